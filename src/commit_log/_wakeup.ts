/**
 * An interruptible sleep on an injected clock: the waiting half of
 * RocketMQ's `ServiceThread.waitForRunning` / `wakeup`.
 *
 * @module
 */

import type { Clock } from "../segment/clock.ts";

/**
 * One service's sleep. A {@link Wakeup.wake} that arrives while the service
 * is busy is remembered, so the next {@link Wakeup.sleep} returns at once
 * (no lost wake-up).
 */
export class Wakeup {
  #clock: Clock;
  /** Wakes the current sleep, if one is in progress. */
  #resolve: (() => void) | undefined;
  /** Cancels the current sleep's timer. */
  #cancelTimer: (() => void) | undefined;
  /** A wake-up arrived while nobody slept. */
  #pending = false;

  /** @param clock The clock whose timers end a sleep. */
  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Sleeps `delayMs`, or less when woken. */
  sleep(delayMs: number): Promise<void> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      this.#resolve = resolve;
      this.#cancelTimer = this.#clock.setTimer(delayMs, () => this.#end());
    });
  }

  /** Ends the current sleep, or the next one at once. Cheap when already awake. */
  wake(): void {
    if (this.#resolve !== undefined) this.#end();
    else this.#pending = true;
  }

  #end(): void {
    const resolve = this.#resolve;
    this.#resolve = undefined;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#pending = false;
    resolve?.();
  }
}
