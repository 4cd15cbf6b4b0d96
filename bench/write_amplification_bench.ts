/**
 * Write amplification of a steady ASYNC_FLUSH store (issue 5): bytes the
 * process dirtied in the page cache (`write_bytes` of `/proc/self/io`,
 * which is what writeback writes) per commit-log byte, while putting 1 KiB
 * messages at a fixed rate to 4 queues with TAGS and, by default, a random
 * key each.
 *
 * ```
 * warm-up   --warm-up s at the rate (files created, first flushes done)
 * measure   --seconds at the rate: dirtied bytes / commit-log bytes, and the
 *           CPU time of every thread (user + system) per second
 * ```
 *
 * Run: `deno run -A bench/write_amplification_bench.ts`,
 * `bun bench/write_amplification_bench.ts`,
 * `node --import tsx bench/write_amplification_bench.ts`. Flags: `--rate
 * <msgs/s>` (default 2,000), `--seconds <n>` (default 10), `--keys
 * random|sequential|none` (default random), `--warm-up <s>` (default 2;
 * a slow writer's steady state lies past the large folios the commit log
 * pre-faults after an open whatever the rate: up to its first lead and a
 * chunk, about 68 MiB), `--root <path>` (the checkout
 * whose `src/` is measured, for A/B runs against a copy; default this
 * one). Linux only (`/proc/self/io`).
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

const TOPIC = "AmpBench";
const QUEUES = 4;
const BODY_BYTES = 1024;
/** Puts are paced in slices of this length. */
const SLICE_MS = 10;

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

const rate = Number(flag("rate") ?? 2_000);
const seconds = Number(flag("seconds") ?? 10);
const keys = flag("keys") ?? "random";
const warmUpMs = Number(flag("warm-up") ?? 2) * 1000;
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(flag("root") ?? path.join(here, ".."));

/** Bytes this process dirtied in the page cache so far. */
function dirtiedBytes(): number {
  const match = /write_bytes: (\d+)/.exec(fs.readFileSync("/proc/self/io", "utf8"));
  if (match === null) throw new Error("/proc/self/io has no write_bytes line");
  return Number(match[1]);
}

function keyOf(i: number): string | undefined {
  if (keys === "none") return undefined;
  return keys === "sequential" ? `key-${i}` : crypto.randomUUID();
}

async function main(): Promise<void> {
  if (!["random", "sequential", "none"].includes(keys)) {
    throw new RangeError(`--keys must be random, sequential or none, not ${keys}`);
  }
  const { MessageStore } = await import(
    path.join(root, "src/store/message_store.ts")
  ) as typeof import("../src/store/message_store.ts");
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-amp-"));
  const store = await MessageStore.open(directory, { flushDiskType: "ASYNC_FLUSH" });
  const body = new Uint8Array(BODY_BYTES).fill(7);
  let i = 0;
  const run = async (ms: number) => {
    const perSlice = Math.max(1, Math.round(rate * SLICE_MS / 1000));
    const start = performance.now();
    while (performance.now() - start < ms) {
      const sliceStart = performance.now();
      for (let k = 0; k < perSlice; k++, i++) {
        const key = keyOf(i);
        await store.putMessage({
          topic: TOPIC,
          queueId: i % QUEUES,
          body,
          properties: key === undefined ? { TAGS: "a" } : { TAGS: "a", KEYS: key },
        });
      }
      const wait = SLICE_MS - (performance.now() - sliceStart);
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    }
  };
  try {
    await run(warmUpMs);
    const dirtiedBefore = dirtiedBytes();
    const logBefore = store.maxOffset;
    const cpuBefore = process.cpuUsage();
    await run(seconds * 1000);
    const cpu = process.cpuUsage(cpuBefore);
    const dirtied = dirtiedBytes() - dirtiedBefore;
    const log = store.maxOffset - logBefore;
    console.log(
      `rate ${rate}/s, keys ${keys}, ${seconds} s: commit log ${(log / 1e6).toFixed(1)} MB, ` +
        `dirtied ${(dirtied / 1e6).toFixed(1)} MB, ${
          (dirtied / log).toFixed(2)
        } bytes per log byte, CPU ${((cpu.user + cpu.system) / 1000 / seconds).toFixed(0)} ms/s`,
    );
  } finally {
    await store.close();
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

await main();
