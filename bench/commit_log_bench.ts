/**
 * Put-path throughput and latency of the commit log through MessageStore,
 * on real files with the host's native adapter:
 * - ASYNC_FLUSH (mapping) and ASYNC_FLUSH + transient store pool, one
 *   producer, 128 B and 1 KiB bodies;
 * - SYNC_FLUSH with 1, 16, 64 and 256 concurrent producers, 1 KiB bodies
 *   (acks/s, ack latency, mean group-commit size);
 * - the raw baseline: one 1 KiB positional write + fdatasync at a time.
 * Every message has TAGS and KEYS and goes to one of 4 queues.
 *
 * Run: `deno run -A bench/commit_log_bench.ts`, `bun bench/commit_log_bench.ts`,
 * `node --import tsx bench/commit_log_bench.ts`. Flags: `--json`,
 * `--filter <text>`, `--scale <factor>` (message counts, default 1).
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import { performance } from "node:perf_hooks";
import { createPort, runtimeName } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import type { MessageInput } from "../src/record/mod.ts";
import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";

interface Row {
  scenario: string;
  runtime: string;
  adapter: string;
  producers: number;
  messages: number;
  seconds: number;
  messagesPerSecond: number;
  mbPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  groupCommitMean: number | null;
}

const argv = process.argv.slice(2);
const json = argv.includes("--json");
const filterIndex = argv.indexOf("--filter");
const filter = filterIndex >= 0 ? argv[filterIndex + 1] ?? "" : "";
const scaleIndex = argv.indexOf("--scale");
const scale = scaleIndex >= 0 ? Number(argv[scaleIndex + 1]) : 1;

const QUEUES = 4;

function messages(bodyBytes: number): MessageInput[] {
  const body = new Uint8Array(bodyBytes);
  for (let i = 0; i < body.length; i++) body[i] = (i * 31) & 0xFF;
  return Array.from({ length: QUEUES }, (_, q) => ({
    topic: "BenchTopic",
    queueId: q,
    body,
    properties: { TAGS: "TagA", KEYS: `key-${q} order-${q * 7}` },
  }));
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

async function withDirectory<T>(body: (directory: string) => Promise<T>): Promise<T> {
  const directory = fs.mkdtempSync(`${os.tmpdir()}/mqstore-bench-`);
  try {
    return await body(directory);
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

async function asyncScenario(
  port: RuntimePort,
  name: string,
  bodyBytes: number,
  count: number,
  extra: MessageStoreOptions,
): Promise<Row> {
  return await withDirectory(async (directory) => {
    const store = await MessageStore.open(`${directory}/store`, {
      port,
      mappedFileSizeCommitLog: 0x4000_0000,
      warmMapedFileEnable: true,
      // Throughput, not the backpressure policy: a flusher that writes a
      // few hundred MB in one msync may take longer than the default 1 s.
      osPageCacheBusyTimeOutMills: 30_000,
      ...extra,
    });
    const batch = messages(bodyBytes);
    // Warm-up: JIT and the first segment.
    for (let i = 0; i < 20_000; i++) await store.putMessage(batch[i & 3]!);
    const sampleEvery = 16;
    const samples = new Float64Array(Math.ceil(count / sampleEvery));
    let sampled = 0;
    const start = performance.now();
    for (let i = 0; i < count; i++) {
      if ((i & (sampleEvery - 1)) === 0) {
        const t0 = performance.now();
        const r = await store.putMessage(batch[i & 3]!);
        samples[sampled++] = performance.now() - t0;
        if (r.status !== "PUT_OK") throw new Error(`put ${i}: ${r.status} ${r.error?.message}`);
      } else {
        const r = await store.putMessage(batch[i & 3]!);
        if (r.status !== "PUT_OK") throw new Error(`put ${i}: ${r.status} ${r.error?.message}`);
      }
    }
    const seconds = (performance.now() - start) / 1000;
    const recordBytes = store.stats().putBytes / store.stats().putCount;
    await store.close();
    const sorted = samples.subarray(0, sampled).sort();
    return {
      scenario: name,
      runtime: runtimeName(),
      adapter: port.adapter,
      producers: 1,
      messages: count,
      seconds,
      messagesPerSecond: count / seconds,
      mbPerSecond: (count * recordBytes) / seconds / 1e6,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      groupCommitMean: null,
    };
  });
}

async function syncScenario(
  port: RuntimePort,
  producers: number,
  count: number,
): Promise<Row> {
  return await withDirectory(async (directory) => {
    const store = await MessageStore.open(`${directory}/store`, {
      port,
      flushDiskType: "SYNC_FLUSH",
      mappedFileSizeCommitLog: 0x1000_0000,
      warmMapedFileEnable: true,
    });
    const batch = messages(1024);
    for (let i = 0; i < 200; i++) await store.putMessage(batch[i & 3]!);
    const before = store.stats();
    const perProducer = Math.ceil(count / producers);
    const latencies = new Float64Array(perProducer * producers);
    let index = 0;
    const start = performance.now();
    await Promise.all(Array.from({ length: producers }, async (_, p) => {
      for (let i = 0; i < perProducer; i++) {
        const t0 = performance.now();
        const r = await store.putMessage(batch[(p + i) & 3]!);
        latencies[index++] = performance.now() - t0;
        if (r.status !== "PUT_OK") throw new Error(`put: ${r.status} ${r.error?.message}`);
      }
    }));
    const seconds = (performance.now() - start) / 1000;
    const after = store.stats();
    await store.close();
    const total = perProducer * producers;
    const sorted = latencies.subarray(0, index).sort();
    const groups = after.groupCommitCount - before.groupCommitCount;
    return {
      scenario: `sync 1 KiB ${producers}p`,
      runtime: runtimeName(),
      adapter: port.adapter,
      producers,
      messages: total,
      seconds,
      messagesPerSecond: total / seconds,
      mbPerSecond: (after.putBytes - before.putBytes) / seconds / 1e6,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      groupCommitMean: groups === 0
        ? 0
        : (after.groupCommitRequests - before.groupCommitRequests) / groups,
    };
  });
}

async function rawScenario(port: RuntimePort, count: number): Promise<Row> {
  return await withDirectory(async (directory) => {
    const handle = await port.createFile(`${directory}/raw`, 0x1000_0000);
    const record = new Uint8Array(1024 + 128);
    const latencies = new Float64Array(count);
    for (let i = 0; i < 200; i++) {
      await handle.write(record, i * record.length);
      await handle.datasync();
    }
    const start = performance.now();
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      await handle.write(record, (200 + i) * record.length);
      await handle.datasync();
      latencies[i] = performance.now() - t0;
    }
    const seconds = (performance.now() - start) / 1000;
    await handle.close();
    const sorted = latencies.sort();
    return {
      scenario: "raw write+fdatasync 1 KiB",
      runtime: runtimeName(),
      adapter: port.adapter,
      producers: 1,
      messages: count,
      seconds,
      messagesPerSecond: count / seconds,
      mbPerSecond: (count * record.length) / seconds / 1e6,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      groupCommitMean: null,
    };
  });
}

const port = await createPort({ onNotice: (message) => console.error(message) });
const n = (base: number) => Math.max(1, Math.round(base * scale));
const scenarios: [string, () => Promise<Row>][] = [
  ["raw write+fdatasync 1 KiB", () => rawScenario(port, n(3_000))],
  ["sync 1 KiB 1p", () => syncScenario(port, 1, n(3_000))],
  ["sync 1 KiB 16p", () => syncScenario(port, 16, n(30_000))],
  ["sync 1 KiB 64p", () => syncScenario(port, 64, n(100_000))],
  ["sync 1 KiB 256p", () => syncScenario(port, 256, n(200_000))],
  ["async 128 B 1p", () => asyncScenario(port, "async 128 B 1p", 128, n(1_500_000), {})],
  ["async 1 KiB 1p", () => asyncScenario(port, "async 1 KiB 1p", 1024, n(400_000), {})],
  [
    "async+pool 128 B 1p",
    () =>
      asyncScenario(port, "async+pool 128 B 1p", 128, n(2_000_000), {
        transientStorePoolEnable: true,
        mappedFileSizeCommitLog: 0x1000_0000,
      }),
  ],
  [
    "async+pool 1 KiB 1p",
    () =>
      asyncScenario(port, "async+pool 1 KiB 1p", 1024, n(1_000_000), {
        transientStorePoolEnable: true,
        mappedFileSizeCommitLog: 0x1000_0000,
      }),
  ],
];

const rows: Row[] = [];
for (const [name, run] of scenarios) {
  if (filter !== "" && !name.includes(filter)) continue;
  const row = await run();
  rows.push(row);
  if (!json) {
    console.log(
      `${row.scenario.padEnd(28)} ${
        Math.round(row.messagesPerSecond).toLocaleString("en-US").padStart(11)
      } msg/s ${row.mbPerSecond.toFixed(0).padStart(5)} MB/s  p50 ${
        row.p50Ms.toFixed(3).padStart(7)
      } ms  p99 ${row.p99Ms.toFixed(3).padStart(7)} ms${
        row.groupCommitMean === null ? "" : `  group ${row.groupCommitMean.toFixed(1)}`
      }`,
    );
  }
}
if (json) {
  console.log(JSON.stringify({ runtime: runtimeName(), adapter: port.adapter, rows }, null, 2));
}
