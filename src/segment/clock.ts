/**
 * Time as the segment layer sees it: wall-clock milliseconds and one-shot
 * timers. Injected so tests control time instead of sleeping.
 *
 * @module
 */

import { performance } from "node:perf_hooks";
import { clearImmediate, setImmediate } from "node:timers";
import { assert } from "../assert.ts";

/**
 * A source of time and timers.
 *
 * @example
 * ```ts
 * import { type Clock, ManualClock, systemClock } from "./clock.ts";
 *
 * function deadline(clock: Clock, afterMs: number): number {
 *   return clock.nowMs() + afterMs;
 * }
 * console.log(deadline(new ManualClock(1_000), 500)); // 1500
 * console.log(deadline(systemClock, 500) > Date.now()); // true
 * ```
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  nowMs(): number;
  /**
   * Milliseconds on a monotonic clock with sub-millisecond resolution, for
   * measuring short spans (the group commit's split tuner times epochs of
   * about 60 ms, which whole milliseconds would blur by ±2 %). Only
   * differences mean anything. When absent, `nowMs` serves.
   */
  monotonicMs?(): number;
  /**
   * Calls `callback` once, `delayMs` from now.
   *
   * @returns A function that cancels the timer (idempotent).
   */
  setTimer(delayMs: number, callback: () => void): () => void;
}

/**
 * The host clock: `Date.now()`, `performance.now()` and `setTimeout`.
 *
 * @example
 * ```ts
 * import { systemClock } from "./clock.ts";
 *
 * const cancel = systemClock.setTimer(1000, () => console.log("late"));
 * cancel();
 * console.log(systemClock.nowMs() > 0);
 * ```
 */
export const systemClock: Clock = {
  nowMs: () => Date.now(),
  monotonicMs: () => performance.now(),
  setTimer(delayMs, callback) {
    const id = setTimeout(callback, delayMs);
    return () => clearTimeout(id);
  },
};

interface PendingTimer {
  dueMs: number;
  sequence: number;
  callback: () => void;
}

/**
 * A clock that only moves when told to; timers fire inside
 * {@link ManualClock.advance}, in due order.
 *
 * @example
 * ```ts
 * import { ManualClock } from "./clock.ts";
 *
 * const clock = new ManualClock(1_000);
 * let fired = false;
 * clock.setTimer(50, () => fired = true);
 * clock.advance(49);
 * console.log(fired); // false
 * clock.advance(1);
 * console.log(fired); // true
 * ```
 */
export class ManualClock implements Clock {
  /** The current time. */
  #nowMs: number;
  /** Timers not yet fired or cancelled. */
  #timers: PendingTimer[] = [];
  /** Tie-breaker so timers due at the same time fire in creation order. */
  #sequence = 0;

  /**
   * Creates a clock that reads `startMs` until it is advanced.
   *
   * @param startMs The initial time.
   * @default startMs 0
   */
  constructor(startMs = 0) {
    this.#nowMs = startMs;
  }

  /** The current time. */
  nowMs(): number {
    return this.#nowMs;
  }

  /** Registers a timer due `delayMs` from now. */
  setTimer(delayMs: number, callback: () => void): () => void {
    assert(delayMs >= 0, `timer delay ${delayMs} must not be negative`);
    const timer = { dueMs: this.#nowMs + delayMs, sequence: this.#sequence++, callback };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Moves time forward by `deltaMs`, firing every timer that falls due. */
  advance(deltaMs: number): void {
    if (!(deltaMs >= 0)) throw new RangeError(`Cannot advance a clock by ${deltaMs} ms`);
    const target = this.#nowMs + deltaMs;
    for (;;) {
      const due = this.#timers
        .filter((t) => t.dueMs <= target)
        .sort((a, b) => a.dueMs - b.dueMs || a.sequence - b.sequence)[0];
      if (due === undefined) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#nowMs = due.dueMs;
      due.callback();
    }
    this.#nowMs = target;
  }

  /** Timers waiting to fire. */
  get pendingTimerCount(): number {
    return this.#timers.length;
  }
}

/**
 * Resolves on a later turn of the event loop, after the I/O callbacks
 * pending now: what a loop that never yields would never let in.
 *
 * @example
 * ```ts
 * import { nextTurn } from "./clock.ts";
 *
 * await nextTurn();
 * ```
 */
export function nextTurn(): Promise<void> {
  return new Promise<void>((resolve) => onNextTurn(resolve));
}

/**
 * Calls `callback` once on a later turn of the event loop, as
 * {@link nextTurn} resolves.
 *
 * @example
 * ```ts
 * import { onNextTurn } from "./clock.ts";
 *
 * const cancel = onNextTurn(() => console.log("later"));
 * cancel();
 * ```
 *
 * @returns A function that cancels the call (idempotent).
 */
export function onNextTurn(callback: () => void): () => void {
  const id = setImmediate(callback);
  return () => clearImmediate(id);
}
