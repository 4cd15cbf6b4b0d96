/**
 * Big-endian int64 fields as two 32-bit halves (no BigInt on the hot path),
 * shared by the consume-queue and index-file codecs.
 *
 * @module
 */

/** 2^32. */
const TWO_POW_32 = 0x1_0000_0000;

/** Writes a safe integer (possibly negative) as a big-endian int64. */
export function writeInt64(view: DataView, position: number, value: number): void {
  view.setInt32(position, Math.floor(value / TWO_POW_32));
  view.setUint32(position + 4, value >>> 0);
}

/** Reads a big-endian int64 as a number (exact within ±2^53). */
export function readInt64(view: DataView, position: number): number {
  return view.getInt32(position) * TWO_POW_32 + view.getUint32(position + 4);
}
