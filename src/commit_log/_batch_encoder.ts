/**
 * The encoder of `putMessages` batches (SPEC §3): one topic and queue, no
 * transaction type and no DELAY inside; the first message's queueId,
 * sysFlag, bornTimestamp, hosts and reconsumeTimes are every record's.
 *
 * ```
 * member 0 ─► MessageEncoder.encodeBefore (every check)  ─► header words read back
 * member i ─► same topic/queue, plain fields, no DELAY?  ─► fast: size, body CRC,
 *               │                                            header words, body, tail
 *               └─ anything else ─► member 0's path (the exact error, or the record)
 * placement ─► in place: queueOffset, physicalOffset, storeTimestamp as each
 *               record is written; into a scratch: patch() from the sizes
 * ```
 *
 * Running each member through the single-message path checked and wrote,
 * per member, what is the same for the whole batch: the topic, the hosts,
 * the shared header fields (about a microsecond a member at 128 B). Here
 * member 0 goes through that path, and the others are checked for what may
 * differ (body, flag, preparedTransactionOffset, properties) and written
 * from the first record's header words. Whatever the fast check does not
 * take (a wrong type, a refused member, a different topic) goes through the
 * single-message path, which gives the same record or the same error as
 * before: the fast path only ever takes members that path accepts, and
 * writes the same bytes.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import {
  BODY_CRC_POSITION,
  DataViewCache,
  FLAG_POSITION,
  HOST_V6_EXTRA_BYTES,
  MAGIC_POSITION,
  MESSAGE_MAGIC_CODE,
  type MessageEncoder,
  type MessageInput,
  PHYSICAL_OFFSET_POSITION,
  PROPERTIES_LENGTH_MAX_BYTES,
  PROPERTY_DELAY,
  PROPERTY_WAIT,
  QUEUE_ID_POSITION,
  QUEUE_OFFSET_POSITION,
  RECORD_FIXED_SIZE_BYTES,
  setInt64,
  STORE_TIMESTAMP_POSITION_V4,
  STORE_TIMESTAMP_POSITION_V6,
  SYS_FLAG_BORN_HOST_V6,
  SYS_FLAG_POSITION,
  SYS_FLAG_STORE_HOST_V6,
  SYS_FLAG_TRANSACTION_MASK,
  TOTAL_SIZE_POSITION,
  wholeBodyCrc,
  writeBodyCrcs,
} from "../record/mod.ts";
import { nativeBodyCrcBytesMax } from "../record/crc32.ts";
import { createLayout, isInt32, TAIL_HAS_DELAY, TAIL_HAS_WAIT } from "../record/validate.ts";
import { assert } from "../assert.ts";
import type { DispatchHints } from "./dispatch_hints.ts";
import type { TopicQueueTable } from "./topic_queue_table.ts";
import { propertyOf } from "./_delay.ts";

/**
 * Words from sysFlag to reconsumeTimes with IPv4 hosts: sysFlag,
 * bornTimestamp (2), bornHost (2), storeTimestamp (2), storeHost (2),
 * reconsumeTimes. An IPv6 host adds 3.
 */
const HEADER_WORDS_V4 = 0x0A;
/** Header words with both hosts IPv6. */
const HEADER_WORDS_MAX = HEADER_WORDS_V4 + 2 * (HOST_V6_EXTRA_BYTES / 4);
/** Record sizes remembered at first; the array doubles for larger batches. */
const INITIAL_SIZES = 0x400;
/**
 * Batches whose encode sets the topic again even when it did not change
 * (see {@link BatchEncoder.encode}): the topic-change call gets type
 * feedback while the encoder is still unoptimized.
 */
const TOPIC_FEEDBACK_BATCHES = 0x10;
/** Bytes in a topic length field. */
const TOPIC_LENGTH_BYTES = 0x01;
/** Bytes in a properties length field. */
const PROPERTIES_LENGTH_BYTES = 0x02;
/** Longest tail of a member without properties: a 127-character topic and both lengths. */
const BARE_TAIL_MAX_BYTES = 0x84;

/**
 * Why member `index` cannot be in a batch with `first`: another queue, a
 * transaction type, a DELAY.
 */
function batchMemberError(
  message: MessageInput,
  first: MessageInput,
  index: number,
): MqStoreError | undefined {
  if (message.topic !== first.topic || message.queueId !== first.queueId) {
    return new MqStoreError(
      "MESSAGE_ILLEGAL",
      `Message ${index} of the batch goes to ${message.topic}/${message.queueId}; a batch goes to one queue (${first.topic}/${first.queueId})`,
    );
  }
  const sysFlag = message.sysFlag;
  if (typeof sysFlag === "number" && (sysFlag & SYS_FLAG_TRANSACTION_MASK) !== 0) {
    return new MqStoreError(
      "MESSAGE_ILLEGAL",
      `Message ${index} of the batch has transaction type 0x${
        (sysFlag & SYS_FLAG_TRANSACTION_MASK).toString(16)
      }; a batch cannot hold transaction messages`,
    );
  }
  const properties = message.properties;
  if (properties !== undefined && properties !== null) {
    const delay = propertyOf(properties, PROPERTY_DELAY);
    if (delay !== undefined) {
      return new MqStoreError(
        "MESSAGE_ILLEGAL",
        `Message ${index} of the batch has DELAY "${delay}"; a batch cannot hold delayed messages`,
      );
    }
  }
  return undefined;
}

/**
 * Encodes batches for one commit log, with its {@link MessageEncoder} for
 * the first member and any member the fast check does not take.
 */
export class BatchEncoder {
  /** The single-message encoder (its options: limits, default hosts, clock). */
  readonly #encoder: MessageEncoder;
  /** maxMessageSize: a body, a record and a whole batch, bytes. */
  readonly #maxBytes: number;
  /** The tail (topic, properties) of fast members with properties. */
  readonly #tail = createLayout().tail;
  /** The tail of a member without properties: topic length, topic, 0x0000. */
  readonly #bare = new Uint8Array(BARE_TAIL_MAX_BYTES);
  readonly #bareView = new DataView(this.#bare.buffer);
  /** Bytes of {@link #bare} in use. */
  #bareBytes = 0;
  /**
   * The topic {@link #bare} and {@link #tail} hold ("" before the first: no
   * topic is empty). Never undefined: V8 records no type feedback in a
   * function's first calls, so `topic !== this.#topic` was optimized for
   * strings only, and a new encoder's first batch (a new store in the
   * process) threw the optimized encode away on undefined ("wrong instance
   * type" in `--trace-deopt`); on Node 20 recompiling encode then took
   * 150–220 ms of TurboFan time while its first batches ran unoptimized.
   */
  #topic = "";
  /** Batches whose topic was set, up to {@link TOPIC_FEEDBACK_BATCHES}. */
  #topicSets = 0;
  /** The first record's words from sysFlag to reconsumeTimes. */
  readonly #header = new Int32Array(HEADER_WORDS_MAX);
  /** Record sizes of the batch encoded last. */
  #sizes = new Int32Array(INITIAL_SIZES);
  /** Members of the batch encoded last (0 after a refused one). */
  #count = 0;
  /** Whether the batch encoded last waits for the flush. */
  #wait = false;
  /** Position of storeTimestamp in the records of the batch encoded last. */
  #storeTimestampPosition = 0;
  /** The view of the bytes encoded into or patched. */
  readonly #views = new DataViewCache();
  /** The queue counters a placed batch reads its first queue offset from. */
  readonly #queueOffsets: TopicQueueTable | undefined;
  /** Whether the batch encoded last was placed as it was written (see {@link encode}). */
  #placed = false;
  /** The first queue offset of the batch placed last. */
  #queueOffset = 0;
  /** See {@link uniformSize}. */
  #uniformSize = -1;
  /**
   * The members' body CRCs left to one native call after the loop (see
   * `writeBodyCrcs`), as (body position, body length, CRC position).
   */
  #crcRanges = new Int32Array(3 * 0x400);

  /**
   * @param encoder The commit log's encoder (its limits apply).
   * @param queueOffsets The commit log's queue counters, for batches placed as they are encoded.
   */
  constructor(encoder: MessageEncoder, queueOffsets?: TopicQueueTable) {
    this.#encoder = encoder;
    this.#maxBytes = encoder.maxMessageSizeBytes;
    this.#queueOffsets = queueOffsets;
    // The tail's first setTopic compares with no topic at all: done here,
    // not in encode, whose optimized code only ever saw a topic there.
    this.#tail.setTopic("");
  }

  /**
   * Whether the batch encoded last has its queueOffset, physicalOffset and
   * storeTimestamp written already (encoded with an offset): no {@link patch}.
   */
  get placed(): boolean {
    return this.#placed;
  }

  /** The first queue offset the batch encoded last was placed with (when {@link placed}). */
  get queueOffset(): number {
    return this.#queueOffset;
  }

  /** Members of the batch encoded last (0 when it was refused). */
  get count(): number {
    return this.#count;
  }

  /** Record sizes of the batch encoded last (the first {@link count}). */
  get sizes(): Int32Array {
    return this.#sizes;
  }

  /**
   * The size of every record of the batch encoded last when they are all
   * the same size (bodies and properties of one length), else -1: its
   * result then needs no copy of {@link sizes}.
   */
  get uniformSize(): number {
    return this.#uniformSize;
  }

  /** Whether the batch encoded last waits for the flush (no member says WAIT=false). */
  get wait(): boolean {
    return this.#wait;
  }

  /**
   * Checks the members of a batch and encodes them one after the other
   * from `bytes[start]`, staging a dispatch hint for each. The batch may
   * use `bytes[start, end)`: a batch that would cross `end` is over
   * maxMessageSize.
   *
   * With `offset` (the first record's commit-log offset, when the batch is
   * encoded where it stays) the records get their queueOffset (from the
   * queue's counter, read and not advanced), physicalOffset and
   * storeTimestamp as they are written: one pass over the records instead
   * of two. Without it (-1) those stay 0 until {@link patch}.
   *
   * Until every member is encoded the first record's magic code stays 0,
   * so that a crash in between leaves nothing a recovery could take for a
   * record (when `bytes` is a mapped segment); a refused batch zeroes what
   * it wrote, leaving the bytes as they were (a segment's unwritten tail
   * is zeros).
   *
   * @param messages The batch (at least one message, each an object).
   * @param bytes Where to write.
   * @param start The first record's position.
   * @param end One past the last byte the batch may use.
   * @param hints Where to stage the members' dispatch hints.
   * @param wait Whether the batch waits for the flush unless a member says WAIT=false.
   * @param offset The first record's commit-log offset, or -1 to leave the placement to {@link patch}.
   * @param storeTimestamp Store time, ms (with `offset`).
   * @returns The batch's size in bytes, or why it is refused.
   * @throws {TypeError} For a member of a wrong type (nothing written).
   */
  encode(
    messages: readonly MessageInput[],
    bytes: Uint8Array,
    start: number,
    end: number,
    hints: DispatchHints | undefined,
    wait: boolean,
    offset = -1,
    storeTimestamp = 0,
  ): number | MqStoreError {
    const first = messages[0]!;
    const count = messages.length;
    this.#count = 0;
    this.#placed = false;
    if (this.#sizes.length < count) {
      let length = this.#sizes.length;
      while (length < count) length *= 2;
      this.#sizes = new Int32Array(length);
    }
    const sizes = this.#sizes;
    const max = this.#maxBytes;
    hints?.beginStage();
    let position = start;
    let error: MqStoreError | undefined;
    let encoded = false;
    this.#wait = wait;
    try {
      // Member 0 through every check: it also validates what the others share.
      const firstSize = this.#encodeChecked(first, first, 0, bytes, start, start, end);
      if (typeof firstSize !== "number") {
        error = firstSize;
        return error;
      }
      // Encoded without its magic code: until the batch is whole, it is no
      // record (see above).
      const d = this.#views.of(bytes);
      sizes[0] = firstSize;
      position = start + firstSize;
      const topic = first.topic;
      const queueId = first.queueId;
      hints?.stage(topic, queueId, this.#encoder.lastTail);
      const sysFlag = d.getInt32(start + SYS_FLAG_POSITION);
      const storeTimestampAt = (sysFlag & SYS_FLAG_BORN_HOST_V6) === 0
        ? STORE_TIMESTAMP_POSITION_V4
        : STORE_TIMESTAMP_POSITION_V6;
      this.#storeTimestampPosition = storeTimestampAt;
      const placing = offset >= 0;
      // The queue's next offset, read only: the caller advances the counter
      // once the batch is appended (a refused batch leaves it as it was).
      const queueOffsets = this.#queueOffsets;
      const queueOffset = placing ? queueOffsets?.get(topic, queueId) ?? 0 : 0;
      if (placing) {
        assert(
          queueOffsets !== undefined && Number.isSafeInteger(offset) &&
            Number.isSafeInteger(storeTimestamp),
          "a placed batch has the queue counters and safe-integer placement values",
        );
        // Before the header words are read: every member shares storeTimestamp.
        setInt64(d, start + QUEUE_OFFSET_POSITION, queueOffset);
        setInt64(d, start + PHYSICAL_OFFSET_POSITION, offset);
        setInt64(d, start + storeTimestampAt, storeTimestamp);
      }
      if (count === 1) {
        encoded = true;
        d.setInt32(start + MAGIC_POSITION, MESSAGE_MAGIC_CODE);
        this.#count = 1;
        this.#uniformSize = firstSize;
        this.#placed = placing;
        this.#queueOffset = queueOffset;
        return firstSize;
      }
      // What the first record says every member shares.
      const v6Hosts = ((sysFlag & SYS_FLAG_BORN_HOST_V6) === 0 ? 0 : 1) +
        ((sysFlag & SYS_FLAG_STORE_HOST_V6) === 0 ? 0 : 1);
      const headerWords = HEADER_WORDS_V4 + v6Hosts * (HOST_V6_EXTRA_BYTES / 4);
      const header = this.#header;
      for (let w = 0; w < headerWords; w++) {
        header[w] = d.getInt32(start + SYS_FLAG_POSITION + 4 * w);
      }
      const afterHeader = SYS_FLAG_POSITION + 4 * headerWords;
      const bareSize = RECORD_FIXED_SIZE_BYTES + v6Hosts * HOST_V6_EXTRA_BYTES + topic.length;
      // A new encoder (a new store in the process) sets its first topic in
      // code V8 optimized while the process's first encoder ran: with no
      // type feedback for this call (V8 records none in a function's first
      // call, the only one where that encoder's topic changed), it threw
      // the optimized encode away there (seen with `--trace-deopt`) and the
      // new store's first batches ran unoptimized while encode, 70 ms of
      // TurboFan work, was compiled again. Set again in the first batches,
      // the call has its feedback.
      if (topic !== this.#topic || this.#topicSets < TOPIC_FEEDBACK_BATCHES) {
        this.#topicSets++;
        this.#setTopic(topic);
      }
      const tail = this.#tail;
      const bare = this.#bareView;
      const bareLast = this.#bareBytes - 4;
      // physicalOffset - position of every record: their distance is the same.
      const offsetDelta = offset - start;
      let waiting = this.#wait;
      let uniform = true;
      // Members without properties not staged yet (see DispatchHints.stageBare):
      // staged a range at a time, before the next member staged otherwise.
      let bareToStage = 0;
      // The IPv4 layout's header words (HEADER_WORDS_V4), as locals.
      const h0 = header[0]!, h1 = header[1]!, h2 = header[2]!, h3 = header[3]!;
      const h4 = header[4]!, h5 = header[5]!, h6 = header[6]!, h7 = header[7]!;
      const h8 = header[8]!, h9 = header[9]!;
      // A native writer (Bun with libdeflate, Node with WebAssembly) does a
      // batch's CRCs in one call: 23–27 ns a 128 B body on Bun against
      // 65–75 ns for a call each. Bodies past crcBatchMaxBytes (where the
      // writer is slower than a call each) are not given to it.
      let crcRanges = this.#crcRanges;
      const crcBatchMaxBytes = nativeBodyCrcBytesMax();
      if (crcBatchMaxBytes >= 0 && crcRanges.length < 3 * count) {
        this.#crcRanges = crcRanges = new Int32Array(3 * count);
      }
      let crcCount = 0;
      for (let i = 1; i < count; i++) {
        const message = messages[i]!;
        const body = message.body;
        const flag = message.flag;
        const memberSysFlag = message.sysFlag;
        const prepared = message.preparedTransactionOffset;
        const properties = message.properties;
        let size = -1;
        let withProperties = false;
        // What the single path would accept without a word (see the module
        // doc); anything else goes there for its verdict.
        if (
          body instanceof Uint8Array && message.topic === topic && message.queueId === queueId &&
          (flag === undefined || isInt32(flag)) &&
          (typeof memberSysFlag !== "number" ||
            (memberSysFlag & SYS_FLAG_TRANSACTION_MASK) === 0) &&
          (prepared === undefined || Number.isSafeInteger(prepared)) && body.length <= max
        ) {
          if (properties === undefined) {
            size = bareSize + body.length;
          } else if (typeof properties === "object" && properties !== null) {
            // Encoded first: the recorded pairs say whether DELAY or WAIT
            // are there at all, and only then is the member's object asked
            // (DELAY: the single path's verdict). A malformed member goes to
            // the single path, which gives its error (a DELAY's first).
            let propertiesBytes = -1;
            try {
              propertiesBytes = tail.setProperties(properties);
            } catch {
              // See above.
            }
            if (
              propertiesBytes >= 0 && propertiesBytes <= PROPERTIES_LENGTH_MAX_BYTES &&
              tail.pairsKnown
            ) {
              const flags = tail.batchFlags();
              if ((flags & TAIL_HAS_DELAY) === 0) {
                if (
                  (flags & TAIL_HAS_WAIT) !== 0 && waiting &&
                  propertyOf(properties, PROPERTY_WAIT) === "false"
                ) {
                  waiting = false;
                }
                size = bareSize + body.length + propertiesBytes;
                withProperties = true;
              }
            }
          }
        }
        if (size < 0 || size > max) {
          // The single path: the same record, or the member's error.
          this.#wait = waiting;
          const checked = this.#encodeChecked(message, first, i, bytes, start, position, end);
          if (typeof checked !== "number") {
            error = checked;
            return error;
          }
          waiting = this.#wait;
          if (placing) {
            setInt64(d, position + QUEUE_OFFSET_POSITION, queueOffset + i);
            setInt64(d, position + PHYSICAL_OFFSET_POSITION, offsetDelta + position);
            setInt64(d, position + storeTimestampAt, storeTimestamp);
          }
          if (checked !== firstSize) uniform = false;
          sizes[i] = checked;
          position += checked;
          if (hints !== undefined) {
            hints.stageBare(topic, queueId, bareToStage);
            bareToStage = 0;
            hints.stage(topic, queueId, this.#encoder.lastTail);
          }
          continue;
        }
        if (position + size > end) {
          error = this.#overError(position + size - start, i);
          return error;
        }
        const p = position;
        const bodyBytes = body.length;
        d.setInt32(p + TOTAL_SIZE_POSITION, size);
        d.setInt32(p + MAGIC_POSITION, MESSAGE_MAGIC_CODE);
        if (bodyBytes > crcBatchMaxBytes) {
          d.setInt32(p + BODY_CRC_POSITION, wholeBodyCrc(body));
        } else {
          const r = 3 * crcCount++;
          crcRanges[r] = p + afterHeader + 12;
          crcRanges[r + 1] = bodyBytes;
          crcRanges[r + 2] = p + BODY_CRC_POSITION;
        }
        d.setInt32(p + QUEUE_ID_POSITION, queueId);
        d.setInt32(p + FLAG_POSITION, flag ?? 0);
        // queueOffset and physicalOffset: 0 until patch() when not placing.
        setInt64(d, p + QUEUE_OFFSET_POSITION, placing ? queueOffset + i : 0);
        setInt64(d, p + PHYSICAL_OFFSET_POSITION, placing ? offsetDelta + p : 0);
        if (v6Hosts === 0) {
          // Straight-line stores of locals: the loop over the array cost
          // about 30 ns a member more on Deno (measured, 128 B bodies).
          d.setInt32(p + SYS_FLAG_POSITION, h0);
          d.setInt32(p + SYS_FLAG_POSITION + 0x04, h1);
          d.setInt32(p + SYS_FLAG_POSITION + 0x08, h2);
          d.setInt32(p + SYS_FLAG_POSITION + 0x0C, h3);
          d.setInt32(p + SYS_FLAG_POSITION + 0x10, h4);
          d.setInt32(p + SYS_FLAG_POSITION + 0x14, h5);
          d.setInt32(p + SYS_FLAG_POSITION + 0x18, h6);
          d.setInt32(p + SYS_FLAG_POSITION + 0x1C, h7);
          d.setInt32(p + SYS_FLAG_POSITION + 0x20, h8);
          d.setInt32(p + SYS_FLAG_POSITION + 0x24, h9);
        } else {
          for (let w = 0; w < headerWords; w++) {
            d.setInt32(p + SYS_FLAG_POSITION + 4 * w, header[w]!);
          }
        }
        let q = p + afterHeader;
        if (prepared === undefined) {
          d.setInt32(q, 0);
          d.setInt32(q + 4, 0);
        } else {
          setInt64(d, q, prepared);
        }
        d.setInt32(q + 8, bodyBytes);
        q += 12;
        bytes.set(body, q);
        q += bodyBytes;
        // The tail in whole words, then its last four bytes (overlapping
        // the previous word with the same values): never a byte past it.
        if (withProperties) {
          const from = tail.start;
          const last = tail.end - from - 4;
          const source = tail.view;
          for (let k = 0; k < last; k += 4) d.setInt32(q + k, source.getInt32(from + k));
          d.setInt32(q + last, source.getInt32(from + last));
          if (hints !== undefined) {
            if (bareToStage > 0) {
              hints.stageBare(topic, queueId, bareToStage);
              bareToStage = 0;
            }
            hints.stage(topic, queueId, tail);
          }
        } else {
          for (let k = 0; k < bareLast; k += 4) d.setInt32(q + k, bare.getInt32(k));
          d.setInt32(q + bareLast, bare.getInt32(bareLast));
          bareToStage++;
        }
        if (size !== firstSize) uniform = false;
        sizes[i] = size;
        position += size;
      }
      hints?.stageBare(topic, queueId, bareToStage);
      if (crcCount > 0) writeBodyCrcs(bytes, crcRanges, crcCount);
      this.#wait = waiting;
      encoded = true;
      d.setInt32(start + MAGIC_POSITION, MESSAGE_MAGIC_CODE);
      this.#count = count;
      this.#uniformSize = uniform ? firstSize : -1;
      this.#placed = placing;
      this.#queueOffset = queueOffset;
      return position - start;
    } finally {
      // Refused, or a member of the wrong type threw: undo what was written.
      if (!encoded) bytes.fill(0, start, position);
    }
  }

  /**
   * Writes queueOffset, physicalOffset and storeTimestamp into the records
   * of the batch encoded last, now at `bytes[position]`.
   *
   * @param bytes Where the records are.
   * @param position The first record's position.
   * @param queueOffset The first record's queue offset.
   * @param offset The first record's commit-log offset.
   * @param storeTimestamp Store time, ms.
   * @returns The bytes of the records patched (the batch's size).
   */
  patch(
    bytes: Uint8Array,
    position: number,
    queueOffset: number,
    offset: number,
    storeTimestamp: number,
  ): number {
    assert(
      Number.isSafeInteger(queueOffset) && queueOffset >= 0 && Number.isSafeInteger(offset) &&
        offset >= 0 && Number.isSafeInteger(storeTimestamp),
      "patch values are non-negative safe integers",
    );
    const d = this.#views.of(bytes);
    const sizes = this.#sizes;
    const count = this.#count;
    const storeTimestampAt = this.#storeTimestampPosition;
    let p = position;
    for (let i = 0; i < count; i++) {
      const physicalOffset = offset + (p - position);
      setInt64(d, p + QUEUE_OFFSET_POSITION, queueOffset + i);
      setInt64(d, p + PHYSICAL_OFFSET_POSITION, physicalOffset);
      setInt64(d, p + storeTimestampAt, storeTimestamp);
      p += sizes[i]!;
    }
    return p - position;
  }

  /**
   * Member `index` at `position` through the single-message path: batch
   * membership, WAIT, every check of the encoder (`start`: the batch's
   * first byte, `end`: the batch's bound).
   */
  #encodeChecked(
    message: MessageInput,
    first: MessageInput,
    index: number,
    bytes: Uint8Array,
    start: number,
    position: number,
    end: number,
  ): number | MqStoreError {
    const error = batchMemberError(message, first, index);
    if (error !== undefined) return error;
    const properties = message.properties;
    if (
      this.#wait && properties !== undefined && properties !== null &&
      propertyOf(properties, PROPERTY_WAIT) === "false"
    ) {
      this.#wait = false;
    }
    // The first message's sysFlag, bornTimestamp (the put's start when it
    // has none), hosts and reconsumeTimes are every record's: read from it,
    // not from a merged copy of each message.
    // Member 0's magic code is written once the batch is whole (see #encode).
    const size = this.#encoder.encodeBefore(
      message,
      bytes,
      position,
      end,
      first,
      0,
      0,
      index === 0 ? 0 : MESSAGE_MAGIC_CODE,
    );
    if (typeof size !== "number") {
      return new MqStoreError(size.code, `Message ${index} of the batch: ${size.message}`);
    }
    if (position + size > end) return this.#overError(position + size - start, index);
    return size;
  }

  #overError(bytes: number, index: number): MqStoreError {
    return new MqStoreError(
      "MESSAGE_ILLEGAL",
      `The batch is over ${bytes} bytes at message ${index}, maxMessageSize is ${this.#maxBytes} bytes`,
    );
  }

  /** Puts `topic` (checked: ASCII, 1–127 characters) into both tails. */
  #setTopic(topic: string): void {
    const bare = this.#bare;
    const length = topic.length;
    bare[0] = length;
    for (let i = 0; i < length; i++) bare[TOPIC_LENGTH_BYTES + i] = topic.charCodeAt(i);
    bare[TOPIC_LENGTH_BYTES + length] = 0;
    bare[TOPIC_LENGTH_BYTES + length + 1] = 0;
    this.#bareBytes = TOPIC_LENGTH_BYTES + length + PROPERTIES_LENGTH_BYTES;
    // The tail skips a topic it holds: in the feedback batches (see
    // TOPIC_FEEDBACK_BATCHES) it is made to write it, so that its code,
    // inlined here, has feedback too (else a new store's first topic threw
    // the optimized encode away on "insufficient type feedback").
    if (this.#topicSets <= TOPIC_FEEDBACK_BATCHES) this.#tail.setTopic("");
    this.#tail.setTopic(topic);
    this.#topic = topic;
  }
}
