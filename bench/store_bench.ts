/**
 * Benchmarks of the message store (issue 6, item 9), on real files with the
 * host's native adapter, each scenario in a fresh temporary directory:
 *
 * ```
 * recovery   1 GiB of 1 KiB messages written by a child process, flushed,
 *            then SIGKILL (abort marker left, checkpoint stale) ─► time
 *            MessageStore.open: read-only (the commit-log scan with and
 *            without CRCs, page cache warm and evicted) and read-write
 *            (scan + re-dispatch into consume queues and index); then,
 *            the log ending 1 record into a segment, read-write opens
 *            under this boot's abort marker and RocketMQ's empty one
 * get        the same store read back through getMessages, pages of 32,
 *            the 4 queues round-robin: warm, cold (mappings dropped and
 *            pages evicted), and cold beside a paced producer (put latency
 *            with and without the reader)
 * dispatch   dispatch lag sampled every 10 ms under full-speed 1 KiB puts;
 *            put→dispatched latency of puts that each open a new queue;
 *            re-dispatch rate on open after deleting consumequeue/ and index/
 * subscribe  put→subscriber latency, ASYNC_FLUSH, at 10 k msg/s and full
 *            speed (a producer that yields every 1 ms, and one that never does)
 * open       open time and memory of stores of 100 and 1,000 segments with
 *            different message counts, page cache warm and evicted
 * heap       (only with `--filter heap`) 10 M 128 B messages through put,
 *            dispatch and getMessages; heap and RSS every 1 M
 * ```
 *
 * Run: `deno run -A --v8-flags=--expose-gc bench/store_bench.ts`,
 * `bun bench/store_bench.ts`, `node --expose-gc --import tsx bench/store_bench.ts`
 * (without the gc flag heap figures are taken without a collection first).
 * Flags: `--json` (one report object on the last line), `--filter <text>`
 * (scenarios or case names containing it; `heap` runs only when named),
 * `--scale <factor>` (data sizes and message counts, default 1).
 * `scripts/bench_store.ts` runs it on the three runtimes side by side.
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { performance } from "node:perf_hooks";
import { setImmediate } from "node:timers";
import { fileURLToPath } from "node:url";
import { createPort, runtimeName } from "../src/runtime/mod.ts";
import { benchRuntime, collectGarbage, filterMatches, scenarioFlags } from "./_harness.ts";
import type { FileHandle, Mapping, RuntimePort } from "../src/runtime/port.ts";
import type { MessageInput } from "../src/record/mod.ts";
import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";

/** One measured case: named figures, units last in each name. */
export interface StoreBenchRow {
  /** `recovery`, `get`, `dispatch`, `subscribe`, `open` or `heap`. */
  scenario: string;
  /** The case. */
  name: string;
  /** The figures, e.g. `openMs`, `gbPerSecond`, `p99Ms`. */
  figures: Record<string, number>;
}

/** What one run prints with `--json` (the last line). */
export interface StoreBenchReport {
  /** Runtime and version. */
  runtime: string;
  /** The port adapter used. */
  adapter: string;
  /** The `--scale` factor. */
  scale: number;
  /** Whether heap figures were taken after a forced collection. */
  gcForced: boolean;
  /** Every case run. */
  rows: StoreBenchRow[];
}

const KIB = 0x400;
const MIB = 0x10_0000;
const GIB = 0x4000_0000;
const TOPIC = "BenchTopic";
const QUEUES = 4;
/** getMessages page size of every reader. */
const PAGE_MESSAGES = 32;
/** Dispatch lag is sampled this often. */
const LAG_SAMPLE_INTERVAL_MS = 10;

/**
 * Options of every store: puts wait for a slow flusher rather than fail, a
 * shared disk near the default 75 % ratio does not refuse puts, and segments
 * are pre-faulted as in `bench/commit_log_bench.ts`.
 */
const BASE_OPTIONS: MessageStoreOptions = {
  warmMapedFileEnable: true,
  osPageCacheBusyTimeOutMills: 30_000,
  diskMaxUsedSpaceRatio: 95,
  onWarning: (message) => console.error(message),
};

const argv = process.argv.slice(2);
const { json, filter, scale } = scenarioFlags(argv);
const SCRIPT = fileURLToPath(import.meta.url);

// ---------------------------------------------------------------------------
// Helpers

/** The 4 messages (one per queue) every producer cycles through. */
function messages(bodyBytes: number, topic = TOPIC): MessageInput[] {
  const body = new Uint8Array(bodyBytes);
  for (let i = 0; i < body.length; i++) body[i] = (i * 31) & 0xFF;
  return Array.from({ length: QUEUES }, (_, q) => ({
    topic,
    queueId: q,
    body,
    properties: { TAGS: "TagA", KEYS: `key-${q} order-${q * 7}` },
  }));
}

function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

/** p50, p99 and max of `values` (sorted in place), in the unit given. */
function spread(values: Float64Array, unit: string, prefix = ""): Record<string, number> {
  values.sort();
  return {
    [`${prefix}p50${unit}`]: percentile(values, 0.5),
    [`${prefix}p99${unit}`]: percentile(values, 0.99),
    [`${prefix}max${unit}`]: values.length === 0 ? 0 : values[values.length - 1]!,
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function withDirectory<T>(body: (directory: string) => Promise<T>): Promise<T> {
  const directory = fs.mkdtempSync(`${os.tmpdir()}/mqstore-bench-`);
  try {
    return await body(directory);
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

function checkPut(status: string, message: string | undefined, at: number): void {
  if (status !== "PUT_OK") throw new Error(`put ${at}: ${status} ${message ?? ""}`);
}

const gcForced = collectGarbage();

interface JscHeapStats {
  heapSize: number;
  extraMemorySize: number;
}

/**
 * Bun's `heapUsed` counts array-buffer memory, mapped segments included (a
 * 420 MB index file shows as 420 MB of heap): on Bun the JS heap is
 * `heapSize − extraMemorySize` of `bun:jsc`, comparable with V8's
 * `heapUsed`, which leaves array buffers out.
 */
const jscHeapStats: (() => JscHeapStats) | undefined = runtimeName() === "bun"
  ? await (async () => {
    // Not a literal: deno check must not try to resolve it.
    const specifier = "bun:jsc";
    const jsc = await import(specifier) as { heapStats(): JscHeapStats };
    return () => jsc.heapStats();
  })()
  : undefined;

/** JS heap used (array buffers left out) and RSS, after a collection where possible. */
function memory(): { heapBytes: number; rssBytes: number } {
  collectGarbage();
  const usage = process.memoryUsage();
  const jsc = jscHeapStats?.();
  const heapBytes = jsc === undefined ? usage.heapUsed : jsc.heapSize - jsc.extraMemorySize;
  return { heapBytes, rssBytes: usage.rss };
}

/** Every regular file under `directory`. */
function filesUnder(directory: string): string[] {
  const found: string[] = [];
  const walk = (at: string) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const child = path.join(at, entry.name);
      if (entry.isDirectory()) walk(child);
      else if (entry.isFile()) found.push(child);
    }
  };
  if (fs.existsSync(directory)) walk(directory);
  return found;
}

/**
 * A port that remembers the live mappings the store makes, so a bench can
 * drop their pages (`madvise(MADV_DONTNEED)`) before evicting the files
 * from the page cache: `posix_fadvise(POSIX_FADV_DONTNEED)` skips pages
 * that are still mapped.
 */
interface TrackingPort {
  port: RuntimePort;
  /** Live mappings by file path. */
  mappings: Map<Mapping, string>;
}

function trackingPort(inner: RuntimePort): TrackingPort {
  const mappings = new Map<Mapping, string>();
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "map") {
          return async (...args: unknown[]) => {
            const mapping: Mapping = await value.apply(target, args);
            mappings.set(mapping, target.path);
            const unmap = mapping.unmap.bind(mapping);
            Object.defineProperty(mapping, "unmap", {
              value: () => {
                mappings.delete(mapping);
                unmap();
              },
            });
            return mapping;
          };
        }
        return value.bind(target);
      },
    });
  const port = new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "openFile" || key === "createFile") {
        return async (...args: unknown[]) => wrapHandle(await value.apply(target, args));
      }
      return value.bind(target);
    },
  });
  return { port, mappings };
}

/** Share of pages of `files` in the page cache (`cachestat`), or NaN where unknown. */
async function cachedShare(port: RuntimePort, files: readonly string[]): Promise<number> {
  let cached = 0;
  let total = 0;
  for (const file of files) {
    const handle = await port.openFile(file, { readOnly: true });
    try {
      const state = handle.pageCacheState(0, handle.sizeBytes);
      if (state === undefined) return Number.NaN;
      cached += state.cachedPages;
      total += Math.ceil(handle.sizeBytes / port.pageSizeBytes);
    } finally {
      await handle.close();
    }
  }
  return total === 0 ? 0 : cached / total;
}

/**
 * Evicts `files` from the page cache: drops the tracked mappings' pages
 * first (a mapped page cannot be evicted), writes dirty pages back, then
 * `POSIX_FADV_DONTNEED`. Returns the share of pages still cached.
 */
async function evict(
  port: RuntimePort,
  files: readonly string[],
  tracking?: TrackingPort,
): Promise<number> {
  const wanted = new Set(files);
  if (tracking !== undefined) {
    for (const [mapping, file] of tracking.mappings) {
      if (wanted.has(file)) mapping.advise(0, mapping.length, "dontneed");
    }
  }
  for (const file of files) {
    const handle = await port.openFile(file, { readOnly: true });
    try {
      await handle.datasync();
      handle.adviseCache(0, handle.sizeBytes, "dontneed");
    } finally {
      await handle.close();
    }
  }
  return await cachedShare(port, files);
}

/** The commit-log segments of a store, oldest first. */
function segmentsOf(directory: string): string[] {
  const at = path.join(directory, "commitlog");
  return fs.existsSync(at)
    ? fs.readdirSync(at).filter((name) => /^[0-9]{20}$/.test(name)).sort().map((name) =>
      path.join(at, name)
    )
    : [];
}

/** The command running this file on the current runtime, with `args`. */
function selfCommand(args: readonly string[]): { command: string; args: string[] } {
  switch (runtimeName()) {
    case "deno":
      return { command: process.execPath, args: ["run", "-A", SCRIPT, ...args] };
    case "bun":
      return { command: process.execPath, args: [SCRIPT, ...args] };
    case "node":
      return { command: process.execPath, args: [...process.execArgv, SCRIPT, ...args] };
  }
}

// ---------------------------------------------------------------------------
// The child of the recovery scenario

interface ChildReport {
  messageCount: number;
  maxOffset: number;
  dispatchedOffset: number;
  putSeconds: number;
  flushSeconds: number;
}

/**
 * Writes 1 KiB messages into segments of `segmentBytes` until the next
 * record would not fit below `targetBytes` (so the log ends near a segment
 * end, and the dirty-tail check of an unclean open reads little past it),
 * waits until the commit log is flushed, records what it did in
 * `reportPath`, and kills itself with SIGKILL: `abort` stays, the lock dies
 * with the process, the consume queues and the index are where the
 * dispatcher left them in the page cache, the checkpoint is as the flush
 * services last wrote it.
 */
async function childWrite(
  directory: string,
  segmentBytes: number,
  targetBytes: number,
  reportPath: string,
): Promise<void> {
  const port = await createPort({ onNotice: (message) => console.error(message) });
  const store = await MessageStore.open(directory, {
    port,
    ...BASE_OPTIONS,
    mappedFileSizeCommitLog: segmentBytes,
    // A running broker writes its checkpoint every thorough flush; the
    // writer lives only seconds, so a short interval keeps the checkpoint
    // about as far behind as a real crash would find it.
    flushCommitLogThoroughInterval: 1_000,
    flushConsumeQueueThoroughInterval: 1_000,
  });
  const batch = messages(KIB);
  let count = 0;
  let recordBytes = 0;
  const start = performance.now();
  while (store.maxOffset + 2 * recordBytes + 8 <= targetBytes) {
    const r = await store.putMessage(batch[count & 3]!);
    checkPut(r.status, r.error?.message, count);
    recordBytes = r.appendResult!.wroteBytes;
    count++;
  }
  const putEnd = performance.now();
  await store.whenFlushed(store.maxOffset);
  const report: ChildReport = {
    messageCount: count,
    maxOffset: store.maxOffset,
    dispatchedOffset: store.dispatchedOffset,
    putSeconds: (putEnd - start) / 1000,
    flushSeconds: (performance.now() - putEnd) / 1000,
  };
  fs.writeFileSync(reportPath, JSON.stringify(report));
  process.kill(process.pid, "SIGKILL");
  // SIGKILL is delivered before anything else runs.
  await new Promise(() => {});
}

const childAt = argv.indexOf("--child-write");
if (childAt >= 0) {
  await childWrite(
    argv[childAt + 1]!,
    Number(argv[childAt + 2]),
    Number(argv[childAt + 3]),
    argv[childAt + 4]!,
  );
}

// ---------------------------------------------------------------------------
// Scenarios

const rows: StoreBenchRow[] = [];
const port = await createPort({ onNotice: (message) => console.error(message) });
let printedScenario = "";

function format(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  const magnitude = Math.abs(value);
  const digits = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : magnitude >= 1 ? 2 : 3;
  return value.toLocaleString("en-US", { maximumFractionDigits: digits });
}

function report(scenario: string, name: string, figures: Record<string, number>): void {
  const row = { scenario, name, figures };
  rows.push(row);
  if (json) return;
  if (scenario !== printedScenario) {
    printedScenario = scenario;
    console.log(`\n[${scenario}]`);
  }
  const text = Object.entries(figures).map(([key, value]) => `${key} ${format(value)}`).join("  ");
  console.log(`  ${name.padEnd(44)} ${text}`);
}

function selected(scenario: string, name = ""): boolean {
  if (filter === "") return scenario !== "heap";
  return filterMatches(`${scenario} ${name}`, filter);
}

/** CPU time (user + system) since `since`, ms. */
function cpuMsSince(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1000;
}

/** Times `MessageStore.open`: wall and CPU ms. */
async function timedOpen(
  directory: string,
  options: MessageStoreOptions,
): Promise<{ store: MessageStore; openMs: number; cpuMs: number }> {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const store = await MessageStore.open(directory, options);
  return { store, openMs: performance.now() - t0, cpuMs: cpuMsSince(cpu) };
}

/** Figures of a store's recovery report. */
function recoveryFigures(
  store: MessageStore,
  openMs: number,
  cpuMs: number,
): Record<string, number> {
  const r = store.recovery;
  const logBytes = r.maxOffset - store.minOffset;
  return {
    openMs,
    cpuMs,
    logBytes,
    messages: r.messageCount,
    gbPerSecond: logBytes / openMs / 1e6,
    gbPerCpuSecond: logBytes / cpuMs / 1e6,
    dispatchedFrom: r.dispatchedFrom,
    clean: r.clean ? 1 : 0,
    cut: r.endKind === "invalid" ? 1 : 0,
  };
}

/**
 * recovery + get: one store of 1 GiB (× scale) of 1 KiB messages, left by
 * a SIGKILLed writer.
 */
async function gibStoreScenarios(): Promise<void> {
  const wantRecovery = selected("recovery");
  const wantGet = selected("get");
  if (!wantRecovery && !wantGet) return;
  await withDirectory(async (root) => {
    const directory = path.join(root, "store");
    const reportPath = path.join(root, "child.json");
    // The default 1 GiB segments; below scale 1 one smaller segment.
    let segmentBytes = GIB;
    while (segmentBytes / 2 >= GIB * scale && segmentBytes > MIB) segmentBytes /= 2;
    const targetBytes = Math.ceil(GIB * scale / segmentBytes) * segmentBytes;
    const { command, args } = selfCommand([
      "--child-write",
      directory,
      String(segmentBytes),
      String(targetBytes),
      reportPath,
    ]);
    const child = spawnSync(command, args, { stdio: ["ignore", "inherit", "inherit"] });
    if (child.signal !== "SIGKILL" || !fs.existsSync(reportPath)) {
      throw new Error(`the writer ended with ${child.signal ?? child.status}, not SIGKILL`);
    }
    const written = JSON.parse(fs.readFileSync(reportPath, "utf8")) as ChildReport;
    report("recovery", "writer (child process, then SIGKILL)", {
      messages: written.messageCount,
      logBytes: written.maxOffset,
      segmentBytes,
      putMsgPerSecond: written.messageCount / written.putSeconds,
      flushAtEndMs: written.flushSeconds * 1000,
      dispatchedAtKill: written.dispatchedOffset,
    });
    const options: MessageStoreOptions = {
      port,
      ...BASE_OPTIONS,
      mappedFileSizeCommitLog: segmentBytes,
    };
    const abortPath = path.join(directory, "abort");
    const all = () => filesUnder(directory).filter((file) => !file.endsWith("lock"));
    // Read-only opens change nothing: each scans the crashed store again.
    const readOnlyOpen = async (name: string, cold: boolean, checkCRCOnRecover: boolean) => {
      const cachedShareBefore = cold ? await evict(port, all()) : await cachedShare(port, all());
      const { store, openMs, cpuMs } = await timedOpen(directory, {
        ...options,
        readOnly: true,
        checkCRCOnRecover,
      });
      report("recovery", name, { ...recoveryFigures(store, openMs, cpuMs), cachedShareBefore });
      await store.close();
    };
    if (wantRecovery) {
      await readOnlyOpen("scan: read-only open, warm, CRC", false, true);
      await readOnlyOpen("scan: read-only open, warm, no CRC", false, false);
      await readOnlyOpen("scan: read-only open, cold, CRC", true, true);
      await readOnlyOpen("scan: read-only open, cold, no CRC", true, false);
    }
    // The real recovery, as after a process crash (page cache kept).
    let opened: Awaited<ReturnType<typeof timedOpen>>;
    try {
      opened = await timedOpen(directory, options);
    } catch (error) {
      console.error(`recovery: the read-write open failed: ${String(error)}`);
      if (wantRecovery) report("recovery", "recovery: read-write open, warm, CRC", { failed: 1 });
      if (wantGet) console.error("get: skipped, the store did not open");
      return;
    }
    const { store, openMs, cpuMs } = opened;
    if (wantRecovery) {
      report(
        "recovery",
        "recovery: read-write open, warm, CRC",
        recoveryFigures(store, openMs, cpuMs),
      );
      // One record more starts a new segment: an unclean open then checks
      // the whole rest of that segment for stale bytes past the log end.
      for (let i = 0; store.maxOffset <= targetBytes; i++) {
        const r = await store.putMessage(messages(KIB)[0]!);
        checkPut(r.status, r.error?.message, i);
      }
    }
    const logEnd = store.maxOffset;
    await store.close();
    if (wantRecovery) {
      // The same store as after a crash, its log now ending 1 record into
      // a segment: the search for stale bytes past the end reads one put's
      // bytes after the death of a process of this boot (the marker names
      // the boot, as mqstore writes it), the whole rest of the segment when
      // the marker does not place the crash (RocketMQ's empty one, or a
      // boot before the last reboot). The rest is written with zeros first,
      // as a store that ran a while leaves its segment (pre-faulted whole
      // in idle time, or warmed at creation): the file system then lists it
      // as data, and a search reads it.
      const tailSegment = path.join(
        directory,
        "commitlog",
        String(logEnd - logEnd % segmentBytes).padStart(20, "0"),
      );
      const tailFd = fs.openSync(tailSegment, "r+");
      try {
        const zeros = new Uint8Array(8 * MIB);
        const from = Math.ceil((logEnd % segmentBytes) / MIB) * MIB;
        for (let at = from; at < segmentBytes; at += zeros.length) {
          fs.writeSync(tailFd, zeros, 0, Math.min(zeros.length, segmentBytes - at), at);
        }
        // Durable before the clock runs, as a pre-fault's pages are.
        fs.fdatasyncSync(tailFd);
      } finally {
        fs.closeSync(tailFd);
      }
      const bootId = await port.bootId();
      const markers: [string, string][] = [["RocketMQ's empty marker", ""]];
      if (bootId !== undefined) markers.unshift(["this boot's marker", `boot ${bootId}\n`]);
      for (const [marker, text] of markers) {
        fs.writeFileSync(abortPath, text);
        const again = await timedOpen(directory, options);
        report(
          "recovery",
          `recovery: read-write open, log ends 1 record into a segment, ${marker}`,
          {
            ...recoveryFigures(again.store, again.openMs, again.cpuMs),
            sameBoot: again.store.recovery.sameBoot ? 1 : 0,
          },
        );
        await again.store.close();
      }
      fs.writeFileSync(abortPath, new Uint8Array(0));
      await readOnlyOpen("scan: as the first, log ends 1 record into a segment", false, true);
      fs.rmSync(abortPath);
    }
    if (wantGet) await getScenarios(directory, options);
  });
}

interface ReadFigures {
  messages: number;
  bytes: number;
  seconds: number;
}

/**
 * Reads every queue of TOPIC from 0 to its end at the start, round-robin
 * one page of 32 per queue (yielding to the event loop after each round
 * when asked), or until `maxMessages` were read.
 */
async function readAll(
  store: MessageStore,
  yieldEachRound = false,
  maxMessages = Number.POSITIVE_INFINITY,
): Promise<ReadFigures> {
  const next = new Array<number>(QUEUES).fill(0);
  const ends = Array.from({ length: QUEUES }, (_, q) => store.getMaxQueueOffset(TOPIC, q));
  let count = 0;
  let bytes = 0;
  const start = performance.now();
  let active = QUEUES;
  // Bounded by the queues' ends: every round moves each unfinished queue.
  while (active > 0 && count < maxMessages) {
    active = 0;
    for (let q = 0; q < QUEUES; q++) {
      if (next[q]! >= ends[q]!) continue;
      active++;
      const page = await store.getMessages(TOPIC, q, next[q]!, PAGE_MESSAGES);
      if (page.status !== "FOUND") throw new Error(`queue ${q} at ${next[q]}: ${page.status}`);
      for (const message of page.messages) bytes += message.storeSize;
      count += page.messages.length;
      next[q] = page.nextQueueOffset;
    }
    // A consumer serves its pages from the event loop: let timers and I/O run.
    if (yieldEachRound) await turn();
  }
  return { messages: count, bytes, seconds: (performance.now() - start) / 1000 };
}

function readFigures(read: ReadFigures): Record<string, number> {
  return {
    messages: read.messages,
    bytes: read.bytes,
    seconds: read.seconds,
    msgPerSecond: read.messages / read.seconds,
    gbPerSecond: read.bytes / read.seconds / 1e9,
  };
}

/** Put latencies of a paced producer: call→answer, and how late each put started. */
interface ProducerFigures {
  putMs: Float64Array;
  startDelayMs: Float64Array;
}

/**
 * A producer of 1 KiB messages to another topic at `ratePerSecond` until
 * `stop()`. A put starts when due, or as soon as the event loop lets it: a
 * long synchronous stretch (a page fault on the JS thread) shows as start
 * delay.
 */
async function pacedProducer(
  store: MessageStore,
  ratePerSecond: number,
  stop: () => boolean,
): Promise<ProducerFigures> {
  const batch = messages(KIB, "ProducerTopic");
  const putMs: number[] = [];
  const startDelayMs: number[] = [];
  const intervalMs = 1000 / ratePerSecond;
  const start = performance.now();
  // Bounded by stop(): the reader it runs beside ends.
  for (let i = 0; !stop(); i++) {
    const due = start + i * intervalMs;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const t0 = performance.now();
    const r = await store.putMessage(batch[i & 3]!);
    const t1 = performance.now();
    putMs.push(t1 - t0);
    // Timers fire up to ~1 ms late: lateness below that is the timer's.
    startDelayMs.push(Math.max(0, t0 - due));
    checkPut(r.status, r.error?.message, i);
  }
  return { putMs: Float64Array.from(putMs), startDelayMs: Float64Array.from(startDelayMs) };
}

function producerFigures(figures: ProducerFigures): Record<string, number> {
  return {
    puts: figures.putMs.length,
    ...spread(figures.putMs, "Ms", "put"),
    ...spread(figures.startDelayMs, "Ms", "startDelay"),
  };
}

/** get: the store the recovery scenario left (or the writer's, recovered here). */
async function getScenarios(directory: string, options: MessageStoreOptions): Promise<void> {
  const tracking = trackingPort(port);
  const store = await MessageStore.open(directory, { ...options, port: tracking.port });
  try {
    if (store.getMaxQueueOffset(TOPIC, 0) === 0) throw new Error("the store holds no messages");
    // Cold files: the consume queues read and every commit-log segment but
    // the one being written (a producer appends there).
    const coldFiles = () => {
      const segments = segmentsOf(directory);
      const last = segments.findLast((file) => Number(path.basename(file)) <= store.maxOffset);
      return [
        ...segments.filter((file) => file !== last),
        ...filesUnder(path.join(directory, "consumequeue", TOPIC)),
      ];
    };
    // Warm: recovery (or the open's scan) has just read every page.
    report("get", "warm, pages of 32, 4 queues round-robin", readFigures(await readAll(store)));
    const cachedShareBefore = await evict(port, coldFiles(), tracking);
    report("get", "cold", { ...readFigures(await readAll(store)), cachedShareBefore });
    // Put latency beside a reader that serves its pages from the event loop
    // (yielding after each round): cold, warm, and without a reader.
    const rate = 10_000;
    // The first puts after open wait for the active segment to be prepared
    // (pre-faulted): not what is measured here.
    const warmupUntil = performance.now() + 500;
    await pacedProducer(store, rate, () => performance.now() >= warmupUntil);
    const limit = Math.max(QUEUES * PAGE_MESSAGES, Math.round(0x1000_0000 * scale / (KIB + 128)));
    let readSeconds = 0;
    for (const cold of [true, false]) {
      const cachedShareBefore = cold
        ? await evict(port, coldFiles(), tracking)
        : await cachedShare(port, coldFiles());
      let readerDone = false;
      const producing = pacedProducer(store, rate, () => readerDone);
      const read = await readAll(store, true, limit);
      readerDone = true;
      const producer = await producing;
      readSeconds = read.seconds;
      const state = cold ? "cold" : "warm";
      report("get", `${state} reader, yielding, beside a producer`, {
        ...readFigures(read),
        cachedShareBefore,
      });
      report(
        "get",
        `put at ${rate / 1000} k msg/s beside a ${state} reader`,
        producerFigures(producer),
      );
    }
    const aloneUntil = performance.now() + readSeconds * 1000;
    const alone = await pacedProducer(store, rate, () => performance.now() >= aloneUntil);
    report("get", `put at ${rate / 1000} k msg/s, no reader`, producerFigures(alone));
  } finally {
    await store.close();
  }
}

/** Resolves after the event loop's next check phase (I/O callbacks run first). */
function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Puts `count` 1 KiB messages as fast as they are answered, yielding to the
 * event loop every `yieldEvery` puts (0: never), and samples the dispatch
 * lag every 10 ms.
 */
async function lagRun(
  store: MessageStore,
  count: number,
  yieldEvery: number,
): Promise<Record<string, number>> {
  const batch = messages(KIB);
  const startOffset = store.maxOffset;
  const lags: number[] = [];
  const start = performance.now();
  let nextSampleMs = start + LAG_SAMPLE_INTERVAL_MS;
  for (let i = 0; i < count; i++) {
    const r = await store.putMessage(batch[i & 3]!);
    checkPut(r.status, r.error?.message, i);
    if (yieldEvery > 0 && i % yieldEvery === yieldEvery - 1) await turn();
    if ((i & 0x1F) === 0) {
      const now = performance.now();
      if (now >= nextSampleMs) {
        lags.push(store.maxOffset - store.dispatchedOffset);
        nextSampleMs = now + LAG_SAMPLE_INTERVAL_MS;
      }
    }
  }
  const seconds = (performance.now() - start) / 1000;
  const endLagBytes = store.maxOffset - store.dispatchedOffset;
  const catchUpStart = performance.now();
  await store.whenDispatched(store.maxOffset);
  const catchUpMs = performance.now() - catchUpStart;
  const recordBytes = (store.maxOffset - startOffset) / count;
  const half = Math.floor(lags.length / 2);
  const sorted = Float64Array.from(lags).sort();
  const max = sorted[sorted.length - 1] ?? 0;
  return {
    puts: count,
    putMsgPerSecond: count / seconds,
    samples: lags.length,
    lagP50Bytes: percentile(sorted, 0.5),
    lagP99Bytes: percentile(sorted, 0.99),
    lagMaxBytes: max,
    lagP99Messages: percentile(sorted, 0.99) / recordBytes,
    lagMaxMessages: max / recordBytes,
    lagMaxFirstHalfBytes: Math.max(0, ...lags.slice(0, half)),
    lagMaxSecondHalfBytes: Math.max(0, ...lags.slice(half)),
    lagEndBytes: endLagBytes,
    catchUpMs,
  };
}

/**
 * Puts `count` 1 KiB messages in a row, each the first of a new queue (its
 * consume-queue file does not exist yet), and times each from the put to
 * its dispatch (readable by getMessages).
 */
async function newQueueRun(store: MessageStore, count: number): Promise<Record<string, number>> {
  const body = new Uint8Array(KIB);
  const latencies = new Float64Array(count);
  for (let i = 0; i < count; i++) {
    const start = performance.now();
    const r = await store.putMessage({ topic: "FreshQueues", queueId: i, body });
    checkPut(r.status, r.error?.message, i);
    const append = r.appendResult!;
    await store.whenDispatched(append.wroteOffset + append.wroteBytes);
    latencies[i] = performance.now() - start;
  }
  return { puts: count, ...spread(latencies, "Ms", "putToDispatched") };
}

/** dispatch: lag under full-speed puts, then the re-dispatch rate on open. */
async function dispatchScenarios(): Promise<void> {
  if (!selected("dispatch")) return;
  await withDirectory(async (root) => {
    const directory = path.join(root, "store");
    const options: MessageStoreOptions = {
      port,
      ...BASE_OPTIONS,
      mappedFileSizeCommitLog: 0x1000_0000,
    };
    let store = await MessageStore.open(directory, options);
    // The first puts: the dispatcher creates the consume-queue files and
    // the index file (420 MB by default) on its path.
    report(
      "dispatch",
      "first 20 k puts (queue and index files created)",
      await lagRun(store, 20_000, 128),
    );
    const count = Math.max(1, Math.round(200_000 * scale));
    report(
      "dispatch",
      "lag, full speed, yield every 128 puts",
      await lagRun(store, count, 128),
    );
    report(
      "dispatch",
      "lag, full speed, tight loop (never yields)",
      await lagRun(store, count, 0),
    );
    report("dispatch", "100 puts, each to a new queue", await newQueueRun(store, 100));
    const total = store.getMaxQueueOffset(TOPIC, 0) * QUEUES;
    await store.close();
    // Baseline: a clean open with nothing to dispatch.
    const baseline = await timedOpen(directory, options);
    await baseline.store.close();
    for (const index of [true, false]) {
      const name = `re-dispatch on open, ${index ? "queues + index" : "queues only"}`;
      for (const file of ["consumequeue", "index", "checkpoint"]) {
        fs.rmSync(path.join(directory, file), { recursive: true, force: true });
      }
      let opened: Awaited<ReturnType<typeof timedOpen>>;
      try {
        opened = await timedOpen(directory, { ...options, messageIndexEnable: index });
      } catch (error) {
        console.error(`dispatch: ${name} failed: ${String(error)}`);
        report("dispatch", name, { failed: 1 });
        continue;
      }
      store = opened.store;
      const dispatched = store.getMaxQueueOffset(TOPIC, 0) * QUEUES;
      await store.close();
      if (dispatched !== total) throw new Error(`re-dispatched ${dispatched} of ${total}`);
      report("dispatch", name, {
        messages: total,
        openMs: opened.openMs,
        cpuMs: opened.cpuMs,
        cleanOpenMs: baseline.openMs,
        cleanOpenCpuMs: baseline.cpuMs,
        msgPerSecond: total / ((opened.openMs - baseline.openMs) / 1000),
        msgPerCpuSecond: total / ((opened.cpuMs - baseline.cpuMs) / 1000),
      });
    }
  });
}

/** subscribe: put→subscriber latency. */
async function subscribeScenarios(): Promise<void> {
  // [name, msg/s, count, the producer yields to the event loop this often (ms; 0: never)]
  const cases: Array<[string, number, number, number]> = [
    ["ASYNC, 10 k msg/s", 10_000, Math.max(2_000, Math.round(50_000 * scale)), 0],
    [
      "ASYNC, full speed, yield every 1 ms",
      Number.POSITIVE_INFINITY,
      Math.max(2_000, Math.round(200_000 * scale)),
      1,
    ],
    // A producer that never yields shares the microtask queue with the
    // subscriber: each await of a put is one turn of it, each message the
    // subscriber takes at least one more, so it gets about half the rate
    // and its lag grows with the run (no real server's producer does that:
    // its puts come from I/O events).
    [
      "ASYNC, full speed, tight loop (never yields)",
      Number.POSITIVE_INFINITY,
      Math.max(2_000, Math.round(200_000 * scale)),
      0,
    ],
  ];
  for (const [name, rate, count, yieldEveryMs] of cases) {
    if (!selected("subscribe", name)) continue;
    await withDirectory(async (root) => {
      const store = await MessageStore.open(path.join(root, "store"), {
        port,
        ...BASE_OPTIONS,
        mappedFileSizeCommitLog: 0x1000_0000,
      });
      // Warm-up messages (the consume-queue and index files are created
      // on the dispatch path) are received before the measured ones.
      const warmup = 5_000;
      const latencies = new Float64Array(count);
      const controller = new AbortController();
      let received = 0;
      let warmedUp: () => void = () => {};
      const warm = new Promise<void>((resolve) => warmedUp = resolve);
      const consumer = (async () => {
        for await (
          const message of store.subscribe("Latency", 0, 0, { signal: controller.signal })
        ) {
          const body = message.body;
          const sentMs = new DataView(body.buffer, body.byteOffset, 8).getFloat64(0);
          if (received >= warmup) latencies[received - warmup] = performance.now() - sentMs;
          received++;
          if (received === warmup) warmedUp();
          if (received === warmup + count) return;
        }
      })();
      const body = new Uint8Array(KIB);
      const stamp = new DataView(body.buffer);
      const message: MessageInput = { topic: "Latency", queueId: 0, body };
      const put = async (i: number) => {
        // The put copies the body before it resolves, so the buffer is reused.
        stamp.setFloat64(0, performance.now());
        const r = await store.putMessage(message);
        checkPut(r.status, r.error?.message, i);
      };
      for (let i = 0; i < warmup; i++) {
        await put(i);
        if (i % 128 === 127) await turn();
      }
      await warm;
      const intervalMs = 1000 / rate;
      const start = performance.now();
      let yieldedAt = start;
      for (let i = 0; i < count; i++) {
        if (rate !== Number.POSITIVE_INFINITY) {
          const wait = start + i * intervalMs - performance.now();
          if (wait > 0) await sleep(wait);
        }
        await put(i);
        if (yieldEveryMs > 0 && performance.now() - yieldedAt >= yieldEveryMs) {
          await turn();
          yieldedAt = performance.now();
        }
      }
      const seconds = (performance.now() - start) / 1000;
      await consumer;
      controller.abort();
      await store.close();
      report("subscribe", `put→subscriber, ${name}`, {
        messages: count,
        putMsgPerSecond: count / seconds,
        ...spread(latencies, "Ms"),
      });
    });
  }
}

/**
 * Puts messages of `bodyBytes` in batches below 48 KiB (one queue each,
 * round-robin) until the log reaches `targetBytes`; returns the count.
 */
async function fill(store: MessageStore, bodyBytes: number, targetBytes: number): Promise<number> {
  const perBatch = Math.max(1, Math.min(64, Math.floor(0xC000 / (bodyBytes + 0x100))));
  const batches = messages(bodyBytes).map((m) => Array.from({ length: perBatch }, () => m));
  let count = 0;
  // Bounded by targetBytes: every batch appends.
  for (let b = 0; store.maxOffset < targetBytes; b++) {
    const r = await store.putMessages(batches[b & 3]!);
    checkPut(r.status, r.error?.message, count);
    count += perBatch;
  }
  return count;
}

/** open: open time and memory by segment count and message count. */
async function openScenarios(): Promise<void> {
  const cases: Array<[string, number, number, number]> = [
    ["100 × 4 MiB, 4 KiB bodies", 4 * MIB, 100, 4 * KIB],
    ["100 × 4 MiB, 128 B bodies", 4 * MIB, 100, 128],
    ["1,000 × 1 MiB, 1 KiB bodies", MIB, 1000, KIB],
  ];
  for (const [name, segmentBytes, segmentCount, bodyBytes] of cases) {
    if (!selected("open", name)) continue;
    await withDirectory(async (root) => {
      const directory = path.join(root, "store");
      const options: MessageStoreOptions = {
        port,
        ...BASE_OPTIONS,
        mappedFileSizeCommitLog: segmentBytes,
        maxMessageSize: 0x1_0000,
      };
      const store = await MessageStore.open(directory, options);
      // Half a segment short of the count: the last segment is the active one.
      const target = (Math.max(1, Math.round(segmentCount * scale)) - 0.5) * segmentBytes;
      const messageCount = await fill(store, bodyBytes, target);
      await store.close();
      const segments = segmentsOf(directory).length;
      for (const cold of [false, true]) {
        if (cold) await evict(port, filesUnder(directory).filter((file) => !file.endsWith("lock")));
        const before = memory();
        const opened = await timedOpen(directory, options);
        const after = memory();
        const t1 = performance.now();
        await opened.store.close();
        report("open", `${name}, ${cold ? "cold" : "warm"}`, {
          segments,
          messages: messageCount,
          openMs: opened.openMs,
          cpuMs: opened.cpuMs,
          closeMs: performance.now() - t1,
          heapDeltaMiB: (after.heapBytes - before.heapBytes) / MIB,
          rssDeltaMiB: (after.rssBytes - before.rssBytes) / MIB,
        });
      }
    });
  }
}

/** Reads every queue of TOPIC from `next` (moved on) to what is dispatched; returns the count. */
async function readDispatched(store: MessageStore, next: number[]): Promise<number> {
  let read = 0;
  for (let q = 0; q < QUEUES; q++) {
    // Bounded by the queue's end: each page moves on or ends the loop.
    for (;;) {
      const page = await store.getMessages(TOPIC, q, next[q]!, PAGE_MESSAGES);
      if (page.status !== "FOUND") break;
      read += page.messages.length;
      next[q] = page.nextQueueOffset;
    }
  }
  return read;
}

/** heap: 10 M 128 B messages through put, dispatch and getMessages. */
async function heapScenario(): Promise<void> {
  if (!selected("heap")) return;
  await withDirectory(async (root) => {
    const store = await MessageStore.open(path.join(root, "store"), {
      port,
      ...BASE_OPTIONS,
      mappedFileSizeCommitLog: 0x1000_0000,
    });
    const count = Math.max(QUEUES * 1000, Math.round(10_000_000 * scale));
    const step = Math.max(QUEUES, Math.round(count / 10));
    const batch = messages(128);
    const next = new Array<number>(QUEUES).fill(0);
    let read = 0;
    const start = memory();
    report("heap", "start", {
      messages: 0,
      heapMiB: start.heapBytes / MIB,
      rssMiB: start.rssBytes / MIB,
    });
    let first: { heapBytes: number; rssBytes: number } | undefined;
    const heaps: number[] = [];
    const t0 = performance.now();
    for (let i = 0; i < count; i++) {
      const r = await store.putMessage(batch[i & 3]!);
      checkPut(r.status, r.error?.message, i);
      // Let the dispatcher's I/O run, as a producer fed by the network does.
      if ((i & 0x7F) === 0x7F) await turn();
      // A consumer per queue reads what was dispatched.
      if ((i & 0xFFF) === 0xFFF) read += await readDispatched(store, next);
      if ((i + 1) % step === 0) {
        const now = memory();
        first ??= now;
        heaps.push(now.heapBytes);
        report("heap", `after ${format((i + 1) / 1e6)} M`, {
          messages: i + 1,
          read,
          heapMiB: now.heapBytes / MIB,
          rssMiB: now.rssBytes / MIB,
          seconds: (performance.now() - t0) / 1000,
        });
      }
    }
    await store.whenDispatched(store.maxOffset);
    read += await readDispatched(store, next);
    if (read !== count) throw new Error(`read ${read} of ${count} messages`);
    await store.close();
    const end = memory();
    const reference = first ?? start;
    report("heap", "summary (from the first mark)", {
      heapRangeMiB: (Math.max(...heaps) - Math.min(...heaps)) / MIB,
      heapGrowthMiB: (end.heapBytes - reference.heapBytes) / MIB,
      rssGrowthMiB: (end.rssBytes - reference.rssBytes) / MIB,
    });
  });
}

if (!json) {
  console.log(`runtime: ${runtimeName()} (${port.adapter}), scale ${scale}, gc ${gcForced}`);
}
await gibStoreScenarios();
await dispatchScenarios();
await subscribeScenarios();
await openScenarios();
await heapScenario();
if (json) {
  const result: StoreBenchReport = {
    runtime: benchRuntime(),
    adapter: port.adapter,
    scale,
    gcForced,
    rows,
  };
  console.log(JSON.stringify(result));
}
