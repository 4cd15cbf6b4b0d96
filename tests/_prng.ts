/**
 * A small seeded PRNG for tests, so every run checks the same cases.
 *
 * @module
 */

/** mulberry32's increment (Weyl sequence step). */
const MULBERRY32_STEP = 0x6D2B79F5;
/** 2^32: maps a 32-bit unsigned value into [0, 1). */
const UINT32_RANGE = 0x1_0000_0000;

/**
 * mulberry32: a deterministic generator of numbers in [0, 1).
 *
 * @param seed Any number; its low 32 bits seed the sequence.
 */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + MULBERRY32_STEP) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / UINT32_RANGE;
  };
}
