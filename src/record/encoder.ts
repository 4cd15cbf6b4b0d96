/**
 * Encoding MESSAGE and BLANK records.
 *
 * The put path works as RocketMQ's does: a message is validated and encoded
 * once, into a reused scratch buffer (or straight into a segment), with
 * queueOffset, physicalOffset and storeTimestamp left 0; when its place in
 * the log is known those three fields are patched in place with
 * {@link patchRecord}. Nothing is allocated per record: 64-bit fields are
 * written as two 32-bit halves, hosts and topic are parsed/checked once per
 * distinct value, and the record's tail (topic and properties) is encoded by
 * validation into the encoder's own buffer — only the pairs that changed
 * since the previous message — and copied four bytes at a time (see
 * `_record_tail.ts`). Measured with `bench/record_bench.ts` (groups
 * "encode …") on Deno, Bun and Node: `scripts/bench_record.ts`.
 *
 * @module
 */

import type { MqStoreError } from "../errors.ts";
import { AssertionError } from "../assert.ts";
import { DataViewCache, setInt64, writeInt32 } from "./_bytes.ts";
import {
  BLANK_MAGIC_CODE,
  BLANK_RECORD_SIZE_BYTES,
  BODY_CRC_POSITION,
  BORN_HOST_POSITION,
  BORN_TIMESTAMP_POSITION,
  FLAG_POSITION,
  HOST_V6_EXTRA_BYTES,
  INT32_MAX,
  MAGIC_POSITION,
  MESSAGE_MAGIC_CODE,
  PHYSICAL_OFFSET_POSITION,
  QUEUE_ID_POSITION,
  QUEUE_OFFSET_POSITION,
  RECORD_FIXED_SIZE_BYTES,
  STORE_TIMESTAMP_POSITION_V4,
  STORE_TIMESTAMP_POSITION_V6,
  SYS_FLAG_BORN_HOST_V6,
  SYS_FLAG_POSITION,
  SYS_FLAG_STORE_HOST_V6,
  TOTAL_SIZE_POSITION,
} from "./constants.ts";
import { bodyCrc } from "./crc32.ts";
import type { HostAddress } from "./host_address.ts";
import type { MessageInput } from "./message.ts";
import type { RecordTail } from "./_record_tail.ts";
import {
  checkMessage,
  createLayout,
  type MessageLayout,
  type ResolvedValidateOptions,
  resolveValidateOptions,
  type ValidateOptions,
} from "./validate.ts";

/** Options of {@link MessageEncoder}. */
export interface MessageEncoderOptions extends ValidateOptions {
  /**
   * Clock for the bornTimestamp of messages that have none, in ms.
   *
   * @default {Date.now}
   */
  now?: () => number;
}

/**
 * From this many bytes on, the tail is copied with `TypedArray#set` (one
 * native copy, but a view to make); below, four bytes at a time through
 * `DataView`s.
 */
const TAIL_SET_MIN_BYTES = 0x100;

/** Writes a host field (address + int32 port) at `position`; returns the position after it. */
function writeHost(
  bytes: Uint8Array,
  view: DataView,
  position: number,
  host: HostAddress,
): number {
  const ip = host.ip;
  if (ip.length === 4) {
    // One store for the address: TypedArray#set or a byte loop cost more.
    view.setInt32(position, (ip[0]! << 24) | (ip[1]! << 16) | (ip[2]! << 8) | ip[3]!);
    view.setInt32(position + 4, host.port);
    return position + 8;
  }
  for (let i = 0; i < ip.length; i++) bytes[position + i] = ip[i]!;
  view.setInt32(position + ip.length, host.port);
  return position + ip.length + 4;
}

/**
 * Validates and encodes messages into caller-supplied buffers. One encoder
 * is meant to live as long as its store: it keeps the resolved options and
 * a layout object it reuses for every message.
 *
 * @example
 * ```ts
 * import { MessageEncoder, patchRecord } from "./encoder.ts";
 *
 * const encoder = new MessageEncoder();
 * const scratch = new Uint8Array(4 * 1024 * 1024);
 * const size = encoder.encode(
 *   { topic: "Orders", queueId: 0, body: new Uint8Array([1]), properties: { TAGS: "a" } },
 *   scratch,
 *   0,
 * );
 * if (typeof size === "number") patchRecord(scratch, 0, 7, 4096, Date.now());
 * ```
 */
export class MessageEncoder {
  /** Limits and default hosts, resolved once. */
  readonly #options: ResolvedValidateOptions;
  /** Sizes and hosts of the message being encoded (reused). */
  readonly #layout: MessageLayout = createLayout();
  /** Clock for missing bornTimestamps. */
  readonly #now: () => number;
  /**
   * Views of the destination (the segment or scratch written last). The
   * encoder keeps its own rather than sharing `dataViewOf`'s: the readers
   * (decoder, lazy messages) would otherwise evict the segment's view
   * between two puts.
   */
  readonly #views = new DataViewCache();

  /**
   * Creates an encoder.
   *
   * @param options Limits, default hosts and clock.
   * @throws {RangeError} For a malformed default host or size.
   */
  constructor(options: MessageEncoderOptions = {}) {
    this.#options = resolveValidateOptions(options);
    this.#now = options.now ?? Date.now;
  }

  /**
   * The topic and property pairs of the message encoded last (valid until
   * the next call): the commit log's dispatch hints read TAGS, KEYS,
   * UNIQ_KEY and DELAY from them instead of from the record.
   */
  get lastTail(): RecordTail {
    return this.#layout.tail;
  }

  /** The largest body and record this encoder accepts, in bytes. */
  get maxMessageSizeBytes(): number {
    return this.#options.maxMessageSizeBytes;
  }

  /**
   * Validates `message` and returns the size of its record. Writes nothing.
   *
   * @param message The message.
   * @returns The record size in bytes, or the validation error.
   * @throws {TypeError} For wrong argument types.
   */
  measure(message: MessageInput): number | MqStoreError {
    return checkMessage(message, this.#options, this.#layout) ?? this.#layout.recordSize;
  }

  /**
   * Validates `message` and encodes its record at `bytes[position]`, with
   * queueOffset, physicalOffset and storeTimestamp 0 (see
   * {@link patchRecord}). An invalid message writes nothing.
   *
   * @param message The message.
   * @param bytes The destination.
   * @param position First byte to write.
   * @param header Where sysFlag, bornTimestamp, the hosts and
   * reconsumeTimes come from: the message, or the first message of the
   * batch it belongs to (a batch's records share them, SPEC §3).
   * @returns The record size in bytes, or the validation error.
   * @throws {TypeError} For wrong argument types.
   * @throws {RangeError} When the record does not fit in `bytes` (nothing is
   * written).
   */
  encode(
    message: MessageInput,
    bytes: Uint8Array,
    position: number,
    header: MessageInput = message,
  ): number | MqStoreError {
    const size = this.encodeBefore(message, bytes, position, bytes.length, header);
    if (typeof size === "number" && position + size > bytes.length) {
      throw new RangeError(
        `Cannot encode a ${size}-byte record at position ${position} of a ${bytes.length}-byte buffer`,
      );
    }
    return size;
  }

  /**
   * {@link encode} of a single message whose place is known but for its
   * queue offset: physicalOffset and storeTimestamp are written as given,
   * queueOffset 0 (the caller writes it once the message is known valid,
   * see {@link writeQueueOffset}); no {@link patchRecord} needed. The
   * magic code is left 0: the bytes are no record until the caller has
   * written the queue offset and then {@link writeMagic}, so a process
   * killed between the two leaves a torn record that recovery cuts, never
   * a whole-looking one without its queue offset.
   *
   * @param message The message.
   * @param bytes The destination.
   * @param position First byte to write.
   * @param physicalOffset The record's commit-log offset (a non-negative safe integer).
   * @param storeTimestamp Store time, ms (a safe integer).
   * @returns The record size in bytes, or the validation error (nothing written).
   * @throws {TypeError} For wrong argument types.
   * @throws {RangeError} When the record does not fit in `bytes`, or for a
   * bad physicalOffset or storeTimestamp (nothing is written).
   */
  encodePlaced(
    message: MessageInput,
    bytes: Uint8Array,
    position: number,
    physicalOffset: number,
    storeTimestamp: number,
  ): number | MqStoreError {
    if (
      !(Number.isSafeInteger(physicalOffset) && physicalOffset >= 0 &&
        Number.isSafeInteger(storeTimestamp))
    ) {
      throw new RangeError(
        `physicalOffset ${physicalOffset} must be a non-negative safe integer and ` +
          `storeTimestamp ${storeTimestamp} a safe integer`,
      );
    }
    const size = this.encodeBefore(
      message,
      bytes,
      position,
      bytes.length,
      message,
      physicalOffset,
      storeTimestamp,
      0,
    );
    if (typeof size === "number" && position + size > bytes.length) {
      throw new RangeError(
        `Cannot encode a ${size}-byte record at position ${position} of a ${bytes.length}-byte buffer`,
      );
    }
    return size;
  }

  /**
   * Writes the queueOffset of the record this encoder wrote last at
   * `bytes[position]` (after {@link encodePlaced}).
   *
   * @param bytes The buffer holding the record.
   * @param position The record's first byte.
   * @param queueOffset The queue offset (a non-negative safe integer).
   */
  writeQueueOffset(bytes: Uint8Array, position: number, queueOffset: number): void {
    setInt64(this.#views.of(bytes), position + QUEUE_OFFSET_POSITION, queueOffset);
  }

  /**
   * Writes a message record's magic code at `bytes[position]`: the last
   * write of a record {@link encodePlaced} left without it.
   *
   * @param bytes The buffer holding the record.
   * @param position The record's first byte.
   */
  writeMagic(bytes: Uint8Array, position: number): void {
    this.#views.of(bytes).setInt32(position + MAGIC_POSITION, MESSAGE_MAGIC_CODE);
  }

  /** The sysFlag of the message encoded last (its host bits set from the hosts). */
  get lastSysFlag(): number {
    return this.#layout.sysFlag;
  }

  /**
   * {@link encode}, bounded: the record is written only when it ends at or
   * before `end`; a valid record that would cross it is measured, not
   * written. A batch is encoded this way straight into a segment, where
   * only the room for the largest batch is known to be free.
   *
   * @param message The message.
   * @param bytes The destination.
   * @param position First byte to write.
   * @param end One past the last byte the record may use (at most
   * `bytes.length`).
   * @param header Where the shared header fields come from (see
   * {@link encode}).
   * @param physicalOffset Written as the record's physicalOffset (0 until
   * {@link patchRecord}; the caller checks it is a safe integer ≥ 0).
   * @param storeTimestamp Written as the storeTimestamp (likewise).
   * @param magic Written as the magic code: 0 leaves the bytes no record
   * until the caller writes the code, last.
   * @returns The record size in bytes (written only if `position + size
   * <= end`), or the validation error (nothing written).
   * @throws {TypeError} For wrong argument types.
   * @throws {RangeError} For a position or end outside `bytes`.
   */
  encodeBefore(
    message: MessageInput,
    bytes: Uint8Array,
    position: number,
    end: number,
    header: MessageInput = message,
    physicalOffset = 0,
    storeTimestamp = 0,
    magic: number = MESSAGE_MAGIC_CODE,
  ): number | MqStoreError {
    const layout = this.#layout;
    const error = checkMessage(message, this.#options, layout, header);
    if (error !== undefined) return error;
    const size = layout.recordSize;
    if (!(Number.isSafeInteger(position) && position >= 0 && end <= bytes.length)) {
      throw new RangeError(
        `Cannot encode at position ${position} before ${end} in a ${bytes.length}-byte buffer`,
      );
    }
    if (position + size > end) return size;
    const body = message.body;
    const bodyBytes = body.length;
    const p = position;
    const d = this.#views.of(bytes);
    d.setInt32(p + TOTAL_SIZE_POSITION, size);
    d.setInt32(p + MAGIC_POSITION, magic);
    d.setInt32(p + BODY_CRC_POSITION, bodyCrc(body));
    d.setInt32(p + QUEUE_ID_POSITION, message.queueId);
    d.setInt32(p + FLAG_POSITION, message.flag ?? 0);
    // queueOffset: 0 until patchRecord() or writeQueueOffset(); physicalOffset
    // and storeTimestamp: as given (0 until patchRecord() unless placed).
    d.setInt32(p + QUEUE_OFFSET_POSITION, 0);
    d.setInt32(p + QUEUE_OFFSET_POSITION + 4, 0);
    setInt64(d, p + PHYSICAL_OFFSET_POSITION, physicalOffset);
    d.setInt32(p + SYS_FLAG_POSITION, layout.sysFlag);
    setInt64(d, p + BORN_TIMESTAMP_POSITION, header.bornTimestamp ?? this.#now());
    let q = writeHost(bytes, d, p + BORN_HOST_POSITION, layout.bornHost);
    setInt64(d, q, storeTimestamp);
    q = writeHost(bytes, d, q + 8, layout.storeHost);
    d.setInt32(q, header.reconsumeTimes ?? 0);
    setInt64(d, q + 4, message.preparedTransactionOffset ?? 0);
    d.setInt32(q + 12, bodyBytes);
    q += 16;
    bytes.set(body, q);
    q += bodyBytes;
    // topicLength, topic, propertiesLength, properties: encoded by checkMessage.
    const tail = layout.tail;
    const from = tail.start;
    const tailBytes = tail.end - from;
    if (tailBytes < TAIL_SET_MIN_BYTES) {
      // Whole words, then the last four bytes (overlapping the previous word
      // with the same values): never a byte past the record. A tail has at
      // least 4 bytes (a 1-character topic and both length fields).
      const source = tail.view;
      const last = tailBytes - 4;
      for (let i = 0; i < last; i += 4) d.setInt32(q + i, source.getInt32(from + i));
      d.setInt32(q + last, source.getInt32(from + last));
    } else {
      bytes.set(tail.bytes.subarray(from, from + tailBytes), q);
    }
    q += tailBytes;
    // Checked with an if, not assert(): the message is built only on failure.
    if (q !== p + size) {
      throw new AssertionError(`Encoded ${q - p} bytes for a record measured at ${size} bytes`);
    }
    return size;
  }
}

/** Views of the array {@link patchRecord} wrote last (its own, as the encoder's). */
const patchViews = new DataViewCache();

/**
 * Size of a MESSAGE record (RocketMQ's `calMsgLength`): 91 bytes plus 12 per
 * IPv6 host (sysFlag 0x10/0x20), plus body, topic and properties bytes.
 *
 * @example
 * ```ts
 * import { recordSizeOf } from "./encoder.ts";
 *
 * recordSizeOf(0, 1, 10, 74); // 176
 * ```
 *
 * @param sysFlag The record's sysFlag (only the host bits count).
 * @param bodyBytes Body length.
 * @param topicBytes Topic length.
 * @param propertiesBytes Properties length.
 * @returns The record size in bytes.
 */
export function recordSizeOf(
  sysFlag: number,
  bodyBytes: number,
  topicBytes: number,
  propertiesBytes: number,
): number {
  return RECORD_FIXED_SIZE_BYTES +
    ((sysFlag & SYS_FLAG_BORN_HOST_V6) === 0 ? 0 : HOST_V6_EXTRA_BYTES) +
    ((sysFlag & SYS_FLAG_STORE_HOST_V6) === 0 ? 0 : HOST_V6_EXTRA_BYTES) +
    bodyBytes + topicBytes + propertiesBytes;
}

/**
 * Position of the storeTimestamp field in a record with this sysFlag: 56,
 * or 68 when the born host is IPv6.
 *
 * @param sysFlag The record's sysFlag.
 * @returns The position relative to the record's first byte.
 */
export function storeTimestampPositionOf(sysFlag: number): number {
  return (sysFlag & SYS_FLAG_BORN_HOST_V6) === 0
    ? STORE_TIMESTAMP_POSITION_V4
    : STORE_TIMESTAMP_POSITION_V6;
}

/**
 * Writes queueOffset, physicalOffset and storeTimestamp into an encoded
 * record at `bytes[position]` (the fields the store knows only when it
 * appends). The storeTimestamp position follows the record's born-host type.
 *
 * @example
 * ```ts
 * import { MessageEncoder, patchRecord } from "./encoder.ts";
 *
 * const record = new Uint8Array(256);
 * new MessageEncoder().encode({ topic: "T", queueId: 0, body: new Uint8Array() }, record, 0);
 * patchRecord(record, 0, 0, 65536, 1700000000000);
 * ```
 *
 * @param bytes The buffer holding the record.
 * @param position The record's first byte.
 * @param queueOffset Queue offset (0 for PREPARED/ROLLBACK).
 * @param physicalOffset The record's commit-log offset.
 * @param storeTimestamp Store time, ms.
 */
export function patchRecord(
  bytes: Uint8Array,
  position: number,
  queueOffset: number,
  physicalOffset: number,
  storeTimestamp: number,
): void {
  if (
    !(Number.isSafeInteger(queueOffset) && queueOffset >= 0 &&
      Number.isSafeInteger(physicalOffset) && physicalOffset >= 0 &&
      Number.isSafeInteger(storeTimestamp))
  ) {
    throw new AssertionError(
      `Patch values must be non-negative safe integers (queueOffset ${queueOffset}, ` +
        `physicalOffset ${physicalOffset}, storeTimestamp ${storeTimestamp})`,
    );
  }
  const d = patchViews.of(bytes);
  setInt64(d, position + QUEUE_OFFSET_POSITION, queueOffset);
  setInt64(d, position + PHYSICAL_OFFSET_POSITION, physicalOffset);
  const sysFlag = bytes[position + SYS_FLAG_POSITION + 3]!;
  setInt64(
    d,
    position +
      ((sysFlag & SYS_FLAG_BORN_HOST_V6) === 0
        ? STORE_TIMESTAMP_POSITION_V4
        : STORE_TIMESTAMP_POSITION_V6),
    storeTimestamp,
  );
}

/**
 * Writes a BLANK record (`int32 size`, `int32 0xCBD43194`) at
 * `bytes[position]`; `size` is the number of bytes left in the segment.
 *
 * @param bytes The segment bytes.
 * @param position Where the BLANK starts.
 * @param size Bytes from `position` to the end of the segment (≥ 8).
 * @throws {RangeError} When `size` is below 8 or the 8 bytes do not fit.
 */
export function writeBlankRecord(bytes: Uint8Array, position: number, size: number): void {
  if (!Number.isInteger(size) || size < BLANK_RECORD_SIZE_BYTES || size > INT32_MAX) {
    throw new RangeError(`A BLANK record is at least 8 bytes, not ${size}`);
  }
  if (!(position >= 0 && position + BLANK_RECORD_SIZE_BYTES <= bytes.length)) {
    throw new RangeError(`A BLANK record at ${position} does not fit in ${bytes.length} bytes`);
  }
  // Once per segment: byte stores, no view.
  writeInt32(bytes, position + TOTAL_SIZE_POSITION, size);
  writeInt32(bytes, position + MAGIC_POSITION, BLANK_MAGIC_CODE);
}

const sharedEncoder = new MessageEncoder();

/**
 * Encodes one message into a new array, with the given placement (a
 * convenience for tests and tools; the put path uses {@link MessageEncoder}).
 *
 * @example
 * ```ts
 * import { encodeMessage } from "./encoder.ts";
 *
 * const record = encodeMessage(
 *   { topic: "T", queueId: 0, body: new Uint8Array([1, 2]) },
 *   { queueOffset: 0, physicalOffset: 0, storeTimestamp: 1700000000000 },
 * );
 * record.length; // 95
 * ```
 *
 * @param message The message.
 * @param placement queueOffset, physicalOffset and storeTimestamp (default 0).
 * @param encoder The encoder (its options apply).
 * @returns The record bytes.
 * @throws {MqStoreError} When the message is invalid.
 */
export function encodeMessage(
  message: MessageInput,
  placement: { queueOffset?: number; physicalOffset?: number; storeTimestamp?: number } = {},
  encoder: MessageEncoder = sharedEncoder,
): Uint8Array {
  const size = encoder.measure(message);
  if (typeof size !== "number") throw size;
  const bytes = new Uint8Array(size);
  const written = encoder.encode(message, bytes, 0);
  if (typeof written !== "number") throw written;
  patchRecord(
    bytes,
    0,
    placement.queueOffset ?? 0,
    placement.physicalOffset ?? 0,
    placement.storeTimestamp ?? 0,
  );
  return bytes;
}
