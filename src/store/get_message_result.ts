/**
 * What the read API answers (RocketMQ's `GetMessageResult` and
 * `QueryMessageResult`, with decoded messages instead of buffers).
 *
 * @module
 */

import type { DecodedMessage } from "../record/mod.ts";

/**
 * A message read back: every field of the record (SPEC §3). `body` and
 * `propertiesRaw` are copies, never views into a segment that retention
 * may delete.
 */
export type StoredMessage = DecodedMessage;

/**
 * The outcome of `getMessages`, RocketMQ's `GetMessageStatus` spellings.
 *
 * - `FOUND`: at least one message.
 * - `NO_MESSAGE_IN_QUEUE`: the queue exists but holds nothing.
 * - `OFFSET_OVERFLOW_ONE`: the offset is the queue's end (wait for more).
 * - `OFFSET_OVERFLOW_BADLY`: the offset is past the end.
 * - `OFFSET_TOO_SMALL`: the offset is below the queue's first kept unit.
 * - `NO_MATCHED_MESSAGE`: units were read but none matched the tags.
 * - `MESSAGE_WAS_REMOVING`: the units point into deleted commit-log bytes.
 * - `OFFSET_FOUND_NULL`: no unit could be read at the offset (file gone).
 * - `NO_MATCHED_LOGIC_QUEUE`: no such topic/queue.
 */
export type GetMessageStatus =
  | "FOUND"
  | "NO_MESSAGE_IN_QUEUE"
  | "OFFSET_OVERFLOW_ONE"
  | "OFFSET_OVERFLOW_BADLY"
  | "OFFSET_TOO_SMALL"
  | "NO_MATCHED_MESSAGE"
  | "MESSAGE_WAS_REMOVING"
  | "OFFSET_FOUND_NULL"
  | "NO_MATCHED_LOGIC_QUEUE";

/** Options of `getMessages`. */
export interface GetMessagesOptions {
  /**
   * Keep only messages with one of these TAGS (matched on tagsCode, then on
   * the TAGS text, so a hash collision is not served).
   *
   * @default {undefined}
   */
  tags?: readonly string[];
}

/** The answer of `getMessages`. */
export interface GetMessageResult {
  /** See {@link GetMessageStatus}. */
  status: GetMessageStatus;
  /** The messages, in queue order. */
  messages: StoredMessage[];
  /** Where the next read of this queue starts (RocketMQ's nextBeginOffset rules). */
  nextQueueOffset: number;
  /** The queue's first readable queue offset. */
  minQueueOffset: number;
  /** The queue offset the queue's next message gets. */
  maxQueueOffset: number;
}

/** Options of `queryMessages`. */
export interface QueryMessagesOptions {
  /**
   * Most messages returned (capped at 64, RocketMQ's maxMsgsNumBatch).
   *
   * @default {64}
   */
  maxCount?: number;
  /**
   * Earliest storeTimestamp, ms.
   *
   * @default {0}
   */
  beginTimestamp?: number;
  /**
   * Latest storeTimestamp, ms.
   *
   * @default {Number.MAX_SAFE_INTEGER}
   */
  endTimestamp?: number;
}

/** The answer of `queryMessages`. */
export interface QueryMessageResult {
  /** Messages of the topic carrying the key, newest first. */
  messages: StoredMessage[];
  /** endTimestamp of the newest index file (0 without one). */
  indexLastUpdateTimestamp: number;
  /** endPhyOffset of the newest index file (0 without one). */
  indexLastUpdatePhyoffset: number;
}
