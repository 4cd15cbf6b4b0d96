/**
 * Small statistics helpers shared by the worker and the report.
 *
 * @module
 */

/** The median of the values (the upper middle one for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** The `fraction` percentile (nearest rank) of the values. */
export function percentile(values: readonly number[] | Float64Array, fraction: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(sorted.length * fraction) - 1));
  return sorted[rank]!;
}

/** A list of numbers that grows without reallocating per push. */
export class Samples {
  #values = new Float64Array(0x1_0000);
  #count = 0;

  /** Number of samples held. */
  get count(): number {
    return this.#count;
  }

  /** Adds one sample. */
  push(value: number): void {
    if (this.#count === this.#values.length) {
      const grown = new Float64Array(this.#values.length * 2);
      grown.set(this.#values);
      this.#values = grown;
    }
    this.#values[this.#count++] = value;
  }

  /** The samples held, as a view. */
  values(): Float64Array {
    return this.#values.subarray(0, this.#count);
  }
}
