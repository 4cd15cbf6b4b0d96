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

/** Size of the first file named like a segment under `directory`, or undefined. */
export function firstSegmentSize(directory: string): number | undefined {
  let names: string[];
  try {
    names = fs.readdirSync(directory).filter((name) => SEGMENT_NAME.test(name)).sort();
  } catch {
    return undefined;
  }
  for (const name of names) {
    const size = fs.statSync(path.join(directory, name)).size;
    if (size > 0) return size;
  }
  return undefined;
}

/** Size of the first consume-queue file of the store, or undefined when there is none. */
function consumeQueueFileSize(root: string): number | undefined {
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
      const size = firstSegmentSize(path.join(base, topic, queue));
      if (size !== undefined) return size;
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
  if (!fs.existsSync(path.join(directory, "commitlog"))) {
    throw new MqStoreError(
      "NOT_FOUND",
      `${directory} is not a store directory (no commitlog/ in it)`,
    );
  }
  const commitLogSize = firstSegmentSize(path.join(directory, "commitlog"));
  const consumeQueueSize = consumeQueueFileSize(directory);
  return await MessageStore.open(directory, {
    readOnly: true,
    adapter: "portable",
    ...(commitLogSize === undefined ? {} : { mappedFileSizeCommitLog: commitLogSize }),
    ...(consumeQueueSize === undefined ? {} : { mappedFileSizeConsumeQueue: consumeQueueSize }),
    ...(sizes ?? guessIndexSizes(directory) ?? {}),
    onWarning: () => {},
  });
}
