/**
 * The internal invariant check.
 *
 * `assert()` documents what must hold at a point in the code and throws
 * loudly when it does not: a failed assertion is a bug in mqstore, never a
 * condition a caller handles, so it is an {@link AssertionError} and not an
 * `MqStoreError`.
 *
 * @module
 */

/** Thrown when an internal invariant does not hold (a bug). */
export class AssertionError extends Error {
  /**
   * Creates the error.
   *
   * @param message What did not hold.
   */
  constructor(message: string) {
    super(message);
    this.name = "AssertionError";
  }
}

/**
 * Throws an {@link AssertionError} when `condition` is false.
 *
 * @example
 * ```ts
 * import { assert } from "./assert.ts";
 *
 * const wrote = 10;
 * const flushed = 4;
 * assert(flushed <= wrote, `flushed ${flushed} is past wrote ${wrote}`);
 * ```
 *
 * @param condition The invariant.
 * @param message What it means, with the values that matter.
 */
export function assert(condition: boolean, message: string): asserts condition {
  if (!condition) throw new AssertionError(`Assertion failed: ${message}`);
}
