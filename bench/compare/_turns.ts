/**
 * Durable writers taking turns in one process, so that every one of them
 * is timed on the same device in the same minutes: the comparison's
 * one-producer durable cells (`durable/<store>/1/<payload>` and the
 * `fsync/<payload>` limit, `scripts/bench_compare.ts`) and
 * `bench/lone_durable_bench.ts` measure with it.
 *
 * ```
 * warm up   each taker in list order, putting for warmUpMs (untimed)
 * round r   every taker once, in the order of row r mod rows of a
 *           balanced Latin square ({@link roundOrder}); a turn puts one
 *           record at a time, each awaited, until sliceMs have passed
 *           (the last put ends the turn, so it runs over)
 * between   an untimed yield to the event loop before every turn
 * rounds    ceil(durationMs / sliceMs): every taker gets as many turns
 * ```
 *
 * Why: this VM's `fdatasync` latency moves by 2–3× from minute to minute,
 * so stores timed one after the other for 2 s each can land one on a fast
 * minute and the other on a slow one (session 19: one full Node run put
 * mqstore at 1.8 k acks/s and SQLite at 4.2 k, a 0.43× that turns of
 * 100 ms in one process did not reproduce: session 18 had mqstore ÷ SQLite
 * at 1.04–1.13 while the rates ran from 1.4 k to 3.9 k).
 *
 * The order of the rounds is balanced because a store's background work
 * (mqstore's consume queue, index and checkpoint flushes) can fall in the
 * turn that follows its own, so every store should follow every other
 * equally often. Rotating one fixed order does not do that: with three
 * takers, 0 1 2 / 1 2 0 / 2 0 1 always has 0 after 2, 1 after 0 and 2
 * after 1. The rows of a Williams square do: within the rounds of one
 * cycle of rows, every ordered pair of takers is adjacent equally often
 * (once for an even count, twice for an odd one). The adjacency from one
 * round's last turn to the next round's first adds at most one more to a
 * pair per cycle (counting those steps too, a pair follows once or twice
 * a cycle with an even count of takers, and a run that ends inside a
 * cycle adds its own imbalance), and the rows are ordered so that no taker ever has two
 * turns in a row. Two takers simply alternate (see {@link roundOrder}).
 *
 * The yield before every turn (a zero `setTimeout`, then a `setImmediate`:
 * about a millisecond, untimed) lets the timers and immediates that the
 * last turn's store scheduled, and that are due, run before the next
 * turn's clock starts, rather than inside it (a `setImmediate` alone runs
 * before due timers when the turn ended in an I/O callback, on Node and
 * Bun). Work on the runtime's
 * thread pool (a store's `fsync` in flight, a native flush) can still
 * overlap the next turn.
 *
 * A taker's acks/s is its acks over its own turn time; its latencies come
 * from its turns only. A taker whose put fails, or does not settle within
 * `putDeadlineMs` ({@link PUT_DEADLINE_MS}), takes no further turns and
 * keeps its failure; the others go on.
 *
 * @module
 */

import { performance } from "node:perf_hooks";
import { setImmediate } from "node:timers";
import { Samples } from "./_stats.ts";

/** Default length of a turn. */
export const SLICE_MS = 100;

/**
 * Longest a put may take before its taker is failed: mqstore's
 * `syncFlushTimeout` (5 s, after which its put rejects on its own) plus
 * a second. A put that never settles would otherwise stop every taker.
 */
export const PUT_DEADLINE_MS = 6_000;

/** One durable write of a taker: settles once its record is durable. */
export type TurnPut = () => Promise<void>;

/** A timer that can be stopped: see {@link TurnTimers.after}. */
export interface TurnTimer {
  /** Settles once the time has passed (never, once cleared). */
  elapsed: Promise<void>;
  /** Stops the timer. */
  clear(): void;
}

/** The event loop as the turns use it; tests pass one they control. */
export interface TurnTimers {
  /** A timer of `ms` (the put deadline). */
  after(ms: number): TurnTimer;
  /** Settles once the timers and immediates already due have run (the yield between turns). */
  yieldToLoop(): Promise<void>;
}

/** The event loop's own timers: `setTimeout` and `setImmediate`. */
export const LOOP_TIMERS: TurnTimers = {
  after(ms) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const elapsed = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    });
    return { elapsed, clear: () => clearTimeout(timer) };
  },
  // A zero timer first: a turn that ends in an I/O callback (Node's and
  // Bun's poll phase) would see a lone setImmediate run before the timers
  // already due, which would then fire in the next turn; after the timer,
  // the immediates those timers queued run too.
  yieldToLoop: () =>
    new Promise<void>((resolve) => setTimeout(resolve, 0)).then(
      () => new Promise<void>((resolve) => setImmediate(resolve)),
    ),
};

/** How long the takers take turns. */
export interface TurnOptions {
  /**
   * Length of a turn; a turn's last put, which ends it, runs over.
   * @default {SLICE_MS}
   */
  sliceMs?: number;
  /** Turn time of each taker in all: `ceil(durationMs / sliceMs)` turns each. */
  durationMs: number;
  /**
   * Untimed puts of each taker, one taker after the other, before the first turn.
   * @default 0
   */
  warmUpMs?: number;
  /**
   * How long one put may take before its taker is failed (warm-up included).
   * @default {PUT_DEADLINE_MS}
   */
  putDeadlineMs?: number;
  /**
   * The clock in ms (tests pass one they advance).
   * @default performance.now
   */
  now?: () => number;
  /**
   * The put deadline's timer and the yield between turns (tests pass ones they control).
   * @default {LOOP_TIMERS}
   */
  timers?: TurnTimers;
  /** For tests: called as each turn starts, with the taker's index (they record the order). */
  onTurn?: (taker: number) => void;
}

/** What one taker did in its turns. */
export interface TurnTally {
  /** Puts acknowledged in the turns (warm-up excluded). */
  acks: number;
  /** Time spent in the taker's turns, the overrun of each turn's last put included. */
  busyMs: number;
  /** Turns taken. */
  turns: number;
  /** Each acknowledged put's latency in µs, from the turns only. */
  latenciesUs: Float64Array;
  /** Acks per second of turn time (NaN before any). */
  ratePerS: number;
  /** Set when a put failed: the taker took no turn after it. */
  failure?: Error;
}

/**
 * Rounds in one cycle of {@link roundOrder}'s rows: one for a single
 * taker or two (they alternate), `count` for an even count, `2 × count`
 * for an odd one (the rows and their reversals).
 */
export function roundsPerCycle(count: number): number {
  if (!Number.isInteger(count) || count < 1) {
    throw new RangeError(`roundsPerCycle() takes a count ≥ 1, not ${count}`);
  }
  return count <= 2 ? 1 : count % 2 === 0 ? count : 2 * count;
}

/**
 * The takers' order in round `round` of `count`: row `round mod rows` of
 * a Williams balanced Latin square. Row 0 is 0, 1, n−1, 2, n−2, …; row r
 * (r < n) adds r mod n to each; for an odd n, rows n … 2n−1 are the
 * reversals of rows n−2, n−3, …, 0, n−1 (in that order, so that no round
 * starts with the taker that ended the one before; in plain order, three
 * takers would have 2 1 0 followed by 0 2 1). Over one cycle of rows
 * ({@link roundsPerCycle}), every ordered pair of takers is adjacent
 * within a round `rows / n` times. Two takers alternate, 0 1 every round:
 * the square's rows 0 1 / 1 0 would give each a double turn at every
 * round boundary, and alternation already has each follow the other
 * equally often.
 *
 * @example
 * ```ts
 * roundOrder(0, 4); // [0, 1, 3, 2]
 * roundOrder(1, 4); // [1, 2, 0, 3]
 * roundOrder(3, 3); // [0, 2, 1]: row 1 reversed
 * ```
 */
export function roundOrder(round: number, count: number): number[] {
  if (!Number.isInteger(round) || round < 0 || !Number.isInteger(count) || count < 1) {
    throw new RangeError(`roundOrder() takes a round ≥ 0 and a count ≥ 1, not ${round}, ${count}`);
  }
  const row = round % roundsPerCycle(count);
  // Row 0 of the square at position k: 0, then 1, n−1, 2, n−2, … .
  const first = (k: number) => k === 0 ? 0 : k % 2 === 1 ? (k + 1) / 2 : count - k / 2;
  if (row < count) return Array.from({ length: count }, (_, k) => (first(k) + row) % count);
  const reversed = (2 * count - 2 - (row - count)) % count;
  return Array.from({ length: count }, (_, k) => (first(count - 1 - k) + reversed) % count);
}

/**
 * What `start()` settles with, or a rejection with an Error of `message`
 * once `deadlineMs` have passed on `timers` (the deadline's timer is
 * cleared either way). What `start()` throws is a rejection too.
 *
 * @example
 * ```ts
 * await settleWithin(() => peer.close(), PUT_DEADLINE_MS, LOOP_TIMERS, "close hung");
 * ```
 */
export async function settleWithin<T>(
  start: () => Promise<T>,
  deadlineMs: number,
  timers: TurnTimers,
  message: string,
): Promise<T> {
  const timer = timers.after(deadlineMs);
  try {
    return await Promise.race([
      start(),
      timer.elapsed.then((): never => {
        throw new Error(message);
      }),
    ]);
  } finally {
    timer.clear();
  }
}

/**
 * Warms the takers up, then has them take turns (see the module doc) and
 * answers each one's tally, in the takers' order.
 *
 * @example
 * ```ts
 * const [a, b] = await takeTurns([putA, putB], { durationMs: 2_000, warmUpMs: 200 });
 * console.log(a.ratePerS / b.ratePerS);
 * ```
 */
export async function takeTurns(
  puts: readonly TurnPut[],
  options: TurnOptions,
): Promise<TurnTally[]> {
  const sliceMs = options.sliceMs ?? SLICE_MS;
  const warmUpMs = options.warmUpMs ?? 0;
  const putDeadlineMs = options.putDeadlineMs ?? PUT_DEADLINE_MS;
  const now = options.now ?? (() => performance.now());
  const timers = options.timers ?? LOOP_TIMERS;
  if (
    !(sliceMs > 0) || !(options.durationMs > 0) || !(warmUpMs >= 0) || !(putDeadlineMs > 0)
  ) {
    throw new RangeError(
      `takeTurns() takes a positive sliceMs, durationMs and putDeadlineMs and a warmUpMs ≥ 0, not ${sliceMs}, ${options.durationMs}, ${putDeadlineMs}, ${warmUpMs}`,
    );
  }
  const samples = puts.map(() => new Samples());
  const busyMs = puts.map(() => 0);
  const turns = puts.map(() => 0);
  const failures = new Map<number, Error>();
  const fail = (i: number, error: unknown) =>
    failures.set(i, error instanceof Error ? error : new Error(String(error)));
  // One put, or a rejection once the deadline has passed: a put that never
  // settles fails its taker instead of stopping them all.
  const putWithin = (i: number): Promise<void> =>
    settleWithin(
      () => puts[i]!(),
      putDeadlineMs,
      timers,
      `A put of taker ${i} did not settle within ${putDeadlineMs} ms`,
    );

  for (let i = 0; i < puts.length && warmUpMs > 0; i++) {
    await timers.yieldToLoop();
    const end = now() + warmUpMs;
    try {
      while (now() < end) await putWithin(i);
    } catch (error) {
      fail(i, error);
    }
  }
  const rounds = Math.ceil(options.durationMs / sliceMs);
  for (let round = 0; round < rounds; round++) {
    for (const i of roundOrder(round, puts.length)) {
      if (failures.has(i)) continue;
      // Untimed: the last turn's timers and immediates run here, not in this turn.
      await timers.yieldToLoop();
      options.onTurn?.(i);
      const latenciesUs = samples[i]!;
      const from = now();
      const end = from + sliceMs;
      let t = from;
      try {
        while (t < end) {
          await putWithin(i);
          const ackedAt = now();
          latenciesUs.push((ackedAt - t) * 1000);
          t = ackedAt;
        }
      } catch (error) {
        fail(i, error);
        t = now();
      }
      busyMs[i]! += t - from;
      turns[i]!++;
    }
  }
  return puts.map((_, i) => {
    const latenciesUs = samples[i]!.values();
    const tally: TurnTally = {
      acks: latenciesUs.length,
      busyMs: busyMs[i]!,
      turns: turns[i]!,
      latenciesUs,
      ratePerS: latenciesUs.length / busyMs[i]! * 1000,
    };
    if (failures.has(i)) tally.failure = failures.get(i);
    return tally;
  });
}
