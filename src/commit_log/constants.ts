/**
 * Constants of the commit-log layer, with load-time checks of their
 * relations.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { BLANK_RECORD_SIZE_BYTES } from "../record/mod.ts";
import { OS_PAGE_SIZE_BYTES, PREPARE_POPULATE_CHUNK_BYTES } from "../segment/constants.ts";

/**
 * Room a segment must keep after a record for the BLANK that may end it: a
 * record is storable only if `totalSize + 8 ≤ segment size`.
 */
export const END_OF_FILE_RESERVE_BYTES: number = BLANK_RECORD_SIZE_BYTES;

/**
 * The unit a disk writes whole, as recovery assumes it (512 bytes, the
 * smallest sector): a write cut short by a power loss leaves whole sectors
 * unwritten, so after a crash recovery looks for properties whose tail
 * reads as zeros from a sector boundary on (`tornTailOf`). A page lost
 * whole is 8 such sectors.
 */
export const TORN_SECTOR_BYTES = 0x200;

/** The least {@link unflushedBytesMaxDefault} answers: 64 MiB. */
export const UNFLUSHED_BYTES_MAX_DEFAULT_MIN = 0x400_0000;
/**
 * The most {@link unflushedBytesMaxDefault} answers: 2 GiB, the burst that
 * issue 5 asks to run at memory speed ("a burst that fits in the page
 * cache").
 */
export const UNFLUSHED_BYTES_MAX_DEFAULT_MAX = 0x8000_0000;
/** {@link unflushedBytesMaxDefault} where the machine's memory is unknown: 512 MiB. */
export const UNFLUSHED_BYTES_MAX_FALLBACK = 0x2000_0000;

/**
 * Default bound on bytes appended but not yet durable (mqstore's
 * `unflushedBytesMax`) on a machine of `totalMemoryBytes`: a tenth of it,
 * whole MiB, within [{@link UNFLUSHED_BYTES_MAX_DEFAULT_MIN},
 * {@link UNFLUSHED_BYTES_MAX_DEFAULT_MAX}]; {@link UNFLUSHED_BYTES_MAX_FALLBACK}
 * when it is unknown. Past the bound puts wait for the flusher (or answer
 * OS_PAGECACHE_BUSY) instead of letting the kernel's dirty-page throttling
 * freeze the event loop inside a page fault. A tenth is Linux's default
 * `dirty_background_ratio` (where background writeback starts, half of
 * `dirty_ratio`, past which writers are throttled), so the store's own
 * backlog stays clear of the throttle. A fixed 512 MiB (before) held a
 * 1 KiB burst to the flusher's pace after ~500 MB here (24 GiB machine:
 * 0.61 M msgs/s over 1 M × 1 KiB, against 1.26–1.41 M within the bound).
 *
 * @example
 * ```ts
 * import { unflushedBytesMaxDefault } from "./constants.ts";
 *
 * console.log(unflushedBytesMaxDefault(8 * 2 ** 30)); // 858783744 (819 MiB)
 * ```
 *
 * @param totalMemoryBytes The machine's memory, or undefined.
 * @returns The bound, bytes.
 */
export function unflushedBytesMaxDefault(totalMemoryBytes: number | undefined): number {
  if (totalMemoryBytes === undefined || !(totalMemoryBytes > 0)) {
    return UNFLUSHED_BYTES_MAX_FALLBACK;
  }
  const tenth = Math.floor(totalMemoryBytes / 10 / MIB) * MIB;
  return Math.min(
    UNFLUSHED_BYTES_MAX_DEFAULT_MAX,
    Math.max(UNFLUSHED_BYTES_MAX_DEFAULT_MIN, tenth),
  );
}

/** A mebibyte. */
const MIB = 0x10_0000;

/** How often disk use is compared with `diskMaxUsedSpaceRatio` by default. */
export const DISK_SPACE_CHECK_INTERVAL_MS_DEFAULT = 1_000;

/**
 * Most bytes one background flush step writes (ASYNC_FLUSH): 32 MiB, a
 * fraction of a second here. A backlog is flushed in steps of this size,
 * one after the other, each reporting progress, so that puts held back by
 * `unflushedBytesMax` resume within `osPageCacheBusyTimeOutMills` instead
 * of waiting for one `msync` of hundreds of MB.
 */
export const FLUSH_STEP_BYTES_MAX = 0x200_0000;

/**
 * Under SYNC_FLUSH a segment's zeros are written through (see
 * `PrepareOptions.writeZeros`) only in gaps of the put load: after the
 * group commit has been idle this long, 10 ms.
 */
export const PREPARE_IDLE_MS = 10;

/**
 * How far ahead of the writer an ASYNC_FLUSH commit log pre-faults its
 * segments: as far as the writer goes in {@link PREFAULT_LEAD_MS} at the
 * rate it went lately, and at least 64 MiB. A preparation that ran to
 * the segment's end, and on through the whole segment allocated ahead,
 * pre-faulted 1–2 GiB a writer might not reach for long: each page costs
 * the pre-fault thread ~1.4 ms per MiB here (zeroing memory the VM's host
 * hands back, `__pi_memset` under `MADV_POPULATE_WRITE`), CPU taken from
 * the writer on 2 cores, and is a dirty page of zeros that the kernel
 * writes back if the writer does not reach it within the dirty expiry.
 * A writer faster than the pre-fault (~0.7 GB/s) outruns it whatever the
 * lead; one at 4 GB/s or more gets a lead of a whole default segment, as
 * before, so the pre-fault starts as early as it did.
 */
export const PREFAULT_LEAD_BYTES_MIN = 0x400_0000;
/** See {@link PREFAULT_LEAD_BYTES_MIN}: the lead in time of the writer's recent rate. */
export const PREFAULT_LEAD_MS = 250;
/**
 * A pre-fault chunk held back is asked about again after the writer
 * appended this much (16 MiB), so that a writer speeding up widens the
 * lead within milliseconds instead of at the old lead's end.
 */
export const PREFAULT_RECHECK_BYTES = 0x100_0000;
/** The shortest window the writer's rate is measured over, ms. */
export const PREFAULT_RATE_WINDOW_MS_MIN = 20;

/**
 * An ASYNC_FLUSH commit log pre-faults large folios (2 MiB, the segment's
 * hugepage advice) for a writer that appends at least this many of them
 * per `flushIntervalCommitLog`, and 4 KiB folios (chunks advised
 * `MADV_RANDOM`) for one that appends less than
 * {@link PREFAULT_SMALL_FOLIOS_BELOW}; in between it keeps what it had.
 * The interval's flush writes the writer's folio whole and the writer
 * dirties it again, so a large folio costs up to 2 MiB of writes per
 * interval (at 300 1 KiB messages a second, 12 bytes dirtied per byte
 * logged) where a small one costs 4 KiB. Small folios cost CPU instead:
 * here the first store from user space to each 4 KiB page costs 8–16 µs
 * (a page of a 2 MiB folio mapped whole, 0.1 µs), and the pre-fault and
 * write-back cost more per byte. At 10,000 1 KiB messages a second (10
 * MB/s, 2.5 folios an interval) the store used 78–125 ms of CPU a
 * second with small folios against 37–67 with large ones. At two folios
 * an interval, large ones cost at most half as many bytes more.
 */
export const PREFAULT_LARGE_FOLIOS_FROM = 2;
/** See {@link PREFAULT_LARGE_FOLIOS_FROM}: small folios below one large folio per flush interval. */
export const PREFAULT_SMALL_FOLIOS_BELOW = 1;
/**
 * The least lead and chunk of a pre-fault of small folios (64 KiB); else
 * both are what the writer appends in {@link PREFAULT_LEAD_MS}, up to a
 * chunk of `PREPARE_POPULATE_CHUNK_BYTES`. Pre-faulted pages are dirty
 * zeros, and the kernel writes them back once their file has been dirty
 * for the dirty expiry (30 s): a slow writer's 64 MiB lead was written
 * as zeros, then dirtied again by the writer (seen with `cachestat`).
 */
export const PREFAULT_SMALL_BYTES_MIN = 0x1_0000;

/**
 * Group-commit flushes in flight at once under SYNC_FLUSH: the next group's
 * positional write and `fdatasync` start while the previous one runs (one
 * more in flight measured 1.1–1.3 times the flushes per second of one at a
 * time on this VM's ext4 in C); past two the device gains nothing.
 */
export const GROUP_COMMIT_FLUSHES_MAX = 2;

/**
 * A second group-commit flush runs beside the first only when the load
 * (the bytes of the puts waiting when a flush settles) is at least this
 * much, 128 KiB: each flush then carries 64 KiB or more. Below it a flush
 * costs the device nearly the same whatever it carries (0.3 ms for 32 KiB,
 * 0.5 ms for 64 KiB here), so two half-size flushes gain little over one,
 * or lose: 1 KiB puts, 64 producers (72 KiB a group), acks/s in 5
 * interleaved runs here, two flushes against one, medians: Deno 47 k
 * against 60 k, Bun 76 k against 65 k. Above it the device time follows
 * the bytes, and two win on both: 256 producers (288 KiB), Deno 99 k
 * against 65 k, Bun 115 k against 90 k (session 3; no longer on Deno:
 * see {@link GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES}).
 */
export const GROUP_COMMIT_SPLIT_MIN_BYTES = 0x2_0000;

/**
 * Bounds of the tuned split threshold (the group commit starts at
 * {@link GROUP_COMMIT_SPLIT_MIN_BYTES}, or at the upper bound where the
 * port's `overlapFlushes` is false, and measures; see `SplitTuner`):
 * below 32 KiB two flushes always cost the device more than they hide (a
 * flush of 16 KiB costs nearly what one of 32 KiB does), so the tuner
 * spends no measurement there.
 *
 * The upper bound, 1 MiB, is above the load of 256 producers of 1 KiB
 * (288 KiB), where the better choice now differs by runtime: once two
 * won on both (see above), but on 2026-11-30 here, 256 producers, 1 KiB,
 * rounds of 40 k puts alternated A B B A within one process, one flush
 * made 1.31× (6 of 6 quads) and 1.33× (10 of 10, spread 1.24–1.41) the
 * acks/s of two on Deno, and 0.92× (3 of 10 won, 0.86–1.10) on Bun;
 * `bench/commit_log_bench.ts --filter 256p`, 4 alternated pairs each: Deno
 * 161 k against 131 k (one won 4 of 4), Bun 158 k against 183 k (two won 4
 * of 4); Node, in-process: 0.68× (two won 7 of 8 quads). Under 256 KiB
 * the tuner never measured 256 producers, and split them on Deno too. With
 * this bound it moved Deno to one flush within 400 k puts in 6 of 12 runs
 * of 800 k (its probes there measured 0.6–1.7× the epochs beside them, so
 * 3 wins of 3 by 1.1 often fail), and kept Bun (13 runs) and Node (2) split.
 *
 * So Deno starts at the upper bound (session 13), and a move takes 5 pairs
 * won of 6 (see {@link GROUP_COMMIT_TUNE_PROBE_WINS}). Runs of 400 k puts
 * here, one process each, alternated with ea97fc2 (start at 128 KiB, 3 of
 * 3): at 256 producers Deno ran one flush from the first put in 8 of 8
 * (before: split through the warm-up in 8 of 8, one flush from 320–360 k
 * puts in 5), Bun and Node stayed split in 8 of 8 each (before: Bun moved
 * to one flush in 2 of 8, Node in none); at 64 producers no run split on
 * any runtime, before or after. `bench/commit_log_bench.ts --filter 256p`,
 * 3 pairs alternated in order: Deno 139 k against 101 k (1.26×, 1.25–1.38).
 */
export const GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES = 0x8000;
/** See {@link GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES}. */
export const GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES = 0x10_0000;
/**
 * Flushes one measurement of the split tuner covers: about 60 ms of a
 * loaded group commit (64 producers). 32 flushes measured rates of two
 * flushes in flight that ranged 0.1–1.6× their run's mean (issue 5,
 * session 7).
 */
export const GROUP_COMMIT_TUNE_EPOCH_FLUSHES = 0x40;
/**
 * After this many measurements of the threshold's choice, one measures
 * the other choice (split or not) at the same load: a steady load runs
 * the worse one an eighth of its time at most while the tuner looks. Each
 * probe that loses doubles the wait, up to
 * {@link GROUP_COMMIT_TUNE_PROBE_EVERY_MAX} (about 4 s), so that a settled
 * choice costs about 1 % of the time; a probe that wins or a load that
 * halves or doubles starts again from here.
 */
export const GROUP_COMMIT_TUNE_PROBE_EVERY = 7;
/** See {@link GROUP_COMMIT_TUNE_PROBE_EVERY}. */
export const GROUP_COMMIT_TUNE_PROBE_EVERY_MAX = 7 * 0x10;
/**
 * How much more durable bytes per ms the other choice must make in each
 * pair of a probe round, as a ratio, to move the split threshold; the
 * choices it is meant to find differ by 1.17–1.5× (see
 * {@link GROUP_COMMIT_SPLIT_MIN_BYTES}).
 */
export const GROUP_COMMIT_TUNE_MARGIN = 1.1;
/**
 * Probe epochs of a round, of {@link GROUP_COMMIT_TUNE_PROBE_PAIRS}, that
 * must each beat the epochs of the threshold's choice either side of them
 * (by {@link GROUP_COMMIT_TUNE_MARGIN}) to move the threshold; the round
 * ends when its first pair is lost, or its second. Epoch rates drift ±25 % within a run here,
 * and those of two flushes in flight much more; a probe won against one
 * epoch, or twice against the best of three, still moved the threshold the
 * wrong way (see `SplitTuner`).
 *
 * 5 of 6, not 3 of 3 (session 13): 1 KiB puts, traced pairs (a probe
 * epoch against the epochs either side, 4 runs of 23–56 pairs for each
 * runtime and load) where the probe was the slower choice scored medians
 * of 0.74–0.91, but came in spells of wins: one flush on Node at 256
 * producers 1.35, 1.43, 1.43 in a row, splitting on Bun at 64 1.51, 2.05,
 * 1.95, 1.15. Over every window of consecutive pairs in those traces,
 * 3 of 3 won in 10 of 880 windows of the slower probe (Bun at 64
 * producers 8 of 216) and in 27 of 84 of the faster (one flush on Deno at
 * 256, median 1.20); 5 of 6 with the first won in 2 of 808, and in 21 of
 * 72. 4 of 5 won in 11 of 848 of the slower. A round that must win its
 * first pair costs a right choice 1.0–1.5 probe epochs (3 of 3: 1.0–1.3).
 */
export const GROUP_COMMIT_TUNE_PROBE_WINS = 5;
/** Pairs a probe round measures at most (see {@link GROUP_COMMIT_TUNE_PROBE_WINS}). */
export const GROUP_COMMIT_TUNE_PROBE_PAIRS = 6;
/**
 * Epochs of the threshold's choice between two pairs of a probe round, so
 * that the next probe meets other weather (the device's good and bad
 * spells last up to a few hundred ms).
 */
export const GROUP_COMMIT_TUNE_PROBE_GAP = 2;
/**
 * Flushes at the start of each tuner epoch that are not measured: they
 * carry the change from the other choice (a flush begun under one, a
 * group sized for it).
 */
export const GROUP_COMMIT_TUNE_SETTLE_FLUSHES = 2;

/**
 * Microtask hops after a lone flush answered its producer within which
 * that producer's next put counts as coming straight back (see GroupCommitService). `await store.putMessage()` in a loop puts 2 hops after the answer,
 * 3 through one more async wrapper; an event-loop turn always ends the
 * window, since the hops run out in the microtask checkpoint that began it.
 */
export const LONE_CHAIN_HOPS = 0x10;
/** Lone flushes chained without an event-loop turn, at most. */
export const LONE_CHAIN_FLUSHES_MAX = 0x10;
/** How long a chain of lone flushes may hold the thread without a turn, ms. */
export const LONE_CHAIN_SPAN_MS = 2;

/** Attempts of the final flush (and commit) on close, as RocketMQ's `RETRY_TIMES_OVER`. */
export const FINAL_FLUSH_ATTEMPTS = 10;

/** Size of the checkpoint file (SPEC §7). */
export const CHECKPOINT_SIZE_BYTES = 0x1000;

/** Position of `physicMsgTimestamp` in the checkpoint. */
export const CHECKPOINT_PHYSIC_TIMESTAMP_POSITION = 0x00;
/** Position of `logicsMsgTimestamp` in the checkpoint. */
export const CHECKPOINT_LOGICS_TIMESTAMP_POSITION = 0x08;
/** Position of `indexMsgTimestamp` in the checkpoint. */
export const CHECKPOINT_INDEX_TIMESTAMP_POSITION = 0x10;
/** Position of mqstore's own block (RocketMQ reads nothing from here on). */
export const CHECKPOINT_EXTENSION_POSITION = 0x18;
/** Magic of mqstore's block: ASCII "MQSC". */
export const CHECKPOINT_EXTENSION_MAGIC = 0x4D515343;
/** Version of mqstore's block. */
export const CHECKPOINT_EXTENSION_VERSION = 0x01;
/** Position of the flushed commit-log offset (int64). */
export const CHECKPOINT_COMMIT_LOG_OFFSET_POSITION = 0x20;
/** Position of the flushed consume-queue offset (int64, a commit-log offset). */
export const CHECKPOINT_CONSUME_QUEUE_OFFSET_POSITION = 0x28;
/** Position of the flushed index offset (int64, a commit-log offset). */
export const CHECKPOINT_INDEX_OFFSET_POSITION = 0x30;
/** Position of the CRC-32 of `[0x18, 0x38)`. */
export const CHECKPOINT_EXTENSION_CRC_POSITION = 0x38;
/** End of mqstore's block. */
export const CHECKPOINT_EXTENSION_END = 0x3C;
/**
 * Position of mqstore's second block, the writer's bounds: a block of its
 * own (magic, version, CRC) so that the first one keeps its layout and a
 * reader that knows only the first still reads it.
 */
export const CHECKPOINT_BOUNDS_POSITION = 0x40;
/** Magic of the bounds block: ASCII "MQSB". */
export const CHECKPOINT_BOUNDS_MAGIC = 0x4D515342;
/** Version of the bounds block. */
export const CHECKPOINT_BOUNDS_VERSION = 0x01;
/** Position of the writer's `unflushedBytesMax` (int64). */
export const CHECKPOINT_UNFLUSHED_BYTES_MAX_POSITION = 0x48;
/** Position of the writer's `maxMessageSize`, the most bytes one put appends (int64). */
export const CHECKPOINT_PUT_BYTES_MAX_POSITION = 0x50;
/** Position of the CRC-32 of `[0x40, 0x58)`. */
export const CHECKPOINT_BOUNDS_CRC_POSITION = 0x58;
/** End of the bounds block. */
export const CHECKPOINT_BOUNDS_END = 0x5C;

/**
 * Upper bounds (exclusive, ms) of RocketMQ's `putMessageDistributeTime`
 * buckets: `<=0ms`, `0~10ms`, `10~50ms`, `50~100ms`, `100~200ms`,
 * `200~500ms`, `500ms~1s`, and `>1s` for the rest.
 */
export const PUT_LATENCY_BUCKET_LIMITS_MS: readonly number[] = Object.freeze([
  0,
  10,
  50,
  100,
  200,
  500,
  1_000,
]);

/** Labels of the put-latency buckets, RocketMQ's spellings. */
export const PUT_LATENCY_BUCKET_LABELS: readonly string[] = Object.freeze([
  "<=0ms",
  "0~10ms",
  "10~50ms",
  "50~100ms",
  "100~200ms",
  "200~500ms",
  "500ms~1s",
  ">1s",
]);

assert(END_OF_FILE_RESERVE_BYTES === 8, "a BLANK is 8 bytes");
assert(GROUP_COMMIT_FLUSHES_MAX >= 1, "a group commit needs a flush in flight");
assert(
  PREFAULT_LEAD_BYTES_MIN > 0 && PREFAULT_RECHECK_BYTES <= PREFAULT_LEAD_BYTES_MIN,
  "a held pre-fault chunk is asked about again before the writer could reach it",
);
assert(
  PREFAULT_RATE_WINDOW_MS_MIN > 0 && PREFAULT_LEAD_MS > 0 && PREFAULT_SMALL_FOLIOS_BELOW > 0,
  "the writer's rate is measured over a positive window, and an idle writer gets small folios",
);
assert(
  PREFAULT_SMALL_FOLIOS_BELOW <= PREFAULT_LARGE_FOLIOS_FROM,
  "a writer between the folio thresholds keeps its folios; none is both small and large",
);
assert(
  PREFAULT_SMALL_BYTES_MIN > 0 && PREFAULT_SMALL_BYTES_MIN % OS_PAGE_SIZE_BYTES === 0 &&
    PREFAULT_SMALL_BYTES_MIN <= PREPARE_POPULATE_CHUNK_BYTES,
  "a small-folio chunk is whole 4 KiB pages, at most a pre-fault chunk",
);
assert(
  GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES <= GROUP_COMMIT_SPLIT_MIN_BYTES &&
    GROUP_COMMIT_SPLIT_MIN_BYTES <= GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
  "the split threshold starts within its tuned bounds",
);
assert(
  PUT_LATENCY_BUCKET_LABELS.length === PUT_LATENCY_BUCKET_LIMITS_MS.length + 1,
  "one label per bucket, the last open-ended",
);
assert(
  CHECKPOINT_EXTENSION_END <= CHECKPOINT_SIZE_BYTES &&
    CHECKPOINT_EXTENSION_POSITION === CHECKPOINT_INDEX_TIMESTAMP_POSITION + 8,
  "mqstore's checkpoint block follows RocketMQ's three timestamps inside 4 KiB",
);
assert(
  CHECKPOINT_EXTENSION_CRC_POSITION === CHECKPOINT_INDEX_OFFSET_POSITION + 8,
  "the CRC follows the last offset",
);
assert(
  CHECKPOINT_BOUNDS_POSITION >= CHECKPOINT_EXTENSION_END &&
    CHECKPOINT_BOUNDS_CRC_POSITION === CHECKPOINT_PUT_BYTES_MAX_POSITION + 8 &&
    CHECKPOINT_BOUNDS_END <= CHECKPOINT_SIZE_BYTES,
  "the bounds block follows mqstore's first block inside 4 KiB, its CRC after its last field",
);
