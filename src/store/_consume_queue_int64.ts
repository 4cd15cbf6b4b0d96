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

/** Writes an int32 big-endian at `bytes[at]` (byte stores: no DataView, no native call). */
export function putInt32(bytes: Uint8Array, at: number, value: number): void {
  bytes[at] = value >>> 24;
  bytes[at + 1] = value >>> 16;
  bytes[at + 2] = value >>> 8;
  bytes[at + 3] = value;
}

/** Writes a safe integer (possibly negative) as a big-endian int64 at `bytes[at]`. */
export function putInt64(bytes: Uint8Array, at: number, value: number): void {
  putInt32(bytes, at, Math.floor(value / TWO_POW_32));
  putInt32(bytes, at + 4, value >>> 0);
}
