/**
 * Strings out of record bytes. `Buffer#toString(encoding, start, end)`
 * decodes a range natively without the `subarray` view `TextDecoder` needs,
 * and is the fastest way on Deno, Bun and Node to turn a few dozen bytes
 * into a string (a char loop is several times slower). The `Buffer` over the
 * caller's bytes is made once per buffer: scans read one segment at a time.
 *
 * @module
 */

import { Buffer } from "node:buffer";

let lastBytes: Uint8Array | undefined;
let lastBuffer: Buffer = Buffer.alloc(0);

function bufferOf(bytes: Uint8Array): Buffer {
  if (bytes !== lastBytes || lastBuffer.length !== bytes.length) {
    lastBuffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
    lastBytes = bytes;
  }
  return lastBuffer;
}

/**
 * Decodes `bytes[start, end)` as UTF-8; malformed sequences become U+FFFD,
 * as with Java's decoder.
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @returns The string.
 */
export function utf8Text(bytes: Uint8Array, start: number, end: number): string {
  return start === end ? "" : bufferOf(bytes).toString("utf8", start, end);
}

/**
 * Decodes `bytes[start, end)` as Latin-1 (one char per byte; for ASCII that
 * was checked already).
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @returns The string.
 */
export function latin1Text(bytes: Uint8Array, start: number, end: number): string {
  return start === end ? "" : bufferOf(bytes).toString("latin1", start, end);
}
