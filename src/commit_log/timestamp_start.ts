/**
 * RocketMQ's start of an unclean recovery (`recoverAbnormally`, SPEC §8):
 * the newest segment whose first record was stored at least 3 s before the
 * checkpoint's minimum timestamp. Used only for stores whose checkpoint
 * lacks mqstore's own offsets (written by RocketMQ): a clock stepped back
 * makes this rule skip records, mqstore's offsets do not.
 *
 * ```
 * segment:         0        1        2        3 (newest)
 * first record ts: t0       t1       t2       t3
 *                           ^ newest with ti ≤ minTimestamp − 3 s
 * ```
 *
 * @module
 */

import type { MappedFile } from "../segment/mapped_file.ts";

/** RocketMQ recovers from 3 s before the checkpoint's timestamps. */
export const RECOVERY_TIMESTAMP_MARGIN_MS = 3_000;
/** Bytes of a record header up to storeTimestamp with an IPv6 born host. */
const HEADER_BYTES_MAX = 76;
const SYS_FLAG_POSITION = 36;
const SYS_FLAG_BORN_HOST_V6 = 0x10;
const STORE_TIMESTAMP_POSITION_V4 = 56;
const HOST_V6_EXTRA_BYTES = 12;

/**
 * The index of the newest segment whose first record's storeTimestamp is
 * at most `minTimestamp − 3 s`; -1 when there is none (recovery then
 * starts at the first).
 *
 * @example
 * ```ts ignore
 * const from = await timestampStartIndex(queue.files, checkpoint.minTimestamp);
 * ```
 */
export async function timestampStartIndex(
  files: readonly MappedFile[],
  minTimestamp: number,
): Promise<number> {
  for (let i = files.length - 1; i >= 0; i--) {
    const timestamp = await firstStoreTimestamp(files[i]!);
    if (timestamp > 0 && timestamp <= minTimestamp - RECOVERY_TIMESTAMP_MARGIN_MS) return i;
  }
  return -1;
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
