/**
 * Constants of the consume-queue format (RocketMQ 4.9.8), with load-time
 * checks of their relations.
 *
 * ```
 * unit (20 bytes, big-endian)
 * 0x00  int64  commitLogOffset   where the message starts in the commit log
 * 0x08  int32  size              its record size
 * 0x0C  int64  tagsCode          hash of TAGS (or delivery time of a delayed message)
 * ```
 *
 * @module
 */

import { assert } from "../assert.ts";

/** Size of one consume-queue unit. */
export const CQ_UNIT_SIZE_BYTES = 0x14;

/** Position of the commit-log offset in a unit. */
export const CQ_UNIT_OFFSET_POSITION = 0x0;

/** Position of the record size in a unit. */
export const CQ_UNIT_SIZE_POSITION = 0x8;

/** Position of the tagsCode in a unit. */
export const CQ_UNIT_TAGS_CODE_POSITION = 0xC;

/**
 * Size field of a padding unit (`0, 0x7FFFFFFF, 0`): RocketMQ fills the
 * positions before the first unit of a queue whose first file starts past
 * queue offset 0 (`fillPreBlank`).
 */
export const CQ_PAD_UNIT_SIZE = 0x7FFF_FFFF;

/** Default consume-queue file size: 300 000 units (`mappedFileSizeConsumeQueue`). */
export const MAPPED_FILE_SIZE_CONSUME_QUEUE_DEFAULT = 300_000 * CQ_UNIT_SIZE_BYTES;

/** Name of the consume-queue directory under the store root. */
export const CONSUME_QUEUE_DIRECTORY_NAME = "consumequeue";

/** 2^32, to split and join 64-bit fields as two 32-bit halves. */
export const TWO_POW_32 = 0x1_0000_0000;

assert(
  CQ_UNIT_SIZE_POSITION === CQ_UNIT_OFFSET_POSITION + 8 &&
    CQ_UNIT_TAGS_CODE_POSITION === CQ_UNIT_SIZE_POSITION + 4 &&
    CQ_UNIT_SIZE_BYTES === CQ_UNIT_TAGS_CODE_POSITION + 8,
  "a consume-queue unit is int64, int32, int64 with no gap",
);
assert(
  MAPPED_FILE_SIZE_CONSUME_QUEUE_DEFAULT === 6_000_000 &&
    MAPPED_FILE_SIZE_CONSUME_QUEUE_DEFAULT % CQ_UNIT_SIZE_BYTES === 0,
  "the default consume-queue file is a whole number of units",
);
