/**
 * The strings of a decoded record that repeat from record to record (host
 * text, host hex, topic) behind one-entry caches, and the hex of an offset
 * for the offsetMsgId. Shared by the eager decoder and {@link LazyMessage}:
 * consecutive records mostly share their hosts and topic, and comparing a
 * few bytes costs less than making the string again.
 *
 * @module
 */

import { HOST_V6_SIZE_BYTES } from "./constants.ts";
import { formatHostField } from "./host_address.ts";
import { hexOf } from "./msg_id.ts";
import { latin1Text } from "./_text.ts";

/**
 * One-entry cache of the text of a host field: consecutive records mostly
 * share their born and store hosts.
 */
export class HostTextCache {
  /** The cached field's bytes (IP + port). */
  readonly #field = new Uint8Array(HOST_V6_SIZE_BYTES);
  /** Length of the cached field: 0 (empty), 8 or 20. */
  #length = 0;
  /** `"ip:port"` of the cached field. */
  text = "";
  /** Uppercase hex of the cached field (the offsetMsgId prefix). */
  hex = "";

  /** Makes `text` and `hex` those of the field at `bytes[position]`. */
  load(bytes: Uint8Array, position: number, length: number): void {
    const field = this.#field;
    if (length === this.#length) {
      let i = 0;
      while (i < length && field[i] === bytes[position + i]) i++;
      if (i === length) return;
    }
    for (let i = 0; i < length; i++) field[i] = bytes[position + i]!;
    this.#length = length;
    this.text = formatHostField(bytes, position, length);
    this.hex = hexOf(bytes, position, position + length);
  }
}

/** The born hosts' cache. */
export const bornHosts: HostTextCache = new HostTextCache();
/** The store hosts' cache. */
export const storeHosts: HostTextCache = new HostTextCache();

// One-entry cache: consecutive records mostly share a topic.
let cachedTopic = "";

/**
 * The topic at `bytes[position, position + length)`, which the checker
 * found to be ASCII.
 */
export function topicOf(bytes: Uint8Array, position: number, length: number): string {
  const cached = cachedTopic;
  if (cached.length === length) {
    let i = 0;
    while (i < length && cached.charCodeAt(i) === bytes[position + i]) i++;
    if (i === length) return cached;
  }
  cachedTopic = latin1Text(bytes, position, position + length);
  return cachedTopic;
}

const TWO_POW_32 = 0x1_0000_0000;

/** Uppercase hex of each byte value. */
const HEX: readonly string[] = Array.from(
  { length: 256 },
  (_, byte) => byte.toString(16).toUpperCase().padStart(2, "0"),
);

/** Uppercase hex of a uint32, 8 characters (table lookups: no toString). */
function hex8(value: number): string {
  return HEX[value >>> 24]! + HEX[(value >>> 16) & 0xFF]! + HEX[(value >>> 8) & 0xFF]! +
    HEX[value & 0xFF]!;
}

/** Uppercase hex of a non-negative offset as an int64 (16 characters). */
export function offsetHex(offset: number): string {
  const high = Math.floor(offset / TWO_POW_32);
  return hex8(high >>> 0) + hex8((offset - high * TWO_POW_32) >>> 0);
}
