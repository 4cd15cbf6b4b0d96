/**
 * A {@link DecodedMessage} that decodes on first access: the read path
 * (getMessages, getMessage, subscribe) makes one per message it serves,
 * and most consumers touch a few fields of each, so the strings, the
 * properties and the views are made only when asked for.
 *
 * ```
 * bytes (owned by the message, or shared by one page of messages)
 *   ... | totalSize ... sysFlag ... bornHost storeTimestamp storeHost ... | body | topic | properties | ...
 *         └─ numbers: read in the constructor (plain own properties)      └─ getters, each computed once
 * ```
 *
 * The numeric fields are plain own properties, read when the message is
 * made. `body`, `propertiesRaw`, `topic`, `bornHost`, `storeHost`,
 * `pairs`, `properties`, `tagsCode` and `msgId` are accessors on the
 * prototype, computed on first access and then kept; each also has a
 * setter, so code that assigned them on the old plain objects still works.
 * Consequences to know: spreading (`{ ...message }`), `Object.keys` and
 * `structuredClone` see only the numeric fields; `JSON.stringify` goes
 * through {@link LazyMessage.toJSON}, which lists every field.
 *
 * @module
 */

import { dataViewOf, getInt64 } from "./_bytes.ts";
import {
  BODY_CRC_POSITION,
  BODY_POSITION_V4,
  BORN_HOST_POSITION,
  BORN_TIMESTAMP_POSITION,
  FLAG_POSITION,
  MAGIC_POSITION,
  MESSAGE_MAGIC_CODE,
  PHYSICAL_OFFSET_POSITION,
  PROPERTIES_LENGTH_SIZE_BYTES,
  PROPERTY_TAGS,
  QUEUE_ID_POSITION,
  QUEUE_OFFSET_POSITION,
  SYS_FLAG_POSITION,
  TOPIC_LENGTH_SIZE_BYTES,
  TOTAL_SIZE_POSITION,
} from "./constants.ts";
import { bornHostSizeBytes, hostsExtraBytes, storeHostSizeBytes } from "./_hosts.ts";
import { tagsCodeOf } from "./hash_code.ts";
import type { DecodedMessage } from "./message.ts";
import { parsePropertiesMap, parsePropertyPairs, propertiesMapOf } from "./properties.ts";
import { bornHosts, offsetHex, storeHosts, topicOf } from "./_field_text.ts";
import { assert } from "../assert.ts";

/** Bytes from the store timestamp to the store host: the timestamp itself. */
const STORE_TIMESTAMP_SIZE_BYTES = 0x08;
/** Bytes from the store host's end to preparedTransactionOffset: reconsumeTimes. */
const RECONSUME_TIMES_SIZE_BYTES = 0x04;

/**
 * A message decoded on demand from the bytes of its record (see the module
 * doc). The caller hands over bytes it will not change or release: a copy,
 * never a view into a segment mapping, which would dangle once the segment
 * is released.
 *
 * @example
 * ```ts
 * import { LazyMessage } from "./lazy_message.ts";
 * import { encodeMessage } from "./encoder.ts";
 *
 * const record = encodeMessage({
 *   topic: "Orders",
 *   queueId: 1,
 *   body: new TextEncoder().encode("hi"),
 *   properties: { TAGS: "created" },
 * });
 * const message = new LazyMessage(record, 0);
 * console.log(message.queueId, message.topic, message.properties.get("TAGS")); // 1 Orders created
 * ```
 */
export class LazyMessage implements DecodedMessage {
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
  /** Store timestamp, ms. */
  storeTimestamp: number;
  /** Reconsume times. */
  reconsumeTimes: number;
  /** Prepared transaction offset. */
  preparedTransactionOffset: number;

  /** The bytes holding the record (owned, never a mapping). */
  #bytes: Uint8Array;
  /** Position of the record in {@link #bytes}. */
  #position: number;
  /** Position of the first body byte. */
  #bodyPosition: number;
  /** Body length in bytes. */
  #bodyLength: number;
  // Computed on first access (or set by the user); undefined until then.
  #body: Uint8Array | undefined = undefined;
  #propertiesRaw: Uint8Array | undefined = undefined;
  #topic: string | undefined = undefined;
  #bornHost: string | undefined = undefined;
  #storeHost: string | undefined = undefined;
  #pairs: [string, string][] | undefined = undefined;
  #properties: Map<string, string> | undefined = undefined;
  #tagsCode: number | undefined = undefined;
  #msgId: string | undefined = undefined;

  /**
   * Reads the header of the record at `bytes[position]`.
   *
   * @param bytes Bytes the message keeps: they must hold a MESSAGE record
   * that a {@link RecordChecker} found valid at `position`, and must not
   * change afterwards.
   * @param position Where the record starts.
   * @throws {AssertionError} When the bytes there do not start a MESSAGE
   * record that fits (the caller skipped the check: a bug).
   */
  constructor(bytes: Uint8Array, position: number) {
    const d = dataViewOf(bytes);
    const size = d.getInt32(position + TOTAL_SIZE_POSITION);
    assert(
      d.getInt32(position + MAGIC_POSITION) === MESSAGE_MAGIC_CODE && size > 0 &&
        position + size <= bytes.length,
      "a LazyMessage is made from a checked MESSAGE record",
    );
    const sysFlag = d.getInt32(position + SYS_FLAG_POSITION);
    const storeTimestampPosition = position + BORN_HOST_POSITION + bornHostSizeBytes(sysFlag);
    const reconsumePosition = storeTimestampPosition + STORE_TIMESTAMP_SIZE_BYTES +
      storeHostSizeBytes(sysFlag);
    const bodyPosition = position + BODY_POSITION_V4 + hostsExtraBytes(sysFlag);
    this.storeSize = size;
    this.bodyCRC = d.getInt32(position + BODY_CRC_POSITION);
    this.queueId = d.getInt32(position + QUEUE_ID_POSITION);
    this.flag = d.getInt32(position + FLAG_POSITION);
    this.queueOffset = getInt64(d, position + QUEUE_OFFSET_POSITION);
    this.physicalOffset = getInt64(d, position + PHYSICAL_OFFSET_POSITION);
    this.sysFlag = sysFlag;
    this.bornTimestamp = getInt64(d, position + BORN_TIMESTAMP_POSITION);
    this.storeTimestamp = getInt64(d, storeTimestampPosition);
    this.reconsumeTimes = d.getInt32(reconsumePosition);
    this.preparedTransactionOffset = getInt64(d, reconsumePosition + RECONSUME_TIMES_SIZE_BYTES);
    this.#bytes = bytes;
    this.#position = position;
    this.#bodyPosition = bodyPosition;
    this.#bodyLength = d.getInt32(bodyPosition - 4);
  }

  /** The body: a view into the message's bytes. */
  get body(): Uint8Array {
    return this.#body ??= this.#bytes.subarray(
      this.#bodyPosition,
      this.#bodyPosition + this.#bodyLength,
    );
  }
  set body(value: Uint8Array) {
    this.#body = value;
  }

  /** Position of the topic's first byte. */
  #topicPosition(): number {
    return this.#bodyPosition + this.#bodyLength + TOPIC_LENGTH_SIZE_BYTES;
  }

  /** Position of the properties' first byte (they end where the record does). */
  #propertiesPosition(): number {
    const topicPosition = this.#topicPosition();
    return topicPosition + this.#bytes[topicPosition - 1]! + PROPERTIES_LENGTH_SIZE_BYTES;
  }

  /** Topic. */
  get topic(): string {
    if (this.#topic === undefined) {
      const topicPosition = this.#topicPosition();
      this.#topic = topicOf(this.#bytes, topicPosition, this.#bytes[topicPosition - 1]!);
    }
    return this.#topic;
  }
  set topic(value: string) {
    this.#topic = value;
  }

  /** The stored properties bytes: a view into the message's bytes. */
  get propertiesRaw(): Uint8Array {
    return this.#propertiesRaw ??= this.#bytes.subarray(
      this.#propertiesPosition(),
      this.#position + this.storeSize,
    );
  }
  set propertiesRaw(value: Uint8Array) {
    this.#propertiesRaw = value;
  }

  /** Raw `[name, value]` pairs in stored order, empty values included. */
  get pairs(): [string, string][] {
    return this.#pairs ??= parsePropertyPairs(
      this.#bytes,
      this.#propertiesPosition(),
      this.#position + this.storeSize,
    );
  }
  set pairs(value: [string, string][]) {
    this.#pairs = value;
  }

  /** Decoded properties: empty values dropped, as RocketMQ's parser does. */
  get properties(): Map<string, string> {
    // Straight from the bytes unless the pairs were made (or set) already.
    return this.#properties ??= this.#pairs !== undefined
      ? propertiesMapOf(this.#pairs)
      : parsePropertiesMap(
        this.#bytes,
        this.#propertiesPosition(),
        this.#position + this.storeSize,
      );
  }
  set properties(value: Map<string, string>) {
    this.#properties = value;
  }

  /** Java hashCode of TAGS as an int64 number; 0 without tags. */
  get tagsCode(): number {
    return this.#tagsCode ??= tagsCodeOf(this.properties.get(PROPERTY_TAGS));
  }
  set tagsCode(value: number) {
    this.#tagsCode = value;
  }

  /** Born host, `"ip:port"` (IPv6 in brackets, Java notation). */
  get bornHost(): string {
    if (this.#bornHost === undefined) {
      bornHosts.load(
        this.#bytes,
        this.#position + BORN_HOST_POSITION,
        bornHostSizeBytes(this.sysFlag),
      );
      this.#bornHost = bornHosts.text;
    }
    return this.#bornHost;
  }
  set bornHost(value: string) {
    this.#bornHost = value;
  }

  /** Loads the store host field into the store hosts' cache. */
  #loadStoreHost(): void {
    const flags = this.sysFlag;
    const position = this.#position + BORN_HOST_POSITION + bornHostSizeBytes(flags) +
      STORE_TIMESTAMP_SIZE_BYTES;
    storeHosts.load(this.#bytes, position, storeHostSizeBytes(flags));
  }

  /** Store host, `"ip:port"`. */
  get storeHost(): string {
    if (this.#storeHost === undefined) {
      this.#loadStoreHost();
      this.#storeHost = storeHosts.text;
    }
    return this.#storeHost;
  }
  set storeHost(value: string) {
    this.#storeHost = value;
  }

  /** The offsetMsgId (store host + physical offset, uppercase hex). */
  get msgId(): string {
    if (this.#msgId === undefined) {
      this.#loadStoreHost();
      this.#msgId = storeHosts.hex + offsetHex(this.physicalOffset);
    }
    return this.#msgId;
  }
  set msgId(value: string) {
    this.#msgId = value;
  }

  /**
   * Every field as a plain object (what `JSON.stringify` serialises, and
   * the shape of an eagerly decoded message).
   *
   * @returns A plain {@link DecodedMessage}.
   */
  toJSON(): DecodedMessage {
    return {
      storeSize: this.storeSize,
      bodyCRC: this.bodyCRC,
      queueId: this.queueId,
      flag: this.flag,
      queueOffset: this.queueOffset,
      physicalOffset: this.physicalOffset,
      sysFlag: this.sysFlag,
      bornTimestamp: this.bornTimestamp,
      bornHost: this.bornHost,
      storeTimestamp: this.storeTimestamp,
      storeHost: this.storeHost,
      reconsumeTimes: this.reconsumeTimes,
      preparedTransactionOffset: this.preparedTransactionOffset,
      body: this.body,
      topic: this.topic,
      propertiesRaw: this.propertiesRaw,
      pairs: this.pairs,
      properties: this.properties,
      tagsCode: this.tagsCode,
      msgId: this.msgId,
    };
  }
}
