/**
 * Big-endian integers in record bytes.
 *
 * The read paths (checker, decoder) go through a `DataView` cached per
 * buffer ({@link dataViewOf}): its accessors beat byte-by-byte access on V8
 * and match it on JavaScriptCore. The encoder and `patchRecord` keep views
 * of their own, so a read between two puts does not evict the segment's.
 * The byte-by-byte helpers serve small one-off buffers (offsetMsgId, host
 * fields). 64-bit fields travel as two 32-bit halves, never as a `BigInt`:
 * offsets and timestamps are JS numbers, exact up to 2^53.
 *
 * Callers check bounds; these helpers do not.
 *
 * @module
 */

const TWO_POW_32 = 0x1_0000_0000;
/**
 * 2^-32: multiplying by it is exact (a power of two) and much cheaper than
 * dividing by 2^32.
 */
const TWO_POW_MINUS_32 = 1 / TWO_POW_32;

/** Writes `value` (int32 or uint32) big-endian at `position`. */
export function writeInt32(bytes: Uint8Array, position: number, value: number): void {
  bytes[position] = value >>> 24;
  bytes[position + 1] = value >>> 16;
  bytes[position + 2] = value >>> 8;
  bytes[position + 3] = value;
}

/** Reads a big-endian int32 at `position`. */
export function readInt32(bytes: Uint8Array, position: number): number {
  return (bytes[position]! << 24) | (bytes[position + 1]! << 16) |
    (bytes[position + 2]! << 8) | bytes[position + 3]!;
}

/** Reads a big-endian uint32 at `position`. */
export function readUint32(bytes: Uint8Array, position: number): number {
  return readInt32(bytes, position) >>> 0;
}

/**
 * Writes a safe integer as a big-endian int64 (two's complement for negative
 * values) at `position`, as two 32-bit halves.
 */
export function writeInt64(bytes: Uint8Array, position: number, value: number): void {
  const high = Math.floor(value * TWO_POW_MINUS_32);
  writeInt32(bytes, position, high);
  writeInt32(bytes, position + 4, value - high * TWO_POW_32);
}

/**
 * Reads a big-endian int64 at `position` as a number (exact within ±2^53;
 * larger magnitudes are rounded).
 */
export function readInt64(bytes: Uint8Array, position: number): number {
  return readInt32(bytes, position) * TWO_POW_32 + readUint32(bytes, position + 4);
}

/**
 * A `DataView` over exactly the bytes of the array asked about last: code
 * that works on one buffer for many records makes the view once. The
 * cached length is compared rather than `DataView#byteLength` (a getter
 * call on V8; a detached array's length reads 0, so it is never reused).
 */
export class DataViewCache {
  #bytes: Uint8Array = new Uint8Array(0);
  #view: DataView = new DataView(this.#bytes.buffer);
  #length = 0;

  /**
   * The view of `bytes`, made when it is not the array asked about last.
   * The caller must not pass a detached buffer (creating a view over one
   * throws).
   */
  of(bytes: Uint8Array): DataView {
    if (bytes !== this.#bytes || bytes.length !== this.#length) {
      this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
      this.#bytes = bytes;
      this.#length = bytes.length;
    }
    return this.#view;
  }
}

const sharedViews = new DataViewCache();

/**
 * A `DataView` over exactly the bytes of `bytes`, from one cache shared by
 * the readers: scans work on one buffer for many records, and `DataView`
 * accessors beat byte-by-byte access on V8. The caller must not pass a
 * detached buffer (check `bytes.length` first: creating a view over one
 * throws).
 *
 * @param bytes The array.
 * @returns Its view.
 */
export function dataViewOf(bytes: Uint8Array): DataView {
  return sharedViews.of(bytes);
}

/** Reads a big-endian int64 through a `DataView` (see {@link readInt64}). */
export function getInt64(view: DataView, position: number): number {
  return view.getInt32(position) * TWO_POW_32 + view.getUint32(position + 4);
}

/** Writes a safe integer as a big-endian int64 through a `DataView`. */
export function setInt64(view: DataView, position: number, value: number): void {
  const high = Math.floor(value * TWO_POW_MINUS_32);
  view.setInt32(position, high);
  view.setUint32(position + 4, value - high * TWO_POW_32);
}
