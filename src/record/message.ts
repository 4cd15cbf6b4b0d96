/**
 * The two shapes of a message: what a caller puts ({@link MessageInput}) and
 * what a record decodes to ({@link DecodedMessage}).
 *
 * @module
 */

import type { PropertiesInput } from "./properties.ts";

/**
 * A message to store (SPEC §10). The store assigns queueOffset,
 * physicalOffset and storeTimestamp when it appends.
 *
 * @example
 * ```ts
 * import type { MessageInput } from "./message.ts";
 *
 * const message: MessageInput = {
 *   topic: "Orders",
 *   queueId: 0,
 *   body: new TextEncoder().encode(JSON.stringify({ id: 1 })),
 *   properties: { TAGS: "created", KEYS: "order-1" },
 * };
 * console.log(message.body.length); // 8
 * ```
 */
export interface MessageInput {
  /** Topic: `^[%|a-zA-Z0-9_-]+$`, 1–127 characters. */
  topic: string;
  /** Queue id: a non-negative int32. */
  queueId: number;
  /** Body bytes, stored and CRC'd as given (compressed bodies too). */
  body: Uint8Array;
  /**
   * Properties, written in this order (a plain object lists integer-like
   * keys first). Names and values must not contain `0x01`/`0x02`.
   */
  properties?: PropertiesInput;
  /** User flag, any int32. @default {0} */
  flag?: number;
  /**
   * System flag (int32). Bits 0x10/0x20 are set from the hosts whatever is
   * given here.
   * @default {0}
   */
  sysFlag?: number;
  /** Born timestamp in ms. @default {the encoder's clock} */
  bornTimestamp?: number;
  /** Producer address, `"ip:port"` or `"[ipv6]:port"`. @default {the encoder's bornHost} */
  bornHost?: string;
  /** Store address, `"ip:port"` or `"[ipv6]:port"`. @default {the encoder's storeHost} */
  storeHost?: string;
  /** Times the message was re-delivered, an int32. @default {0} */
  reconsumeTimes?: number;
  /** Offset of the PREPARED record a COMMIT/ROLLBACK refers to. @default {0} */
  preparedTransactionOffset?: number;
}

/** Every field of a MESSAGE record (SPEC §3), decoded. */
export interface DecodedMessage {
  /** The whole record's size in bytes (`totalSize`). */
  storeSize: number;
  /** `bodyCRC` as stored (CRC-32 & 0x7FFFFFFF). */
  bodyCRC: number;
  /** Queue id. */
  queueId: number;
  /** User flag. */
  flag: number;
  /** Queue offset (0 for PREPARED/ROLLBACK). */
  queueOffset: number;
  /** The record's own commit-log offset (the field). */
  physicalOffset: number;
  /** System flag. */
  sysFlag: number;
  /** Born timestamp, ms. */
  bornTimestamp: number;
  /** Born host, `"ip:port"` (IPv6 in brackets, Java notation). */
  bornHost: string;
  /** Store timestamp, ms. */
  storeTimestamp: number;
  /** Store host, `"ip:port"`. */
  storeHost: string;
  /** Reconsume times. */
  reconsumeTimes: number;
  /** Prepared transaction offset. */
  preparedTransactionOffset: number;
  /** The body: a view into the decoded buffer (copy it to keep it). */
  body: Uint8Array;
  /** Topic. */
  topic: string;
  /** The stored properties bytes: a view into the decoded buffer. */
  propertiesRaw: Uint8Array;
  /** Raw `[name, value]` pairs in stored order, empty values included. */
  pairs: [string, string][];
  /** Decoded properties: empty values dropped, as RocketMQ's parser does. */
  properties: Map<string, string>;
  /** Java hashCode of TAGS as an int64 number; 0 without tags. */
  tagsCode: number;
  /** The offsetMsgId (store host + physical offset, uppercase hex). */
  msgId: string;
}
