/**
 * One durable producer (issue 7's `durable/…/1/…` cell), with the stores
 * taking turns in one process: mqstore (SYNC_FLUSH, as the comparison
 * opens it), the runtime's SQLite (WAL, `synchronous=FULL`) and a raw loop
 * (each record appended with one positional write and one `fdatasync`
 * into a file prepared like mqstore's warmed segments), each putting for
 * `--slice-ms` in turn, so that all three see the same device. The
 * rounds of turns follow the rows of a balanced Latin square (mqstore,
 * SQLite, raw; then rows 1, 0 and 2 reversed: mqstore, raw, SQLite; raw,
 * SQLite, mqstore; SQLite, mqstore, raw), so within a cycle of rows each
 * store follows each other store equally often (the steps from one round
 * to the next add at most one more a pair per cycle):
 * mqstore's background flushes (consume queues, index, checkpoint) can
 * fall in the turn after its own, and in a fixed order, or one rotated
 * round by round, that turn was always SQLite's. The turns are
 * `compare/_turns.ts`'s, which the comparison's one-producer durable
 * cells take too; a yield to the event loop before each turn keeps a
 * store's timers out of the next store's turn (not its thread-pool work).
 *
 * ```
 * open      the three, then 200 ms of puts each (untimed)
 * measure   --seconds in turns of --slice-ms, a third of it each (as many
 *           turns each): acks/s, ack latency p50/p90/p99
 * ```
 *
 * Why: this VM's `fdatasync` latency moves by 2–3× from minute to minute,
 * so the comparison's separate 2 s runs of each store (3 repeats) can put
 * one store on a fast minute and the other on a slow one: in session 17's
 * full run mqstore made 0.69× `bun:sqlite` from one slow repeat of three
 * (p50 431 µs against 151 and 247 in the others). Taking turns every
 * 100 ms, the ratio holds still while the device does not (session 18,
 * Bun, 8 runs: mqstore 1.04–1.13× SQLite and 0.88–1.03× the raw loop, its
 * p50 within a few µs of the raw loop's, while the rates ran from 1.4 k
 * to 3.9 k acks/s).
 *
 * Run: `deno run -A bench/lone_durable_bench.ts`,
 * `bun bench/lone_durable_bench.ts`,
 * `node --import tsx bench/lone_durable_bench.ts`. Flags: `--seconds <n>`
 * (default 9), `--slice-ms <ms>` (default 100), `--size <bytes>` (the
 * payload; default 1024), `--dir <path>` (default the OS temporary
 * directory), `--json` (one line). Hold the machine's benchmark lock.
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { createPort } from "../src/runtime/mod.ts";
import { recordSizeOf } from "../src/record/mod.ts";
import { prepareSyncFile } from "./_raw_group_commit.ts";
import type { Peer } from "./compare/_peer.ts";
import { mqstorePeer } from "./compare/mqstore_peer.ts";
import { sqlitePeer } from "./compare/sqlite_peer.ts";
import { percentile } from "./compare/_stats.ts";
import { takeTurns } from "./compare/_turns.ts";

const WARM_UP_MS = 200;
/** The raw loop's file: 64 MiB, rewound when full. */
const RAW_FILE_BYTES = 0x400_0000;
/** The comparison's topic (bench/compare/mqstore_peer.ts): its records' size goes with it. */
const TOPIC = "BenchTopic";

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

const seconds = Number(flag("seconds") ?? 9);
const sliceMs = Number(flag("slice-ms") ?? 100);
const payloadBytes = Number(flag("size") ?? 1024);
const json = process.argv.includes("--json");
if (!(seconds > 0) || !(sliceMs > 0) || !Number.isInteger(payloadBytes) || payloadBytes < 1) {
  throw new RangeError("--seconds and --slice-ms take a positive number, --size a byte count");
}

/** Appends records of mqstore's size for the payload with a write and an `fdatasync` each. */
async function rawPeer(directory: string): Promise<Peer> {
  const file = path.join(directory, "raw.bin");
  // The handle is all the port leaves open: a RuntimePort has no close.
  await (await prepareSyncFile(await createPort(), file, RAW_FILE_BYTES)).close();
  const fd = fs.openSync(file, "r+");
  // mqstore's record of the payload (no properties): the raw loop writes as many bytes.
  const record = new Uint8Array(recordSizeOf(0, payloadBytes, TOPIC.length, 0));
  let position = 0;
  return {
    put() {
      fs.writeSync(fd, record, 0, record.length, position);
      fs.fdatasyncSync(fd);
      position += record.length;
      if (position + record.length > RAW_FILE_BYTES) position = 0;
      return Promise.resolve();
    },
    putBatch() {
      return Promise.reject(new Error("the raw loop puts one record at a time"));
    },
    close() {
      fs.closeSync(fd);
      return Promise.resolve();
    },
  };
}

function payload(): Uint8Array {
  const bytes = new Uint8Array(payloadBytes);
  let x = 0x9e37_79b9;
  for (let i = 0; i < payloadBytes; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xff;
  }
  return bytes;
}

const root = fs.mkdtempSync(path.join(flag("dir") ?? os.tmpdir(), "mqstore-lone-"));
const names = ["mqstore", "sqlite", "raw"] as const;
const peers: Peer[] = [];
try {
  for (const name of names) {
    const directory = path.join(root, name);
    fs.mkdirSync(directory);
    if (name === "raw") peers.push(await rawPeer(directory));
    else peers.push(await (name === "mqstore" ? mqstorePeer : sqlitePeer).open(directory, "sync"));
  }
  const body = payload();
  const tallies = await takeTurns(peers.map((peer) => () => peer.put(body)), {
    sliceMs,
    durationMs: seconds * 1000 / peers.length,
    warmUpMs: WARM_UP_MS,
  });
  for (const [i, tally] of tallies.entries()) {
    if (tally.failure !== undefined) {
      throw new Error(`${names[i]} failed in its turns`, { cause: tally.failure });
    }
  }
  const rows = names.map((name, i) => {
    const values = tallies[i]!.latenciesUs;
    return {
      store: name,
      acksPerS: Math.round(tallies[i]!.ratePerS),
      p50Us: Math.round(percentile(values, 0.5)),
      p90Us: Math.round(percentile(values, 0.9)),
      p99Us: Math.round(percentile(values, 0.99)),
    };
  });
  const [mqstore, sqlite, raw] = rows;
  const ratios = {
    mqstoreToSqlite: Number((mqstore!.acksPerS / sqlite!.acksPerS).toFixed(3)),
    mqstoreToRaw: Number((mqstore!.acksPerS / raw!.acksPerS).toFixed(3)),
  };
  if (json) {
    console.log(JSON.stringify({ payloadBytes, seconds, sliceMs, rows, ...ratios }));
  } else {
    console.log(
      `one durable producer, ${payloadBytes} B payloads, turns of ${sliceMs} ms for ${seconds} s`,
    );
    for (const row of rows) {
      console.log(
        `${row.store.padEnd(8)} ${
          String(row.acksPerS).padStart(6)
        } acks/s  p50 ${row.p50Us} µs  p90 ${row.p90Us} µs  p99 ${row.p99Us} µs`,
      );
    }
    console.log(`mqstore × sqlite ${ratios.mqstoreToSqlite}, × raw ${ratios.mqstoreToRaw}`);
  }
} finally {
  for (const peer of peers) await peer.close();
  fs.rmSync(root, { recursive: true, force: true });
}
