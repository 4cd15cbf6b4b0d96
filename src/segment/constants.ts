/**
 * Constants of the segment layer, with load-time checks of their relations.
 *
 * @module
 */

import { assert } from "../assert.ts";

/**
 * The page size of the least-pages rules (RocketMQ's `OS_PAGE_SIZE`): a
 * flush or commit with `leastPages = N` waits until N whole 4 KiB pages
 * changed. It is fixed, not the host's page size, so batching is the same
 * everywhere.
 */
export const OS_PAGE_SIZE_BYTES = 0x1000;

/** Digits of a segment file name: its start offset, zero-padded. */
export const FILE_NAME_DIGITS = 20;

/** Suffix of a segment that is being created (see `createSegmentFile`). */
export const TEMPORARY_SUFFIX = ".tmp";

/**
 * Default size of the bounded write buffer used where the runtime cannot
 * map files (portable adapter): 4 MiB, one maximum-size message.
 */
export const WRITE_BUFFER_SIZE_BYTES_DEFAULT = 0x40_0000;

/**
 * Size of the zero buffer `MappedFile.zeroRange` writes with where it
 * cannot write through a mapping: bounded, never segment-sized.
 */
export const ZERO_CHUNK_BYTES = 0x1_0000;

/**
 * Pre-faulting a segment goes in chunks of this size, so a writer that
 * starts on a segment still being prepared overtakes the preparation and
 * a close waits for at most one chunk: 4 MiB, a few milliseconds. Ahead
 * of a mapping writer that keeps up with the pre-fault, chunks grow up to
 * 64 MiB (`MappedFile.prepare`), which a close may then wait for: about
 * 60 ms here.
 */
export const PREPARE_POPULATE_CHUNK_BYTES = 0x40_0000;

/**
 * Writing a prepared segment's zeros through to the device goes in chunks
 * of this size: each one delays a concurrent flush of the same device by
 * about its write time (256 KiB, about 1 ms here), so the chunks are small
 * and paced by the flusher.
 */
export const PREPARE_WRITE_CHUNK_BYTES = 0x4_0000;

/** Default number of buffers in a transient store pool (RocketMQ: 5). */
export const TRANSIENT_POOL_COUNT_DEFAULT = 5;

/** At most this many segments are deleted by one expiry call (RocketMQ: 10). */
export const DELETE_FILES_BATCH_MAX = 10;

/**
 * How long a destroyed segment waits for readers that still hold it before
 * its mapping is retired anyway (RocketMQ's
 * `destroyMapedFileIntervalForcibly`, 120 s).
 */
export const DESTROY_FORCE_AFTER_MS_DEFAULT = 120_000;

/**
 * Bound of the allocation-ahead queue: the requested segment plus the one
 * after it (RocketMQ submits two requests per call).
 */
export const ALLOCATE_QUEUE_CAPACITY = 2;

assert(
  (OS_PAGE_SIZE_BYTES & (OS_PAGE_SIZE_BYTES - 1)) === 0,
  `OS_PAGE_SIZE_BYTES ${OS_PAGE_SIZE_BYTES} must be a power of two`,
);
assert(
  String(Number.MAX_SAFE_INTEGER).length <= FILE_NAME_DIGITS,
  `a ${FILE_NAME_DIGITS}-digit file name must hold every safe offset`,
);
assert(
  WRITE_BUFFER_SIZE_BYTES_DEFAULT % OS_PAGE_SIZE_BYTES === 0,
  "the default write buffer must be a whole number of pages",
);
assert(
  PREPARE_POPULATE_CHUNK_BYTES % OS_PAGE_SIZE_BYTES === 0 &&
    PREPARE_WRITE_CHUNK_BYTES % OS_PAGE_SIZE_BYTES === 0,
  "preparation chunks must be whole pages",
);
assert(
  TRANSIENT_POOL_COUNT_DEFAULT >= ALLOCATE_QUEUE_CAPACITY,
  "the pool must cover the segment being written and the one allocated ahead",
);
