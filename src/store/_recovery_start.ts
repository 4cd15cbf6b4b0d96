/**
 * Where re-dispatch starts on open (SPEC §7, §8): the first commit-log
 * record the consume queues or the index may lack.
 *
 * ```
 * consume queues: none at all (deleted): the first record
 *                 else checkpoint.consumeQueueOffset (mqstore's block)
 *                 else clean: the furthest unit's message end
 *                 else: RocketMQ's walk back to the newest segment whose
 *                       first record is ≤ checkpoint min timestamp − 3 s
 * index:          clean: checkpoint.indexOffset, else as the queues
 *                 unclean: checkpoint.indexOffset (the load cut the files
 *                          back to it)
 *                 unclean, no mqstore block: the last kept file's
 *                          endPhyOffset, else the first record
 *                 whatever the exit: where the files the load dropped
 *                          began, when that is earlier (files newer than
 *                          the checkpoint, and every file after the first
 *                          of them; a file whose cut found its chains
 *                          broken, and every file after it)
 * ```
 *
 * mqstore's own offsets are preferred to timestamps: a clock stepped back
 * cannot make recovery skip records.
 *
 * The index's checkpoint offset was written after every index file was
 * flushed: each key of a record before it is in a file, kept (cut back to
 * the offset after a crash) or dropped by the load (a file written after
 * the checkpoint has a newer endTimestamp once its header is durable, or
 * is caught prepared). So re-dispatch starts there, or where the dropped
 * files began. Before this
 * rule a store whose messages carry no key (no index file at all), or
 * whose last key is old, replayed the whole log (or everything since
 * that key) after every crash. RocketMQ starts the abnormal recovery
 * from the consume queues' timestamp only (`messageIndexSafe` off, its
 * default), or from the index's too when it is on; this is that safe
 * mode with offsets.
 *
 * @module
 */

import type { StoreCheckpoint } from "../commit_log/store_checkpoint.ts";
import { timestampStartIndex } from "../commit_log/timestamp_start.ts";
import type { MappedFile } from "../segment/mapped_file.ts";
import type { IndexService } from "./index_service.ts";

/** What {@link recoveryStart} needs. */
export interface RecoveryStartInput {
  /** Whether the last close was clean. */
  clean: boolean;
  /** The checkpoint as loaded. */
  checkpoint: StoreCheckpoint;
  /** The commit-log segments after recovery. */
  files: readonly MappedFile[];
  /** The commit log's min offset. */
  minOffset: number;
  /** The commit log's end after recovery. */
  endOffset: number;
  /** The furthest message end the consume queues reference (-1: none). */
  consumeQueueEnd: number;
  /** The index, loaded; undefined without it. */
  index: IndexService | undefined;
}

/** Where re-dispatch starts and what the index already holds. */
export interface RecoveryStart {
  /** First record to dispatch again. */
  fromOffset: number;
  /**
   * Records at or below this offset are in the index already (-1: none);
   * always below the log's end.
   */
  indexSkipThrough: number;
}

/** Computes where re-dispatch starts; see the module doc. */
export async function recoveryStart(input: RecoveryStartInput): Promise<RecoveryStart> {
  const { checkpoint, minOffset, endOffset } = input;
  const clamp = (offset: number) => Math.min(Math.max(offset, minOffset), endOffset);
  let consumeQueueStart: number;
  if (input.consumeQueueEnd < 0) {
    // No unit anywhere (the queues were deleted, or a crash lost them
    // all): whatever the checkpoint says, every record goes in again.
    consumeQueueStart = minOffset;
  } else if (checkpoint.consumeQueueOffset >= 0) {
    consumeQueueStart = checkpoint.consumeQueueOffset;
  } else if (input.clean) {
    consumeQueueStart = input.consumeQueueEnd;
  } else {
    consumeQueueStart = await timestampStart(input.files, checkpoint.minTimestamp, minOffset);
  }
  let from = clamp(consumeQueueStart);
  let indexSkipThrough = -1;
  const index = input.index;
  if (index !== undefined) {
    const last = index.files[index.files.length - 1];
    // Below the log's end: a record written at or past it is new. A
    // writable load cut the files back to it; a read-only one kept them.
    indexSkipThrough = last !== undefined && last.indexCount > 1
      ? Math.min(last.endPhyOffset, endOffset - 1)
      : -1;
    let indexStart: number;
    if (checkpoint.indexOffset >= 0) {
      // Every key before the checkpoint's point is in a kept file (cut
      // back to the point after a crash) or in a dropped one.
      indexStart = checkpoint.indexOffset;
    } else if (input.clean) {
      indexStart = consumeQueueStart;
    } else {
      // A checkpoint without offsets (RocketMQ's): rebuild from the last
      // entry kept, or from the start when none is left.
      indexStart = indexSkipThrough >= 0 ? indexSkipThrough : minOffset;
    }
    // The files the load dropped are rebuilt from their beginning,
    // whatever the exit: a cut to the log's end drops one that fails its
    // checks, and every file after it, after a clean exit too.
    const droppedFrom = index.loadReport.droppedFromOffset;
    if (droppedFrom >= 0) indexStart = Math.min(indexStart, droppedFrom);
    from = Math.min(from, clamp(indexStart));
  }
  return { fromOffset: from, indexSkipThrough };
}

/**
 * RocketMQ's `recoverAbnormally` start: the newest segment whose first
 * record's storeTimestamp is at most `minTimestamp − 3 s`, else the first.
 */
async function timestampStart(
  files: readonly MappedFile[],
  minTimestamp: number,
  minOffset: number,
): Promise<number> {
  const index = await timestampStartIndex(files, minTimestamp);
  return index < 0 ? minOffset : files[index]!.fileFromOffset;
}
