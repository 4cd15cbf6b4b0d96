/**
 * The dispatcher's lean decode of a MESSAGE record: the few fields a
 * consume-queue unit and the index need, read straight from the record
 * bytes into one reused object (RocketMQ's `DispatchRequest`, without the
 * message).
 *
 * ```
 * record bytes ─► size, queueId, sysFlag, queueOffset, physicalOffset, storeTimestamp
 *              ─► topic            (one string per distinct topic, cached)
 *              ─► properties scan  (once, no strings): TAGS, KEYS, UNIQ_KEY, DELAY
 *                   ├─ tagsCode    Java hashCode over the TAGS bytes (or the delay rule)
 *                   └─ keyHashes   Java hashCode of `topic#key`, continued from the
 *                                  topic's cached `topic#` hash over the key bytes
 * ```
 *
 * Java's `String.hashCode` is `h = 31*h + c` over UTF-16 code units, so the
 * hash of `prefix + key` is the prefix's hash carried on over the key's
 * units: no `topic#key` string is built. Over ASCII bytes a byte is a code
 * unit; a value with any other byte is decoded as UTF-8 first (as the
 * property parser would) and hashed over its code units.
 *
 * It accepts exactly the records `RecordChecker` (without CRC check)
 * classifies as valid messages, with the cheap structural checks; for
 * anything else it returns false and the caller asks the checker why.
 *
 * @module
 */

import { getInt64 } from "./_bytes.ts";
import { latin1Text, utf8Text } from "./_text.ts";
import {
  BODY_POSITION_V4,
  BORN_HOST_POSITION,
  DELAY_LEVELS_DEFAULT_MS,
  HOST_V4_SIZE_BYTES,
  HOST_V6_SIZE_BYTES,
  MAGIC_POSITION,
  MESSAGE_MAGIC_CODE,
  NAME_VALUE_SEPARATOR,
  PHYSICAL_OFFSET_POSITION,
  PROPERTY_DELAY,
  PROPERTY_KEYS,
  PROPERTY_SEPARATOR,
  PROPERTY_TAGS,
  PROPERTY_UNIQ_KEY,
  QUEUE_ID_POSITION,
  QUEUE_OFFSET_POSITION,
  RECORD_FIXED_SIZE_BYTES,
  RECORD_SIZE_MIN_BYTES,
  SCHEDULE_TOPIC,
  SYS_FLAG_BORN_HOST_V6,
  SYS_FLAG_POSITION,
  SYS_FLAG_STORE_HOST_V6,
  SYS_FLAG_TRANSACTION_MASK,
  TOPIC_LENGTH_MAX_BYTES,
  TOTAL_SIZE_POSITION,
  TRANSACTION_ROLLBACK_TYPE,
} from "./constants.ts";
import { scheduleTagsCode } from "./dispatch.ts";
import { TOPIC_PATTERN } from "./validate.ts";

/** The byte that separates KEYS tokens. */
const KEYS_SEPARATOR = 0x20;
/** The byte between topic and key in an index key (`topic#key`). */
const INDEX_KEY_SEPARATOR = 0x23;
/** The first byte that is not ASCII. */
const NON_ASCII_MIN = 0x80;
/** Distinct topics cached at most; the cache starts over when full. */
const TOPIC_CACHE_ENTRIES_MAX = 0x400;
/** Initial room of {@link DispatchView.keyHashes}; it doubles as needed. */
const KEY_HASHES_INITIAL = 0x10;

/** A cached topic: its string and the Java hash of `topic#`. */
interface TopicEntry {
  readonly topic: string;
  readonly prefixHash: number;
}

/** Whether `bytes[start, start + name.length)` spells `name` (ASCII). */
function nameIs(bytes: Uint8Array, start: number, length: number, name: string): boolean {
  if (length !== name.length) return false;
  for (let i = 0; i < length; i++) {
    if (bytes[start + i] !== name.charCodeAt(i)) return false;
  }
  return true;
}

/** Java's hash carried on from `hash` over the code units of `text`. */
function continueHash(hash: number, text: string): number {
  for (let i = 0; i < text.length; i++) hash = (Math.imul(hash, 31) + text.charCodeAt(i)) | 0;
  return hash;
}

/**
 * Java's hash carried on from `hash` over the UTF-8 text of
 * `bytes[start, end)`: byte by byte while ASCII, else over the decoded
 * string.
 */
function continueHashBytes(hash: number, bytes: Uint8Array, start: number, end: number): number {
  let h = hash;
  for (let i = start; i < end; i++) {
    const b = bytes[i]!;
    if (b >= NON_ASCII_MIN) return continueHash(hash, utf8Text(bytes, start, end));
    h = (Math.imul(h, 31) + b) | 0;
  }
  return h;
}

/** Options of {@link DispatchView}. */
export interface DispatchViewOptions {
  /**
   * Delay of each level, ms (the schedule topic's tagsCode).
   *
   * @default {DELAY_LEVELS_DEFAULT_MS}
   */
  delayLevelsMs?: readonly number[];
}

/**
 * What the dispatcher needs of one MESSAGE record, filled by
 * {@link DispatchView.load} and overwritten by the next call: a scan
 * allocates nothing but a string per new topic (and, rarely, a larger key
 * buffer or the decoded text of a non-ASCII value).
 *
 * @example
 * ```ts
 * import { DispatchView } from "./dispatch_view.ts";
 * import { encodeMessage } from "./encoder.ts";
 * import { javaHashCode } from "./hash_code.ts";
 *
 * const record = encodeMessage(
 *   { topic: "Orders", queueId: 1, body: new Uint8Array(1), properties: { TAGS: "new", KEYS: "a b" } },
 *   { physicalOffset: 0, queueOffset: 7, storeTimestamp: 1795954493785 },
 * );
 * const view = new DispatchView();
 * view.load(record, 0, 0, true); // true
 * view.topic; // "Orders"
 * view.tagsCode === javaHashCode("new"); // true
 * view.keyHashes[1] === javaHashCode("Orders#b"); // true (keyCount is 2)
 * ```
 */
export class DispatchView {
  /** totalSize. */
  size = 0;
  /** queueId field. */
  queueId = 0;
  /** sysFlag field. */
  sysFlag = 0;
  /** queueOffset field. */
  queueOffset = 0;
  /** physicalOffset field (the offset the record was found at). */
  physicalOffset = 0;
  /** storeTimestamp field, ms. */
  storeTimestamp = 0;
  /** The topic (the same string for every record of one topic). */
  topic = "";
  /** The consume-queue tagsCode (`dispatchTagsCode`). */
  tagsCode = 0;
  /**
   * `javaHashCode(topic + "#" + key)` of each index key, in
   * `indexKeysOf` order (UNIQ_KEY, then each KEYS token); the first
   * {@link keyCount} are this record's. Not filled unless asked.
   */
  keyHashes: Int32Array = new Int32Array(KEY_HASHES_INITIAL);
  /** How many of {@link keyHashes} belong to this record (0 for ROLLBACK). */
  keyCount = 0;

  #delayLevelsMs: readonly number[];
  /** The array of the last load, and its view. */
  #bytes: Uint8Array | undefined;
  #dataView: DataView = new DataView(new ArrayBuffer(0));
  /** The last topic: producers mostly repeat it. */
  #lastTopic: TopicEntry = { topic: "", prefixHash: 0 };
  /** Topics by the Java hash of their bytes (bounded). */
  #topics = new Map<number, TopicEntry>();
  // Where the properties scan found the values the store acts on (-1: no
  // such property, or only with an empty value).
  #tagsStart = -1;
  #tagsEnd = 0;
  #keysStart = -1;
  #keysEnd = 0;
  #uniqStart = -1;
  #uniqEnd = 0;
  #delayStart = -1;
  #delayEnd = 0;

  /** @param options The delay levels. */
  constructor(options: DispatchViewOptions = {}) {
    this.#delayLevelsMs = options.delayLevelsMs ?? DELAY_LEVELS_DEFAULT_MS;
  }

  /**
   * Reads the MESSAGE record at `bytes[position]` whose commit-log offset
   * is `expectedOffset`. Never throws on bytes, never reads outside them.
   *
   * @param bytes The buffer (typically a segment range).
   * @param position Where the record starts (a non-negative integer).
   * @param expectedOffset The record's commit-log offset: the
   *   physicalOffset field must hold it.
   * @param withKeys Whether to fill {@link keyHashes} (else `keyCount` is 0).
   * @param readEnd One past the last byte that may be read (default: all of
   *   `bytes`); a record that goes past it is not read.
   * @returns True for a valid message (the fields are filled); false for
   *   anything else (a BLANK, the end, a cut or invalid record: ask
   *   `RecordChecker` what it is).
   */
  load(
    bytes: Uint8Array,
    position: number,
    expectedOffset: number,
    withKeys: boolean,
    readEnd: number = bytes.length,
  ): boolean {
    const available = Math.min(readEnd, bytes.length) - position;
    if (available < RECORD_SIZE_MIN_BYTES) return false;
    // A view of its own: the encoder's (dataViewOf) is over another array
    // in the same put, and making a DataView costs more than the reads.
    if (bytes !== this.#bytes || this.#dataView.byteLength !== bytes.length) {
      this.#dataView = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
      this.#bytes = bytes;
    }
    const d = this.#dataView;
    const size = d.getInt32(position + TOTAL_SIZE_POSITION);
    if (d.getInt32(position + MAGIC_POSITION) !== MESSAGE_MAGIC_CODE) return false;
    if (size < RECORD_SIZE_MIN_BYTES || size > available) return false;
    // The same checks, in the same order of trust, as RecordChecker: the
    // fixed part against size before any length field is believed.
    const sysFlag = d.getInt32(position + SYS_FLAG_POSITION);
    const bornHostLength = (sysFlag & SYS_FLAG_BORN_HOST_V6) === 0
      ? HOST_V4_SIZE_BYTES
      : HOST_V6_SIZE_BYTES;
    const storeHostLength = (sysFlag & SYS_FLAG_STORE_HOST_V6) === 0
      ? HOST_V4_SIZE_BYTES
      : HOST_V6_SIZE_BYTES;
    const extra = bornHostLength + storeHostLength - 2 * HOST_V4_SIZE_BYTES;
    const fixed = RECORD_FIXED_SIZE_BYTES + extra;
    if (size < fixed + 1) return false;
    const end = position + size;
    const bodyPosition = position + BODY_POSITION_V4 + extra;
    const bodyLength = d.getInt32(bodyPosition - 4);
    if (bodyLength < 0 || bodyLength > end - bodyPosition - 3) return false;
    const topicPosition = bodyPosition + bodyLength + 1;
    const topicLength = bytes[topicPosition - 1]!;
    if (topicLength > end - topicPosition - 2) return false;
    const propertiesPosition = topicPosition + topicLength + 2;
    const propertiesLength = d.getInt16(propertiesPosition - 2);
    if (propertiesLength < 0 || fixed + bodyLength + topicLength + propertiesLength !== size) {
      return false;
    }
    if (getInt64(d, position + PHYSICAL_OFFSET_POSITION) !== expectedOffset) return false;
    if (topicLength === 0 || topicLength > TOPIC_LENGTH_MAX_BYTES) return false;
    const topic = this.#topicAt(bytes, topicPosition, topicLength);
    if (topic === undefined) return false;
    if (!this.#scanProperties(bytes, propertiesPosition, propertiesPosition + propertiesLength)) {
      return false;
    }

    const storeTimestamp = getInt64(d, position + BORN_HOST_POSITION + bornHostLength);
    this.size = size;
    this.queueId = d.getInt32(position + QUEUE_ID_POSITION);
    this.sysFlag = sysFlag;
    this.queueOffset = getInt64(d, position + QUEUE_OFFSET_POSITION);
    this.physicalOffset = expectedOffset;
    this.storeTimestamp = storeTimestamp;
    this.topic = topic.topic;

    let tagsCode = this.#tagsStart < 0
      ? 0
      : continueHashBytes(0, bytes, this.#tagsStart, this.#tagsEnd);
    if (topic.topic === SCHEDULE_TOPIC && this.#delayStart >= 0) {
      tagsCode = scheduleTagsCode(
        tagsCode,
        utf8Text(bytes, this.#delayStart, this.#delayEnd),
        storeTimestamp,
        this.#delayLevelsMs,
      );
    }
    this.tagsCode = tagsCode;

    this.keyCount = 0;
    if (withKeys && (sysFlag & SYS_FLAG_TRANSACTION_MASK) !== TRANSACTION_ROLLBACK_TYPE) {
      const prefix = topic.prefixHash;
      if (this.#uniqStart >= 0) {
        this.#pushKey(continueHashBytes(prefix, bytes, this.#uniqStart, this.#uniqEnd));
      }
      if (this.#keysStart >= 0) this.#pushKeys(bytes, prefix, this.#keysStart, this.#keysEnd);
    }
    return true;
  }

  /** The topic at `bytes[start]`, cached; undefined when malformed. */
  #topicAt(bytes: Uint8Array, start: number, length: number): TopicEntry | undefined {
    const last = this.#lastTopic;
    const lastTopic = last.topic;
    if (lastTopic.length === length) {
      let i = 0;
      while (i < length && lastTopic.charCodeAt(i) === bytes[start + i]) i++;
      if (i === length) return last;
    }
    let hash = 0;
    for (let i = start; i < start + length; i++) hash = (Math.imul(hash, 31) + bytes[i]!) | 0;
    let entry = this.#topics.get(hash);
    if (entry === undefined || !nameIs(bytes, start, length, entry.topic)) {
      // latin1 maps each byte to one char, so the pattern sees the bytes.
      const topic = latin1Text(bytes, start, start + length);
      if (!TOPIC_PATTERN.test(topic)) return undefined;
      entry = { topic, prefixHash: (Math.imul(hash, 31) + INDEX_KEY_SEPARATOR) | 0 };
      if (this.#topics.size >= TOPIC_CACHE_ENTRIES_MAX) this.#topics.clear();
      this.#topics.set(hash, entry);
    }
    this.#lastTopic = entry;
    return entry;
  }

  /**
   * Scans the properties once, as `checkPropertiesBytes` checks them and
   * `propertiesMapOf` keeps them (pairs with an empty value dropped, a
   * later duplicate wins), noting where TAGS, KEYS, UNIQ_KEY and DELAY are.
   *
   * @returns Whether the properties are well-formed.
   */
  #scanProperties(bytes: Uint8Array, start: number, end: number): boolean {
    this.#tagsStart = -1;
    this.#keysStart = -1;
    this.#uniqStart = -1;
    this.#delayStart = -1;
    let pairStart = start;
    // Position of the current pair's 0x01, -1 before it.
    let separator = -1;
    for (let i = start; i < end; i++) {
      const b = bytes[i]!;
      if (b > PROPERTY_SEPARATOR) continue;
      if (b === NAME_VALUE_SEPARATOR) {
        if (separator >= 0 || i === pairStart) return false;
        separator = i;
      } else if (b === PROPERTY_SEPARATOR) {
        if (separator < 0) return false;
        this.#pair(bytes, pairStart, separator, i);
        pairStart = i + 1;
        separator = -1;
      }
    }
    if (separator >= 0) this.#pair(bytes, pairStart, separator, end);
    else if (pairStart !== end) return false;
    return true;
  }

  /** Notes the pair `name 0x01 value` when the store acts on it. */
  #pair(bytes: Uint8Array, nameStart: number, separator: number, valueEnd: number): void {
    const valueStart = separator + 1;
    if (valueEnd === valueStart) return;
    const nameLength = separator - nameStart;
    if (nameIs(bytes, nameStart, nameLength, PROPERTY_TAGS)) {
      this.#tagsStart = valueStart;
      this.#tagsEnd = valueEnd;
    } else if (nameIs(bytes, nameStart, nameLength, PROPERTY_KEYS)) {
      this.#keysStart = valueStart;
      this.#keysEnd = valueEnd;
    } else if (nameIs(bytes, nameStart, nameLength, PROPERTY_UNIQ_KEY)) {
      this.#uniqStart = valueStart;
      this.#uniqEnd = valueEnd;
    } else if (nameIs(bytes, nameStart, nameLength, PROPERTY_DELAY)) {
      this.#delayStart = valueStart;
      this.#delayEnd = valueEnd;
    }
  }

  /** Adds the hash of each non-empty KEYS token of `bytes[start, end)`. */
  #pushKeys(bytes: Uint8Array, prefix: number, start: number, end: number): void {
    let tokenStart = start;
    let hash = prefix;
    for (let i = start; i < end; i++) {
      const b = bytes[i]!;
      if (b === KEYS_SEPARATOR) {
        if (i > tokenStart) this.#pushKey(hash);
        tokenStart = i + 1;
        hash = prefix;
      } else if (b >= NON_ASCII_MIN) {
        // A space is never part of a UTF-8 sequence, and a malformed one
        // never swallows it, so each token decodes on its own.
        let to = i;
        while (to < end && bytes[to] !== KEYS_SEPARATOR) to++;
        this.#pushKey(continueHash(prefix, utf8Text(bytes, tokenStart, to)));
        i = to;
        tokenStart = to + 1;
        hash = prefix;
      } else {
        hash = (Math.imul(hash, 31) + b) | 0;
      }
    }
    if (end > tokenStart) this.#pushKey(hash);
  }

  #pushKey(hash: number): void {
    if (this.keyCount === this.keyHashes.length) {
      const larger = new Int32Array(this.keyHashes.length * 2);
      larger.set(this.keyHashes);
      this.keyHashes = larger;
    }
    this.keyHashes[this.keyCount++] = hash;
  }
}
