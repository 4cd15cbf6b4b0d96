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
 *                 unclean: the last kept file's endPhyOffset (files newer
 *                          than the checkpoint were dropped)
 * ```
 *
 * mqstore's own offsets are preferred to timestamps: a clock stepped back
 * cannot make recovery skip records.
 *
 * @module
 */

import type { StoreCheckpoint } from "../commit_log/store_checkpoint.ts";
import type { MappedFile } from "../segment/mapped_file.ts";
import type { IndexService } from "./index_service.ts";

/** RocketMQ re-dispatches from 3 s before the checkpoint's timestamps. */
const RECOVERY_TIMESTAMP_MARGIN_MS = 3_000;
/** Bytes of a record header up to storeTimestamp with an IPv6 born host. */
const HEADER_BYTES_MAX = 76;
const SYS_FLAG_POSITION = 36;
const SYS_FLAG_BORN_HOST_V6 = 0x10;
const STORE_TIMESTAMP_POSITION_V4 = 56;
const HOST_V6_EXTRA_BYTES = 12;

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
  /** Records at or below this offset are in the index already (-1: none). */
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
    indexSkipThrough = last !== undefined && last.indexCount > 1 ? last.endPhyOffset : -1;
    let indexStart: number;
    if (input.clean) {
      indexStart = checkpoint.indexOffset >= 0 ? checkpoint.indexOffset : consumeQueueStart;
    } else {
      // Files newer than the checkpoint were dropped: rebuild from the
      // last entry kept, or from the start when none is left.
      indexStart = indexSkipThrough >= 0 ? indexSkipThrough : minOffset;
    }
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
  for (let i = files.length - 1; i >= 0; i--) {
    const file = files[i]!;
    const timestamp = await firstStoreTimestamp(file);
    if (timestamp > 0 && timestamp <= minTimestamp - RECOVERY_TIMESTAMP_MARGIN_MS) {
      return file.fileFromOffset;
    }
  }
  return minOffset;
}

/** storeTimestamp of a segment's first record, or 0 when it has none. */
async function firstStoreTimestamp(file: MappedFile): Promise<number> {
  if (file.readPosition < HEADER_BYTES_MAX) return 0;
  const range = await file.selectRange(0, HEADER_BYTES_MAX);
  if (range === undefined) return 0;
  try {
    const view = new DataView(range.bytes.buffer, range.bytes.byteOffset, HEADER_BYTES_MAX);
    if (view.getInt32(0) <= 0) return 0;
    const at = STORE_TIMESTAMP_POSITION_V4 +
      ((view.getInt32(SYS_FLAG_POSITION) & SYS_FLAG_BORN_HOST_V6) !== 0 ? HOST_V6_EXTRA_BYTES : 0);
    return view.getUint32(at) * 0x1_0000_0000 + view.getUint32(at + 4);
  } finally {
    range.release();
  }
}
