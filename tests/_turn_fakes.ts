/**
 * A fake clock and fake event-loop timers for the turn-taking tests
 * (`bench/compare/_turns.ts`): nothing waits on real time.
 *
 * @module
 */

import type { TurnTimer, TurnTimers } from "../bench/compare/_turns.ts";

/** A clock the test moves: each fake put advances it by its cost. */
export class FakeClock {
  /** The time in ms. */
  nowMs = 0;
  /** Reads {@link nowMs}. */
  readonly now = (): number => this.nowMs;
}

/**
 * Timers the test controls: a deadline elapses only when the test calls
 * {@link FakeTimers.expirePending}, and the yield between turns is only logged.
 */
export class FakeTimers implements TurnTimers {
  /** What happened, in order: `yield` and whatever the test logs. */
  readonly log: string[] = [];
  /** The ms of every deadline asked for. */
  readonly deadlinesMs: number[] = [];
  /** The expiry of every deadline neither elapsed nor cleared. */
  #pending = new Set<() => void>();
  /** The clock a yield moves, and by how much (a real yield takes time too). */
  readonly #yieldCost: { clock: FakeClock; ms: number } | undefined;

  /** @param yieldCost The clock each yield advances, and by how many ms. */
  constructor(yieldCost?: { clock: FakeClock; ms: number }) {
    this.#yieldCost = yieldCost;
  }

  /** Deadlines neither elapsed nor cleared (a finished run leaves none). */
  get pendingCount(): number {
    return this.#pending.size;
  }

  /** A deadline that elapses at the next {@link expirePending}, unless cleared. */
  after(ms: number): TurnTimer {
    this.deadlinesMs.push(ms);
    let expire = () => {};
    const elapsed = new Promise<void>((resolve) => {
      expire = resolve;
    });
    this.#pending.add(expire);
    return { elapsed, clear: () => this.#pending.delete(expire) };
  }

  /** Logs `yield`, advances the clock by the yield's cost, and settles at once. */
  yieldToLoop(): Promise<void> {
    this.log.push("yield");
    if (this.#yieldCost !== undefined) this.#yieldCost.clock.nowMs += this.#yieldCost.ms;
    return Promise.resolve();
  }

  /** Lets every deadline not yet cleared elapse. */
  expirePending(): void {
    for (const expire of this.#pending) expire();
    this.#pending.clear();
  }
}
