/**
 * CPU cost of the read path (issues 6 and 7): a warm, sequential read of
 * 1 KiB messages through `getMessages` (pages of 32, 4 queues round-robin),
 * `getMessage(offset)` and `subscribe`, as CPU µs per message
 * (`process.cpuUsage()`, user + system), messages per wall second, and
 * minor page faults per message (`process.resourceUsage()`).
 *
 * ```
 * fill      N messages of `--body` bytes, 4 queues, batches of 32 (once per
 *           --dir: a later run reuses the store)
 * warm-up   one pass of getMessages over every queue (page cache, JIT)
 * get       --rounds passes of getMessages, reading body.length and
 *           storeSize of each message (what a consumer at least touches)
 * props     the same, also properties.get("TAGS") and msgId
 * one       getMessage(offset) for the first 20,000 messages of queue 0
 * subscribe queue 0 from 0 to its end through subscribe()
 * ```
 *
 * Run: `deno run -A bench/read_path_bench.ts`, `bun bench/read_path_bench.ts`,
 * `node --import tsx bench/read_path_bench.ts`. Flags: `--messages <n>`
 * (default 200,000), `--body <bytes>` (default 1024), `--rounds <n>`
 * (default 3; each case's lowest-CPU round is reported), `--cases <list>`
 * (default `get,props,one,subscribe`), `--dir <path>` (a store to fill
 * once and reuse; default a fresh temporary directory, removed after),
 * `--root <path>` (the checkout whose `src/` is measured, for A/B runs
 * against a copy; default this one), `--json` (one object on the last
 * line).
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type { MessageStore as MessageStoreType } from "../src/store/message_store.ts";
import type { MessageInput } from "../src/record/mod.ts";

const TOPIC = "ReadBench";
const QUEUES = 4;
const PAGE_MESSAGES = 32;
const ONE_BY_ONE_COUNT = 20_000;

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

const messageCount = Number(flag("messages") ?? 200_000);
const bodyBytes = Number(flag("body") ?? 1024);
const rounds = Number(flag("rounds") ?? 3);
const cases = (flag("cases") ?? "get,props,one,subscribe").split(",");
const json = process.argv.includes("--json");
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(flag("root") ?? path.join(here, ".."));
const keepDirectory = flag("dir");

function cpuMicros(): number {
  const usage = process.cpuUsage();
  return usage.user + usage.system;
}

function minorFaults(): number {
  return process.resourceUsage().minorPageFault;
}

interface Figures {
  messages: number;
  cpuUsPerMessage: number;
  msgPerSecond: number;
  minorFaultsPerMessage: number;
}

async function measure(run: () => Promise<number>): Promise<Figures> {
  const cpu0 = cpuMicros();
  const faults0 = minorFaults();
  const t0 = performance.now();
  const messages = await run();
  const seconds = (performance.now() - t0) / 1000;
  return {
    messages,
    cpuUsPerMessage: (cpuMicros() - cpu0) / messages,
    msgPerSecond: messages / seconds,
    minorFaultsPerMessage: (minorFaults() - faults0) / messages,
  };
}

async function fill(store: MessageStoreType): Promise<void> {
  const body = new Uint8Array(bodyBytes).fill(0x61);
  const batches = Math.ceil(messageCount / PAGE_MESSAGES);
  for (let b = 0; b < batches; b++) {
    const batch: MessageInput[] = [];
    for (let i = 0; i < PAGE_MESSAGES; i++) {
      batch.push({
        topic: TOPIC,
        queueId: b % QUEUES,
        body,
        properties: { TAGS: `tag-${i & 7}`, KEYS: `key-${b * PAGE_MESSAGES + i}` },
      });
    }
    const r = await store.putMessages(batch);
    if (r.status !== "PUT_OK") throw new Error(`put: ${r.status} ${r.error?.message}`);
  }
  await store.whenDispatched(store.maxOffset);
}

/** Every queue from 0 to its end, one page per queue in turn; returns the count. */
async function readAll(store: MessageStoreType, touchProperties: boolean): Promise<number> {
  const next = new Array<number>(QUEUES).fill(0);
  const ends = Array.from({ length: QUEUES }, (_, q) => store.getMaxQueueOffset(TOPIC, q));
  let count = 0;
  let sink = 0;
  let active = QUEUES;
  while (active > 0) {
    active = 0;
    for (let q = 0; q < QUEUES; q++) {
      if (next[q]! >= ends[q]!) continue;
      active++;
      const page = await store.getMessages(TOPIC, q, next[q]!, PAGE_MESSAGES);
      if (page.status !== "FOUND") throw new Error(`queue ${q} at ${next[q]}: ${page.status}`);
      for (const message of page.messages) {
        sink += message.body.length + message.storeSize;
        if (touchProperties) {
          sink += (message.properties.get("TAGS")?.length ?? 0) + message.msgId.length;
        }
      }
      count += page.messages.length;
      next[q] = page.nextQueueOffset;
    }
  }
  if (sink === 0) throw new Error("nothing was read");
  return count;
}

async function readOneByOne(store: MessageStoreType, offsets: number[]): Promise<number> {
  let sink = 0;
  for (const offset of offsets) {
    const message = await store.getMessage(offset);
    if (message === undefined) throw new Error(`no message at ${offset}`);
    sink += message.body.length;
  }
  if (sink === 0) throw new Error("nothing was read");
  return offsets.length;
}

async function subscribeAll(store: MessageStoreType): Promise<number> {
  const end = store.getMaxQueueOffset(TOPIC, 0);
  const controller = new AbortController();
  let count = 0;
  for await (const message of store.subscribe(TOPIC, 0, 0, { signal: controller.signal })) {
    count += message.body.length > 0 ? 1 : 0;
    if (message.queueOffset + 1 >= end) controller.abort();
  }
  return count;
}

/** Fills (once) and reads the store; prints the figures. */
async function main(): Promise<void> {
  const directory = keepDirectory ?? fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-read-"));
  const { MessageStore } = await import(
    path.join(root, "src/store/message_store.ts")
  ) as typeof import("../src/store/message_store.ts");
  const rows: Record<string, Figures> = {};
  const fresh = !fs.existsSync(path.join(directory, "commitlog"));
  const store = await MessageStore.open(directory, { mappedFileSizeCommitLog: 0x400_0000 });
  try {
    if (fresh) await fill(store);
    await readAll(store, false);
    const offsets: number[] = [];
    // Bounded by the queue's end: each page moves on or ends the loop.
    for (let q = 0; offsets.length < ONE_BY_ONE_COUNT;) {
      const page = await store.getMessages(TOPIC, 0, q, ONE_BY_ONE_COUNT, {
        maxBytes: 0x1000_0000,
      });
      if (page.status !== "FOUND") break;
      for (const m of page.messages) offsets.push(m.physicalOffset);
      q = page.nextQueueOffset;
    }
    offsets.length = Math.min(offsets.length, ONE_BY_ONE_COUNT);
    const runs: Record<string, () => Promise<number>> = {
      get: () => readAll(store, false),
      props: () => readAll(store, true),
      one: () => readOneByOne(store, offsets),
      subscribe: () => subscribeAll(store),
    };
    // The lowest CPU cost of the rounds: the run least disturbed by other load.
    for (let r = 0; r < rounds; r++) {
      for (const name of cases) {
        const run = runs[name];
        if (run === undefined) throw new Error(`unknown case ${name}`);
        const figures = await measure(run);
        const best = rows[name];
        if (best === undefined || figures.cpuUsPerMessage < best.cpuUsPerMessage) {
          rows[name] = figures;
        }
      }
    }
  } finally {
    await store.close();
    if (keepDirectory === undefined) fs.rmSync(directory, { recursive: true, force: true });
  }

  const runtime = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined"
    ? "bun"
    : typeof (globalThis as { Deno?: unknown }).Deno !== "undefined"
    ? "deno"
    : "node";
  if (json) {
    console.log(JSON.stringify({ runtime, root, bodyBytes, rows }));
  } else {
    for (const [name, f] of Object.entries(rows)) {
      console.log(
        `${runtime} ${name.padEnd(9)} ${f.messages} msgs  ${
          f.cpuUsPerMessage.toFixed(2)
        } CPU µs/msg  ` +
          `${Math.round(f.msgPerSecond / 1000)} k msg/s  ${
            f.minorFaultsPerMessage.toFixed(3)
          } faults/msg`,
      );
    }
  }
}

// A standalone script: `deno bench` (where import.meta.main is false) skips it.
if (import.meta.main !== false) await main();
