/**
 * The workloads of the side-by-side comparison and how they run on the
 * current runtime. The orchestrator (`scripts/bench_compare.ts`) builds
 * the list with {@link buildCases}, narrows it with {@link selectCases}
 * and splits it into worker runs with {@link planRuns}; the worker
 * (`worker.ts`) runs a case alone with {@link runCase}, or the cases of a
 * turn run together with {@link runInTurns}.
 *
 * - `throughput`: N records put in batches of 1000 with `async` durability
 *   (records/s);
 * - `durable`: 1 or 64 producers putting one record at a time with `sync`
 *   durability for a fixed time (acks/s, ack latency p50/p99);
 * - `memcpy`, `sequential`, `fsync`, `group`: the machine's limits
 *   (`limits.ts`); the raw group commit runs with 1 and with 2 flushes in
 *   flight ({@link GROUP_FLUSHES}), and the 64-producer workloads are read
 *   against the better of the two.
 *
 * The one-producer durable cells of a payload size and its `fsync` limit
 * take turns in one process ({@link takesTurns}, `_turns.ts`): this VM's
 * fdatasync latency moves by 2–3× from minute to minute, and timed one
 * after the other they compared the stores' minutes more than the stores.
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";
import {
  groupCommitLimit,
  type LimitResult,
  memcpyLimit,
  openDurableWrite,
  sequentialWriteLimit,
} from "./limits.ts";
import { levelPeer } from "./level_peer.ts";
import { lmdbPeer } from "./lmdb_peer.ts";
import { mqstoreBatchPeer, mqstorePeer } from "./mqstore_peer.ts";
import type { PeerModule } from "./_peer.ts";
import { sqlitePeer } from "./sqlite_peer.ts";
import { percentile, Samples } from "./_stats.ts";
import { cpuPerRecord, sampleCpu } from "./_cpu.ts";
import {
  LOOP_TIMERS,
  PUT_DEADLINE_MS,
  settleWithin,
  takeTurns,
  type TurnOptions,
  type TurnPut,
} from "./_turns.ts";

/** Records per batch in the throughput workloads. */
export const BATCH_RECORDS = 1000;
/** Producers of the concurrent durable workloads. */
export const MANY_PRODUCERS = 64;
/** Flushes in flight of the raw group-commit limit's runs. */
export const GROUP_FLUSHES = [1, 2] as const;
/** The record sizes compared. */
export const PAYLOAD_SIZES = [128, 1024] as const;

/** Every store compared, mqstore first. */
export const PEERS: readonly PeerModule[] = [
  mqstorePeer,
  mqstoreBatchPeer,
  lmdbPeer,
  sqlitePeer,
  levelPeer,
];

/** What a case measures. */
export type CaseKind = "throughput" | "durable" | "memcpy" | "sequential" | "fsync" | "group";

/** One measured run, the same on every runtime. */
export interface CaseSpec {
  /** Unique within a run, e.g. `throughput/lmdb/1024`. */
  id: string;
  kind: CaseKind;
  /** The store, for `throughput` and `durable`. */
  peer?: string;
  payloadBytes: number;
  /** Concurrent producers (`durable`, `group`); 1 elsewhere. */
  producers: number;
  /** Records, pages or bytes for count-bound cases. */
  count?: number;
  /** Duration of time-bound cases. */
  durationMs?: number;
  /** Flushes in flight at most (`group`). */
  flushesMax?: number;
}

/** What one run of a case measured. */
export interface CaseResult {
  id: string;
  /** Records/s, acks/s, bytes/s or durable writes/s. */
  ratePerS: number;
  count: number;
  elapsedMs: number;
  p50Us?: number;
  p99Us?: number;
  /** Turns the case took, when it ran in turns ({@link runInTurns}); `elapsedMs` is their time. */
  turns?: number;
  /** Set when the case could not run here (peer missing, failure). */
  skipped?: string;
  /** A throughput case's JavaScript-thread CPU a record, ns (Linux; see `_cpu.ts`). */
  jsCpuNs?: number;
  /** A throughput case's CPU a record on the process's other threads, ns. */
  otherCpuNs?: number;
}

/** Sizes of a run: `full` aims at 1–3 s per case, `quick` at a smoke test. */
export interface Sizing {
  /** Records of a throughput case, per payload size. */
  throughputRecords: Record<number, number>;
  /** Records copied by the memcpy limit, per payload size. */
  memcpyRecords: Record<number, number>;
  durableMs: number;
  sequentialBytes: number;
}

/** Default sizes: about 1–3 s per case on this 2-core VM. */
export const FULL_SIZING: Sizing = {
  throughputRecords: { 128: 600_000, 1024: 200_000 },
  memcpyRecords: { 128: 30_000_000, 1024: 5_000_000 },
  durableMs: 2_000,
  sequentialBytes: 0x2000_0000,
};

/** `--quick`: a smoke run. */
export const QUICK_SIZING: Sizing = {
  throughputRecords: { 128: 50_000, 1024: 20_000 },
  memcpyRecords: { 128: 2_000_000, 1024: 500_000 },
  durableMs: 300,
  sequentialBytes: 0x1000_0000,
};

/** The cases of a run, limits first then stores, for every payload size. */
export function buildCases(sizing: Sizing): CaseSpec[] {
  const cases: CaseSpec[] = [];
  for (const payloadBytes of PAYLOAD_SIZES) {
    cases.push({
      id: `memcpy/${payloadBytes}`,
      kind: "memcpy",
      payloadBytes,
      producers: 1,
      count: sizing.memcpyRecords[payloadBytes],
    });
  }
  cases.push({
    id: "sequential",
    kind: "sequential",
    payloadBytes: 0x40_0000,
    producers: 1,
    count: sizing.sequentialBytes,
  });
  // One per payload size, though each writes 4 KiB: each takes turns with
  // that size's one-producer stores, its × limit read in their minutes.
  for (const payloadBytes of PAYLOAD_SIZES) {
    cases.push({
      id: `fsync/${payloadBytes}`,
      kind: "fsync",
      payloadBytes,
      producers: 1,
      durationMs: sizing.durableMs,
    });
  }
  for (const payloadBytes of PAYLOAD_SIZES) {
    for (const flushesMax of GROUP_FLUSHES) {
      cases.push({
        id: `${groupIdOf(MANY_PRODUCERS, payloadBytes)}/${flushesMax}f`,
        kind: "group",
        payloadBytes,
        producers: MANY_PRODUCERS,
        durationMs: sizing.durableMs,
        flushesMax,
      });
    }
  }
  for (const payloadBytes of PAYLOAD_SIZES) {
    for (const peer of PEERS) {
      cases.push({
        id: `throughput/${peer.name}/${payloadBytes}`,
        kind: "throughput",
        peer: peer.name,
        payloadBytes,
        producers: 1,
        count: sizing.throughputRecords[payloadBytes],
      });
    }
  }
  for (const payloadBytes of PAYLOAD_SIZES) {
    for (const producers of [1, MANY_PRODUCERS]) {
      for (const peer of PEERS) {
        if (!peer.supportsProducers(producers)) continue;
        cases.push({
          id: `durable/${peer.name}/${producers}/${payloadBytes}`,
          kind: "durable",
          peer: peer.name,
          payloadBytes,
          producers,
          durationMs: sizing.durableMs,
        });
      }
    }
  }
  return cases;
}

/** Which cases {@link selectCases} keeps; see `scripts/bench_compare.ts`'s `--only` and `--filter`. */
export interface CaseSelection {
  /** Only the stores' cases whose id contains it (limits always kept). */
  only?: string;
  /** Only the cases, limits included, whose id contains one of them. */
  filter?: readonly string[];
}

/** The cases that `selection` keeps, in their order. */
export function selectCases(cases: readonly CaseSpec[], selection: CaseSelection): CaseSpec[] {
  const { only, filter } = selection;
  return cases.filter((c) =>
    (only === undefined || c.peer === undefined || c.id.includes(only)) &&
    (filter === undefined || filter.some((text) => c.id.includes(text)))
  );
}

/**
 * Whether a case takes turns with others in one process rather than
 * running alone: the one-producer durable cells and the `fsync` limit
 * they are read against (see the module doc).
 */
export function takesTurns(spec: CaseSpec): boolean {
  return (spec.kind === "durable" && spec.producers === 1) || spec.kind === "fsync";
}

/**
 * What one worker process runs: one case `alone`, or cases that take
 * `turns` ({@link runInTurns}).
 */
export interface CaseRun {
  /**
   * `alone`: the run holds one case, run by {@link runCase} after its
   * warm-ups; `turns`: its cases take turns in one process
   * ({@link runInTurns}).
   */
  schedule: "alone" | "turns";
  /** The run's cases: one when `alone`; in a turn run, in the order they are opened and warmed up. */
  cases: CaseSpec[];
}

/**
 * The worker runs of `cases`: every case alone, except those that take
 * turns ({@link takesTurns}), which go in one run per payload size, at the
 * place of the first of them, in case order. A selection naming one such
 * case gives a turn run of one: that case alone.
 */
export function planRuns(cases: readonly CaseSpec[]): CaseRun[] {
  const runs: CaseRun[] = [];
  const turnRuns = new Map<number, CaseRun>();
  for (const spec of cases) {
    if (!takesTurns(spec)) {
      runs.push({ schedule: "alone", cases: [spec] });
      continue;
    }
    let run = turnRuns.get(spec.payloadBytes);
    if (run === undefined) {
      run = { schedule: "turns", cases: [] };
      turnRuns.set(spec.payloadBytes, run);
      runs.push(run);
    }
    run.cases.push(spec);
  }
  return runs;
}

/**
 * The runs of repeat `repeat` (counted from 0): `runs` as planned on even
 * repeats; on odd ones in reverse order, the cases of each turn run
 * reversed too, so that no case always runs first or last, and in a turn
 * run the store warmed up last, and the one the rounds start with, change.
 *
 * @example
 * ```ts
 * const runs = planRuns(cases);
 * for (let repeat = 0; repeat < 3; repeat++) console.log(runsOfRepeat(runs, repeat));
 * ```
 */
export function runsOfRepeat(runs: readonly CaseRun[], repeat: number): CaseRun[] {
  if (!Number.isInteger(repeat) || repeat < 0) {
    throw new RangeError(`runsOfRepeat() takes a repeat ≥ 0, not ${repeat}`);
  }
  if (repeat % 2 === 0) return [...runs];
  return runs.map((run) => ({ ...run, cases: [...run.cases].reverse() })).reverse();
}

/**
 * The id of the raw group-commit limit of `producers` and `payloadBytes`
 * without its flush count: every run of it (`…/1f`, `…/2f`) starts so.
 */
export function groupIdOf(producers: number, payloadBytes: number): string {
  return `group/${producers}/${payloadBytes}`;
}

/** The peer of a case, among `peers`. */
export function peerOf(name: string | undefined, peers: readonly PeerModule[] = PEERS): PeerModule {
  const peer = peers.find((p) => p.name === name);
  if (peer === undefined) throw new RangeError(`Unknown peer ${name}`);
  return peer;
}

/** A payload of pseudo-random bytes, so no layer can compress it away. */
function payload(sizeBytes: number): Uint8Array {
  const bytes = new Uint8Array(sizeBytes);
  let x = 0x9e37_79b9;
  for (let i = 0; i < sizeBytes; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xff;
  }
  return bytes;
}

function fromLimit(id: string, limit: LimitResult): CaseResult {
  const result: CaseResult = {
    id,
    ratePerS: limit.ratePerS,
    count: limit.count,
    elapsedMs: limit.elapsedMs,
  };
  if (limit.latenciesUs !== undefined) {
    result.p50Us = percentile(limit.latenciesUs, 0.5);
    result.p99Us = percentile(limit.latenciesUs, 0.99);
  }
  return result;
}

async function runThroughput(spec: CaseSpec, directory: string): Promise<CaseResult> {
  const peer = await peerOf(spec.peer).open(directory, "async");
  const body = payload(spec.payloadBytes);
  const batch = Array.from({ length: BATCH_RECORDS }, () => body);
  const batches = Math.max(1, Math.round((spec.count ?? BATCH_RECORDS) / BATCH_RECORDS));
  try {
    const cpuBefore = sampleCpu();
    const start = performance.now();
    for (let i = 0; i < batches; i++) await peer.putBatch(batch);
    const elapsedMs = performance.now() - start;
    const count = batches * BATCH_RECORDS;
    const cpu = cpuPerRecord(cpuBefore, sampleCpu(), count);
    return { id: spec.id, ratePerS: count / elapsedMs * 1000, count, elapsedMs, ...cpu };
  } finally {
    await peer.close();
  }
}

async function runDurable(spec: CaseSpec, directory: string): Promise<CaseResult> {
  const peer = await peerOf(spec.peer).open(directory, "sync");
  const latenciesUs = new Samples();
  let acks = 0;
  try {
    const start = performance.now();
    const deadline = start + (spec.durationMs ?? 1_000);
    const producer = async (index: number) => {
      const body = payload(spec.payloadBytes);
      body[0] = index;
      while (performance.now() < deadline) {
        const t = performance.now();
        await peer.put(body);
        latenciesUs.push((performance.now() - t) * 1000);
        acks++;
      }
    };
    await Promise.all(Array.from({ length: spec.producers }, (_, i) => producer(i)));
    const elapsedMs = performance.now() - start;
    return {
      id: spec.id,
      ratePerS: acks / elapsedMs * 1000,
      count: acks,
      elapsedMs,
      p50Us: percentile(latenciesUs.values(), 0.5),
      p99Us: percentile(latenciesUs.values(), 0.99),
    };
  } finally {
    await peer.close();
  }
}

function takesTurnsError(spec: CaseSpec): RangeError {
  return new RangeError(
    `${spec.id} takes turns with others: run it with runInTurns(), not runCase()`,
  );
}

/**
 * Runs one case in a fresh subdirectory of `directory`, removed after.
 * Refuses (RangeError) a case that takes turns ({@link takesTurns}).
 */
export async function runCase(spec: CaseSpec, directory: string): Promise<CaseResult> {
  if (takesTurns(spec)) throw takesTurnsError(spec);
  const runDirectory = fs.mkdtempSync(path.join(directory, "run-"));
  try {
    switch (spec.kind) {
      case "memcpy":
        return fromLimit(spec.id, memcpyLimit(spec.payloadBytes, spec.count ?? 1));
      case "sequential":
        return fromLimit(spec.id, sequentialWriteLimit(runDirectory, spec.count ?? 1));
      case "fsync":
        // Never: refused above, the limit is measured in turns only.
        throw takesTurnsError(spec);
      case "group":
        return fromLimit(
          spec.id,
          await groupCommitLimit(
            runDirectory,
            spec.producers,
            spec.payloadBytes,
            spec.durationMs ?? 1_000,
            spec.flushesMax ?? 1,
          ),
        );
      case "throughput":
        return await runThroughput(spec, runDirectory);
      case "durable":
        return await runDurable(spec, runDirectory);
    }
  } finally {
    fs.rmSync(runDirectory, { recursive: true, force: true });
  }
}

/** The result of a case that failed: no figure, and the error's first line. */
export function failedResult(id: string, error: unknown): CaseResult {
  const reason = error instanceof Error ? error.message.split("\n")[0]! : String(error);
  return { id, ratePerS: 0, count: 0, elapsedMs: 0, skipped: `failed: ${reason}` };
}

/** What {@link runInTurns} runs with; tests pass fakes. */
export interface TurnRunOptions {
  /**
   * The stores the specs name.
   * @default {PEERS}
   */
  peers?: readonly PeerModule[];
  /**
   * The turns' slice, clock and timers ({@link takeTurns}); the timers also time each close.
   * @default the real ones, turns of 100 ms
   */
  turns?: Pick<TurnOptions, "sliceMs" | "now" | "timers">;
}

/**
 * Runs `specs` (cases that take turns, {@link takesTurns}) in turns in this
 * process (`_turns.ts`): each store is opened with `sync` durability, or
 * the limit's file prepared, in a fresh subdirectory of `directory`
 * (removed after); when `start` is `warmed`, each then puts untimed for
 * its warm-up ({@link warmupsOf}: a tenth of its duration, at least 100 ms),
 * one after the other; then they take turns of 100 ms until each has had
 * its `durationMs`. Answers a result per spec, in order: a store that
 * fails to open, to put (or whose put or close does not settle within
 * {@link PUT_DEADLINE_MS}) or to close is reported failed and the others
 * go on.
 */
export async function runInTurns(
  specs: readonly CaseSpec[],
  directory: string,
  start: "warmed" | "cold",
  options: TurnRunOptions = {},
): Promise<CaseResult[]> {
  const peers = options.peers ?? PEERS;
  const timers = options.turns?.timers ?? LOOP_TIMERS;
  const durationMs = specs[0]?.durationMs ?? 1_000;
  for (const spec of specs) {
    if (!takesTurns(spec) || spec.durationMs !== specs[0]!.durationMs) {
      throw new RangeError(`${spec.id} cannot take turns with ${specs[0]!.id}`);
    }
  }
  const results: (CaseResult | undefined)[] = specs.map(() => undefined);
  const takers: { index: number; put: TurnPut; close: () => Promise<void> }[] = [];
  const runDirectory = fs.mkdtempSync(path.join(directory, "turns-"));
  try {
    for (const [index, spec] of specs.entries()) {
      const own = path.join(runDirectory, String(index));
      fs.mkdirSync(own);
      try {
        if (spec.kind === "fsync") {
          const limit = await openDurableWrite(own);
          takers.push({ index, put: () => limit.put(), close: () => limit.close() });
        } else {
          const peer = await peerOf(spec.peer, peers).open(own, "sync");
          const body = payload(spec.payloadBytes);
          takers.push({ index, put: () => peer.put(body), close: () => peer.close() });
        }
      } catch (error) {
        results[index] = failedResult(spec.id, error);
      }
    }
    const warmUpMs = start === "warmed" ? warmupsOf(specs[0]!)[0]!.durationMs ?? 0 : 0;
    const tallies = takers.length === 0 ? [] : await takeTurns(takers.map((taker) => taker.put), {
      ...options.turns,
      durationMs,
      warmUpMs,
    });
    tallies.forEach((tally, k) => {
      const spec = specs[takers[k]!.index]!;
      results[takers[k]!.index] = tally.failure !== undefined
        ? failedResult(spec.id, tally.failure)
        : {
          id: spec.id,
          ratePerS: tally.ratePerS,
          count: tally.acks,
          elapsedMs: tally.busyMs,
          turns: tally.turns,
          p50Us: percentile(tally.latenciesUs, 0.5),
          p99Us: percentile(tally.latenciesUs, 0.99),
        };
    });
  } finally {
    for (const taker of takers) {
      try {
        // A store whose put hung may hang in close too: it fails alone.
        await settleWithin(
          taker.close,
          PUT_DEADLINE_MS,
          timers,
          `Closing ${specs[taker.index]!.id} did not settle within ${PUT_DEADLINE_MS} ms`,
        );
      } catch (error) {
        // A store that fails to close failed its case: its figure stays out.
        results[taker.index] = failedResult(specs[taker.index]!.id, error);
      }
    }
    fs.rmSync(runDirectory, { recursive: true, force: true });
  }
  return results.map((result, i) => result ?? failedResult(specs[i]!.id, "no result"));
}

/**
 * Untimed full-size runs before a throughput case's timed run, at least:
 * each on a fresh store like the timed one, and more until
 * {@link THROUGHPUT_WARMUP_MS} passed (see {@link warmUp}). Measured on
 * this VM (5–8 runs of each case in one process): lmdb, SQLite and
 * LevelDB are within their noise from the second run on; mqstore's
 * JavaScript put path reaches its steady user CPU a message only in the
 * third on Deno and Bun (500, 290, then 155–190 ns a 128 B record), while
 * its first run, JIT cold and into never-touched memory, ran at a third
 * to a half of the rate.
 */
export const THROUGHPUT_WARMUP_RUNS = 2;

/**
 * Warm-up time a throughput case runs for, in full-size runs, before its
 * timed run (at least {@link THROUGHPUT_WARMUP_RUNS} runs, at most
 * {@link THROUGHPUT_WARMUP_RUNS_MAX}). Node 20 (V8 11.3, no Maglev) moves
 * a function to optimized code after a number of its own bytecodes, so
 * mqstore's per-batch functions (a call each 1000 records) reach it some
 * runs after the per-record loops: `putMessages` of 1000 × 128 B, 600 k
 * records a run, 6 processes of 8 runs each, medians by run: 2.24, 3.69,
 * 4.05, 4.74, 4.79, 4.58, 5.09, 5.34 M/s (`--trace-opt` shows the
 * per-batch functions optimized in runs 1 to 5; with
 * `--interrupt-budget=8192`, a 16th of V8's, the third run's median over
 * 4 processes was 4.81 M/s). A run of mqstore there takes 0.15–0.25 s
 * with its store's open and close: 1.5 s is 6–10 runs; a peer's run of
 * 0.6–1.5 s gets 2–3. In the comparison (`--filter
 * throughput/mqstore-batch/128,memcpy/128 --repeats 5`, alternated with
 * two warm-up runs): Node 2.95, 4.66, 4.48 against 3.43, 3.24, 3.57 M/s;
 * Bun 7.69, 5.70 against 6.19, 4.60; Deno 4.57, 6.68, 6.44 against 6.73,
 * 6.83, 6.06 (medians of 5). The same rule for every store: a server runs
 * for longer than any of these.
 */
export const THROUGHPUT_WARMUP_MS = 1_500;

/** The most untimed runs {@link warmUp} gives a throughput case. */
export const THROUGHPUT_WARMUP_RUNS_MAX = 12;

/**
 * Runs a case's warm-up ({@link warmupsOf}) through `run`; a throughput
 * case then runs on, a full-size run at a time, until
 * {@link THROUGHPUT_WARMUP_MS} passed since the warm-up began or it ran
 * {@link THROUGHPUT_WARMUP_RUNS_MAX} times.
 *
 * @param spec The case to warm up.
 * @param run Runs one untimed case (as `runCase` does).
 * @param nowMs The clock (`performance.now`).
 * @returns How many untimed runs it made.
 */
export async function warmUp(
  spec: CaseSpec,
  run: (warm: CaseSpec) => Promise<unknown>,
  nowMs: () => number = () => performance.now(),
): Promise<number> {
  const start = nowMs();
  let runs = 0;
  for (const warm of warmupsOf(spec)) {
    await run(warm);
    runs++;
  }
  if (spec.kind !== "throughput") return runs;
  while (runs < THROUGHPUT_WARMUP_RUNS_MAX && nowMs() - start < THROUGHPUT_WARMUP_MS) {
    runs++;
    await run({ ...spec, id: `${spec.id}#warmup${runs}` });
  }
  return runs;
}

/**
 * The untimed runs that warm a case up before it is measured, at the
 * least (see {@link warmUp}): for a throughput case
 * {@link THROUGHPUT_WARMUP_RUNS} runs of its full size; for the others, as
 * before, a tenth of the case (at least 100 ms): the durable cases'
 * warm-up was not measured again, and a full one would add 2 s to each of
 * them (4 min to a full comparison).
 */
export function warmupsOf(spec: CaseSpec): CaseSpec[] {
  if (spec.kind === "throughput") {
    return Array.from(
      { length: THROUGHPUT_WARMUP_RUNS },
      (_, i): CaseSpec => ({ ...spec, id: `${spec.id}#warmup${i + 1}` }),
    );
  }
  const warm: CaseSpec = { ...spec, id: `${spec.id}#warmup` };
  if (spec.count !== undefined) warm.count = Math.max(1, Math.round(spec.count / 10));
  if (spec.durationMs !== undefined) warm.durationMs = Math.max(100, spec.durationMs / 10);
  return [warm];
}
