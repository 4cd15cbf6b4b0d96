/**
 * `mqstore bench`: the end-to-end job. Opens a store in a fresh directory,
 * writes N messages, waits until they are durable and dispatched, reads
 * every queue back with `getMessages` and checks every body, then reports
 * throughput, put latency, bytes on disk and `PASS` or `FAIL: <reason>`.
 *
 * ```
 * open ─► write: K producers, each awaiting its put; message k goes to
 *         queue k % Q at queue offset ⌊k / Q⌋, body = pattern(k)
 *      ─► wait: durable (whenFlushed), dispatched (whenDispatched)
 *      ─► read: every queue in pages; queue offsets contiguous, every
 *         body, TAGS and KEYS as written; a few keys through the index
 *      ─► close ─► bytes on disk ─► report ─► remove the directory
 * ```
 *
 * A body is a pseudo-random pattern (a fixed seed) read from a window that
 * moves with the message index, with the index itself in its first 8 bytes
 * (big-endian): a body that comes back at the wrong queue offset, or
 * another message's body, does not compare equal.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { MqStoreError } from "../errors.ts";
import { type MessageInput, recordSizeOf, validateMessage } from "../record/mod.ts";
import { runtimeName } from "../runtime/info.ts";
import type { AdapterName, RuntimeName } from "../runtime/port.ts";
import type { StoredMessage } from "../store/get_message_result.ts";
import { MessageStore } from "../store/message_store.ts";
import type { MessageStoreOptions } from "../store/options.ts";
import { EXIT_BENCH_FAILED, EXIT_OK } from "./_exit_codes.ts";
import { formatCount, Progress, type ProgressMode } from "./_progress.ts";
import { UsageError } from "./_usage_error.ts";

/** How the bench's store makes puts durable. */
export type BenchFlush = "async" | "async-pool" | "sync";

/** The bench's settings, parsed from its flags. */
export interface BenchOptions {
  /** Messages written and read back (`--messages`). */
  messages: number;
  /** Body size (`--size`). */
  sizeBytes: number;
  /** Queues of the topic (`--queues`). */
  queues: number;
  /** Flush mode (`--flush`). */
  flush: BenchFlush;
  /** Concurrent producers, each awaiting its put (`--producers`). */
  producers: number;
  /** Store directory (`--dir`); undefined: a fresh one under the temp directory. */
  directory: string | undefined;
  /** Keep the store directory at the end (`--keep`). */
  keep: boolean;
  /** Print one JSON object (`--json`). */
  json: boolean;
  /** Run under this runtime (`--runtime`); undefined: this one. */
  runtime: RuntimeName | undefined;
  /** `mappedFileSizeCommitLog` (`--segment-size`); undefined: the store's default. */
  segmentSizeBytes: number | undefined;
  /** The runtime adapter (`--adapter`). */
  adapter: AdapterName | "auto";
  /** How progress is shown (`--progress`); undefined: bar on a terminal, lines otherwise, off with --json. */
  progress: ProgressMode | undefined;
}

/** Where the bench writes; the CLI's output (see main.ts). */
export interface BenchOutput {
  /** Receives standard output. */
  stdout(text: string): void;
  /** Receives standard error (progress, warnings). */
  stderr(text: string): void;
  /** Whether standard error is a terminal (progress is a bar then). */
  stderrIsTerminal?: boolean;
}

/** Everything the bench measured; `--json` prints it as is. */
export interface BenchReport {
  /** `PASS` or `FAIL`. */
  result: "PASS" | "FAIL";
  /** Why it failed, or null. */
  failure: string | null;
  /** The runtime. */
  runtime: RuntimeName;
  /** Its version. */
  runtimeVersion: string;
  /** The adapter the store used. */
  adapter: string;
  /** `--flush`. */
  flush: BenchFlush;
  /** Concurrent producers. */
  producers: number;
  /** Messages asked for. */
  messages: number;
  /** Messages stored (PUT_OK). */
  messagesWritten: number;
  /** Messages read back and verified. */
  messagesVerified: number;
  /** Body size. */
  sizeBytes: number;
  /** Queues. */
  queues: number;
  /** The topic. */
  topic: string;
  /** Body bytes written. */
  bodyBytes: number;
  /** Record bytes written (bodies, headers, topic and properties). */
  recordBytes: number;
  /** From the first put to the last answer. */
  writeSeconds: number;
  /** CPU time of the process (every thread, user + system) while writing. */
  writeCpuSeconds: number;
  /** Messages per second written. */
  messagesPerSecond: number;
  /** Record MB (10^6 bytes) per second written. */
  mbPerSecond: number;
  /** Put latency (call to answer), ms: median. */
  putLatencyP50Ms: number;
  /** 99th percentile. */
  putLatencyP99Ms: number;
  /** 99.9th percentile. */
  putLatencyP999Ms: number;
  /** Largest sample. */
  putLatencyMaxMs: number;
  /** Every how many puts one was timed. */
  latencySampleEvery: number;
  /** Puts timed. */
  latencySamples: number;
  /** Seconds after the last put until the log was durable to its end. */
  durableAfterSeconds: number;
  /** Seconds after the last put until every message was dispatched. */
  dispatchedAfterSeconds: number;
  /** Reading every queue back and checking it. */
  readSeconds: number;
  /** CPU time of the process while reading and verifying. */
  readCpuSeconds: number;
  /** Messages per second read and verified. */
  readMessagesPerSecond: number;
  /** Record MB per second read. */
  readMbPerSecond: number;
  /** Mean puts per group-commit flush (sync), else null. */
  groupCommitMean: number | null;
  /** Sum of the sizes of every file in the store directory. */
  diskFilesBytes: number;
  /** Blocks allocated to them (fallocated segments count whole). */
  diskAllocatedBytes: number;
  /** Bytes of commit-log data (maxOffset − minOffset). */
  commitLogDataBytes: number;
  /** Commit-log segments. */
  commitLogSegments: number;
  /** The store directory. */
  directory: string;
  /** Whether it was kept. */
  kept: boolean;
  /** The store options given to `MessageStore.open` (the rest: defaults). */
  options: Record<string, string | number | boolean>;
}

/** Default message count. */
export const BENCH_MESSAGES_DEFAULT = 1_000_000;
/** Default body size, bytes. */
export const BENCH_SIZE_DEFAULT_BYTES = 0x400;
/** Default queue count. */
export const BENCH_QUEUES_DEFAULT = 4;
/** Default producers under `--flush sync`: enough for group commit to batch. */
export const BENCH_SYNC_PRODUCERS_DEFAULT = 64;

/** The topic written. */
const TOPIC = "BenchTopic";
/** Most messages: 100 million (the latency samples and a day's run stay bounded). */
const MESSAGES_MAX = 100_000_000;
/** Queues at most: each one preallocates a consume-queue file. */
const QUEUES_MAX = 0x100;
/** Producers at most. */
const PRODUCERS_MAX = 0x1000;
/** The message index fills the first 8 bytes of each body. */
const INDEX_FIELD_BYTES = 8;
/** RocketMQ's maxMessageSize default, the largest body and record. */
const MAX_MESSAGE_SIZE_BYTES = 0x40_0000;
/** Smallest and largest commit-log segment (the store's limits). */
const SEGMENT_SIZE_MIN_BYTES = 0x1000;
const SEGMENT_SIZE_MAX_BYTES = 0x7FFF_F000;
/** `--flush async-pool` default segment: the pool holds 5 segment-sized heap buffers. */
const POOL_SEGMENT_SIZE_DEFAULT_BYTES = 0x1000_0000;
/** Bytes a segment keeps after its last record for the BLANK end marker. */
const SEGMENT_END_RESERVE_BYTES = 8;
/** Latency samples kept at most (32 MiB of float64). */
const LATENCY_SAMPLES_MAX = 0x40_0000;
/**
 * One put in this many is timed under async flush (timing every one costs
 * more than the put). Prime, so the sample does not lock onto anything
 * periodic in the put path: the store looks at the clock every 32 puts
 * to give the event loop a turn, and with one put in 16 timed every such
 * put was in the sample (p99.9 1.5–1.9 ms, where 0.04 % of puts wait).
 */
const ASYNC_SAMPLE_EVERY = 17;
/** Messages one getMessages call asks for. */
const READ_PAGE_COUNT = 0x100;
/** Distinct TAGS values. */
const TAG_COUNT = 8;
/** Window positions of the body pattern (prime, so windows do not repeat with the queue count). */
const PATTERN_SHIFTS = 251;
/** Seed of the body pattern (xorshift32). */
const PATTERN_SEED = 0x9E37_79B9;
const KIB = 0x400;
const MIB = 0x10_0000;

// ---------------------------------------------------------------------
// Flags

function flagValue(argv: readonly string[], i: number, name: string): [string, number] {
  const argument = argv[i]!;
  if (argument.includes("=")) return [argument.slice(argument.indexOf("=") + 1), i];
  const value = argv[i + 1];
  if (value === undefined || (value.startsWith("--") && value.length > 2)) {
    throw new UsageError(`bench: ${name} needs a value`);
  }
  return [value, i + 1];
}

/**
 * Parses a count: digits with optional `_` or `,` separators, or a
 * decimal with `k` (thousand) or `m` (million): `2000`, `1_000_000`, `100k`, `1m`.
 */
export function parseCount(name: string, text: string, min: number, max: number): number {
  let value = Number.NaN;
  const plain = /^[0-9][0-9_,]*$/.exec(text);
  const scaled = /^([0-9]+(?:\.[0-9]+)?)([kKmM])$/.exec(text);
  if (plain !== null) value = Number(text.replace(/[_,]/g, ""));
  else if (scaled !== null) {
    value = Math.round(Number(scaled[1]) * (scaled[2]!.toLowerCase() === "k" ? 1e3 : 1e6) * 1e6) /
      1e6;
  }
  if (!Number.isSafeInteger(value)) {
    throw new UsageError(`bench: ${name} needs a whole number (like 2000, 100k, 1m), not ${text}`);
  }
  if (value < min || value > max) {
    throw new UsageError(
      `bench: ${name} is ${formatCount(value)}; it must be from ${formatCount(min)} to ${
        formatCount(max)
      }`,
    );
  }
  return value;
}

/**
 * Parses a byte size: digits, optionally followed by `B`, `k`/`KB`/`KiB`
 * (1024) or `m`/`MB`/`MiB` (1024²): `128`, `1k`, `1KiB`, `64MiB`.
 */
export function parseSize(name: string, text: string, min: number, max: number): number {
  const match = /^([0-9]+)\s*(b|k|kb|kib|m|mb|mib)?$/i.exec(text);
  const unit = match?.[2]?.toLowerCase() ?? "";
  const value = match === null
    ? Number.NaN
    : Number(match[1]) * (unit.startsWith("k") ? KIB : unit.startsWith("m") ? MIB : 1);
  if (!Number.isSafeInteger(value)) {
    throw new UsageError(`bench: ${name} needs a size in bytes (like 128, 1k, 1KiB), not ${text}`);
  }
  if (value < min || value > max) {
    throw new UsageError(
      `bench: ${name} is ${formatCount(value)} bytes; it must be from ${formatCount(min)} to ${
        formatCount(max)
      }`,
    );
  }
  return value;
}

function oneOf<T extends string>(name: string, text: string, values: readonly T[]): T {
  if (!(values as readonly string[]).includes(text)) {
    throw new UsageError(`bench: ${name} must be one of ${values.join(", ")}, not ${text}`);
  }
  return text as T;
}

const FLUSH_MODES: readonly BenchFlush[] = ["async", "async-pool", "sync"];
const RUNTIMES: readonly RuntimeName[] = ["deno", "bun", "node"];
const ADAPTERS: readonly (AdapterName | "auto")[] = [
  "auto",
  "deno-ffi",
  "bun-ffi",
  "node-koffi",
  "portable",
];
const PROGRESS_MODES: readonly ProgressMode[] = ["bar", "lines", "off"];

/**
 * Parses the flags of `mqstore bench` (everything after `bench`).
 *
 * @example
 * ```ts
 * import { parseBenchArguments } from "./bench.ts";
 *
 * const options = parseBenchArguments(["--messages", "2k", "--size", "1KiB", "--flush", "sync"]);
 * console.log(options.messages, options.sizeBytes, options.producers); // 2000 1024 64
 * ```
 *
 * @throws {UsageError} For an unknown flag, a missing value or a value out of range.
 */
export function parseBenchArguments(argv: readonly string[]): BenchOptions {
  const options: BenchOptions = {
    messages: BENCH_MESSAGES_DEFAULT,
    sizeBytes: BENCH_SIZE_DEFAULT_BYTES,
    queues: BENCH_QUEUES_DEFAULT,
    flush: "async",
    producers: 0,
    directory: undefined,
    keep: false,
    json: false,
    runtime: undefined,
    segmentSizeBytes: undefined,
    adapter: "auto",
    progress: undefined,
  };
  for (let i = 0; i < argv.length; i++) {
    const argument = argv[i]!;
    const name = argument.includes("=") ? argument.slice(0, argument.indexOf("=")) : argument;
    if (name === "--keep" || name === "--json") {
      if (argument !== name) throw new UsageError(`bench: ${name} takes no value`);
      if (name === "--keep") options.keep = true;
      else options.json = true;
      continue;
    }
    if (!name.startsWith("-")) {
      throw new UsageError(`bench: unexpected argument ${argument} (the directory is --dir)`);
    }
    let value: string;
    switch (name) {
      case "--messages":
        [value, i] = flagValue(argv, i, name);
        options.messages = parseCount(name, value, 1, MESSAGES_MAX);
        break;
      case "--size":
        [value, i] = flagValue(argv, i, name);
        options.sizeBytes = parseSize(name, value, INDEX_FIELD_BYTES, MAX_MESSAGE_SIZE_BYTES);
        break;
      case "--queues":
        [value, i] = flagValue(argv, i, name);
        options.queues = parseCount(name, value, 1, QUEUES_MAX);
        break;
      case "--flush":
        [value, i] = flagValue(argv, i, name);
        options.flush = oneOf(name, value, FLUSH_MODES);
        break;
      case "--producers":
        [value, i] = flagValue(argv, i, name);
        options.producers = parseCount(name, value, 1, PRODUCERS_MAX);
        break;
      case "--dir":
        [value, i] = flagValue(argv, i, name);
        if (value === "") throw new UsageError("bench: --dir needs a path");
        options.directory = value;
        break;
      case "--runtime":
        [value, i] = flagValue(argv, i, name);
        options.runtime = oneOf(name, value, RUNTIMES);
        break;
      case "--segment-size":
        [value, i] = flagValue(argv, i, name);
        options.segmentSizeBytes = parseSize(
          name,
          value,
          SEGMENT_SIZE_MIN_BYTES,
          SEGMENT_SIZE_MAX_BYTES,
        );
        break;
      case "--adapter":
        [value, i] = flagValue(argv, i, name);
        options.adapter = oneOf(name, value, ADAPTERS);
        break;
      case "--progress":
        [value, i] = flagValue(argv, i, name);
        options.progress = oneOf(name, value, PROGRESS_MODES);
        break;
      default:
        throw new UsageError(`bench: unknown flag ${argument}`);
    }
  }
  if (options.producers === 0) {
    options.producers = options.flush === "sync" ? BENCH_SYNC_PRODUCERS_DEFAULT : 1;
  }
  // The largest record must fit a segment (with its end marker) and the
  // store's maxMessageSize: check the last message, whose KEYS are longest.
  const segment = segmentSizeOf(options);
  const problem = validateMessage(
    messageOf(options.messages - 1, options.queues, new Uint8Array(options.sizeBytes)),
    { maxMessageSizeBytes: MAX_MESSAGE_SIZE_BYTES },
  );
  if (problem !== undefined) {
    throw new UsageError(`bench: --size ${formatCount(options.sizeBytes)}: ${problem.message}`);
  }
  const recordBytes = largestRecordBytes(options);
  if (segment !== undefined && recordBytes > segment - SEGMENT_END_RESERVE_BYTES) {
    throw new UsageError(
      `bench: a record of ${formatCount(recordBytes)} bytes does not fit a --segment-size of ${
        formatCount(segment)
      } bytes`,
    );
  }
  return options;
}

// ---------------------------------------------------------------------
// Messages

/** The body pattern: PATTERN_SHIFTS + size pseudo-random bytes from a fixed seed. */
function makePattern(sizeBytes: number): Uint8Array {
  const pattern = new Uint8Array(sizeBytes + PATTERN_SHIFTS);
  let state = PATTERN_SEED;
  for (let i = 0; i < pattern.length; i++) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    pattern[i] = state & 0xFF;
  }
  return pattern;
}

/** Writes message `index`'s body into `body`. */
function fillBody(body: Uint8Array, pattern: Uint8Array, index: number): void {
  const shift = index % PATTERN_SHIFTS;
  body.set(pattern.subarray(shift, shift + body.length));
  writeIndex(body, index);
}

function writeIndex(body: Uint8Array, index: number): void {
  const high = Math.floor(index / 0x1_0000_0000);
  const low = index >>> 0;
  body[0] = high >>> 24;
  body[1] = (high >>> 16) & 0xFF;
  body[2] = (high >>> 8) & 0xFF;
  body[3] = high & 0xFF;
  body[4] = low >>> 24;
  body[5] = (low >>> 16) & 0xFF;
  body[6] = (low >>> 8) & 0xFF;
  body[7] = low & 0xFF;
}

function readIndex(body: Uint8Array): number {
  const high = ((body[0]! << 24) | (body[1]! << 16) | (body[2]! << 8) | body[3]!) >>> 0;
  const low = ((body[4]! << 24) | (body[5]! << 16) | (body[6]! << 8) | body[7]!) >>> 0;
  return high * 0x1_0000_0000 + low;
}

const TAGS = Array.from({ length: TAG_COUNT }, (_, i) => `tag-${i}`);

function keyOf(index: number): string {
  return `bench-${index}`;
}

function messageOf(index: number, queues: number, body: Uint8Array): MessageInput {
  return {
    topic: TOPIC,
    queueId: index % queues,
    body,
    properties: { TAGS: TAGS[index % TAG_COUNT]!, KEYS: keyOf(index) },
  };
}

function segmentSizeOf(options: BenchOptions): number | undefined {
  return options.segmentSizeBytes ??
    (options.flush === "async-pool" ? POOL_SEGMENT_SIZE_DEFAULT_BYTES : undefined);
}

/** Record size of the longest message: IPv4 hosts, ASCII topic and properties. */
function largestRecordBytes(options: BenchOptions): number {
  const properties = `TAGS\u0001${TAGS[0]}\u0002KEYS\u0001${keyOf(options.messages - 1)}\u0002`;
  return recordSizeOf(0, options.sizeBytes, TOPIC.length, properties.length);
}

/** The store options of a bench run. */
function storeOptionsOf(options: BenchOptions): MessageStoreOptions {
  const storeOptions: MessageStoreOptions = {
    flushDiskType: options.flush === "sync" ? "SYNC_FLUSH" : "ASYNC_FLUSH",
  };
  if (options.flush === "async-pool") storeOptions.transientStorePoolEnable = true;
  const segment = segmentSizeOf(options);
  if (segment !== undefined) storeOptions.mappedFileSizeCommitLog = segment;
  if (options.adapter !== "auto") storeOptions.adapter = options.adapter;
  return storeOptions;
}

// ---------------------------------------------------------------------
// The run

function percentile(sorted: Float64Array, fraction: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))]!;
}

/** On a shared machine, CPU time says more than wall time. */
function cpuSecondsSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1e6;
}

function runtimeVersion(runtime: RuntimeName): string {
  const versions = process.versions as Record<string, string | undefined>;
  return versions[runtime] ?? versions.node ?? "unknown";
}

/** Sizes of every file under `directory`: apparent and allocated. */
function diskUsage(directory: string): { filesBytes: number; allocatedBytes: number } {
  let filesBytes = 0;
  let allocatedBytes = 0;
  const walk = (at: string) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const child = path.join(at, entry.name);
      if (entry.isDirectory()) {
        walk(child);
      } else if (entry.isFile()) {
        const stat = fs.statSync(child);
        filesBytes += stat.size;
        // st_blocks counts 512-byte units whatever the file system's block size.
        allocatedBytes += stat.blocks * 512;
      }
    }
  };
  walk(directory);
  return { filesBytes, allocatedBytes };
}

function countSegments(directory: string): number {
  try {
    return fs.readdirSync(path.join(directory, "commitlog")).filter((name) =>
      /^[0-9]{20}$/.test(name)
    ).length;
  } catch {
    return 0;
  }
}

/** What is wrong with message `message` read at queue `queueId`, offset `queueOffset`, or undefined. */
function checkMessage(
  message: StoredMessage,
  queueId: number,
  queueOffset: number,
  queues: number,
  expected: Buffer,
  pattern: Uint8Array,
): string | undefined {
  const index = queueOffset * queues + queueId;
  const where = `queue ${queueId} offset ${queueOffset}`;
  if (message.topic !== TOPIC || message.queueId !== queueId) {
    return `${where} holds a message of ${message.topic} queue ${message.queueId}`;
  }
  if (message.queueOffset !== queueOffset) {
    return `${where} holds a message whose queue offset is ${message.queueOffset}`;
  }
  if (message.body.length !== expected.length) {
    return `${where}: body is ${message.body.length} bytes, ${expected.length} were written`;
  }
  const found = readIndex(message.body);
  if (found !== index) return `${where} holds message ${found}, message ${index} was written there`;
  fillBody(expected, pattern, index);
  const body = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.length);
  if (!body.equals(expected)) return `${where}: the body of message ${index} differs`;
  const tags = message.properties.get("TAGS");
  const keys = message.properties.get("KEYS");
  if (tags !== TAGS[index % TAG_COUNT] || keys !== keyOf(index)) {
    return `${where}: message ${index} has TAGS ${tags} and KEYS ${keys}`;
  }
  return undefined;
}

/**
 * Runs the bench in `directory` (which must be empty or missing) and
 * measures it; the caller prepares and removes the directory.
 *
 * @example
 * ```ts ignore
 * import { parseBenchArguments, runBench } from "./bench.ts";
 *
 * const options = parseBenchArguments(["--messages", "2000", "--segment-size", "1m"]);
 * const report = await runBench(options, "/tmp/bench-store", { stdout() {}, stderr() {} });
 * console.log(report.result); // PASS
 * ```
 *
 * @throws {MqStoreError} When the store cannot be opened or closed.
 */
export async function runBench(
  options: BenchOptions,
  directory: string,
  output: BenchOutput,
): Promise<BenchReport> {
  const progressMode = options.progress ??
    (options.json ? "off" : output.stderrIsTerminal === true ? "bar" : "lines");
  const storeOptions = storeOptionsOf(options);
  const store = await MessageStore.open(directory, {
    ...storeOptions,
    onWarning: (message) => output.stderr(`${message}\n`),
  });
  const messages = options.messages;
  const queues = options.queues;
  const pattern = makePattern(options.sizeBytes);
  let failure: string | undefined;
  let closed = false;
  try {
    // Write.
    const sampleEvery = Math.max(
      options.flush === "sync" ? 1 : ASYNC_SAMPLE_EVERY,
      Math.ceil(messages / LATENCY_SAMPLES_MAX),
    );
    const samples = new Float64Array(Math.ceil(messages / sampleEvery));
    let sampleCount = 0;
    let next = 0;
    let written = 0;
    const writeProgress = new Progress(progressMode, output.stderr, "write", messages);
    const produce = async () => {
      const body = new Uint8Array(options.sizeBytes);
      // Bounded: each round takes the next message index, up to `messages`.
      while (failure === undefined && next < messages) {
        const index = next++;
        fillBody(body, pattern, index);
        const message = messageOf(index, queues, body);
        const timed = index % sampleEvery === 0;
        const t0 = timed ? performance.now() : 0;
        const result = await store.putMessage(message);
        if (timed) samples[sampleCount++] = performance.now() - t0;
        if (result.status !== "PUT_OK") {
          failure ??= `put of message ${index} answered ${result.status}${
            result.error === undefined ? "" : `: ${result.error.message}`
          }`;
          return;
        }
        const queueOffset = result.appendResult?.queueOffset;
        if (queueOffset !== Math.floor(index / queues)) {
          failure ??= `message ${index} got queue offset ${queueOffset}, not ${
            Math.floor(index / queues)
          } (puts are appended in call order)`;
          return;
        }
        writeProgress.update(++written);
      }
    };
    const statsBefore = store.stats();
    const writeCpu = process.cpuUsage();
    const writeStart = performance.now();
    await Promise.all(Array.from({ length: options.producers }, produce));
    const writeEnd = performance.now();
    const writeCpuSeconds = cpuSecondsSince(writeCpu);
    writeProgress.finish();
    const writeSeconds = (writeEnd - writeStart) / 1000;
    const stats = store.stats();
    const recordBytes = stats.putBytes - statsBefore.putBytes;

    // Durable and dispatched.
    const endOffset = store.maxOffset;
    let durableAt = writeEnd;
    let dispatchedAt = writeEnd;
    await Promise.all([
      store.whenFlushed(endOffset).then(() => durableAt = performance.now()),
      store.whenDispatched(endOffset).then(() => dispatchedAt = performance.now()),
    ]);

    // Read back.
    let verified = 0;
    const readCpu = process.cpuUsage();
    const readStart = performance.now();
    if (failure === undefined) {
      const readProgress = new Progress(progressMode, output.stderr, "read", messages);
      const expected = Buffer.alloc(options.sizeBytes);
      for (let queueId = 0; queueId < queues && failure === undefined; queueId++) {
        const count = queueId < messages ? Math.floor((messages - 1 - queueId) / queues) + 1 : 0;
        let queueOffset = 0;
        // Bounded: each page moves queueOffset forward or ends the loop.
        while (queueOffset < count && failure === undefined) {
          const page = await store.getMessages(
            TOPIC,
            queueId,
            queueOffset,
            Math.min(READ_PAGE_COUNT, count - queueOffset),
          );
          if (page.status !== "FOUND") {
            failure =
              `queue ${queueId} at offset ${queueOffset}: getMessages answered ${page.status}`;
            break;
          }
          for (const message of page.messages) {
            failure = checkMessage(message, queueId, queueOffset, queues, expected, pattern);
            if (failure !== undefined) break;
            queueOffset++;
            verified++;
          }
          if (failure === undefined && page.nextQueueOffset !== queueOffset) {
            failure =
              `queue ${queueId}: the page ending at offset ${queueOffset} says the next is ${page.nextQueueOffset}`;
          }
          readProgress.update(verified);
        }
        const max = store.getMaxQueueOffset(TOPIC, queueId);
        if (failure === undefined && max !== count) {
          failure = `queue ${queueId} holds ${max} messages, ${count} were written`;
        }
      }
      readProgress.finish();
      // The key index: the first, middle and last message by KEYS.
      for (const index of new Set([0, messages >> 1, messages - 1])) {
        if (failure !== undefined) break;
        const found = await store.queryMessages(TOPIC, keyOf(index));
        const hits = found.messages.filter((message) => readIndex(message.body) === index);
        if (hits.length !== 1) {
          failure = `the index finds ${hits.length} messages with KEYS ${keyOf(index)}, not 1`;
        }
      }
    }
    const readSeconds = (performance.now() - readStart) / 1000;
    const readCpuSeconds = cpuSecondsSince(readCpu);
    const commitLogDataBytes = store.maxOffset - store.minOffset;
    const groups = stats.groupCommitCount - statsBefore.groupCommitCount;
    const groupCommitMean = options.flush !== "sync"
      ? null
      : groups === 0
      ? 0
      : (stats.groupCommitRequests - statsBefore.groupCommitRequests) / groups;
    closed = true;
    await store.close();
    const disk = diskUsage(directory);
    const sorted = samples.subarray(0, sampleCount).sort();
    const runtime = runtimeName();
    const readBytes = messages === 0 ? 0 : recordBytes * verified / Math.max(1, written);
    return {
      result: failure === undefined ? "PASS" : "FAIL",
      failure: failure ?? null,
      runtime,
      runtimeVersion: runtimeVersion(runtime),
      adapter: store.port.adapter,
      flush: options.flush,
      producers: options.producers,
      messages,
      messagesWritten: written,
      messagesVerified: verified,
      sizeBytes: options.sizeBytes,
      queues,
      topic: TOPIC,
      bodyBytes: written * options.sizeBytes,
      recordBytes,
      writeSeconds,
      writeCpuSeconds,
      messagesPerSecond: written / writeSeconds,
      mbPerSecond: recordBytes / writeSeconds / 1e6,
      putLatencyP50Ms: percentile(sorted, 0.5),
      putLatencyP99Ms: percentile(sorted, 0.99),
      putLatencyP999Ms: percentile(sorted, 0.999),
      putLatencyMaxMs: sorted.length === 0 ? 0 : sorted[sorted.length - 1]!,
      latencySampleEvery: sampleEvery,
      latencySamples: sampleCount,
      durableAfterSeconds: (durableAt - writeEnd) / 1000,
      dispatchedAfterSeconds: (dispatchedAt - writeEnd) / 1000,
      readSeconds,
      readCpuSeconds,
      readMessagesPerSecond: readSeconds > 0 ? verified / readSeconds : 0,
      readMbPerSecond: readSeconds > 0 ? readBytes / readSeconds / 1e6 : 0,
      groupCommitMean,
      diskFilesBytes: disk.filesBytes,
      diskAllocatedBytes: disk.allocatedBytes,
      commitLogDataBytes,
      commitLogSegments: countSegments(directory),
      directory,
      kept: false,
      options: storeOptionsJson(storeOptions),
    };
  } finally {
    if (!closed) await store.close().catch(() => {});
  }
}

function storeOptionsJson(options: MessageStoreOptions): Record<string, string | number | boolean> {
  const json: Record<string, string | number | boolean> = {};
  for (const [name, value] of Object.entries(options)) {
    if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") {
      json[name] = value;
    }
  }
  return json;
}

// ---------------------------------------------------------------------
// Report

function fixed(value: number, digits: number): string {
  return value.toFixed(digits);
}

function latency(ms: number): string {
  return ms < 1 ? `${fixed(ms * 1000, 0)} µs` : `${fixed(ms, 2)} ms`;
}

/**
 * The report as text lines, `PASS` or `FAIL: <reason>` last.
 *
 * @example
 * ```ts ignore
 * console.log(formatBenchReport(report));
 * ```
 */
export function formatBenchReport(report: BenchReport): string {
  const options = Object.entries(report.options).map(([name, value]) => `${name}=${value}`);
  const lines = [
    `mqstore bench: ${report.runtime} ${report.runtimeVersion}, adapter ${report.adapter}, --flush ${report.flush}, ${report.producers} producer${
      report.producers === 1 ? "" : "s"
    }`,
    `  store     ${report.directory}${report.kept ? " (kept)" : " (removed)"}`,
    `  options   ${options.join(" ")} (others: defaults)`,
    `write       ${formatCount(report.messagesWritten)} messages × ${
      formatCount(report.sizeBytes)
    } B in ${report.queues} queues: ${fixed(report.writeSeconds, 2)} s (CPU ${
      fixed(report.writeCpuSeconds, 2)
    } s), ${formatCount(report.messagesPerSecond)} msg/s, ${
      fixed(report.mbPerSecond, 1)
    } MB/s of records (${formatCount(report.recordBytes)} bytes)`,
    `put latency p50 ${latency(report.putLatencyP50Ms)}, p99 ${
      latency(report.putLatencyP99Ms)
    }, p99.9 ${latency(report.putLatencyP999Ms)}, max ${latency(report.putLatencyMaxMs)} (${
      report.latencySampleEvery === 1 ? "every put" : `1 put in ${report.latencySampleEvery}`
    }, ${formatCount(report.latencySamples)} samples)${
      report.groupCommitMean === null
        ? ""
        : `; ${fixed(report.groupCommitMean, 1)} puts per group commit`
    }`,
    `durable     ${fixed(report.durableAfterSeconds, 3)} s after the last put; dispatched ${
      fixed(report.dispatchedAfterSeconds, 3)
    } s after`,
    `read        ${formatCount(report.messagesVerified)} messages verified: ${
      fixed(report.readSeconds, 2)
    } s (CPU ${fixed(report.readCpuSeconds, 2)} s), ${
      formatCount(report.readMessagesPerSecond)
    } msg/s, ${fixed(report.readMbPerSecond, 1)} MB/s`,
    `disk        ${formatCount(report.diskFilesBytes)} bytes in files (${
      formatCount(report.diskAllocatedBytes)
    } allocated); commit log ${
      formatCount(report.commitLogDataBytes)
    } bytes of data in ${report.commitLogSegments} segment${
      report.commitLogSegments === 1 ? "" : "s"
    }`,
    report.result === "PASS" ? "PASS" : `FAIL: ${report.failure}`,
  ];
  return `${lines.join("\n")}\n`;
}

// ---------------------------------------------------------------------
// The command

/** Exit codes after SIGINT and SIGTERM: 128 + the signal number. */
const EXIT_SIGINT = 130;
const EXIT_SIGTERM = 143;

/** This module's directory: main.ts beside it in the repo, main.js in the npm package. */
const CLI_DIRECTORY = path.dirname(fileURLToPath(import.meta.url));
/** The CLI entry next to this file, in the same language as this file. */
const MAIN_SCRIPT = path.join(
  CLI_DIRECTORY,
  import.meta.url.endsWith(".ts") ? "main.ts" : "main.js",
);
/** The repository root, whose node_modules/.bin holds deno and bun during development. */
const PROJECT_ROOT = path.resolve(CLI_DIRECTORY, "..", "..");

/** `name` from the project's node_modules/.bin when it is there, else from PATH. */
function runtimeBinary(name: string): string {
  const local = path.join(PROJECT_ROOT, "node_modules", ".bin", name);
  return fs.existsSync(local) ? local : name;
}

/** The command line that runs the CLI under `runtime`. */
function runtimeCommand(runtime: RuntimeName): [string, string[]] {
  // TypeScript sources need a loader on Node; the compiled package does not.
  const nodeLoader = MAIN_SCRIPT.endsWith(".ts") ? ["--import", "tsx"] : [];
  switch (runtime) {
    case "deno":
      return [runtimeBinary("deno"), ["run", "-A", MAIN_SCRIPT]];
    case "bun":
      return [runtimeBinary("bun"), [MAIN_SCRIPT]];
    case "node":
      return [runtimeName() === "node" ? process.execPath : "node", [...nodeLoader, MAIN_SCRIPT]];
  }
}

/** Flags without `--runtime` (both spellings), for the child. */
function withoutRuntimeFlag(argv: readonly string[]): string[] {
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const argument = argv[i]!;
    if (argument === "--runtime") i++;
    else if (!argument.startsWith("--runtime=")) rest.push(argument);
  }
  return rest;
}

/** Runs the bench in a child process of `runtime`, relaying its output and exit code. */
function runUnder(
  runtime: RuntimeName,
  argv: readonly string[],
  options: BenchOptions,
  output: BenchOutput,
): Promise<number> {
  const [command, prefix] = runtimeCommand(runtime);
  if (command.includes(path.sep) && !fs.existsSync(command)) {
    throw new MqStoreError(
      "NOT_FOUND",
      `Cannot run the bench under ${runtime}: ${command} is missing (run npm install)`,
    );
  }
  const args = [...prefix, "bench", ...withoutRuntimeFlag(argv)];
  // The child's stderr is a pipe: tell it what this terminal shows.
  if (options.progress === undefined) {
    args.push(
      "--progress",
      options.json ? "off" : output.stderrIsTerminal === true ? "bar" : "lines",
    );
  }
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.setEncoding("utf8");
    child.stderr.setEncoding("utf8");
    child.stdout.on("data", (text: string) => output.stdout(text));
    child.stderr.on("data", (text: string) => output.stderr(text));
    child.on("error", (error) =>
      reject(
        new MqStoreError("NOT_FOUND", `Cannot run the bench under ${runtime}: ${error.message}`, {
          cause: error,
        }),
      ));
    child.on("close", (code, signal) => {
      if (signal !== null) output.stderr(`mqstore: the ${runtime} bench ended by ${signal}\n`);
      resolve(code ?? EXIT_BENCH_FAILED);
    });
  });
}

/** The store directory of a run, and how to leave it as found. */
interface BenchDirectory {
  path: string;
  /** Removes what the run created. */
  cleanUp(): void;
}

/**
 * Removes `target` and everything under it. A signal can stop the run while
 * a file operation started before it is still running on another thread (a
 * segment or consume-queue file being created): that file appears after
 * the directory was read and makes its removal fail with ENOTEMPTY. No new
 * operation starts while this runs, so a few more passes remove it.
 */
function removeTree(target: string): void {
  for (let attempt = 1;; attempt++) {
    try {
      fs.rmSync(target, { recursive: true, force: true });
      return;
    } catch (error) {
      if ((error as { code?: string }).code !== "ENOTEMPTY" || attempt >= REMOVE_ATTEMPTS) {
        throw error;
      }
      // A blocking pause: the handler must not return to the event loop.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, REMOVE_PAUSE_MS);
    }
  }
}

/** Passes {@link removeTree} makes before it gives up, and the pause between. */
const REMOVE_ATTEMPTS = 50;
const REMOVE_PAUSE_MS = 10;

/**
 * A fresh temporary directory; or `given`, which must be missing or empty
 * (the bench never writes into a directory holding anything).
 */
function prepareDirectory(given: string | undefined): BenchDirectory {
  if (given === undefined) {
    const created = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-bench-"));
    return { path: created, cleanUp: () => removeTree(created) };
  }
  let stat: fs.Stats | undefined;
  try {
    stat = fs.statSync(given);
  } catch (error) {
    if ((error as { code?: string }).code !== "ENOENT") throw error;
  }
  if (stat === undefined) {
    fs.mkdirSync(given, { recursive: true });
    return { path: given, cleanUp: () => removeTree(given) };
  }
  if (!stat.isDirectory()) throw new UsageError(`bench: --dir ${given} is not a directory`);
  if (fs.readdirSync(given).length > 0) {
    throw new UsageError(
      `bench: --dir ${given} is not empty; give a missing or empty directory (the bench never writes into an existing store)`,
    );
  }
  return {
    path: given,
    cleanUp: () => {
      for (const name of fs.readdirSync(given)) removeTree(path.join(given, name));
    },
  };
}

/**
 * `mqstore bench [flags]`: parses the flags, runs the bench (here, or
 * under `--runtime` in a child process), prints the report and removes the
 * store directory (kept with `--keep`, and on FAIL for inspection).
 *
 * @example
 * ```ts ignore
 * import { runBenchCommand } from "./bench.ts";
 *
 * const code = await runBenchCommand(["--messages", "2000", "--json"], {
 *   stdout: (text) => console.log(text),
 *   stderr: (text) => console.error(text),
 * });
 * ```
 *
 * @returns The exit code: 0 on PASS, 1 on FAIL, the child's under `--runtime`.
 * @throws {UsageError} For a flag mistake or a non-empty `--dir`.
 * @throws {MqStoreError} When the store cannot be opened.
 */
export async function runBenchCommand(
  argv: readonly string[],
  output: BenchOutput,
): Promise<number> {
  const options = parseBenchArguments(argv);
  if (options.runtime !== undefined && options.runtime !== runtimeName()) {
    return await runUnder(options.runtime, argv, options, output);
  }
  const directory = prepareDirectory(options.directory);
  // Ctrl-C or a kill mid-run: remove what the run created, then exit as
  // a shell expects (128 + the signal number).
  const onSignal = (signal: string) => {
    if (!options.keep) directory.cleanUp();
    output.stderr(
      `bench: stopped by ${signal}; ${
        options.keep ? `store kept in ${directory.path}` : "store removed"
      }\n`,
    );
    process.exit(signal === "SIGINT" ? EXIT_SIGINT : EXIT_SIGTERM);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  let report: BenchReport;
  try {
    report = await runBench(options, directory.path, output);
  } catch (error) {
    if (!options.keep) directory.cleanUp();
    throw error;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
  // A failed run keeps its store: `mqstore verify` can look at it.
  report.kept = options.keep || report.result === "FAIL";
  if (!report.kept) directory.cleanUp();
  output.stdout(options.json ? `${JSON.stringify(report)}\n` : formatBenchReport(report));
  return report.result === "PASS" ? EXIT_OK : EXIT_BENCH_FAILED;
}
