/**
 * The offsetMsgId: uppercase hex of the store host (IP 4 or 16 bytes +
 * int32 port) and the record's physical offset (int64), 32 or 56
 * characters. It locates a record; it is not the client's UNIQ_KEY.
 *
 * @module
 */

import { readInt64, writeInt64 } from "./_bytes.ts";
import { HOST_V4_SIZE_BYTES, HOST_V6_SIZE_BYTES } from "./constants.ts";
import { formatHostField } from "./host_address.ts";

const HEX_PAIRS: readonly string[] = Array.from(
  { length: 256 },
  (_, byte) => byte.toString(16).toUpperCase().padStart(2, "0"),
);

/** Length of an offsetMsgId with an IPv4 store host. */
export const OFFSET_MSG_ID_V4_LENGTH: number = (HOST_V4_SIZE_BYTES + 8) * 2;
/** Length of an offsetMsgId with an IPv6 store host. */
export const OFFSET_MSG_ID_V6_LENGTH: number = (HOST_V6_SIZE_BYTES + 8) * 2;

/**
 * Uppercase hex of `bytes[start, end)`.
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @returns Two characters per byte.
 */
export function hexOf(bytes: Uint8Array, start = 0, end: number = bytes.length): string {
  let text = "";
  for (let i = start; i < end; i++) text += HEX_PAIRS[bytes[i]!]!;
  return text;
}

const offsetScratch = new Uint8Array(8);

/**
 * Builds the offsetMsgId of a record from its store-host field (as stored)
 * and its physical offset.
 *
 * @example
 * ```ts
 * import { offsetMsgIdOf } from "./msg_id.ts";
 *
 * const storeHost = new Uint8Array([0x7F, 0, 0, 1, 0, 0, 0x2A, 0x9F]); // 127.0.0.1:10911
 * offsetMsgIdOf(storeHost, 0, storeHost.length, 176); // "7F00000100002A9F00000000000000B0"
 * ```
 *
 * @param bytes The buffer holding the store-host field.
 * @param position First byte of the field.
 * @param length 8 (IPv4) or 20 (IPv6).
 * @param physicalOffset The record's commit-log offset.
 * @returns 32 or 56 uppercase hex characters.
 */
export function offsetMsgIdOf(
  bytes: Uint8Array,
  position: number,
  length: number,
  physicalOffset: number,
): string {
  writeInt64(offsetScratch, 0, physicalOffset);
  return hexOf(bytes, position, position + length) + hexOf(offsetScratch);
}

/** The parts of an offsetMsgId. */
export interface ParsedOffsetMsgId {
  /** The store host as `"ip:port"` (IPv6 in brackets). */
  storeHost: string;
  /** The address: 4 or 16 bytes. */
  ip: Uint8Array;
  /** The store host's port. */
  port: number;
  /** The record's commit-log offset. */
  physicalOffset: number;
}

/**
 * Parses an offsetMsgId back into store host and physical offset.
 *
 * @example
 * ```ts
 * import { parseOffsetMsgId } from "./msg_id.ts";
 *
 * parseOffsetMsgId("7F00000100002A9F00000000000000B0").physicalOffset; // 176
 * ```
 *
 * @param id 32 or 56 hex characters (either case).
 * @returns The parts.
 * @throws {RangeError} When `id` is not an offsetMsgId.
 */
export function parseOffsetMsgId(id: string): ParsedOffsetMsgId {
  if (typeof id !== "string") throw new TypeError(`offsetMsgId must be a string, not ${typeof id}`);
  if (
    (id.length !== OFFSET_MSG_ID_V4_LENGTH && id.length !== OFFSET_MSG_ID_V6_LENGTH) ||
    !/^[0-9a-fA-F]*$/.test(id)
  ) {
    throw new RangeError(
      `Invalid offsetMsgId "${id}": expected ${OFFSET_MSG_ID_V4_LENGTH} or ` +
        `${OFFSET_MSG_ID_V6_LENGTH} hex characters`,
    );
  }
  const bytes = new Uint8Array(id.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(id.slice(i * 2, i * 2 + 2), 16);
  const hostLength = bytes.length - 8;
  const physicalOffset = readInt64(bytes, hostLength);
  if (!Number.isSafeInteger(physicalOffset) || physicalOffset < 0) {
    throw new RangeError(`Invalid offsetMsgId "${id}": physical offset is out of range`);
  }
  return {
    storeHost: formatHostField(bytes, 0, hostLength),
    ip: bytes.slice(0, hostLength - 4),
    port: ((bytes[hostLength - 4]! << 24) | (bytes[hostLength - 3]! << 16) |
      (bytes[hostLength - 2]! << 8) | bytes[hostLength - 1]!) >>> 0,
    physicalOffset,
  };
}
