/**
 * Constants of the index-file format (RocketMQ 4.9.8), with load-time
 * checks of their relations.
 *
 * ```
 * header (40 bytes, big-endian)
 * 0x00  int64  beginTimestamp    storeTimestamp of the first entry
 * 0x08  int64  endTimestamp      storeTimestamp of the last entry
 * 0x10  int64  beginPhyOffset    commit-log offset of the first entry
 * 0x18  int64  endPhyOffset      commit-log offset of the last entry
 * 0x20  int32  hashSlotCount     slots that were empty when an entry went in
 * 0x24  int32  indexCount        next entry number (starts at 1: entry 0 is never used)
 * then hashSlotNum int32 slots    newest entry number of the slot, 0 = empty
 * then indexNum 20-byte entries:
 * +0x00 int32  keyHash           abs(String.hashCode(topic + "#" + key)), 0 if still negative
 * +0x04 int64  phyOffset         the message's commit-log offset
 * +0x0C int32  timeDiffSec       (storeTimestamp - beginTimestamp) / 1000, clamped to [0, 2^31-1]
 * +0x10 int32  prevIndex         previous entry of the slot's chain, 0 = end
 * ```
 *
 * @module
 */

import { assert } from "../assert.ts";

/** Size of the index-file header. */
export const INDEX_HEADER_SIZE_BYTES = 0x28;

/** Header field positions. */
export const HEADER_BEGIN_TIMESTAMP_POSITION = 0x00;
/** Position of endTimestamp in the header. */
export const HEADER_END_TIMESTAMP_POSITION = 0x08;
/** Position of beginPhyOffset in the header. */
export const HEADER_BEGIN_PHY_OFFSET_POSITION = 0x10;
/** Position of endPhyOffset in the header. */
export const HEADER_END_PHY_OFFSET_POSITION = 0x18;
/** Position of hashSlotCount in the header. */
export const HEADER_HASH_SLOT_COUNT_POSITION = 0x20;
/** Position of indexCount in the header. */
export const HEADER_INDEX_COUNT_POSITION = 0x24;

/** Size of one hash slot. */
export const HASH_SLOT_SIZE_BYTES = 0x4;

/** Size of one index entry. */
export const INDEX_ENTRY_SIZE_BYTES = 0x14;

/** Entry field positions, relative to the entry. */
export const ENTRY_KEY_HASH_POSITION = 0x0;
/** Position of phyOffset in an entry. */
export const ENTRY_PHY_OFFSET_POSITION = 0x4;
/** Position of timeDiffSec in an entry. */
export const ENTRY_TIME_DIFF_POSITION = 0xC;
/** Position of prevIndex in an entry. */
export const ENTRY_PREV_INDEX_POSITION = 0x10;

/** The "no entry" value of a slot or a prevIndex. */
export const INVALID_INDEX = 0;

/** Largest int32 (timeDiffSec clamp). */
export const INT32_MAX = 0x7FFF_FFFF;

/** Default `maxHashSlotNum`. */
export const MAX_HASH_SLOT_NUM_DEFAULT = 5_000_000;

/** Default `maxIndexNum`. */
export const MAX_INDEX_NUM_DEFAULT = 20_000_000;

/** RocketMQ's `maxMsgsNumBatch`: a query returns at most this many offsets. */
export const MAX_MSGS_NUM_BATCH_DEFAULT = 64;

/** Name of the index directory under the store root. */
export const INDEX_DIRECTORY_NAME = "index";

/** Index file names: `yyyyMMddHHmmssSSS`, the creation time in local time. */
export const INDEX_FILE_NAME_PATTERN = /^[0-9]{17}$/;

/**
 * An index file prepared ahead, not yet in use: `<name>.tmp`. RocketMQ
 * skips such a name (its `Long.parseLong` of the name fails) and mqstore
 * removes it on open.
 */
export const PREPARED_INDEX_FILE_NAME_PATTERN = /^[0-9]{17}\.tmp$/;

/**
 * beginTimestamp and endTimestamp of a prepared file's header until it is
 * put in use (2^53 − 1, far past any store time): should a crash leave it
 * under its real name, RocketMQ's unclean load deletes it (its
 * endTimestamp is newer than any checkpoint), and so does mqstore's load.
 */
export const PREPARED_TIMESTAMP = 0x1F_FFFF_FFFF_FFFF;

/**
 * Bytes of entries an index file pre-faults at a time ahead of its writer
 * (`IndexFile`'s pre-fault): 4 MiB, 209,715 entries, about 40 ms of a
 * writer putting 2.5 M records of two keys a second, against the 6–12 ms
 * the pre-fault of a chunk took here.
 */
export const INDEX_POPULATE_CHUNK_BYTES = 0x40_0000;

assert(
  INDEX_POPULATE_CHUNK_BYTES % 0x1000 === 0,
  "an index pre-fault chunk is a whole number of 4 KiB pages",
);
assert(
  HEADER_INDEX_COUNT_POSITION + 4 === INDEX_HEADER_SIZE_BYTES &&
    HEADER_HASH_SLOT_COUNT_POSITION + 4 === HEADER_INDEX_COUNT_POSITION &&
    HEADER_END_PHY_OFFSET_POSITION + 8 === HEADER_HASH_SLOT_COUNT_POSITION,
  "the index header is four int64 then two int32",
);
assert(
  ENTRY_PREV_INDEX_POSITION + 4 === INDEX_ENTRY_SIZE_BYTES &&
    ENTRY_TIME_DIFF_POSITION + 4 === ENTRY_PREV_INDEX_POSITION &&
    ENTRY_PHY_OFFSET_POSITION + 8 === ENTRY_TIME_DIFF_POSITION,
  "an index entry is int32, int64, int32, int32",
);
assert(
  INDEX_HEADER_SIZE_BYTES + 64 * HASH_SLOT_SIZE_BYTES + 256 * INDEX_ENTRY_SIZE_BYTES === 5416,
  "a 64/256 index file is 5416 bytes, as RocketMQ writes it",
);
