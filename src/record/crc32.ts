/**
 * CRC-32 (IEEE 802.3, zlib's and `java.util.zip.CRC32`'s) of a byte range,
 * and the record's `bodyCrc` (that value `& 0x7FFFFFFF`, as RocketMQ's
 * `UtilAll.crc32` stores it).
 *
 * Two implementations, picked per call by runtime and size from
 * measurements (`bench/record_bench.ts`, groups "crc32 …"):
 * - {@link crc32Zlib}: `node:zlib`'s native `crc32` (Deno, Bun, Node ≥ 20.15):
 *   fastest from a few hundred bytes up, but each call has a fixed cost (about
 *   50–100 ns on Deno and Bun, 120–300 ns on Node 20), and a range that is not
 *   a whole array needs a `subarray` view first (another 80–100 ns).
 * - {@link crc32Table}: slicing-by-8 in JavaScript, about 1 GB/s, no fixed
 *   cost and no view: it wins for small inputs.
 *
 * The thresholds per runtime are in {@link CRC32_NATIVE_THRESHOLDS}.
 * WebAssembly (hash-wasm) was measured too and loses to one of the two at
 * every size on every runtime; it appears only in the bench.
 *
 * A batch's body CRCs can also be computed in one call
 * ({@link writeBodyCrcs}): the runtime layer may install a native
 * {@link BodyCrcWriter} ({@link installBodyCrcWriter}; on Bun, libdeflate's
 * CRC-32 looped over by a function TinyCC compiles at load), which pays the
 * JavaScript-to-native crossing once per batch instead of once per body.
 * Without one, the same call computes each CRC here. The system zlib
 * through FFI was measured and loses to `node:zlib` at every size on Deno
 * and Bun (its CRC-32 has no SIMD: about 150 ns for 128 B here), and a
 * per-body FFI call to libdeflate wins nothing at 128 B; both appear only
 * in the bench. {@link crc32Implementation} names what is in use.
 *
 * @module
 */

import { crc32 as zlibCrc32 } from "node:zlib";
import { runtimeName } from "../runtime/info.ts";
import { assert } from "../assert.ts";

/** The reflected IEEE polynomial. */
const POLYNOMIAL_REFLECTED = 0xEDB88320;

/** Mask RocketMQ applies to the stored body CRC. */
export const BODY_CRC_MASK = 0x7FFFFFFF;

/** Sizes from which the native CRC wins, for one runtime. */
export interface Crc32NativeThresholds {
  /** Smallest whole array (no view needed) to hand to `node:zlib`. */
  readonly wholeArrayMinBytes: number;
  /** Smallest sub-range (a view must be made) to hand to `node:zlib`. */
  readonly rangeMinBytes: number;
}

/** Where the native CRC overtakes the table, per runtime (measured). */
export const CRC32_NATIVE_THRESHOLDS: Readonly<
  Record<ReturnType<typeof runtimeName>, Crc32NativeThresholds>
> = {
  deno: { wholeArrayMinBytes: 0x40, rangeMinBytes: 0x80 },
  bun: { wholeArrayMinBytes: 0x40, rangeMinBytes: 0x100 },
  // Node 20's zlib.crc32 validates its arguments in JavaScript first: about
  // 190 ns a call, so the table wins up to 192 B (whole) and 384 B (range).
  node: { wholeArrayMinBytes: 0x100, rangeMinBytes: 0x180 },
};

/** Slicing-by-8 tables: 8 × 256 entries, table k at `k * 256`. */
const TABLES: Int32Array = crc32SliceTables(8);

/**
 * The tables of slicing-by-`count` CRC-32: `count` × 256 entries, table k
 * at `k * 256` (table 0 is the classic byte table; table k advances a
 * byte's CRC by k more zero bytes).
 *
 * @example
 * ```ts
 * import { crc32SliceTables } from "./crc32.ts";
 *
 * crc32SliceTables(8)[1]; // 0x77073096
 * ```
 *
 * @param count Tables wanted (at least 1).
 * @returns The tables, one after the other.
 */
export function crc32SliceTables(count: number): Int32Array {
  const tables = new Int32Array(count * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? POLYNOMIAL_REFLECTED ^ (c >>> 1) : c >>> 1;
    tables[n] = c;
  }
  for (let n = 0; n < 256; n++) {
    let c = tables[n]!;
    for (let k = 1; k < count; k++) {
      c = tables[c & 0xFF]! ^ (c >>> 8);
      tables[k * 256 + n] = c;
    }
  }
  return tables;
}

/**
 * CRC-32 of `bytes[start, end)` in JavaScript (slicing-by-8), continuing
 * from `previous` (the CRC of the bytes before, 0 to start).
 *
 * @example
 * ```ts
 * import { crc32Table } from "./crc32.ts";
 *
 * crc32Table(new TextEncoder().encode("123456789"), 0, 9); // 0xCBF43926
 * ```
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @param previous CRC of the preceding bytes, to chain.
 * @returns The CRC as an unsigned 32-bit number.
 */
export function crc32Table(bytes: Uint8Array, start: number, end: number, previous = 0): number {
  const t = TABLES;
  let crc = ~previous;
  let i = start;
  const end8 = end - ((end - start) & 7);
  while (i < end8) {
    crc ^= bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24);
    crc = t[0x700 + (crc & 0xFF)]! ^ t[0x600 + ((crc >>> 8) & 0xFF)]! ^
      t[0x500 + ((crc >>> 16) & 0xFF)]! ^ t[0x400 + (crc >>> 24)]! ^
      t[0x300 + bytes[i + 4]!]! ^ t[0x200 + bytes[i + 5]!]! ^
      t[0x100 + bytes[i + 6]!]! ^ t[bytes[i + 7]!]!;
    i += 8;
  }
  while (i < end) crc = t[(crc ^ bytes[i++]!) & 0xFF]! ^ (crc >>> 8);
  return ~crc >>> 0;
}

/**
 * CRC-32 of `bytes[start, end)` with `node:zlib`'s native `crc32`.
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @param previous CRC of the preceding bytes, to chain.
 * @returns The CRC as an unsigned 32-bit number.
 */
export function crc32Zlib(bytes: Uint8Array, start: number, end: number, previous = 0): number {
  const view = start === 0 && end === bytes.length ? bytes : bytes.subarray(start, end);
  return zlibCrc32(view, previous) >>> 0;
}

const thresholds = CRC32_NATIVE_THRESHOLDS[runtimeName()];
const wholeArrayMinBytes = thresholds.wholeArrayMinBytes;
const rangeMinBytes = thresholds.rangeMinBytes;

function selected(bytes: Uint8Array, start: number, end: number): number {
  const length = end - start;
  if (start === 0 && end === bytes.length) {
    return length >= wholeArrayMinBytes ? zlibCrc32(bytes) >>> 0 : crc32Table(bytes, 0, end);
  }
  return length >= rangeMinBytes
    ? zlibCrc32(bytes.subarray(start, end)) >>> 0
    : crc32Table(bytes, start, end);
}

/**
 * CRC-32 (IEEE) of `bytes[start, end)` with this runtime's fastest
 * implementation.
 *
 * @example
 * ```ts
 * import { crc32 } from "./crc32.ts";
 *
 * crc32(new TextEncoder().encode("123456789")); // 0xCBF43926
 * ```
 *
 * @param bytes The buffer.
 * @param start First byte (default 0).
 * @param end One past the last byte (default `bytes.length`).
 * @returns The CRC as an unsigned 32-bit number.
 */
export function crc32(bytes: Uint8Array, start = 0, end: number = bytes.length): number {
  return selected(bytes, start, end);
}

/**
 * The `bodyCrc` RocketMQ stores for a body in `bytes[start, end)`:
 * CRC-32 `& 0x7FFFFFFF`.
 *
 * @example
 * ```ts
 * import { bodyCrc } from "./crc32.ts";
 *
 * bodyCrc(new Uint8Array([0x5D])); // 1205387972
 * ```
 *
 * @param bytes The buffer.
 * @param start First byte (default 0).
 * @param end One past the last byte (default `bytes.length`).
 * @returns A non-negative int32.
 */
export function bodyCrc(bytes: Uint8Array, start = 0, end: number = bytes.length): number {
  return selected(bytes, start, end) & BODY_CRC_MASK;
}

/**
 * {@link bodyCrc} of a whole array: the choice between the native and the
 * table CRC made from the length alone, with no range to check or view to
 * make. On JavaScriptCore the extra call layer of {@link bodyCrc} is not
 * inlined; the batch encoder calls this once per member.
 *
 * @example
 * ```ts
 * import { wholeBodyCrc } from "./crc32.ts";
 *
 * wholeBodyCrc(new Uint8Array([0x5D])); // 1205387972
 * ```
 *
 * @param bytes The body.
 * @returns A non-negative int32.
 */
export function wholeBodyCrc(bytes: Uint8Array): number {
  const length = bytes.length;
  return (length >= wholeArrayMinBytes ? zlibCrc32(bytes) : crc32Table(bytes, 0, length)) &
    BODY_CRC_MASK;
}

/**
 * A native implementation of {@link writeBodyCrcs}, installed by the
 * runtime layer ({@link installBodyCrcWriter}).
 *
 * @example
 * ```ts
 * import { type BodyCrcWriter, bodyCrc } from "./crc32.ts";
 *
 * // A stand-in with the contract of a native writer (it is the fallback).
 * const writer: BodyCrcWriter = {
 *   name: "example",
 *   write(bytes, ranges, count) {
 *     const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
 *     for (let i = 0; i < count; i++) {
 *       const body = ranges[3 * i]!, length = ranges[3 * i + 1]!, at = ranges[3 * i + 2]!;
 *       if (body < 0 || length < 0 || body + length > bytes.length || at < 0 || at + 4 > bytes.length) return i;
 *       view.setInt32(at, bodyCrc(bytes, body, body + length));
 *     }
 *     return -1;
 *   },
 * };
 * console.log(writer.name);
 * ```
 */
export interface BodyCrcWriter {
  /** What it uses, as {@link crc32Implementation} reports it. */
  readonly name: string;
  /**
   * For each of `count` triples `(bodyPosition, bodyLength, crcPosition)`
   * in `ranges`, stores the {@link bodyCrc} of `bytes[bodyPosition,
   * bodyPosition + bodyLength)` big-endian at `bytes[crcPosition]`.
   *
   * @returns -1, or the index of the first triple not inside `bytes`
   *   (nothing at or after it was written).
   */
  write(bytes: Uint8Array, ranges: Int32Array, count: number): number;
  /**
   * Longest body the writer is faster for than {@link bodyCrc} (absent:
   * every length). Callers give longer bodies to {@link wholeBodyCrc}.
   */
  readonly bodyBytesMax?: number;
}

/** The installed native writer, if any. */
let bodyCrcWriter: BodyCrcWriter | undefined;

/** Name of the per-call choice, reported while no writer is installed. */
const SELECTED_NAME = "node:zlib crc32 + JavaScript slicing-by-8";

/**
 * Installs (or, with `undefined`, removes) the native {@link BodyCrcWriter}
 * that {@link writeBodyCrcs} uses. `createPort()` calls it where a native
 * one loads (Bun with libdeflate); the core never does.
 *
 * @example
 * ```ts
 * import { crc32Implementation, installBodyCrcWriter } from "./crc32.ts";
 *
 * installBodyCrcWriter(undefined);
 * console.log(crc32Implementation()); // "node:zlib crc32 + JavaScript slicing-by-8"
 * ```
 *
 * @param writer The writer, or undefined for the JavaScript path.
 */
export function installBodyCrcWriter(writer: BodyCrcWriter | undefined): void {
  bodyCrcWriter = writer;
}

/**
 * Whether {@link writeBodyCrcs} is native: worth collecting a batch's
 * ranges for one call. Where it is not, computing each body's CRC as it is
 * copied ({@link wholeBodyCrc} of the source array) is faster.
 *
 * @example
 * ```ts
 * import { nativeBodyCrcs } from "./crc32.ts";
 *
 * console.log(nativeBodyCrcs()); // true on Bun with libdeflate after createPort()
 * ```
 *
 * @returns True when a native writer is installed.
 */
export function nativeBodyCrcs(): boolean {
  return bodyCrcWriter !== undefined;
}

/**
 * The longest body worth giving to the installed {@link BodyCrcWriter}
 * (its `bodyBytesMax`): -1 without one, `Infinity` for one that is faster
 * at every length.
 *
 * @example
 * ```ts
 * import { installBodyCrcWriter, nativeBodyCrcBytesMax } from "./crc32.ts";
 *
 * installBodyCrcWriter(undefined);
 * console.log(nativeBodyCrcBytesMax()); // -1
 * ```
 *
 * @returns Bytes, -1 or `Infinity`.
 */
export function nativeBodyCrcBytesMax(): number {
  return bodyCrcWriter === undefined ? -1 : bodyCrcWriter.bodyBytesMax ?? Infinity;
}

/**
 * The CRC-32 implementation in use for record bodies, for diagnostics.
 *
 * @example
 * ```ts
 * import { crc32Implementation } from "./crc32.ts";
 *
 * console.log(crc32Implementation());
 * ```
 *
 * @returns The installed writer's name, or the JavaScript path's.
 */
export function crc32Implementation(): string {
  return bodyCrcWriter?.name ?? SELECTED_NAME;
}

/**
 * Stores the {@link bodyCrc} of many bodies of one buffer, big-endian, in
 * one call: natively where a {@link BodyCrcWriter} is installed, else
 * body by body here.
 *
 * @example
 * ```ts
 * import { bodyCrc, writeBodyCrcs } from "./crc32.ts";
 *
 * const bytes = new Uint8Array(16);
 * bytes.set([1, 2, 3], 8);
 * writeBodyCrcs(bytes, Int32Array.of(8, 3, 0), 1);
 * console.log(new DataView(bytes.buffer).getInt32(0) === bodyCrc(bytes, 8, 11)); // true
 * ```
 *
 * @param bytes The buffer holding the bodies and the CRC fields.
 * @param ranges `count` triples `(bodyPosition, bodyLength, crcPosition)`.
 * @param count Triples to use.
 * @throws {RangeError} When `count` exceeds the triples in `ranges`, or a
 *   triple does not lie inside `bytes` (the triples before it are written).
 */
export function writeBodyCrcs(bytes: Uint8Array, ranges: Int32Array, count: number): void {
  if (!(Number.isInteger(count) && count >= 0 && 3 * count <= ranges.length)) {
    throw new RangeError(
      `Cannot write body CRCs: count is ${count}, ranges holds ${ranges.length / 3} triples`,
    );
  }
  const failed = bodyCrcWriter === undefined
    ? writeBodyCrcsHere(bytes, ranges, count)
    : bodyCrcWriter.write(bytes, ranges, count);
  if (failed >= 0) {
    throw new RangeError(
      `Cannot write body CRC ${failed}: body [${ranges[3 * failed]}, +${
        ranges[3 * failed + 1]
      }) or CRC at ${ranges[3 * failed + 2]} is outside the ${bytes.length}-byte buffer`,
    );
  }
}

function writeBodyCrcsHere(bytes: Uint8Array, ranges: Int32Array, count: number): number {
  const length = bytes.length;
  for (let i = 0; i < count; i++) {
    const body = ranges[3 * i]!;
    const bodyBytes = ranges[3 * i + 1]!;
    const at = ranges[3 * i + 2]!;
    if (body < 0 || bodyBytes < 0 || body + bodyBytes > length || at < 0 || at + 4 > length) {
      return i;
    }
    const crc = selected(bytes, body, body + bodyBytes) & BODY_CRC_MASK;
    bytes[at] = crc >>> 24;
    bytes[at + 1] = crc >>> 16;
    bytes[at + 2] = crc >>> 8;
    bytes[at + 3] = crc;
  }
  return -1;
}

assert(
  crc32Table(new Uint8Array([0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39]), 0, 9) ===
    0xCBF43926,
  "slicing-by-8 CRC-32 of '123456789' is the IEEE check value 0xCBF43926",
);
