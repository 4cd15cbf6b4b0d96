/**
 * Durable writers taking turns in one process, so that every one of them
 * is timed on the same device in the same minutes: the comparison's
 * one-producer durable cells (`durable/<store>/1/<payload>` and the
 * `fsync/<payload>` limit, `scripts/bench_compare.ts`) and
 * `bench/lone_durable_bench.ts` measure with it.
 *
 * ```
 * warm up   each taker in list order, putting for warmUpMs (untimed)
 * round r   every taker once, starting with taker r mod n, then on in list
 *           order: a turn puts one record at a time, each awaited, until
 *           sliceMs have passed (the last put ends the turn, so it runs over)
 * rounds    ceil(durationMs / sliceMs): every taker gets as many turns
 * ```
 *
 * Why: this VM's `fdatasync` latency moves by 2–3× from minute to minute,
 * so stores timed one after the other for 2 s each can land one on a fast
 * minute and the other on a slow one (session 19: one full Node run put
 * mqstore at 1.8 k acks/s and SQLite at 4.2 k, a 0.43× that turns of
 * 100 ms in one process did not reproduce: session 18 had mqstore ÷ SQLite
 * at 1.04–1.13 while the rates ran from 1.4 k to 3.9 k). Each round starts
 * with the next taker because a store's background work (mqstore's consume
 * queue, index and checkpoint flushes) can fall in the turns that follow
 * its own: in a fixed order those were always the same store's.
 *
 * A taker's acks/s is its acks over its own turn time; its latencies come
 * from its turns only. A taker whose put fails takes no further turns and
 * keeps its failure; the others go on.
 *
 * @module
 */

import { performance } from "node:perf_hooks";
import { Samples } from "./_stats.ts";

/** Default length of a turn. */
export const SLICE_MS = 100;

/** One durable write of a taker: settles once its record is durable. */
export type TurnPut = () => Promise<void>;

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
   * The clock in ms (tests pass one they advance).
   * @default performance.now
   */
  now?: () => number;
  /** Called as each turn starts, with the taker's index (tests record the order). */
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
 * The takers' order in round `round` of `count`: it starts with taker
 * `round mod count` and goes on in list order.
 *
 * @example
 * ```ts
 * roundOrder(1, 3); // [1, 2, 0]
 * ```
 */
export function roundOrder(round: number, count: number): number[] {
  if (!Number.isInteger(round) || round < 0 || !Number.isInteger(count) || count < 1) {
    throw new RangeError(`roundOrder() takes a round ≥ 0 and a count ≥ 1, not ${round}, ${count}`);
  }
  return Array.from({ length: count }, (_, k) => (round + k) % count);
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
  const now = options.now ?? (() => performance.now());
  if (!(sliceMs > 0) || !(options.durationMs > 0) || !(warmUpMs >= 0)) {
    throw new RangeError(
      `takeTurns() takes a positive sliceMs and durationMs and a warmUpMs ≥ 0, not ${sliceMs}, ${options.durationMs}, ${warmUpMs}`,
    );
  }
  const samples = puts.map(() => new Samples());
  const busyMs = puts.map(() => 0);
  const turns = puts.map(() => 0);
  const failures = new Map<number, Error>();
  const fail = (i: number, error: unknown) =>
    failures.set(i, error instanceof Error ? error : new Error(String(error)));

  for (let i = 0; i < puts.length && warmUpMs > 0; i++) {
    const end = now() + warmUpMs;
    try {
      while (now() < end) await puts[i]!();
    } catch (error) {
      fail(i, error);
    }
  }
  const rounds = Math.ceil(options.durationMs / sliceMs);
  for (let round = 0; round < rounds; round++) {
    for (const i of roundOrder(round, puts.length)) {
      if (failures.has(i)) continue;
      options.onTurn?.(i);
      const put = puts[i]!;
      const latenciesUs = samples[i]!;
      const from = now();
      const end = from + sliceMs;
      let t = from;
      try {
        while (t < end) {
          await put();
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
