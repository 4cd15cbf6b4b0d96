/**
 * The SIGKILL crash harness shared by `tests/message_store_kill_test.ts`
 * (a short chain per runtime) and `scripts/kill_loop.ts` (hundreds of
 * kills): spawns `tests/fixtures/kill_child.ts` on Deno, Bun or Node, kills
 * it with SIGKILL at a seeded moment, and checks the store it left.
 *
 * ```
 * iteration i:  spawn child (runtime, adapter, flush mode, producers)
 *               ─► "recovery {...}" "ready <pid>" "ack ..." "ack ..."
 *               ─► [second open from here: LOCKED naming <pid>]
 *               ─► SIGKILL (after N acks | at a timer | during open)
 *               ─► raw scan of the files: the first invalid record = the cut
 *               ─► reopen: in this process (verify everything, put more,
 *                  close) or by the next child (its recovery line is checked)
 * ```
 *
 * The model holds every acknowledged message of the chain. An ack is
 * *strict* when the put was in the page cache before it was answered
 * (SYNC_FLUSH, or ASYNC_FLUSH through a shared mapping): a SIGKILL keeps the
 * page cache, so a strict ack must survive. An ASYNC_FLUSH ack of the
 * portable adapter or of the transient store pool may still be in a heap
 * buffer: it may be lost, but only as a suffix past the cut.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { MqStoreError } from "../src/errors.ts";
import { type DecodedMessage, decodeRecord } from "../src/record/mod.ts";
import type { MessageInput } from "../src/record/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { AdapterName, RuntimeName } from "../src/runtime/port.ts";
import { MessageStore } from "../src/store/message_store.ts";
import type { FlushDiskType } from "../src/store/options.ts";
import { FIXTURES, PROJECT_ROOT } from "./_helpers.ts";
import { prng } from "./_prng.ts";

/** Topics the children write to. */
export const KILL_TOPICS: readonly string[] = ["KillA", "KillB", "KillC"];
/** Queues per topic. */
export const KILL_QUEUE_COUNT = 4;
/**
 * Store settings every open of a kill test uses (child and parent): small
 * consume-queue and index files, so they roll and a store costs megabytes,
 * not the default 420 MB index file.
 */
export const KILL_STORE_SIZING = {
  /** 4096 units of 20 bytes. */
  mappedFileSizeConsumeQueue: 0x1000 * 20,
  maxHashSlotNum: 0x1000,
  maxIndexNum: 0x2_0000,
} as const;
/** Sequence numbers per iteration: children of iteration i use `[(i+1)·K, (i+2)·K)`. */
export const SEQ_STRIDE = 10_000_000;
/** Where the parent's own puts start inside an iteration's range. */
const PARENT_SEQ_START = 9_000_000;
const BIN = path.join(PROJECT_ROOT, "node_modules", ".bin");

/** A 32-bit hash of a sequence number (splitmix-like), the root of its content. */
export function seqHash(seq: number, salt = 0): number {
  let x = (seq ^ Math.imul(salt + 1, 0x9E3779B9)) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x85EBCA6B);
  x = Math.imul(x ^ (x >>> 13), 0xC2B2AE35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** The body of message `seq`: mostly small, sometimes up to 40 KiB (several pages). */
export function bodyOf(seq: number): Uint8Array {
  const h = seqHash(seq, 1);
  const length = h % 100 < 3 ? 0x2000 + seqHash(seq, 2) % 0x8000 : 1 + seqHash(seq, 2) % 600;
  const bytes = new Uint8Array(length);
  let x = seqHash(seq, 3) | 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xFF;
  }
  return bytes;
}

/** The properties of message `seq`. */
export function propertiesOf(seq: number): Record<string, string> {
  return { TAGS: `tag${seq % 5}`, KEYS: `key-${seq} k${seq % 97}`, SEQ: String(seq) };
}

/** Topic and queue of a put whose first message is `seq`. */
export function queueOf(seq: number): { topic: string; queueId: number } {
  const h = seqHash(seq, 4);
  return { topic: KILL_TOPICS[h % KILL_TOPICS.length]!, queueId: (h >>> 8) % KILL_QUEUE_COUNT };
}

/** Message `seq` bound for `topic`/`queueId`. */
export function messageOf(seq: number, topic: string, queueId: number): MessageInput {
  return { topic, queueId, body: bodyOf(seq), properties: propertiesOf(seq) };
}

/** The command line running `script` on `runtime`, whatever runtime this process is. */
export function runtimeCommand(
  runtime: RuntimeName,
  script: string,
  args: readonly string[],
): { command: string; args: string[] } {
  switch (runtime) {
    case "deno":
      return { command: path.join(BIN, "deno"), args: ["run", "-A", script, ...args] };
    case "bun":
      return { command: path.join(BIN, "bun"), args: [script, ...args] };
    case "node":
      return {
        command: runtimeName() === "node" ? process.execPath : "node",
        args: ["--import", "tsx", script, ...args],
      };
  }
}

/** What the child is told (see the usage of `tests/fixtures/kill_child.ts`). */
export interface ChildConfig {
  /** The runtime the child runs on. */
  runtime: RuntimeName;
  /** `flushDiskType` of its store. */
  flushDiskType: FlushDiskType;
  /** `auto` (the runtime's FFI adapter) or `portable`. */
  adapter: "auto" | "portable";
  /** `transientStorePoolEnable` (ASYNC_FLUSH only). */
  transientStorePoolEnable: boolean;
  /** Concurrent producer loops. */
  producers: number;
  /** First sequence number. */
  seqBase: number;
  /** `mappedFileSizeCommitLog`. */
  segmentBytes: number;
  /** Share of puts that are batches of 2–4 messages, percent. */
  batchPercent: number;
  /** `flushIntervalCommitLog`, ms. */
  flushIntervalMs: number;
}

/** How the child dies. */
export type KillPlan =
  | { kind: "acks"; acks: number }
  | { kind: "timer"; afterReadyMs: number }
  | { kind: "early"; afterSpawnMs: number };

/** One acknowledged message (an `ack` line). */
export interface Ack {
  /** Its physical offset. */
  offset: number;
  /** Its record size. */
  sizeBytes: number;
  topic: string;
  queueId: number;
  queueOffset: number;
  /** Its sequence number: the content derives from it. */
  seq: number;
  /** Must survive a SIGKILL (see the module doc). */
  strict: boolean;
  /** Who wrote it, for failure messages. */
  origin: string;
}

/** The child's recovery line. */
export interface ChildRecovery {
  clean: boolean;
  maxOffset: number;
  endKind: string;
  messageCount: number;
}

/** What one killed child left. */
export interface ChildRun {
  pid: number | undefined;
  recovery: ChildRecovery | undefined;
  acks: Ack[];
  /** Non-PUT_OK answers (`fail <seq> <status>`), FLUSH_DISK_TIMEOUT only is tolerated. */
  failures: string[];
  signal: string | null;
  code: number | null;
  stderr: string;
  lockChecked: boolean;
}

/** Whether an ASYNC ack of this configuration is in the page cache when answered. */
function strictAcks(config: ChildConfig): boolean {
  return config.flushDiskType === "SYNC_FLUSH" ||
    (config.adapter === "auto" && !config.transientStorePoolEnable);
}

function childArgs(directory: string, config: ChildConfig): string[] {
  return [
    directory,
    "--flush",
    config.flushDiskType,
    "--adapter",
    config.adapter,
    "--producers",
    String(config.producers),
    "--seq-base",
    String(config.seqBase),
    "--segment-bytes",
    String(config.segmentBytes),
    "--batch-percent",
    String(config.batchPercent),
    "--flush-interval-ms",
    String(config.flushIntervalMs),
    ...(config.transientStorePoolEnable ? ["--pool"] : []),
  ];
}

/** Describes a config in one line. */
export function describeConfig(config: ChildConfig): string {
  return `${config.runtime} ${config.adapter}${
    config.transientStorePoolEnable ? "+pool" : ""
  } ${config.flushDiskType} producers=${config.producers} batch=${config.batchPercent}%`;
}

/**
 * Expects `MessageStore.open` of `directory` to fail with LOCKED naming `pid`.
 */
async function expectLocked(
  directory: string,
  adapter: "auto" | "portable",
  pid: number,
  segmentBytes: number,
): Promise<void> {
  let store: MessageStore | undefined;
  try {
    store = await MessageStore.open(directory, {
      ...KILL_STORE_SIZING,
      adapter,
      mappedFileSizeCommitLog: segmentBytes,
      onWarning: () => {},
    });
  } catch (error) {
    if (!(error instanceof MqStoreError) || error.code !== "LOCKED") {
      throw new Error(`A second open while pid ${pid} holds ${directory} failed with ${error}`);
    }
    if (!error.message.includes(`pid ${pid}`)) {
      throw new Error(`The LOCKED error does not name the holder pid ${pid}: ${error.message}`);
    }
    return;
  }
  await store.close();
  throw new Error(`A second open (${adapter}) succeeded while pid ${pid} holds ${directory}`);
}

/**
 * What each thread of `pid` is doing (Linux `/proc`: state, syscall, the
 * kernel stack where readable), for the report of a child that hangs.
 */
export function threadStates(pid: number): string {
  try {
    return fs.readdirSync(`/proc/${pid}/task`).map((tid) => {
      const read = (name: string) => {
        try {
          return fs.readFileSync(`/proc/${pid}/task/${tid}/${name}`, "utf8").trim();
        } catch {
          return "?";
        }
      };
      const stat = read("stat");
      const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
      const stack = read("stack").split("\n").slice(0, 6).map((line) =>
        line.replace(/^\[<0>\] /, "")
      ).join(" < ");
      return `${tid} ${read("comm")} ${state} syscall ${read("syscall").split(" ")[0]} wchan ${
        read("wchan")
      } [${stack}]`;
    }).join("; ");
  } catch (error) {
    return `unreadable (${error})`;
  }
}

/**
 * Spawns the child, kills it per `plan`, and collects what it printed.
 */
export function runChild(
  directory: string,
  config: ChildConfig,
  plan: KillPlan,
  lockCheck: boolean,
  origin: string,
): Promise<ChildRun> {
  const { command, args } = runtimeCommand(
    config.runtime,
    path.join(FIXTURES, "kill_child.ts"),
    childArgs(directory, config),
  );
  const strict = strictAcks(config);
  return new Promise<ChildRun>((resolve, reject) => {
    const child: ChildProcess = spawn(command, args, {
      cwd: PROJECT_ROOT,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" },
    });
    const run: ChildRun = {
      pid: undefined,
      recovery: undefined,
      acks: [],
      failures: [],
      signal: null,
      code: null,
      stderr: "",
      lockChecked: false,
    };
    const timers: ReturnType<typeof setTimeout>[] = [];
    let killed = false;
    let failure: unknown;
    const kill = () => {
      if (killed) return;
      killed = true;
      child.kill("SIGKILL");
    };
    // Kills on the acks plan wait for the lock check: the child must be alive for it.
    let armed = false;
    // A child that never gets anywhere is killed anyway: the parent must not hang.
    timers.push(setTimeout(() => {
      const threads = child.pid === undefined ? "" : threadStates(child.pid);
      failure ??= new Error(
        `${origin}: the child was not killed within 60 s (ready: ${
          run.pid !== undefined
        }, recovery: ${
          JSON.stringify(run.recovery)
        }, acks: ${run.acks.length}, lock check done: ${run.lockChecked}, armed: ${armed}, SIGKILL sent: ${killed}); stderr: ${
          run.stderr.slice(-2000)
        }; threads: ${threads}`,
      );
      kill();
    }, 60_000));
    if (plan.kind === "early") timers.push(setTimeout(kill, plan.afterSpawnMs));
    const killOnAcks = () => {
      if (armed && plan.kind === "acks" && run.acks.length >= plan.acks) kill();
    };
    const onReady = async () => {
      if (lockCheck && !killed) {
        try {
          await expectLocked(directory, config.adapter, run.pid!, config.segmentBytes);
          run.lockChecked = true;
        } catch (error) {
          failure ??= error;
          kill();
          return;
        }
      }
      armed = true;
      if (plan.kind === "timer") timers.push(setTimeout(kill, plan.afterReadyMs));
      if (plan.kind === "acks") {
        killOnAcks();
        // A child slower than its target is killed after 5 s all the same.
        timers.push(setTimeout(kill, 5_000));
      }
    };
    let buffered = "";
    const onLine = (line: string) => {
      const [word, ...rest] = line.split(" ");
      if (word === "ack") {
        const [offset, size, topic, queueId, queueOffset, seq] = rest;
        run.acks.push({
          offset: Number(offset),
          sizeBytes: Number(size),
          topic: topic!,
          queueId: Number(queueId),
          queueOffset: Number(queueOffset),
          seq: Number(seq),
          strict,
          origin,
        });
        killOnAcks();
      } else if (word === "ready") {
        run.pid = Number(rest[0]);
        void onReady();
      } else if (word === "recovery") {
        run.recovery = JSON.parse(rest.join(" ")) as ChildRecovery;
      } else if (word === "fail") {
        run.failures.push(rest.join(" "));
      }
    };
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (text: string) => {
      buffered += text;
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        onLine(buffered.slice(0, newline));
        buffered = buffered.slice(newline + 1);
      }
    });
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (text: string) => (run.stderr += text));
    child.on("error", (error) => {
      for (const timer of timers) clearTimeout(timer);
      reject(error);
    });
    child.on("close", (code: number | null, signal: string | null) => {
      for (const timer of timers) clearTimeout(timer);
      // An incomplete last line is a write the kill cut: not an ack.
      run.code = code;
      run.signal = signal;
      if (failure !== undefined) reject(failure);
      else resolve(run);
    });
  });
}

/** A record found by {@link scanStore}. */
export interface ScannedRecord {
  offset: number;
  message: DecodedMessage;
}

/** What {@link scanStore} found in the commit-log files. */
export interface StoreScan {
  records: ScannedRecord[];
  /** Offset of the first byte that is not a valid record (or a BLANK filling its segment). */
  cutOffset: number;
  /** What stopped the walk at the cut. */
  stop: string;
  /** A non-zero byte after the cut (in its segment or a later one). */
  dirtyAfterCut: number | undefined;
  segmentCount: number;
}

/**
 * Walks `<directory>/commitlog` like an unclean recovery (every record,
 * CRCs checked) but from the files, independently of the store.
 */
export function scanStore(directory: string, segmentBytes: number): StoreScan {
  const commitLog = path.join(directory, "commitlog");
  const names = fs.existsSync(commitLog)
    ? fs.readdirSync(commitLog).filter((name) => /^[0-9]{20}$/.test(name)).sort()
    : [];
  const scan: StoreScan = {
    records: [],
    cutOffset: 0,
    stop: "no segment",
    dirtyAfterCut: undefined,
    segmentCount: names.length,
  };
  let cut = false;
  for (let index = 0; index < names.length; index++) {
    const start = Number(names[index]);
    if (start !== index * segmentBytes) {
      throw new Error(`Segment ${names[index]} of ${commitLog} is out of sequence`);
    }
    const bytes = new Uint8Array(fs.readFileSync(path.join(commitLog, names[index]!)));
    if (bytes.length !== segmentBytes) {
      throw new Error(`Segment ${names[index]} is ${bytes.length} bytes, not ${segmentBytes}`);
    }
    if (cut) {
      const dirty = bytes.findIndex((b) => b !== 0);
      if (dirty >= 0) scan.dirtyAfterCut ??= start + dirty;
      continue;
    }
    let position = 0;
    while (position < bytes.length) {
      const result = decodeRecord(bytes, position, { expectedOffset: start + position });
      if (result.kind === "message") {
        scan.records.push({ offset: start + position, message: result.message });
        position += result.size;
        continue;
      }
      if (result.kind === "blank" && result.size === bytes.length - position) {
        position = bytes.length;
        break;
      }
      scan.stop = result.kind === "invalid"
        ? `${result.reason} (${result.detail})`
        : result.kind === "blank"
        ? `a BLANK of ${result.size} bytes not filling the segment`
        : "end";
      break;
    }
    if (position < bytes.length) {
      cut = true;
      scan.cutOffset = start + position;
      for (let i = position; i < bytes.length; i++) {
        if (bytes[i] !== 0) {
          scan.dirtyAfterCut = start + i;
          break;
        }
      }
    } else {
      scan.cutOffset = start + bytes.length;
      scan.stop = "full";
    }
  }
  return scan;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Why `message` (at `offset`) is not message `seq` as acknowledged, or undefined. */
function contentProblem(message: DecodedMessage, ack: Ack): string | undefined {
  if (message.physicalOffset !== ack.offset) return `physicalOffset ${message.physicalOffset}`;
  if (message.storeSize !== ack.sizeBytes) {
    return `storeSize ${message.storeSize}, acknowledged ${ack.sizeBytes}`;
  }
  if (message.topic !== ack.topic || message.queueId !== ack.queueId) {
    return `queue ${message.topic}/${message.queueId}, acknowledged ${ack.topic}/${ack.queueId}`;
  }
  if (message.queueOffset !== ack.queueOffset) {
    return `queueOffset ${message.queueOffset}, acknowledged ${ack.queueOffset}`;
  }
  return recordProblem(message, ack.seq);
}

/** Why `message` is not the content of `seq` (or of its own SEQ when `seq` is undefined). */
function recordProblem(message: DecodedMessage, seq?: number): string | undefined {
  const stored = Number(message.properties.get("SEQ"));
  const expected = seq ?? stored;
  if (!Number.isSafeInteger(stored) || stored !== expected) return `SEQ ${stored}, not ${seq}`;
  const properties = propertiesOf(expected);
  for (const [name, value] of Object.entries(properties)) {
    if (message.properties.get(name) !== value) {
      return `property ${name} "${message.properties.get(name)}", not "${value}"`;
    }
  }
  if (!sameBytes(message.body, bodyOf(expected))) {
    return `body of ${message.body.length} bytes differs from that of seq ${expected}`;
  }
  return undefined;
}

/** Counters of a chain (what the loop reports). */
export interface ChainReport {
  kills: number;
  killsByRuntime: Record<RuntimeName, number>;
  killsBeforeReady: number;
  /** Acks checked present after the kill (strict and kept non-strict). */
  acksVerified: number;
  /** Non-strict acks past the cut (allowed: they were in a heap buffer). */
  acksLostAllowed: number;
  /** Strict acks missing or wrong: always 0, or the chain throws. */
  acksLost: number;
  lockChecks: number;
  parentReopens: number;
  childReopens: number;
  parentPuts: number;
  putFailures: number;
  maxOffset: number;
}

/** Options of {@link runKillChain}. */
export interface ChainOptions {
  /** An empty or missing store directory. */
  directory: string;
  /** Child runtimes, picked at random per iteration. */
  runtimes: readonly RuntimeName[];
  /**
   * Take the runtimes in turn instead of at random.
   *
   * @default {false}
   */
  rotate?: boolean;
  iterations: number;
  seed: number;
  /** Commit-log segment size (the same for the whole chain). */
  segmentBytes: number;
  /** Chance of checking LOCKED while a child runs (iteration 0 always). */
  lockCheckProbability: number;
  /**
   * Chance of a kill at a random moment after spawn (during open and recovery, often).
   *
   * @default {0.12}
   */
  earlyKillProbability?: number;
  /** Chance that the next child, not this process, recovers after a kill. */
  childReopenProbability: number;
  /**
   * Where to copy the store as each kill left it, before it is reopened
   * here (replaced every time): on a failure it holds the files that
   * recovery got.
   *
   * @default {undefined}
   */
  snapshotDirectory?: string;
  /** Progress lines. */
  log?: (line: string) => void;
}

/**
 * The store's read API, used where it exists: the harness also runs against
 * a store that only puts (and the read API is younger than these tests).
 */
interface Readable {
  getMessage?: (offset: number) => Promise<unknown>;
  getMessages?: (
    topic: string,
    queueId: number,
    queueOffset: number,
    maxCount: number,
  ) => Promise<{ status: string; messages: DecodedMessage[]; maxQueueOffset: number }>;
  queryMessages?: (topic: string, key: string) => Promise<{ messages: DecodedMessage[] }>;
}

/**
 * Messages read per `getMessages` call: RocketMQ's pull batch, which is also
 * the store's default `maxTransferCountOnMessageInMemory`, so every full page
 * is answered whole.
 */
const READ_PAGE_COUNT = 32;
/** Lost offsets probed after each reopen. */
const LOST_PROBE_COUNT = 50;
/** Acks looked up by key after each reopen. */
const KEY_QUERY_COUNT = 20;

function messageOfRead(result: unknown): DecodedMessage | undefined {
  if (typeof result !== "object" || result === null) return undefined;
  const value = result as { message?: unknown; body?: unknown };
  if (value.body instanceof Uint8Array) return result as DecodedMessage;
  if (typeof value.message === "object" && value.message !== null) {
    return value.message as DecodedMessage;
  }
  return undefined;
}

/** A report with every count at zero: a chain's start, or a sum over chains. */
export function emptyChainReport(): ChainReport {
  return {
    kills: 0,
    killsByRuntime: { deno: 0, bun: 0, node: 0 },
    killsBeforeReady: 0,
    acksVerified: 0,
    acksLostAllowed: 0,
    acksLost: 0,
    lockChecks: 0,
    parentReopens: 0,
    childReopens: 0,
    parentPuts: 0,
    putFailures: 0,
    maxOffset: 0,
  };
}

/**
 * Runs `iterations` spawn/kill/verify cycles on one store directory.
 *
 * @throws {Error} At the first violated property, naming the iteration,
 *   the child's configuration and the seed.
 */
export async function runKillChain(options: ChainOptions): Promise<ChainReport> {
  const rng = prng(options.seed);
  const log = options.log ?? (() => {});
  const { directory, segmentBytes } = options;
  const report = emptyChainReport();
  /** Every acknowledged message still expected, by offset. */
  const model = new Map<number, Ack>();
  /** What the next child's recovery must report: where the files end, whether closed cleanly. */
  let expected = { cut: 0, clean: true };
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;

  for (let iteration = 0; iteration < options.iterations; iteration++) {
    const runtime = options.rotate === true
      ? options.runtimes[iteration % options.runtimes.length]!
      : pick(options.runtimes);
    const flushDiskType: FlushDiskType = rng() < 0.5 ? "SYNC_FLUSH" : "ASYNC_FLUSH";
    const adapter = rng() < 0.2 ? "portable" : "auto";
    const config: ChildConfig = {
      runtime,
      flushDiskType,
      adapter,
      transientStorePoolEnable: flushDiskType === "ASYNC_FLUSH" && rng() < 0.25,
      producers: 1 + Math.floor(rng() * 16),
      seqBase: (iteration + 1) * SEQ_STRIDE,
      segmentBytes,
      batchPercent: rng() < 0.3 ? 20 : 0,
      flushIntervalMs: 1 + Math.floor(rng() * 200),
    };
    const lockCheck = iteration === 0 || rng() < options.lockCheckProbability;
    const roll = rng();
    // A lock check needs the child alive after ready: no early kill then.
    // The first kill waits for acks, so every chain puts something at stake.
    const plan: KillPlan = roll < 0.45 || iteration === 0
      ? { kind: "acks", acks: 1 + Math.floor(rng() * rng() * 3000) }
      : roll < 1 - (options.earlyKillProbability ?? 0.12) || lockCheck
      ? { kind: "timer", afterReadyMs: Math.floor(rng() * 300) }
      : { kind: "early", afterSpawnMs: Math.floor(rng() * 400) };
    const origin = `seed ${options.seed} iteration ${iteration} (${describeConfig(config)}, kill ${
      JSON.stringify(plan)
    })`;

    const run = await runChild(directory, config, plan, lockCheck, origin);
    if (run.signal !== "SIGKILL") {
      throw new Error(
        `${origin}: the child ended with code ${run.code} signal ${run.signal}, not SIGKILL: ${run.stderr.trim()}`,
      );
    }
    report.kills++;
    report.killsByRuntime[runtime]++;
    if (run.pid === undefined) report.killsBeforeReady++;
    if (run.lockChecked) report.lockChecks++;
    const badFailures = run.failures.filter((line) => !line.includes("FLUSH_DISK_TIMEOUT"));
    if (badFailures.length > 0) {
      throw new Error(`${origin}: puts were refused: ${badFailures.slice(0, 3).join("; ")}`);
    }
    report.putFailures += run.failures.length;

    // What the child's open found: the end the last kill (or close) left.
    if (run.recovery !== undefined) {
      if (run.recovery.maxOffset !== expected.cut || run.recovery.clean !== expected.clean) {
        throw new Error(
          `${origin}: the child recovered clean=${run.recovery.clean} to ${run.recovery.maxOffset}; the files end at ${expected.cut}, clean=${expected.clean}`,
        );
      }
      if (!expected.clean) report.childReopens++;
    }

    for (const ack of run.acks) {
      const earlier = model.get(ack.offset);
      if (earlier !== undefined) {
        report.acksLost++;
        throw new Error(
          `${origin}: seq ${ack.seq} acknowledged at ${ack.offset}, where seq ${earlier.seq} (${earlier.origin}) was acknowledged before`,
        );
      }
      model.set(ack.offset, ack);
    }

    // The files as the kill left them: the first invalid record is the cut.
    const raw = scanStore(directory, segmentBytes);
    const byOffset = new Map(raw.records.map((r) => [r.offset, r.message]));
    let lostAllowed = 0;
    const lostOffsets: number[] = [];
    for (const [offset, ack] of model) {
      const message = offset + ack.sizeBytes <= raw.cutOffset ? byOffset.get(offset) : undefined;
      if (message === undefined) {
        if (!ack.strict && offset >= raw.cutOffset) {
          lostAllowed++;
          lostOffsets.push(offset);
          model.delete(offset);
          continue;
        }
        report.acksLost++;
        throw new Error(
          `${ack.origin}: acknowledged seq ${ack.seq} at ${offset} (+${ack.sizeBytes}) is lost after ${origin}; the log is cut at ${raw.cutOffset}: ${raw.stop}`,
        );
      }
      const problem = contentProblem(message, ack);
      if (problem !== undefined) {
        report.acksLost++;
        throw new Error(`${ack.origin}: acknowledged seq ${ack.seq} at ${offset}: ${problem}`);
      }
    }
    report.acksLostAllowed += lostAllowed;
    report.acksVerified += run.acks.length - lostAllowed;
    for (const record of raw.records) {
      const problem = recordProblem(record.message);
      if (problem !== undefined) {
        throw new Error(`${origin}: record at ${record.offset}: ${problem}`);
      }
    }
    const abortExists = fs.existsSync(path.join(directory, "abort"));
    if (run.pid !== undefined && !abortExists) {
      throw new Error(`${origin}: no abort marker after a kill of a running store`);
    }
    log(
      `  #${iteration} ${describeConfig(config)} kill=${plan.kind} acks=${run.acks.length} ` +
        `cut=${raw.cutOffset} (${raw.stop}) records=${raw.records.length}`,
    );

    const last = iteration === options.iterations - 1;
    if (!last && rng() < options.childReopenProbability) {
      expected = { cut: raw.cutOffset, clean: !abortExists };
      continue;
    }
    if (options.snapshotDirectory !== undefined) {
      fs.rmSync(options.snapshotDirectory, { recursive: true, force: true });
      fs.cpSync(directory, options.snapshotDirectory, { recursive: true });
    }
    const end = await reopenAndVerify(
      directory,
      raw,
      abortExists,
      model,
      report,
      {
        lostOffsets,
        segmentBytes,
        adapter: rng() < 0.2 ? "portable" : "auto",
        seqStart: (iteration + 1) * SEQ_STRIDE + PARENT_SEQ_START,
        puts: 3 + Math.floor(rng() * 8),
        origin,
      },
    );
    report.parentReopens++;
    expected = { cut: end, clean: true };
  }
  return report;
}

/** Opens the killed store in this process and checks everything; puts more; closes. */
async function reopenAndVerify(
  directory: string,
  raw: StoreScan,
  abortExists: boolean,
  model: Map<number, Ack>,
  report: ChainReport,
  settings: {
    /** Offsets of acknowledged puts lost past the cut (non-strict): nothing may be served there. */
    lostOffsets: readonly number[];
    segmentBytes: number;
    adapter: AdapterName | "auto";
    seqStart: number;
    puts: number;
    origin: string;
  },
): Promise<number> {
  const { origin } = settings;
  const warnings: string[] = [];
  let end = 0;
  const store = await MessageStore.open(directory, {
    ...KILL_STORE_SIZING,
    adapter: settings.adapter,
    mappedFileSizeCommitLog: settings.segmentBytes,
    flushDiskType: "SYNC_FLUSH",
    onWarning: (warning) => warnings.push(warning),
  });
  try {
    if (store.recovery.clean === abortExists) {
      throw new Error(
        `${origin}: recovery says clean=${store.recovery.clean}, abort ${abortExists}`,
      );
    }
    // Every child ran on this boot: its death kept the page cache, and the
    // recovery looked for stale bytes within one put only (what follows
    // checks that nothing stale is left past the cut all the same).
    if (abortExists && !store.recovery.sameBoot) {
      throw new Error(`${origin}: a killed child's store was not recovered as this boot's`);
    }
    if (store.maxOffset !== raw.cutOffset || store.recovery.maxOffset !== raw.cutOffset) {
      throw new Error(
        `${origin}: the store recovered to ${store.maxOffset} (report ${store.recovery.maxOffset}); the first invalid record is at ${raw.cutOffset}: ${raw.stop}`,
      );
    }
    // After recovery nothing past the cut may remain, so nothing stale is ever served.
    const scan = scanStore(directory, settings.segmentBytes);
    if (scan.cutOffset !== raw.cutOffset || scan.records.length !== raw.records.length) {
      throw new Error(
        `${origin}: after recovery the files end at ${scan.cutOffset} (${scan.records.length} records), before at ${raw.cutOffset} (${raw.records.length})`,
      );
    }
    if (scan.dirtyAfterCut !== undefined) {
      throw new Error(
        `${origin}: after recovery a non-zero byte remains at ${scan.dirtyAfterCut}, past the cut at ${scan.cutOffset}`,
      );
    }
    // Queue offsets: contiguous per queue from 0, and the store continues them.
    const next = new Map<string, number>();
    /** Physical offsets of each queue's messages, in queue order. */
    const queues = new Map<string, { topic: string; queueId: number; offsets: number[] }>();
    for (const { offset, message } of scan.records) {
      const key = `${message.topic}-${message.queueId}`;
      const expected = next.get(key) ?? 0;
      if (message.queueOffset !== expected) {
        throw new Error(
          `${origin}: record at ${offset} of ${key} has queueOffset ${message.queueOffset}, not ${expected}`,
        );
      }
      next.set(key, expected + 1);
      let queue = queues.get(key);
      if (queue === undefined) {
        queue = { topic: message.topic, queueId: message.queueId, offsets: [] };
        queues.set(key, queue);
      }
      queue.offsets.push(offset);
    }
    const table = store.topicQueueTable();
    for (const key of new Set([...next.keys(), ...table.keys()])) {
      const count = next.get(key) ?? 0;
      if ((table.get(key) ?? 0) !== count) {
        throw new Error(
          `${origin}: the store's next queue offset of ${key} is ${
            table.get(key)
          }, the log holds ${count}`,
        );
      }
    }
    // Through the read API too, where it exists.
    const reader = store as unknown as Readable;
    if (typeof reader.getMessage === "function") {
      for (const [offset, ack] of model) {
        const message = messageOfRead(await reader.getMessage(offset));
        const problem = message === undefined ? "not found" : contentProblem(message, ack);
        if (problem !== undefined) {
          throw new Error(`${origin}: getMessage(${offset}) of seq ${ack.seq}: ${problem}`);
        }
      }
    }
    // Nothing is served at or past the cut: not the torn record, not a lost put.
    if (typeof reader.getMessage === "function") {
      for (const offset of [raw.cutOffset, ...settings.lostOffsets.slice(0, LOST_PROBE_COUNT)]) {
        const message = messageOfRead(await reader.getMessage(offset));
        if (message !== undefined) {
          throw new Error(
            `${origin}: getMessage(${offset}) serves seq ${
              message.properties.get("SEQ")
            } past the cut at ${raw.cutOffset}`,
          );
        }
      }
    }
    // The consume queues, recovered too, serve each queue whole and in order.
    if (typeof reader.getMessages === "function") {
      for (const [key, queue] of queues) {
        for (let from = 0; from < queue.offsets.length; from += READ_PAGE_COUNT) {
          const page = await reader.getMessages(queue.topic, queue.queueId, from, READ_PAGE_COUNT);
          const want = Math.min(READ_PAGE_COUNT, queue.offsets.length - from);
          if (page.status !== "FOUND" || page.messages.length !== want) {
            throw new Error(
              `${origin}: getMessages(${key}, ${from}) answered ${page.status} with ${page.messages.length} messages; the log holds ${queue.offsets.length}`,
            );
          }
          page.messages.forEach((message, i) => {
            if (
              message.queueOffset !== from + i || message.physicalOffset !== queue.offsets[from + i]
            ) {
              throw new Error(
                `${origin}: getMessages(${key}) served queueOffset ${message.queueOffset} at ${message.physicalOffset}; the log has ${
                  from + i
                } at ${queue.offsets[from + i]}`,
              );
            }
          });
        }
        const end = await reader.getMessages(
          queue.topic,
          queue.queueId,
          queue.offsets.length,
          1,
        );
        if (end.messages.length !== 0 || end.maxQueueOffset !== queue.offsets.length) {
          throw new Error(
            `${origin}: ${key} serves ${end.messages.length} messages past its end ${queue.offsets.length} (maxQueueOffset ${end.maxQueueOffset})`,
          );
        }
      }
    }
    // The index, recovered too, finds acknowledged messages by key.
    if (typeof reader.queryMessages === "function") {
      const acks = [...model.values()];
      for (let i = 0; i < Math.min(KEY_QUERY_COUNT, acks.length); i++) {
        const ack = acks[Math.floor((i * acks.length) / KEY_QUERY_COUNT)]!;
        const found = await reader.queryMessages(ack.topic, `key-${ack.seq}`);
        if (!found.messages.some((message) => message.physicalOffset === ack.offset)) {
          throw new Error(
            `${origin}: queryMessages(${ack.topic}, key-${ack.seq}) does not find the message at ${ack.offset}`,
          );
        }
      }
    }
    // New puts go on from the cut, the queue offsets without a gap.
    for (let i = 0; i < settings.puts; i++) {
      const seq = settings.seqStart + i;
      const { topic, queueId } = queueOf(seq);
      const expectedQueueOffset = store.nextQueueOffset(topic, queueId);
      const before = store.maxOffset;
      const r = await store.putMessage(messageOf(seq, topic, queueId));
      if (r.status !== "PUT_OK" || r.appendResult === undefined) {
        throw new Error(
          `${origin}: a put after recovery answered ${r.status}: ${r.error?.message}`,
        );
      }
      const a = r.appendResult;
      if (a.queueOffset !== expectedQueueOffset) {
        throw new Error(
          `${origin}: a put after recovery got queueOffset ${a.queueOffset}, not ${expectedQueueOffset}`,
        );
      }
      const sameSegment = Math.floor(before / settings.segmentBytes) ===
        Math.floor(a.wroteOffset / settings.segmentBytes);
      if (sameSegment ? a.wroteOffset !== before : a.wroteOffset % settings.segmentBytes !== 0) {
        throw new Error(
          `${origin}: a put after recovery went to ${a.wroteOffset}, the log ended at ${before}`,
        );
      }
      model.set(a.wroteOffset, {
        offset: a.wroteOffset,
        sizeBytes: a.wroteBytes,
        topic,
        queueId,
        queueOffset: a.queueOffset,
        seq,
        strict: true,
        origin: `${origin} (parent put)`,
      });
      report.parentPuts++;
    }
    report.maxOffset = store.maxOffset;
    end = store.maxOffset;
  } finally {
    await store.close();
  }
  if (fs.existsSync(path.join(directory, "abort"))) {
    throw new Error(`${origin}: abort remains after a clean close`);
  }
  for (const warning of warnings) {
    if (!/segment .* has an invalid record/.test(warning)) continue;
    throw new Error(`${origin}: recovery warned: ${warning}`);
  }
  return end;
}
