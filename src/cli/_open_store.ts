/**
 * Opening a store directory read-only for the CLI: segment sizes are read
 * from the files themselves, so `get` and `stats` work on a store written
 * with any `mappedFileSizeCommitLog` / `mappedFileSizeConsumeQueue`.
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";
import { MqStoreError } from "../errors.ts";
import { MessageStore } from "../store/message_store.ts";

/** Index table sizes, which a file's size alone cannot tell apart. */
export interface IndexSizes {
  /** `maxHashSlotNum`. */
  maxHashSlotNum: number;
  /** `maxIndexNum`. */
  maxIndexNum: number;
}

/** Index header bytes, and bytes per slot and per entry (SPEC §7). */
const INDEX_HEADER_BYTES = 40;
const INDEX_SLOT_BYTES = 4;
const INDEX_ENTRY_BYTES = 20;
/** RocketMQ's defaults (5 000 000 slots, 20 000 000 entries) keep 4 entries per slot. */
const INDEX_ENTRIES_PER_SLOT = 4;
/** Size of a consume-queue unit (SPEC §7). */
const CQ_UNIT_BYTES = 20;

/**
 * The index sizes of a store's first index file, assuming RocketMQ's ratio
 * of 4 entries per slot; undefined without index files or for another
 * ratio (give them with flags then).
 */
export function guessIndexSizes(root: string): IndexSizes | undefined {
  let names: string[];
  try {
    names = fs.readdirSync(path.join(root, "index")).filter((name) => /^[0-9]{17}$/.test(name));
  } catch {
    return undefined;
  }
  const first = names.sort()[0];
  if (first === undefined) return undefined;
  const size = fs.statSync(path.join(root, "index", first)).size;
  const perSlot = INDEX_SLOT_BYTES + INDEX_ENTRIES_PER_SLOT * INDEX_ENTRY_BYTES;
  if (size <= INDEX_HEADER_BYTES || (size - INDEX_HEADER_BYTES) % perSlot !== 0) return undefined;
  const slots = (size - INDEX_HEADER_BYTES) / perSlot;
  return { maxHashSlotNum: slots, maxIndexNum: slots * INDEX_ENTRIES_PER_SLOT };
}

const SEGMENT_NAME = /^[0-9]{20}$/;

/** Smallest and largest commit-log segment the store opens (see options.ts). */
const COMMIT_LOG_SEGMENT_MIN_BYTES = 0x1000;
const COMMIT_LOG_SEGMENT_MAX_BYTES = 0x7FFF_F000;
/** Largest consume-queue file the store opens. */
const CONSUME_QUEUE_FILE_MAX_BYTES = 0x7FFF_FFEC;

/** The first non-empty file named like a segment under `directory`, with its size. */
function firstSegment(directory: string): { file: string; sizeBytes: number } | undefined {
  let names: string[];
  try {
    names = fs.readdirSync(directory).filter((name) => SEGMENT_NAME.test(name)).sort();
  } catch {
    return undefined;
  }
  for (const name of names) {
    const file = path.join(directory, name);
    const sizeBytes = fs.statSync(file).size;
    if (sizeBytes > 0) return { file, sizeBytes };
  }
  return undefined;
}

/** Size of the first file named like a segment under `directory`, or undefined. */
export function firstSegmentSize(directory: string): number | undefined {
  return firstSegment(directory)?.sizeBytes;
}

/**
 * Throws unless `directory` holds a `commitlog/` directory: a path that is
 * no store must not be answered as an empty one.
 *
 * @throws {MqStoreError} `NOT_FOUND`.
 */
export function checkStoreDirectory(directory: string): void {
  let isDirectory = false;
  try {
    isDirectory = fs.statSync(path.join(directory, "commitlog")).isDirectory();
  } catch {
    isDirectory = false;
  }
  if (!isDirectory) {
    throw new MqStoreError(
      "NOT_FOUND",
      `${directory} is not a store directory (no commitlog/ directory in it)`,
    );
  }
}

/** The first consume-queue file of the store with its size, or undefined when there is none. */
function firstConsumeQueueFile(root: string): { file: string; sizeBytes: number } | undefined {
  const base = path.join(root, "consumequeue");
  let topics: string[];
  try {
    topics = fs.readdirSync(base);
  } catch {
    return undefined;
  }
  for (const topic of topics) {
    let queues: string[];
    try {
      queues = fs.readdirSync(path.join(base, topic));
    } catch {
      continue;
    }
    for (const queue of queues) {
      const first = firstSegment(path.join(base, topic, queue));
      if (first !== undefined) return first;
    }
  }
  return undefined;
}

/**
 * Opens `directory` read-only (no lock, no write), with the segment sizes
 * its files have; index sizes as given, else guessed from the files.
 *
 * @throws {MqStoreError} `NOT_FOUND` when it is not a store directory.
 */
export async function openStoreReadOnly(
  directory: string,
  sizes: IndexSizes | undefined,
): Promise<MessageStore> {
  checkStoreDirectory(directory);
  // Sizes come from the files: one no store writes is a corrupt file, not
  // an option out of range.
  const segment = firstSegment(path.join(directory, "commitlog"));
  const commitLogSize = segment?.sizeBytes;
  if (
    segment !== undefined &&
    (segment.sizeBytes < COMMIT_LOG_SEGMENT_MIN_BYTES ||
      segment.sizeBytes > COMMIT_LOG_SEGMENT_MAX_BYTES)
  ) {
    throw new MqStoreError(
      "INVALID_FILE",
      `Commit-log segment ${segment.file} is ${segment.sizeBytes} bytes; a segment is ${COMMIT_LOG_SEGMENT_MIN_BYTES} to ${COMMIT_LOG_SEGMENT_MAX_BYTES} bytes`,
    );
  }
  const consumeQueue = firstConsumeQueueFile(directory);
  const consumeQueueSize = consumeQueue?.sizeBytes;
  if (
    consumeQueue !== undefined &&
    (consumeQueue.sizeBytes % CQ_UNIT_BYTES !== 0 ||
      consumeQueue.sizeBytes > CONSUME_QUEUE_FILE_MAX_BYTES)
  ) {
    throw new MqStoreError(
      "INVALID_FILE",
      `Consume-queue file ${consumeQueue.file} is ${consumeQueue.sizeBytes} bytes; it must be a whole number of ${CQ_UNIT_BYTES}-byte units, at most ${CONSUME_QUEUE_FILE_MAX_BYTES}`,
    );
  }
  return await MessageStore.open(directory, {
    readOnly: true,
    adapter: "portable",
    ...(commitLogSize === undefined ? {} : { mappedFileSizeCommitLog: commitLogSize }),
    ...(consumeQueueSize === undefined ? {} : { mappedFileSizeConsumeQueue: consumeQueueSize }),
    ...(sizes ?? guessIndexSizes(directory) ?? {}),
    onWarning: () => {},
  });
}
