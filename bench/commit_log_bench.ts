/**
 * Put-path throughput and latency of the commit log through MessageStore,
 * on real files with the host's native adapter:
 * - ASYNC_FLUSH (mapping) and ASYNC_FLUSH + transient store pool, one
 *   producer, 128 B and 1 KiB bodies; the `distinct` rows put different
 *   messages (own bodies and KEYS) where the others repeat four;
 * - SYNC_FLUSH with 1, 16, 64 and 256 concurrent producers, 1 KiB bodies
 *   (acks/s, ack latency, mean group-commit size, process CPU per ack);
 *   the 64 and 256 rows after 20 k untimed puts at their concurrency
 *   (`+20k warm-up` in the row), so that they measure the store, not the JIT;
 * - the raw baselines: one 1 KiB positional write + fdatasync at a time;
 *   and a hand-made group commit of 64 or 256 producers (records buffered,
 *   each flush one positional write + one fdatasync, 1 or 2 flushes in
 *   flight: rows `1f`, `2f`) into a file prepared like a SYNC_FLUSH
 *   segment; each sync row of 64 or 256 producers is followed by its ratio
 *   to the better raw row of the same run.
 * - the page-cache fill limit before the ASYNC rows: a new 1 GiB file
 *   pre-faulted (the run's first fill: of memory that sat idle, on a quiet
 *   machine), then again (what the first freed); each ASYNC row prints its
 *   MB/s over the first (`× first fill`), and runs on the memory the row
 *   warmed;
 * - opt-in (`--filter sustained`): sustained ASYNC, 1 KiB bodies, 8 GiB
 *   appended, far past the dirty limit, against the disk's buffered-write
 *   bandwidth measured in the same run; `sustained async+pool` is the
 *   same through the transient store pool and `sustained async batch64`
 *   with `putMessages` batches of 64 (`--filter "^sustained async 1"`
 *   selects the mapping row alone).
 * - opt-in (`--filter ceiling`, where /dev/shm exists): the SYNC 64p and
 *   256p rows with the store on tmpfs, where `fdatasync` returns at once:
 *   what the store's own work per group commit allows, apart from the
 *   device.
 * Every message has TAGS and KEYS and goes to one of 4 queues, but in the
 * `bare` rows (batches of 1,000 messages without properties, the lean case
 * of `putMessages`, as `bench/compare`'s `mqstore-batch` puts them).
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
import { setImmediate } from "node:timers";
import { unflushedBytesMaxDefault } from "../src/commit_log/constants.ts";
import { totalMemoryBytes } from "../src/runtime/info.ts";
import { createPort, runtimeName } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import type { MessageInput } from "../src/record/mod.ts";
import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import { pageCacheFillLimit, sequentialWriteLimit } from "./compare/limits.ts";
import { deviceStatFile } from "./_device.ts";
import { rawGroupCommit } from "./_raw_group_commit.ts";
import { collectGarbage, filterMatches, scenarioFlags } from "./_harness.ts";

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
  /**
   * A sync row's messages per second over the better raw group commit row
   * of as many producers in the same run, when one ran.
   */
  rawRatio?: number;
  /**
   * The page-cache fill row: MB/s of pre-faulting a new 1 GiB file, the
   * run's first fill of that memory and the fill again of what it freed
   * (`"cannot map"` with the portable adapter).
   */
  fill?: { firstMbPerSecond: number; againMbPerSecond: number } | "cannot map";
  /**
   * An ASYNC row's MB/s over the first fill of the page-cache fill row of
   * the same run, when one ran: above 1, the row appended faster than this
   * machine hands out memory that sat idle.
   */
  fillRatio?: number;
  /**
   * Process CPU time (every thread: user + system, `process.cpuUsage()`)
   * per message, µs: steadier than wall time on a shared machine.
   */
  cpuMicrosPerMessage?: number;
  /** Heap and RSS samples of the memory scenario, MiB. */
  memory?: MemorySample[];
}

/** One sample of the memory scenario. */
interface MemorySample {
  /** Messages put when sampled. */
  messages: number;
  /** JS objects: V8's heapUsed; on Bun its heap size less ArrayBuffer memory. */
  heapUsedMiB: number;
  /** ArrayBuffer memory the heap accounts for (segment mappings included). */
  externalMiB: number;
  rssMiB: number;
}

/** Bun's `bun:jsc` heap statistics, where its heapUsed counts ArrayBuffer memory too. */
interface JscHeapStats {
  heapSize: number;
  extraMemorySize: number;
}
let jscHeapStats: (() => JscHeapStats) | undefined;
if ((globalThis as { Bun?: unknown }).Bun !== undefined) {
  // Not a string literal: deno check must not resolve it.
  const specifier = "bun:jsc";
  jscHeapStats = ((await import(specifier)) as { heapStats(): JscHeapStats }).heapStats;
}

/** `filter` runs the scenarios it names (`filterMatches`: `|` between alternatives, `^` for a prefix). */
const { json, filter, scale } = scenarioFlags();

const QUEUES = 4;
/** Distinct messages a queue in the `distinct` rows' pool (a power of two). */
const DISTINCT_PER_QUEUE = 0x400;

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

/**
 * `perQueue` distinct messages per queue, queue after queue: each with its
 * own body bytes and its own KEYS, as a server's producers send them (the
 * encoder's properties cache never sees the same object twice in a row).
 */
function distinctMessages(bodyBytes: number, perQueue: number): MessageInput[] {
  const all: MessageInput[] = [];
  for (let q = 0; q < QUEUES; q++) {
    for (let i = 0; i < perQueue; i++) {
      const body = new Uint8Array(bodyBytes);
      for (let b = 0; b < body.length; b++) body[b] = (b * 31 + i * 7 + q) & 0xFF;
      all.push({
        topic: "BenchTopic",
        queueId: q,
        body,
        properties: { TAGS: "TagA", KEYS: `order-${q}-${i} customer-${i * 13}` },
      });
    }
  }
  return all;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

async function withDirectory<T>(
  body: (directory: string) => Promise<T>,
  parent: string = os.tmpdir(),
): Promise<T> {
  const directory = fs.mkdtempSync(`${parent}/mqstore-bench-`);
  try {
    return await body(directory);
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

/** How the ASYNC scenarios' producer puts. */
interface ProducerShape {
  /**
   * Messages per `putMessages` batch (one queue per batch, the next queue
   * for the next batch); 1 = `putMessage`.
   *
   * @default {1}
   */
  batchSize?: number;
  /**
   * Put distinct messages (own body bytes and KEYS, from a pool of 1,024
   * per queue) instead of the same four message objects again.
   *
   * @default {false}
   */
  distinct?: boolean;
  /**
   * Put messages without properties (no TAGS, no KEYS), as a producer
   * that only needs queue order does: the batch path's lean case.
   *
   * @default {false}
   */
  bare?: boolean;
  /**
   * Yield to the event loop (`setImmediate`) every this many puts, as a
   * producer fed by I/O does, so the flusher and the dispatcher run during
   * the measurement; 0 = never (they run only once backpressure makes puts
   * wait, or after the run).
   *
   * @default {0}
   */
  yieldEvery?: number;
}

const MIB = 0x10_0000;

function memorySample(messages: number): MemorySample {
  collectGarbage();
  const usage = process.memoryUsage();
  if (jscHeapStats !== undefined) {
    // Bun's heapUsed includes every ArrayBuffer, mapped segments and
    // consume-queue files too: take the objects alone.
    const stats = jscHeapStats();
    return {
      messages,
      heapUsedMiB: (stats.heapSize - stats.extraMemorySize) / MIB,
      externalMiB: stats.extraMemorySize / MIB,
      rssMiB: usage.rss / MIB,
    };
  }
  return {
    messages,
    heapUsedMiB: usage.heapUsed / MIB,
    externalMiB: usage.external / MIB,
    rssMiB: usage.rss / MIB,
  };
}

/**
 * Memory, not speed: `count` 128 B ASYNC puts (default 10 M, well past the
 * dirty-page limit), heap used and RSS sampled before, every 1 M and after
 * (with a full collection first where the runtime allows one). Flat = the
 * heap stays within ±32 MiB of the first sample: nothing per message is
 * retained. The producer yields every 1 000 puts, so flushing and dispatch
 * run alongside as in a service.
 */
async function heapScenario(port: RuntimePort, count: number): Promise<Row> {
  return await withDirectory(async (directory) => {
    const store = await MessageStore.open(`${directory}/store`, {
      port,
      mappedFileSizeCommitLog: 0x4000_0000,
      warmMapedFileEnable: true,
      osPageCacheBusyTimeOutMills: 30_000,
    });
    const batch = messages(128);
    for (let i = 0; i < 20_000; i++) await store.putMessage(batch[i & 3]!);
    const samples = [memorySample(0)];
    const report = (sample: MemorySample) => {
      const line = `heap ${(sample.messages / 1e6).toFixed(0).padStart(3)} M puts: heapUsed ${
        sample.heapUsedMiB.toFixed(1).padStart(7)
      } MiB, external ${sample.externalMiB.toFixed(0).padStart(5)} MiB, rss ${
        sample.rssMiB.toFixed(0).padStart(6)
      } MiB`;
      if (json) console.error(line);
      else console.log(line);
    };
    report(samples[0]!);
    const sampleEvery = 1_000_000;
    const cpu0 = process.cpuUsage();
    const start = performance.now();
    for (let i = 0; i < count; i++) {
      const r = await store.putMessage(batch[i & 3]!);
      if (r.status !== "PUT_OK") throw new Error(`put ${i}: ${r.status} ${r.error?.message}`);
      if ((i + 1) % 1_000 === 0) await new Promise<void>((resolve) => setImmediate(resolve));
      if ((i + 1) % sampleEvery === 0) {
        samples.push(memorySample(i + 1));
        report(samples[samples.length - 1]!);
      }
    }
    const seconds = (performance.now() - start) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const recordBytes = store.stats().putBytes / store.stats().putCount;
    await store.close();
    const after = memorySample(count);
    samples.push(after);
    report(after);
    const heaps = samples.map((sample) => sample.heapUsedMiB);
    const spreadMiB = Math.max(...heaps) - Math.min(...heaps);
    const line = `heap spread ${spreadMiB.toFixed(1)} MiB over ${count} puts (${
      spreadMiB <= 32 ? "flat" : "NOT flat"
    }: limit ±32 MiB; full collections ${collectGarbage() ? "forced" : "not available"})`;
    if (json) console.error(line);
    else console.log(line);
    return {
      scenario: `heap async 128 B ${count / 1e6} M`,
      runtime: runtimeName(),
      adapter: port.adapter,
      producers: 1,
      messages: count,
      seconds,
      messagesPerSecond: count / seconds,
      mbPerSecond: (count * recordBytes) / seconds / 1e6,
      p50Ms: 0,
      p99Ms: 0,
      groupCommitMean: null,
      cpuMicrosPerMessage: (cpu.user + cpu.system) / count,
      memory: samples,
    };
  });
}

/** Bytes of one sector in the block layer's `stat` counters. */
const SECTOR_BYTES = 0x200;
/** Data the same-run limit writes (as `bench/compare`'s FULL sizing). */
const SUSTAINED_LIMIT_BYTES = 0x2000_0000;
/** Data the sustained row appends at `--scale 1`: 8 GiB, well past the 4.6 GB dirty limit. */
const SUSTAINED_BYTES = 0x2_0000_0000;

/** Bytes the device has written (field 7 of its `stat`), or NaN without one. */
function deviceBytesWritten(statPath: string | undefined): number {
  if (statPath === undefined) return NaN;
  const fields = fs.readFileSync(statPath, "utf8").trim().split(/\s+/);
  return Number(fields[6]) * SECTOR_BYTES;
}

/**
 * Sustained ASYNC throughput (issue 5): one producer puts 1 KiB messages
 * (TAGS, KEYS, 4 queues), yielding every 1 000 puts as a producer fed by
 * I/O does, until 8 GiB (× `--scale`) are appended, far past the kernel's
 * dirty limit, so the flusher's rate is what the producer gets. With
 * `batchSize` > 1 it puts `putMessages` batches of that many messages of
 * one queue (the next queue for the next batch), yielding as often, so the
 * producer's CPU per message is not what limits the row. Measured
 * over the steady part: from when the first `unflushedBytesMax` is in
 * flight to the last put. OS_PAGECACHE_BUSY answers are counted and the
 * put retried. The same run measures the disk's buffered-write limit
 * (4 MiB writes + one fdatasync, `bench/compare/limits.ts`) before and
 * after, and prints the ratio to their mean.
 */
async function sustainedScenario(
  port: RuntimePort,
  name: string,
  totalBytes: number,
  extra: MessageStoreOptions = {},
  batchSize = 1,
): Promise<Row> {
  return await withDirectory(async (directory) => {
    const limitBefore = sequentialWriteLimit(directory, SUSTAINED_LIMIT_BYTES).ratePerS;
    fs.rmSync(`${directory}/sequential.bin`, { force: true });
    const store = await MessageStore.open(`${directory}/store`, {
      port,
      mappedFileSizeCommitLog: 0x4000_0000,
      ...extra,
    });
    const statPath = deviceStatFile(directory)?.statPath;
    const batch = messages(1024);
    const batches = batch.map((message) => Array.from({ length: batchSize }, () => message));
    const openedMs = performance.now();
    let firstFlushMs = NaN;
    let busy = 0;
    let puts = 0;
    // Messages put; a batch counts all of its own.
    let i = 0;
    const putOne = async (): Promise<void> => {
      for (;;) {
        const r = batchSize === 1
          ? await store.putMessage(batch[i & 3]!)
          : await store.putMessages(batches[(i / batchSize) & 3]!);
        if (r.status === "PUT_OK") break;
        if (r.status !== "OS_PAGECACHE_BUSY") {
          throw new Error(`put ${i}: ${r.status} ${r.error?.message}`);
        }
        busy++;
      }
      i += batchSize;
    };
    // Yield every 1,000 messages (the batch that reaches a multiple of it).
    const yieldsAt = (at: number) => at % 1_000 < batchSize;
    // Until the first unflushedBytesMax is in flight (and the JIT is warm):
    // the store's bound, a tenth of memory by default (2 GiB here).
    const steadyFrom = extra.unflushedBytesMax ?? unflushedBytesMaxDefault(totalMemoryBytes());
    while (store.maxOffset < steadyFrom) {
      await putOne();
      if (yieldsAt(i)) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (Number.isNaN(firstFlushMs) && store.flushedOffset > 0) {
          firstFlushMs = performance.now() - openedMs;
        }
      }
    }
    const busyBefore = busy;
    const offset0 = store.maxOffset;
    const stats0 = store.stats();
    const device0 = deviceBytesWritten(statPath);
    const samples = new Float64Array(Math.ceil(totalBytes / 1024 / 16) + 16);
    let sampled = 0;
    const steps: number[] = [];
    let lastFlushed = store.flushedOffset;
    const cpu0 = process.cpuUsage();
    const start = performance.now();
    const first = i;
    while (store.maxOffset < totalBytes) {
      if (i % 16 < batchSize) {
        const t0 = performance.now();
        await putOne();
        if (sampled < samples.length) samples[sampled++] = performance.now() - t0;
      } else {
        await putOne();
      }
      if (yieldsAt(i)) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        const flushed = store.flushedOffset;
        if (flushed !== lastFlushed) {
          steps.push(flushed - lastFlushed);
          lastFlushed = flushed;
        }
      }
    }
    const seconds = (performance.now() - start) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const dataBytes = store.maxOffset - offset0;
    const deviceBytes = deviceBytesWritten(statPath) - device0;
    const stats1 = store.stats();
    puts = i - first;
    await store.close();
    const limitAfter = sequentialWriteLimit(directory, SUSTAINED_LIMIT_BYTES).ratePerS;
    const sorted = samples.subarray(0, sampled).sort();
    const stepSorted = Float64Array.from(steps).sort();
    const flushes = stats1.flushCount - stats0.flushCount;
    const mbPerSecond = dataBytes / seconds / 1e6;
    const limitMbPerSecond = (limitBefore + limitAfter) / 2 / 1e6;
    const line = `sustained: ${mbPerSecond.toFixed(0)} MB/s over ${
      (dataBytes / 2 ** 30).toFixed(1)
    } GiB = ${(mbPerSecond / limitMbPerSecond).toFixed(2)} × the same-run limit ${
      limitMbPerSecond.toFixed(0)
    } MB/s (4 MiB writes + fdatasync: ${(limitBefore / 1e6).toFixed(0)} before, ${
      (limitAfter / 1e6).toFixed(0)
    } after); device/data ${(deviceBytes / dataBytes).toFixed(2)}; OS_PAGECACHE_BUSY ${
      busy - busyBefore
    } (${busyBefore} before steady); flushes ${flushes}, mean ${
      flushes === 0 ? 0 : ((stats1.flushTimeMsTotal - stats0.flushTimeMsTotal) / flushes).toFixed(0)
    } ms, max ${stats1.flushTimeMsMax.toFixed(0)} ms; flushed-offset steps p50 ${
      (percentile(stepSorted, 0.5) / MIB).toFixed(1)
    } MiB, p99 ${(percentile(stepSorted, 0.99) / MIB).toFixed(1)} MiB; ${
      // A fast producer reaches the steady part before the first flush.
      Number.isNaN(firstFlushMs)
        ? "no flush before the steady part"
        : `first flush seen ${firstFlushMs.toFixed(0)} ms after open`}`;
    if (json) console.error(line);
    else console.log(line);
    return {
      scenario: `${name} ${(totalBytes / 2 ** 30).toFixed(0)} GiB`,
      runtime: runtimeName(),
      adapter: port.adapter,
      producers: 1,
      messages: puts,
      seconds,
      messagesPerSecond: puts / seconds,
      mbPerSecond,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      groupCommitMean: null,
      cpuMicrosPerMessage: (cpu.user + cpu.system) / puts,
    };
  });
}

async function asyncScenario(
  port: RuntimePort,
  name: string,
  bodyBytes: number,
  count: number,
  extra: MessageStoreOptions,
  shape: ProducerShape = {},
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
    const batchSize = shape.batchSize ?? 1;
    const yieldEvery = shape.yieldEvery ?? 0;
    // `batch[i & 3]` for single puts, `batches[i & 3]` for batches: with
    // `distinct`, a pool of 1,024 messages a queue (one queue per batch).
    let batch = messages(bodyBytes);
    if (shape.bare === true) {
      batch = batch.map(({ topic, queueId, body }) => ({ topic, queueId, body }));
    }
    let batches = batch.map((message) => Array.from({ length: batchSize }, () => message));
    let poolMask = 3;
    if (shape.distinct === true) {
      const pool = distinctMessages(bodyBytes, DISTINCT_PER_QUEUE);
      // Interleave the queues for single puts (message i goes to queue i % 4).
      batch = Array.from(
        { length: pool.length },
        (_, i) => pool[(i % QUEUES) * DISTINCT_PER_QUEUE + Math.floor(i / QUEUES)]!,
      );
      batches = [];
      for (let at = 0; at + batchSize <= pool.length; at += batchSize) {
        batches.push(pool.slice(at, at + batchSize));
      }
      poolMask = batchSize === 1 ? pool.length - 1 : batches.length - 1;
    }
    // Warm-up: JIT and the first segment.
    for (let i = 0; i < 20_000; i++) await store.putMessage(batch[i & poolMask & 3]!);
    if (batchSize > 1) {
      for (let i = 0; i < 20_000 / batchSize; i++) await store.putMessages(batches[i & poolMask]!);
    }
    const puts = Math.ceil(count / batchSize);
    // The latency of every 16th message put, or of every batch.
    const sampleEvery = batchSize === 1 ? 16 : 1;
    const samples = new Float64Array(Math.ceil(puts / sampleEvery));
    let sampled = 0;
    const put = (i: number) =>
      batchSize === 1
        ? store.putMessage(batch[i & poolMask]!)
        : store.putMessages(batches[i & poolMask]!);
    const cpu0 = process.cpuUsage();
    const start = performance.now();
    for (let i = 0; i < puts; i++) {
      if (i % sampleEvery === 0) {
        const t0 = performance.now();
        const r = await put(i);
        samples[sampled++] = performance.now() - t0;
        if (r.status !== "PUT_OK") throw new Error(`put ${i}: ${r.status} ${r.error?.message}`);
      } else {
        const r = await put(i);
        if (r.status !== "PUT_OK") throw new Error(`put ${i}: ${r.status} ${r.error?.message}`);
      }
      if (yieldEvery > 0 && (i + 1) % yieldEvery === 0) {
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
    const seconds = (performance.now() - start) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const recordBytes = store.stats().putBytes / store.stats().putCount;
    await store.close();
    const sorted = samples.subarray(0, sampled).sort();
    const total = puts * batchSize;
    return {
      scenario: name,
      runtime: runtimeName(),
      adapter: port.adapter,
      producers: 1,
      messages: total,
      seconds,
      messagesPerSecond: total / seconds,
      mbPerSecond: (total * recordBytes) / seconds / 1e6,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      groupCommitMean: null,
      cpuMicrosPerMessage: (cpu.user + cpu.system) / total,
    };
  });
}

/**
 * SYNC_FLUSH acks: `producers` each put and await in a loop, `count` puts
 * in all. With `warmupCount`, as many puts at the same concurrency run
 * first, untimed (the row's name says so): at 64 producers and more a cold
 * row measured the JIT as much as the store (Bun's JIT thread took 6.3 µs
 * per ack over 60 k acks, 1.7 over 240 k). With `parent`, the store lives
 * there instead of the temporary directory (the `ceiling` row: tmpfs).
 */
async function syncScenario(
  port: RuntimePort,
  producers: number,
  count: number,
  warmupCount = 0,
  parent?: string,
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
    const run = async (perProducer: number, latencies?: Float64Array) => {
      let index = 0;
      await Promise.all(Array.from({ length: producers }, async (_, p) => {
        for (let i = 0; i < perProducer; i++) {
          const t0 = performance.now();
          const r = await store.putMessage(batch[(p + i) & 3]!);
          if (latencies !== undefined) latencies[index++] = performance.now() - t0;
          if (r.status !== "PUT_OK") throw new Error(`put: ${r.status} ${r.error?.message}`);
        }
      }));
      return index;
    };
    if (warmupCount > 0) await run(Math.ceil(warmupCount / producers));
    const before = store.stats();
    const perProducer = Math.ceil(count / producers);
    const latencies = new Float64Array(perProducer * producers);
    const cpuBefore = process.cpuUsage();
    const start = performance.now();
    const index = await run(perProducer, latencies);
    const seconds = (performance.now() - start) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const after = store.stats();
    await store.close();
    const total = perProducer * producers;
    const sorted = latencies.subarray(0, index).sort();
    const groups = after.groupCommitCount - before.groupCommitCount;
    return {
      scenario: `${parent === undefined ? "" : "ceiling "}sync 1 KiB ${producers}p${
        warmupCount > 0 ? ` +${Math.round(warmupCount / 1000)}k warm-up` : ""
      }${parent === undefined ? "" : " tmpfs"}`,
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
      cpuMicrosPerMessage: (cpu.user + cpu.system) / total,
    };
  }, parent);
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

/** Bytes the page-cache fill row pre-faults each time: an ASYNC row's segment. */
const FILL_BYTES = 0x4000_0000;

/**
 * The page-cache fill limit (`bench/compare/limits.ts`), twice: a new
 * 1 GiB file pre-faulted, removed, and another in its place. On a quiet
 * machine the first takes memory that sat idle (on this VM the hypervisor
 * backs each page on first use: 0.5–1.3 GB/s measured cold, about
 * 0.4–1.1 M records of the 1 KiB rows a second), the second takes what the
 * first freed (4.5–10 GB/s). The ASYNC rows after it append into memory
 * it warmed; each prints its MB/s over the first fill (`× first fill`).
 * Run it first to see the cold rate: `--filter "fill|async 1 KiB 1p"`.
 * Not measured with the portable adapter (no mapping).
 */
async function fillScenario(port: RuntimePort): Promise<Row> {
  return await withDirectory(async (directory) => {
    const first = await pageCacheFillLimit(port, directory, FILL_BYTES);
    const again = first && await pageCacheFillLimit(port, directory, FILL_BYTES);
    const row: Row = {
      scenario: "page-cache fill 1 GiB",
      runtime: runtimeName(),
      adapter: port.adapter,
      producers: 1,
      messages: 0,
      seconds: 0,
      messagesPerSecond: 0,
      mbPerSecond: 0,
      p50Ms: 0,
      p99Ms: 0,
      groupCommitMean: null,
      fill: "cannot map",
    };
    if (first === undefined || again === undefined) return row;
    return {
      ...row,
      seconds: (first.elapsedMs + again.elapsedMs) / 1000,
      mbPerSecond: first.ratePerS / 1e6,
      fill: { firstMbPerSecond: first.ratePerS / 1e6, againMbPerSecond: again.ratePerS / 1e6 },
    };
  });
}

/**
 * The raw group commit (`bench/_raw_group_commit.ts`): `producers` loops
 * appending 1 KiB records (+ 128 B, a stored record's header and
 * properties), `flushesMax` flushes in flight at most, into a file
 * prepared like a SYNC_FLUSH segment.
 */
async function rawGroupScenario(
  port: RuntimePort,
  producers: number,
  count: number,
  flushesMax: number,
): Promise<Row> {
  return await withDirectory(async (directory) => {
    const recordBytes = 1024 + 128;
    const perProducer = Math.ceil(count / producers);
    const latencies = new Float64Array(perProducer * producers);
    let index = 0;
    const { acks, elapsedMs, groups } = await rawGroupCommit({
      port,
      file: `${directory}/raw-group`,
      producers,
      recordBytes,
      flushesMax,
      fileBytes: 0x1000_0000,
      appendsPerProducer: perProducer,
      onAck: (latencyMs) => {
        latencies[index++] = latencyMs;
      },
    });
    const seconds = elapsedMs / 1000;
    const sorted = latencies.subarray(0, index).sort();
    return {
      scenario: `raw group commit 1 KiB ${producers}p ${flushesMax}f`,
      runtime: runtimeName(),
      adapter: port.adapter,
      producers,
      messages: acks,
      seconds,
      messagesPerSecond: acks / seconds,
      mbPerSecond: (acks * recordBytes) / seconds / 1e6,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      groupCommitMean: groups === 0 ? 0 : acks / groups,
    };
  });
}

/** Untimed puts before the SYNC rows of 64 and 256 producers, at their concurrency. */
const SYNC_WARMUP_PUTS = 20_000;
/** A tmpfs (Linux): the `ceiling` row's store, where `fdatasync` costs nothing. */
const TMPFS_DIRECTORY = "/dev/shm";
const port = await createPort({ onNotice: (message) => console.error(message) });
const n = (base: number) => Math.max(1, Math.round(base * scale));
const scenarios: [string, () => Promise<Row>][] = [
  ["raw write+fdatasync 1 KiB", () => rawScenario(port, n(3_000))],
  ["sync 1 KiB 1p", () => syncScenario(port, 1, n(3_000))],
  ["sync 1 KiB 16p", () => syncScenario(port, 16, n(30_000))],
  ["raw group commit 1 KiB 64p 1f", () => rawGroupScenario(port, 64, n(100_000), 1)],
  ["raw group commit 1 KiB 64p 2f", () => rawGroupScenario(port, 64, n(100_000), 2)],
  // Warmed up: the row measures the store, not the JIT (see syncScenario).
  ["sync 1 KiB 64p", () => syncScenario(port, 64, n(100_000), n(SYNC_WARMUP_PUTS))],
  ["raw group commit 1 KiB 256p 1f", () => rawGroupScenario(port, 256, n(200_000), 1)],
  ["raw group commit 1 KiB 256p 2f", () => rawGroupScenario(port, 256, n(200_000), 2)],
  ["sync 1 KiB 256p", () => syncScenario(port, 256, n(200_000), n(SYNC_WARMUP_PUTS))],
  // Before the ASYNC rows: they append into the memory it warmed.
  ["page-cache fill 1 GiB", () => fillScenario(port)],
  ["async 128 B 1p", () => asyncScenario(port, "async 128 B 1p", 128, n(1_500_000), {})],
  ["async 1 KiB 1p", () => asyncScenario(port, "async 1 KiB 1p", 1024, n(400_000), {})],
  [
    "async batch64 128 B 1p",
    () => asyncScenario(port, "async batch64 128 B 1p", 128, n(1_500_000), {}, { batchSize: 64 }),
  ],
  [
    "async batch64 1 KiB 1p",
    () => asyncScenario(port, "async batch64 1 KiB 1p", 1024, n(400_000), {}, { batchSize: 64 }),
  ],
  [
    "async batch1000 bare 128 B 1p",
    () =>
      asyncScenario(port, "async batch1000 bare 128 B 1p", 128, n(3_000_000), {}, {
        batchSize: 1000,
        bare: true,
      }),
  ],
  [
    "async batch1000 bare 1 KiB 1p",
    () =>
      asyncScenario(port, "async batch1000 bare 1 KiB 1p", 1024, n(1_000_000), {}, {
        batchSize: 1000,
        bare: true,
      }),
  ],
  [
    "async distinct 128 B 1p",
    () => asyncScenario(port, "async distinct 128 B 1p", 128, n(1_000_000), {}, { distinct: true }),
  ],
  [
    "async batch64 distinct 128 B 1p",
    () =>
      asyncScenario(port, "async batch64 distinct 128 B 1p", 128, n(1_500_000), {}, {
        batchSize: 64,
        distinct: true,
      }),
  ],
  [
    "async batch64 distinct 1 KiB 1p",
    () =>
      asyncScenario(port, "async batch64 distinct 1 KiB 1p", 1024, n(400_000), {}, {
        batchSize: 64,
        distinct: true,
      }),
  ],
  [
    // The flusher and the dispatcher run during the measurement: p99 is
    // what flushing does to appends, the rate is what dispatch leaves.
    "async yielding 1 KiB 1p",
    () =>
      asyncScenario(port, "async yielding 1 KiB 1p", 1024, n(400_000), {}, { yieldEvery: 1_000 }),
  ],
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

// Opt-in: run only when a filter names them.
scenarios.push(["heap async 128 B 10 M", () => heapScenario(port, n(10_000_000))]);
scenarios.push([
  "sustained async 1 KiB 8 GiB",
  () => sustainedScenario(port, "sustained async 1 KiB", Math.max(0x4000_0000, n(SUSTAINED_BYTES))),
]);
// The same through the transient store pool (RocketMQ's answer to page
// faults in the mapping): appends into pooled 1 GiB buffers, committed to
// the file with positional writes, flushed with fdatasync. Select the
// mapping row alone with `--filter "^sustained async 1"`.
scenarios.push([
  "sustained async+pool 1 KiB 8 GiB",
  () =>
    sustainedScenario(
      port,
      "sustained async+pool 1 KiB",
      Math.max(0x4000_0000, n(SUSTAINED_BYTES)),
      { transientStorePoolEnable: true },
    ),
]);
// The same with putMessages batches of 64: the flusher's rate, not the
// producer's CPU per message (Deno's single puts are CPU-bound there).
scenarios.push([
  "sustained async batch64 1 KiB 8 GiB",
  () =>
    sustainedScenario(
      port,
      "sustained async batch64 1 KiB",
      Math.max(0x4000_0000, n(SUSTAINED_BYTES)),
      {},
      64,
    ),
]);
// The SYNC cycle's own ceiling: the store on tmpfs, where `fdatasync`
// returns at once, so the row measures what the store adds to the device
// (encoding, answers, dispatch, the hop to the flush thread and back) and
// is robust to device noise. Session 10, 64 producers on a busy machine:
// Deno 142–186 k acks/s, Bun 135–153 k; the device-bound row cannot pass
// it without overlapping that work with the device. The 256p row tells
// whether the store's own work limits the 256p disk row (session 16, 3
// runs each: Deno 390–400 k, Bun 427–594 k, Node 363–374 k on tmpfs,
// against 182–212 k on the disk, where the raw group commit made 224–281 k):
// it does not; the device cycle does.
if (fs.existsSync(TMPFS_DIRECTORY)) {
  scenarios.push([
    "ceiling sync 1 KiB 64p tmpfs",
    () => syncScenario(port, 64, n(100_000), n(SYNC_WARMUP_PUTS), TMPFS_DIRECTORY),
  ]);
  scenarios.push([
    "ceiling sync 1 KiB 256p tmpfs",
    () => syncScenario(port, 256, n(200_000), n(SYNC_WARMUP_PUTS), TMPFS_DIRECTORY),
  ]);
}
const OPT_IN_PREFIXES = ["heap ", "sustained ", "ceiling "];

if (filter !== "" && !scenarios.some(([name]) => filterMatches(name, filter))) {
  // A filter that selects nothing would otherwise print an empty table.
  throw new RangeError(
    `--filter ${JSON.stringify(filter)} selects no scenario; the scenarios are:\n` +
      scenarios.map(([name]) => `  ${name}`).join("\n"),
  );
}

const rows: Row[] = [];
for (const [name, run] of scenarios) {
  const selected = filter === ""
    ? !OPT_IN_PREFIXES.some((prefix) => name.startsWith(prefix))
    : filterMatches(name, filter);
  if (!selected) continue;
  const row = await run();
  if (row.scenario.startsWith("sync ")) {
    const raws = rows.filter((r) =>
      r.scenario.startsWith("raw group commit") && r.producers === row.producers
    );
    const best = Math.max(0, ...raws.map((r) => r.messagesPerSecond));
    if (best > 0) row.rawRatio = row.messagesPerSecond / best;
  }
  const fill = rows.find((r) => r.fill !== undefined)?.fill;
  if (row.scenario.startsWith("async") && fill !== undefined && fill !== "cannot map") {
    row.fillRatio = row.mbPerSecond / fill.firstMbPerSecond;
  }
  rows.push(row);
  if (!json && row.fill !== undefined) {
    const mbPerSecond = (rate: number) => `${Math.round(rate).toLocaleString("en-US")} MB/s`;
    console.log(
      `${row.scenario.padEnd(28)} ${
        row.fill === "cannot map"
          ? `not measured: the ${row.adapter} adapter cannot map`
          : `first ${mbPerSecond(row.fill.firstMbPerSecond)}, again ${
            mbPerSecond(row.fill.againMbPerSecond)
          }`
      }`,
    );
  } else if (!json) {
    console.log(
      `${row.scenario.padEnd(28)} ${
        Math.round(row.messagesPerSecond).toLocaleString("en-US").padStart(11)
      } msg/s ${row.mbPerSecond.toFixed(0).padStart(5)} MB/s  p50 ${
        row.p50Ms.toFixed(3).padStart(7)
      } ms  p99 ${row.p99Ms.toFixed(3).padStart(7)} ms${
        row.groupCommitMean === null ? "" : `  group ${row.groupCommitMean.toFixed(1)}`
      }${
        row.cpuMicrosPerMessage === undefined
          ? ""
          : `  cpu ${row.cpuMicrosPerMessage.toFixed(3)} µs/msg`
      }${row.rawRatio === undefined ? "" : `  ${row.rawRatio.toFixed(2)}× raw`}${
        row.fillRatio === undefined ? "" : `  ${row.fillRatio.toFixed(2)}× first fill`
      }`,
    );
  }
}
if (json) {
  console.log(JSON.stringify({ runtime: runtimeName(), adapter: port.adapter, rows }, null, 2));
}
