/**
 * Reading records: a checker that classifies the bytes at a position
 * without making strings (the scan and recovery path), a decoder that
 * materialises a {@link DecodedMessage}, and the read path's lighter check
 * ({@link isMessageRecordAt}: is the record a consume-queue unit points at
 * really there?), whose records `LazyMessage` decodes on access.
 *
 * Neither ever throws on bytes nor reads outside the buffer. The bytes at a
 * position are one of:
 * - a valid MESSAGE record;
 * - a BLANK record (end of a segment);
 * - the end of the data: `totalSize` and `magic` both zero, as in the
 *   unwritten, zero-filled rest of the last segment;
 * - an invalid record, with a precise {@link RecordInvalidReason}.
 *
 * A MESSAGE is valid if its magic is known, its size is in range and agrees
 * with its length fields, its physicalOffset field equals the offset where
 * it was found (when the caller says), its topic matches
 * `^[%|a-zA-Z0-9_-]{1,127}$`, its properties are well-formed, and its body
 * CRC matches (when asked). RocketMQ checks only the CRC and the sizes; the
 * body CRC does not cover a torn topic or properties page, hence the rest.
 * The cheap structural checks run first, the CRC last.
 *
 * @module
 */

import { dataViewOf, getInt64 } from "./_bytes.ts";
import {
  BLANK_MAGIC_CODE,
  BLANK_RECORD_SIZE_BYTES,
  BODY_CRC_POSITION,
  BODY_POSITION_V4,
  BORN_HOST_POSITION,
  BORN_TIMESTAMP_POSITION,
  FLAG_POSITION,
  MAGIC_POSITION,
  MESSAGE_MAGIC_CODE,
  PHYSICAL_OFFSET_POSITION,
  PROPERTY_TAGS,
  QUEUE_ID_POSITION,
  QUEUE_OFFSET_POSITION,
  RECORD_FIXED_SIZE_BYTES,
  RECORD_SIZE_MIN_BYTES,
  SYS_FLAG_POSITION,
  TOPIC_LENGTH_MAX_BYTES,
  TOTAL_SIZE_POSITION,
} from "./constants.ts";
import { bornHostSizeBytes, hostsExtraBytes, storeHostSizeBytes } from "./_hosts.ts";
import { bodyCrc } from "./crc32.ts";
import { tagsCodeOf } from "./hash_code.ts";
import type { DecodedMessage } from "./message.ts";
import { bornHosts, offsetHex, storeHosts, topicOf } from "./_field_text.ts";
import { checkPropertiesBytes, parsePropertyPairs, propertiesMapOf } from "./properties.ts";

/** Why the bytes at a position are not a valid record. */
export type RecordInvalidReason =
  /** The buffer ends before the record does (or before its 8-byte header). */
  | "TRUNCATED"
  /** The magic code is neither MESSAGE's nor BLANK's. */
  | "UNKNOWN_MAGIC"
  /** totalSize is below the smallest record, or a BLANK's size is impossible. */
  | "SIZE_OUT_OF_RANGE"
  /** totalSize disagrees with the body, topic and properties lengths. */
  | "SIZE_MISMATCH"
  /** The physicalOffset field is not the offset the record was found at. */
  | "OFFSET_MISMATCH"
  /** The topic is empty, too long, or has a character outside `[%|a-zA-Z0-9_-]`. */
  | "TOPIC_MALFORMED"
  /** The properties are not `name 0x01 value` pairs joined by `0x02`. */
  | "PROPERTIES_MALFORMED"
  /** The body CRC does not match the stored bodyCRC. */
  | "CRC_MISMATCH";

/** What the bytes at a position are. */
export type RecordKind = "message" | "blank" | "end" | "invalid";

/** Options of {@link checkRecord} and {@link decodeRecord}. */
export interface ReadRecordOptions {
  /**
   * The commit-log offset of `position`; when given, a MESSAGE whose
   * physicalOffset field differs is invalid (`OFFSET_MISMATCH`).
   */
  expectedOffset?: number;
  /**
   * Whether to verify the body CRC (RocketMQ's `checkCRCOnRecover`).
   *
   * @default {true}
   */
  checkCrc?: boolean;
}

// 1 for the bytes a topic may contain: [%|a-zA-Z0-9_-].
const TOPIC_BYTES: Uint8Array = (() => {
  const table = new Uint8Array(256);
  for (const c of "%|_-0123456789") table[c.charCodeAt(0)] = 1;
  for (let c = 0x41; c <= 0x5A; c++) {
    table[c] = 1;
    table[c + 0x20] = 1;
  }
  return table;
})();

/**
 * The classification of the bytes at one position, and for a MESSAGE every
 * header field and where its variable parts lie. Reused by
 * {@link RecordChecker} from record to record so a scan allocates nothing.
 */
export class RecordView {
  /** What was found. */
  kind: RecordKind = "end";
  /** totalSize of a MESSAGE, size of a BLANK, the claimed size of an invalid record. */
  size = 0;
  /** Why the record is invalid (`kind === "invalid"` only). */
  reason: RecordInvalidReason | undefined = undefined;
  /** A sentence with the values that made the record invalid. */
  detail = "";
  /** Position of the record in the buffer. */
  position = 0;
  /** bodyCRC field. */
  bodyCRC = 0;
  /** queueId field. */
  queueId = 0;
  /** flag field. */
  flag = 0;
  /** queueOffset field. */
  queueOffset = 0;
  /** physicalOffset field. */
  physicalOffset = 0;
  /** sysFlag field. */
  sysFlag = 0;
  /** bornTimestamp field. */
  bornTimestamp = 0;
  /** storeTimestamp field. */
  storeTimestamp = 0;
  /** reconsumeTimes field. */
  reconsumeTimes = 0;
  /** preparedTransactionOffset field. */
  preparedTransactionOffset = 0;
  /** Position of the bornHost field. */
  bornHostPosition = 0;
  /** Length of the bornHost field: 8 or 20. */
  bornHostLength = 0;
  /** Position of the storeHost field. */
  storeHostPosition = 0;
  /** Length of the storeHost field: 8 or 20. */
  storeHostLength = 0;
  /** Position of the first body byte. */
  bodyPosition = 0;
  /** Body length. */
  bodyLength = 0;
  /** Position of the first topic byte. */
  topicPosition = 0;
  /** Topic length in bytes. */
  topicLength = 0;
  /** Position of the first properties byte. */
  propertiesPosition = 0;
  /** Properties length in bytes. */
  propertiesLength = 0;
}

function invalid(
  view: RecordView,
  reason: RecordInvalidReason,
  size: number,
  detail: string,
): RecordView {
  view.kind = "invalid";
  view.reason = reason;
  view.size = size;
  view.detail = detail;
  return view;
}

/**
 * Classifies the bytes at `bytes[position]` into `view` (see the module
 * doc). Never throws on bytes, never reads outside `bytes`, makes no strings for a
 * valid record.
 *
 * @param bytes The buffer (typically a whole segment).
 * @param position Where the record starts.
 * @param expectedOffset Commit-log offset of `position`, or -1 not to check.
 * @param checkCrc Whether to verify the body CRC.
 * @param view Receives the result.
 * @returns `view`.
 * @throws {RangeError} When `position` is not a non-negative integer (an
 * argument mistake, not a property of the bytes).
 */
function classify(
  bytes: Uint8Array,
  position: number,
  expectedOffset: number,
  checkCrc: boolean,
  view: RecordView,
): RecordView {
  view.position = position;
  view.reason = undefined;
  view.detail = "";
  if (!Number.isSafeInteger(position) || position < 0) {
    throw new RangeError(`A record position must be a non-negative integer, not ${position}`);
  }
  const available = bytes.length - position;
  if (available < BLANK_RECORD_SIZE_BYTES) {
    return invalid(
      view,
      "TRUNCATED",
      0,
      `Only ${Math.max(0, available)} bytes left at position ${position}, a record header is 8`,
    );
  }
  // bytes.length >= 8 here, so the buffer is not detached.
  const d = dataViewOf(bytes);
  const size = d.getInt32(position + TOTAL_SIZE_POSITION);
  const magic = d.getInt32(position + MAGIC_POSITION);
  if (magic !== MESSAGE_MAGIC_CODE) {
    if (magic === BLANK_MAGIC_CODE) {
      if (size < BLANK_RECORD_SIZE_BYTES || size > available) {
        return invalid(
          view,
          "SIZE_OUT_OF_RANGE",
          size,
          `BLANK size ${size} at position ${position} is outside 8..${available} (bytes left)`,
        );
      }
      view.kind = "blank";
      view.size = size;
      return view;
    }
    if (magic === 0 && size === 0) {
      view.kind = "end";
      view.size = 0;
      return view;
    }
    return invalid(
      view,
      "UNKNOWN_MAGIC",
      size,
      `Magic code 0x${(magic >>> 0).toString(16).padStart(8, "0")} at position ${position} ` +
        "is neither MESSAGE (0xdaa320a7) nor BLANK (0xcbd43194)",
    );
  }
  if (size < RECORD_SIZE_MIN_BYTES) {
    return invalid(
      view,
      "SIZE_OUT_OF_RANGE",
      size,
      `totalSize ${size} at position ${position} is below the smallest record (${RECORD_SIZE_MIN_BYTES} bytes)`,
    );
  }
  if (size > available) {
    return invalid(
      view,
      "TRUNCATED",
      size,
      `Record at position ${position} claims ${size} bytes, only ${available} are left`,
    );
  }

  // Every read below stays inside [position, position + size): the fixed
  // part is checked against size before the length fields are trusted.
  const sysFlag = d.getInt32(position + SYS_FLAG_POSITION);
  const bornHostLength = bornHostSizeBytes(sysFlag);
  const storeHostLength = storeHostSizeBytes(sysFlag);
  const extra = hostsExtraBytes(sysFlag);
  const fixed = RECORD_FIXED_SIZE_BYTES + extra;
  if (size < fixed + 1) {
    return invalid(
      view,
      "SIZE_OUT_OF_RANGE",
      size,
      `totalSize ${size} at position ${position} is below the smallest record with sysFlag ` +
        `0x${(sysFlag >>> 0).toString(16)} (${fixed + 1} bytes)`,
    );
  }
  const end = position + size;
  const bodyPosition = position + BODY_POSITION_V4 + extra;
  const bodyLength = d.getInt32(bodyPosition - 4);
  // Room for the body, then topicLength (1) and propertiesLength (2).
  if (bodyLength < 0 || bodyLength > end - bodyPosition - 3) {
    return invalid(
      view,
      "SIZE_MISMATCH",
      size,
      `bodyLength ${bodyLength} at position ${position} does not fit in totalSize ${size}`,
    );
  }
  const topicPosition = bodyPosition + bodyLength + 1;
  const topicLength = bytes[topicPosition - 1]!;
  if (topicLength > end - topicPosition - 2) {
    return invalid(
      view,
      "SIZE_MISMATCH",
      size,
      `topicLength ${topicLength} at position ${position} does not fit in totalSize ${size}`,
    );
  }
  const propertiesPosition = topicPosition + topicLength + 2;
  const propertiesLength = d.getInt16(propertiesPosition - 2);
  const computed = fixed + bodyLength + topicLength + propertiesLength;
  if (propertiesLength < 0 || computed !== size) {
    return invalid(
      view,
      "SIZE_MISMATCH",
      size,
      `totalSize ${size} at position ${position} but the fields add up to ${computed} ` +
        `(body ${bodyLength}, topic ${topicLength}, properties ${propertiesLength})`,
    );
  }
  const physicalOffset = getInt64(d, position + PHYSICAL_OFFSET_POSITION);
  if (expectedOffset >= 0 && physicalOffset !== expectedOffset) {
    return invalid(
      view,
      "OFFSET_MISMATCH",
      size,
      `physicalOffset field is ${physicalOffset}, the record is at offset ${expectedOffset}`,
    );
  }
  if (topicLength === 0 || topicLength > TOPIC_LENGTH_MAX_BYTES) {
    return invalid(
      view,
      "TOPIC_MALFORMED",
      size,
      `Topic length ${topicLength} at position ${position} is outside 1..${TOPIC_LENGTH_MAX_BYTES}`,
    );
  }
  for (let i = topicPosition; i < topicPosition + topicLength; i++) {
    if (TOPIC_BYTES[bytes[i]!] === 0) {
      return invalid(
        view,
        "TOPIC_MALFORMED",
        size,
        `Topic byte 0x${bytes[i]!.toString(16).padStart(2, "0")} at position ${i} is outside ` +
          "[%|a-zA-Z0-9_-]",
      );
    }
  }
  if (!checkPropertiesBytes(bytes, propertiesPosition, propertiesPosition + propertiesLength)) {
    return invalid(
      view,
      "PROPERTIES_MALFORMED",
      size,
      `Properties at position ${propertiesPosition} (${propertiesLength} bytes) are not ` +
        "name 0x01 value pairs joined by 0x02",
    );
  }
  const storedCrc = d.getInt32(position + BODY_CRC_POSITION);
  if (checkCrc) {
    const actual = bodyCrc(bytes, bodyPosition, bodyPosition + bodyLength);
    if (actual !== storedCrc) {
      return invalid(
        view,
        "CRC_MISMATCH",
        size,
        `Body CRC at position ${position} is ${actual}, the record says ${storedCrc}`,
      );
    }
  }
  view.kind = "message";
  view.size = size;
  view.bodyCRC = storedCrc;
  view.queueId = d.getInt32(position + QUEUE_ID_POSITION);
  view.flag = d.getInt32(position + FLAG_POSITION);
  view.queueOffset = getInt64(d, position + QUEUE_OFFSET_POSITION);
  view.physicalOffset = physicalOffset;
  view.sysFlag = sysFlag;
  view.bornTimestamp = getInt64(d, position + BORN_TIMESTAMP_POSITION);
  view.bornHostPosition = position + BORN_HOST_POSITION;
  view.bornHostLength = bornHostLength;
  const storeTimestampPosition = position + BORN_HOST_POSITION + bornHostLength;
  view.storeTimestamp = getInt64(d, storeTimestampPosition);
  view.storeHostPosition = storeTimestampPosition + 8;
  view.storeHostLength = storeHostLength;
  const reconsumePosition = view.storeHostPosition + storeHostLength;
  view.reconsumeTimes = d.getInt32(reconsumePosition);
  view.preparedTransactionOffset = getInt64(d, reconsumePosition + 4);
  view.bodyPosition = bodyPosition;
  view.bodyLength = bodyLength;
  view.topicPosition = topicPosition;
  view.topicLength = topicLength;
  view.propertiesPosition = propertiesPosition;
  view.propertiesLength = propertiesLength;
  return view;
}

/**
 * Checks records one after another with one reused {@link RecordView}: the
 * allocation-free scan path (recovery, dump, reads by offset).
 *
 * @example Walking one segment
 * ```ts
 * import { RecordChecker } from "./decoder.ts";
 *
 * const segment = new Uint8Array(65536); // bytes of the segment starting at offset 0
 * const checker = new RecordChecker();
 * let position = 0;
 * while (true) {
 *   const view = checker.check(segment, position, position);
 *   if (view.kind !== "message") break; // "blank", "end" or "invalid"
 *   position += view.size;
 * }
 * ```
 */
export class RecordChecker {
  /** Whether body CRCs are verified. */
  readonly checkCrc: boolean;
  /** The view every {@link check} call fills and returns. */
  readonly view: RecordView = new RecordView();

  /**
   * Creates a checker.
   *
   * @param options `checkCrc` (default true).
   */
  constructor(options: { checkCrc?: boolean } = {}) {
    this.checkCrc = options.checkCrc ?? true;
  }

  /**
   * Classifies the bytes at `position`. The returned view is overwritten by
   * the next call.
   *
   * @param bytes The buffer.
   * @param position Where the record starts.
   * @param expectedOffset Commit-log offset of `position`; omit (or -1) not
   * to check the physicalOffset field.
   * @returns The checker's view.
   */
  check(bytes: Uint8Array, position: number, expectedOffset = -1): RecordView {
    return classify(bytes, position, expectedOffset, this.checkCrc, this.view);
  }
}

/**
 * The read path's check: whether a MESSAGE record of exactly `size` bytes,
 * whose physicalOffset field is `offset`, starts at `bytes[position]`, with
 * length fields that add up to its size and a well-formed topic. It guards
 * against a consume-queue unit that points at the wrong bytes; it does not
 * redo what recovery and the writer checked (properties syntax, body CRC:
 * RocketMQ checks neither on reads either), and what it lets through
 * decodes without reading outside the record. Never throws on bytes.
 *
 * @example
 * ```ts
 * import { isMessageRecordAt } from "./decoder.ts";
 * import { encodeMessage } from "./encoder.ts";
 *
 * const record = encodeMessage({ topic: "T", queueId: 1, body: new Uint8Array([7]) });
 * console.log(isMessageRecordAt(record, 0, 0, record.length)); // true
 * console.log(isMessageRecordAt(record, 0, 64, record.length)); // false: another offset
 * ```
 *
 * @param bytes The buffer.
 * @param position Where the record should start.
 * @param offset Its commit-log offset.
 * @param size Its size (from the consume queue, or its own totalSize).
 * @returns Whether the record is there.
 */
export function isMessageRecordAt(
  bytes: Uint8Array,
  position: number,
  offset: number,
  size: number,
): boolean {
  if (
    !(position >= 0 && size >= RECORD_SIZE_MIN_BYTES && size <= bytes.length - position)
  ) {
    return false;
  }
  const d = dataViewOf(bytes);
  if (
    d.getInt32(position + TOTAL_SIZE_POSITION) !== size ||
    d.getInt32(position + MAGIC_POSITION) !== MESSAGE_MAGIC_CODE ||
    getInt64(d, position + PHYSICAL_OFFSET_POSITION) !== offset
  ) {
    return false;
  }
  const sysFlag = d.getInt32(position + SYS_FLAG_POSITION);
  const extra = hostsExtraBytes(sysFlag);
  const end = position + size;
  const bodyPosition = position + BODY_POSITION_V4 + extra;
  // Room for the body, then topicLength (1) and propertiesLength (2).
  if (bodyPosition + 3 > end) return false;
  const bodyLength = d.getInt32(bodyPosition - 4);
  if (bodyLength < 0 || bodyLength > end - bodyPosition - 3) return false;
  const topicPosition = bodyPosition + bodyLength + 1;
  const topicLength = bytes[topicPosition - 1]!;
  if (
    topicLength === 0 || topicLength > TOPIC_LENGTH_MAX_BYTES ||
    topicLength > end - topicPosition - 2
  ) {
    return false;
  }
  const topicEnd = topicPosition + topicLength;
  for (let i = topicPosition; i < topicEnd; i++) {
    if (TOPIC_BYTES[bytes[i]!] === 0) return false;
  }
  return d.getInt16(topicEnd) === end - topicEnd - 2;
}

/**
 * Classifies the bytes at `position` into a new {@link RecordView}.
 *
 * @param bytes The buffer.
 * @param position Where the record starts.
 * @param options Expected offset and CRC checking.
 * @returns The view.
 */
export function checkRecord(
  bytes: Uint8Array,
  position: number,
  options: ReadRecordOptions = {},
): RecordView {
  return classify(
    bytes,
    position,
    options.expectedOffset ?? -1,
    options.checkCrc ?? true,
    new RecordView(),
  );
}

/**
 * Materialises the message of a view that {@link RecordChecker.check} or
 * {@link checkRecord} classified as `"message"`. `body` and `propertiesRaw`
 * are views into `bytes`.
 *
 * @param bytes The buffer the view was made from.
 * @param view A `"message"` view.
 * @returns The message.
 * @throws {RangeError} When the view is not a message.
 */
export function decodeMessageView(bytes: Uint8Array, view: RecordView): DecodedMessage {
  if (view.kind !== "message") {
    throw new RangeError(`Cannot decode a ${view.kind} record as a message`);
  }
  const propertiesEnd = view.propertiesPosition + view.propertiesLength;
  const pairs = parsePropertyPairs(bytes, view.propertiesPosition, propertiesEnd);
  const properties = propertiesMapOf(pairs);
  bornHosts.load(bytes, view.bornHostPosition, view.bornHostLength);
  storeHosts.load(bytes, view.storeHostPosition, view.storeHostLength);
  return {
    storeSize: view.size,
    bodyCRC: view.bodyCRC,
    queueId: view.queueId,
    flag: view.flag,
    queueOffset: view.queueOffset,
    physicalOffset: view.physicalOffset,
    sysFlag: view.sysFlag,
    bornTimestamp: view.bornTimestamp,
    bornHost: bornHosts.text,
    storeTimestamp: view.storeTimestamp,
    storeHost: storeHosts.text,
    reconsumeTimes: view.reconsumeTimes,
    preparedTransactionOffset: view.preparedTransactionOffset,
    body: bytes.subarray(view.bodyPosition, view.bodyPosition + view.bodyLength),
    topic: topicOf(bytes, view.topicPosition, view.topicLength),
    propertiesRaw: bytes.subarray(view.propertiesPosition, propertiesEnd),
    pairs,
    properties,
    tagsCode: tagsCodeOf(properties.get(PROPERTY_TAGS)),
    msgId: storeHosts.hex + offsetHex(view.physicalOffset),
  };
}

/** The outcome of {@link decodeRecord}. */
export type DecodeResult =
  | { kind: "message"; size: number; message: DecodedMessage }
  | { kind: "blank"; size: number }
  | { kind: "end" }
  | { kind: "invalid"; reason: RecordInvalidReason; detail: string; size: number };

/**
 * Decodes the record at `bytes[position]`. Never throws on bytes.
 *
 * @example
 * ```ts
 * import { decodeRecord } from "./decoder.ts";
 * import { encodeMessage } from "./encoder.ts";
 *
 * const record = encodeMessage({ topic: "T", queueId: 1, body: new Uint8Array([7]) });
 * const result = decodeRecord(record, 0, { expectedOffset: 0 });
 * if (result.kind === "message") console.log(result.message.queueId); // 1
 * ```
 *
 * @param bytes The buffer.
 * @param position Where the record starts.
 * @param options Expected offset and CRC checking.
 * @returns The message, a BLANK, the end of the data, or why it is invalid.
 */
export function decodeRecord(
  bytes: Uint8Array,
  position: number,
  options: ReadRecordOptions = {},
): DecodeResult {
  const view = checkRecord(bytes, position, options);
  switch (view.kind) {
    case "message":
      return { kind: "message", size: view.size, message: decodeMessageView(bytes, view) };
    case "blank":
      return { kind: "blank", size: view.size };
    case "end":
      return { kind: "end" };
    case "invalid":
      return { kind: "invalid", reason: view.reason!, detail: view.detail, size: view.size };
  }
}
