/**
 * The dispatcher (RocketMQ's `ReputMessageService`): follows the commit log
 * and turns each record into a consume-queue unit (NOT_TYPE and COMMIT
 * only) and index entries.
 *
 * ```
 * commit log  ─┬─ MESSAGE ─► putUnit(topic/queueId) ─► buildIndex(keys)
 *              ├─ BLANK   ─► next segment
 *              ├─ cut     ─► (a record past the limit) stop, go on next time
 *              └─ limit   ─► wait for wakeup() / dispatchNow()
 *     dispatchedOffset ▲          limit(): flushed (SYNC_FLUSH) or readable (ASYNC_FLUSH)
 * ```
 *
 * The limit is a function the store gives: under SYNC_FLUSH it is the
 * flushed offset, so no consumer ever sees a message a crash could take
 * back; under ASYNC_FLUSH it is the readable offset. Dispatch is strictly
 * sequential, so units and index keys go in commit-log order.
 *
 * Two ways forward, never at the same time:
 * - {@link Dispatcher.dispatchNow}, called by the put path (the store
 *   calls it once for up to 16 single puts, and before any read): a bounded
 *   slice of records dispatched synchronously, as long as none needs I/O
 *   (a consume queue rolling to a file not prepared, a new index file, a
 *   port that cannot map; a new consume queue takes its first units in
 *   memory while its file is created). A producer that never yields to the event loop (a tight
 *   `await put()` loop) keeps the dispatcher in step that way: a
 *   background loop would only get a share of the microtask queue, and
 *   nothing at all of I/O completions.
 * - the background loop (and {@link Dispatcher.dispatchUpTo}), which does
 *   everything the synchronous slice leaves, awaiting the I/O.
 *
 * A record the put path described (a dispatch hint: offset, size, queue
 * offset, tagsCode, key hashes; see `DispatchHints`) is dispatched from
 * its hint when the hint's offset is the dispatched offset and its size
 * and the record's magic agree; every other record is decoded
 * (`DispatchView`): re-dispatch at open, a BLANK, a queued put, a full
 * hint ring. Both write the same bytes (tests/message_store_dispatch_hints_test.ts).
 *
 * Re-dispatching a record is harmless: the consume queue skips a unit it
 * has, and records at or below `indexSkipThrough` are not indexed again.
 * A record that the range read ends in the middle of (the limit is a
 * recovery step, or the read window) is not an error: dispatch stops
 * before it and goes on from it next time.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { type DispatchHints, HINT_KEYS_MAX } from "../commit_log/dispatch_hints.ts";
import { MqStoreError } from "../errors.ts";
import {
  DispatchView,
  hasConsumeQueueEntry,
  MAGIC_POSITION,
  MESSAGE_MAGIC_CODE,
  readInt32,
  RecordChecker,
} from "../record/mod.ts";
import type { MappedFile } from "../segment/mapped_file.ts";
import type { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import { type ConsumeQueue, POSITIONAL_RUN_UNITS_MAX } from "./consume_queue.ts";
import type { ConsumeQueueTable } from "./consume_queue_table.ts";
import type { IndexService } from "./index_service.ts";

/** Options of {@link Dispatcher}. */
export interface DispatcherOptions {
  /** The commit-log segments read. */
  commitLog: MappedFileQueue;
  /** Offset up to which records may be dispatched now. */
  limit: () => number;
  /** Receives the units. */
  consumeQueues: ConsumeQueueTable;
  /** Receives the keys; undefined when `messageIndexEnable` is off. */
  index: IndexService | undefined;
  /** Delay of each level, ms (the schedule topic's tagsCode). */
  delayLevelsMs: readonly number[];
  /** The first record to dispatch (a record boundary). */
  fromOffset: number;
  /**
   * Records at or below this offset are already in the index (not indexed
   * again); -1 for none.
   *
   * @default {-1}
   */
  indexSkipThrough?: number;
  /**
   * Largest read of commit-log bytes at once where the port cannot map
   * (at least the largest record).
   */
  windowBytes: number;
  /**
   * What the put path says of the records it appended: a record whose
   * hint is there is dispatched from it, without decoding it.
   *
   * @default {undefined}
   */
  hints?: DispatchHints;
  /** Called after each run of dispatched records (subscribers wake). */
  onDispatched?: (dispatchedOffset: number) => void;
  /** Receives the error that stopped the dispatcher. */
  onError: (error: MqStoreError) => void;
}

/**
 * Records one {@link Dispatcher.dispatchNow} call dispatches at most,
 * besides one uniform run ({@link SLICE_UNIFORM_RUN_RECORDS_MAX}): a put
 * pays for at most this many (a few µs each), and a dispatcher that fell
 * behind (it waited for a new file) catches up this many times faster
 * than puts arrive.
 */
const SLICE_RECORDS_MAX = 0x40;
/**
 * Records of a batch whose consume-queue units go in with one append, at
 * most (a few pages of units).
 */
const RUN_RECORDS_MAX = 0x400;
/**
 * Records of a uniform run (a batch's records of one size and queue, see
 * `#dispatchUniformRun`) a {@link Dispatcher.dispatchNow} slice takes
 * whole, past {@link SLICE_RECORDS_MAX}: such a run costs tens of ns a
 * record, not µs, and cut at the slice's 64 records it went in as a
 * 64-unit run (stores into the mapping, a first touch of a page under
 * random advice every few batches) and a second run of the rest
 * (`ConsumeQueue.putUniformRunNow`'s positional write, from 256 units).
 * As many as one positional write takes: a slice's run is one write.
 */
const SLICE_UNIFORM_RUN_RECORDS_MAX = POSITIONAL_RUN_UNITS_MAX;
/** A BLANK record's header: int32 size, int32 magic. */
const BLANK_HEADER_BYTES = 8;
const BLANK_MAGIC = 0xCBD4_3194;

/** Why {@link Dispatcher.#walk} stopped. */
const WALK_RANGE_END = 0;
/** A BLANK: the dispatched offset moved to the next segment. */
const WALK_SEGMENT_END = 1;
/** A record goes past the end of the bytes read (see {@link Dispatcher.#cutClaimBytes}). */
const WALK_CUT = 2;
/** A record needs I/O (see {@link Dispatcher.#pending}). */
const WALK_IO = 3;
/** The record budget is spent. */
const WALK_BUDGET = 4;

/**
 * What the dispatch of one record needs, copied out of the reused
 * {@link DispatchView} while its I/O runs.
 */
interface PendingRecord {
  offset: number;
  size: number;
  topic: string;
  queueId: number;
  queueOffset: number;
  sysFlag: number;
  storeTimestamp: number;
  tagsCode: number;
  /** Java hashes of its `topic#key`s (empty when not indexed). */
  keyHashes: Int32Array;
  /** Whether it came from a dispatch hint (counted as such). */
  hinted: boolean;
}

/**
 * Whether a hint for a record of `file` is checked against the record's
 * header (its size and magic) before it is taken. Where the put wrote the
 * record through the mapping the dispatcher reads (`mapping` mode), the
 * read is a look at a page the writer just touched, and the check stays as
 * belt and braces. Where the record reached the file by a positional write
 * (`window` mode: SYNC_FLUSH), the check was the first touch of each page
 * of the mapping on this thread, and the dispatcher reads nothing else
 * there (without a mapping the check reads the bytes read anyway, and
 * stays): on this VM that first touch costs several µs per page (user
 * time at the load, not a fault the guest kernel sees), 2.3 µs of
 * the JavaScript thread per 1 KiB SYNC ack at 256 producers (tmpfs, 3
 * alternated pairs: 3.9 → 1.6 µs of its user CPU per ack, 126–189 k →
 * 279–299 k acks/s). There the hint is taken as the put published it:
 * from the offset and size of the record it had just written (a put that
 * failed never committed it), by this very store. A batch's run of records
 * of one size is checked in every mode (see `#dispatchUniformRun`).
 */
function checksHeaders(file: MappedFile): boolean {
  return file.writeMode !== "window" || !file.readsThroughMapping;
}

/**
 * Follows the commit log into the consume queues and the index.
 *
 * @example
 * ```ts ignore
 * const dispatcher = new Dispatcher({ commitLog: queue, limit: () => queue.flushedWhere, ... });
 * await dispatcher.dispatchUpTo(queue.flushedWhere); // recovery: re-dispatch
 * dispatcher.start();
 * dispatcher.dispatchNow(); // after every put
 * await dispatcher.close();
 * ```
 */
export class Dispatcher {
  #options: DispatcherOptions;
  /** Offset of the next record to dispatch. */
  #dispatched: number;
  /** storeTimestamp of the last dispatched record (0 before the first). */
  #lastTimestamp = 0;
  /** Incremented after each run that dispatched something (subscriber wakeups). */
  #sequence = 0;
  #indexSkipThrough: number;
  /** Says what a record the lean decode refused is (BLANK, cut, corrupt). */
  #checker = new RecordChecker({ checkCrc: false });
  /** The lean decode of each message dispatched. */
  #view: DispatchView;
  /** The run loop, while started. */
  #loop: Promise<void> | undefined;
  /** A dispatch in progress (recovery or the loop): one at a time. */
  #busy: Promise<void> | undefined;
  #wake: (() => void) | undefined;
  #woken = false;
  #closed = false;
  #failure: MqStoreError | undefined;
  /** The record {@link Dispatcher.#walk} stopped at with {@link WALK_IO}. */
  #pending: PendingRecord | undefined;
  /** Bytes the record {@link Dispatcher.#walk} stopped at with {@link WALK_CUT} claims. */
  #cutClaimBytes = 0;
  /**
   * Whether {@link Dispatcher.#walk} checks a hint against its record's
   * header (see {@link checksHeaders}), for the segment it walks.
   */
  #checkHeaders = true;
  /** Records (and BLANKs) the last {@link Dispatcher.#walk} dispatched. */
  #walkedRecords = 0;
  /** The segment {@link Dispatcher.#bytes} views. */
  #bytesFile: MappedFile | undefined;
  /** All of the mapping of {@link Dispatcher.#bytesFile}. */
  #bytes: Uint8Array | undefined;
  /** The put path's descriptions of the records it appended. */
  #hints: DispatchHints | undefined;
  /** The key hashes of the hinted record being dispatched. */
  #hintKeys = new Int32Array(HINT_KEYS_MAX);
  /** The records of a run of hints (see {@link Dispatcher.#dispatchHintRun}). */
  #runOffsets = new Float64Array(RUN_RECORDS_MAX);
  #runSizes = new Int32Array(RUN_RECORDS_MAX);
  #runTagsCodes = new Float64Array(RUN_RECORDS_MAX);
  /** The hint slot of each record of the run. */
  #runSlots = new Int32Array(RUN_RECORDS_MAX);
  /** Bytes of the records the last run dispatched. */
  #runBytes = 0;
  /** Records dispatched from a hint, and decoded (tests, stats). */
  #hintedCount = 0;
  #decodedCount = 0;

  /** @param options The commit log, its limit, the queues and the index. */
  constructor(options: DispatcherOptions) {
    assert(Number.isSafeInteger(options.fromOffset) && options.fromOffset >= 0, "fromOffset");
    assert(options.windowBytes >= BLANK_HEADER_BYTES, "windowBytes");
    this.#options = options;
    this.#dispatched = options.fromOffset;
    this.#indexSkipThrough = options.indexSkipThrough ?? -1;
    this.#view = new DispatchView({ delayLevelsMs: options.delayLevelsMs });
    this.#hints = options.hints;
  }

  /** Records dispatched from a dispatch hint so far. */
  get hintedRecordCount(): number {
    return this.#hintedCount;
  }

  /** MESSAGE records dispatched by decoding them so far. */
  get decodedRecordCount(): number {
    return this.#decodedCount;
  }

  /** Offset of the next record to dispatch: everything before it is in the queues. */
  get dispatchedOffset(): number {
    return this.#dispatched;
  }

  /** storeTimestamp of the last record dispatched, ms (0 before the first). */
  get lastTimestampMs(): number {
    return this.#lastTimestamp;
  }

  /** Changes whenever records were dispatched (a waiter compares it). */
  get sequence(): number {
    return this.#sequence;
  }

  /** The error that stopped the dispatcher, if any. */
  get failure(): MqStoreError | undefined {
    return this.#failure;
  }

  /**
   * Stops the dispatcher with `error`, as a failed dispatch would: a
   * consume queue lost units it had taken (its file could not be made).
   * Nothing when it failed already.
   */
  fail(error: unknown): void {
    if (this.#failure !== undefined) return;
    this.#fail(error);
    this.wakeup();
  }

  /** Starts following the commit log in the background. */
  start(): void {
    if (this.#loop !== undefined || this.#closed) return;
    this.#loop = this.#run();
  }

  /** Tells the dispatcher the limit may have moved. */
  wakeup(): void {
    this.#woken = true;
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /**
   * Dispatches, synchronously, up to {@link SLICE_RECORDS_MAX} records
   * (and one batch's uniform run of up to
   * {@link SLICE_UNIFORM_RUN_RECORDS_MAX} records past them)
   * below the limit when the loop is started and idle and no record needs
   * I/O; wakes the loop for whatever is left. Called after each put: the
   * dispatcher then moves in step with the producer whatever the event
   * loop does. Never throws: a failure stops the dispatcher as the loop's
   * would.
   */
  dispatchNow(): void {
    if (
      this.#busy !== undefined || this.#loop === undefined || this.#closed ||
      this.#failure !== undefined
    ) {
      this.wakeup();
      return;
    }
    const limit = this.#options.limit();
    if (this.#dispatched >= limit) return;
    const start = this.#dispatched;
    let done = false;
    try {
      done = this.#dispatchHinted(limit) || this.#dispatchSlice(limit);
    } catch (error) {
      this.#fail(error);
    } finally {
      // The loop walks the record again when it gets to it.
      this.#pending = undefined;
      if (this.#dispatched !== start) this.#progressed();
    }
    if (!done) this.wakeup();
  }

  /**
   * Dispatches every record below `offset` now (recovery, close). Not
   * while another dispatch runs: it waits for it. A record that `offset`
   * cuts is left for a later call.
   *
   * @throws {MqStoreError} When a record cannot be read or dispatched.
   */
  dispatchUpTo(offset: number): Promise<void> {
    return this.#serial(() => this.#dispatch(offset, false));
  }

  /** Runs `dispatch` once no other dispatch runs. */
  async #serial(dispatch: () => Promise<void>): Promise<void> {
    for (let round = 0; this.#busy !== undefined && round < 0x1000; round++) {
      await this.#busy.catch(() => {});
    }
    if (this.#failure !== undefined) throw this.#failure;
    const run = dispatch();
    this.#busy = run;
    try {
      await run;
    } finally {
      if (this.#busy === run) this.#busy = undefined;
    }
  }

  /** Stops the loop after the record in progress. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    this.wakeup();
    await this.#loop;
  }

  async #run(): Promise<void> {
    while (!this.#closed && this.#failure === undefined) {
      const limit = this.#options.limit();
      if (this.#dispatched >= limit) {
        if (!this.#woken) await new Promise<void>((resolve) => this.#wake = resolve);
        this.#woken = false;
        continue;
      }
      this.#woken = false;
      const before = this.#dispatched;
      try {
        await this.#serial(() => this.#dispatch(limit, true));
      } catch (error) {
        this.#fail(error);
      }
      // Nothing readable below the limit yet (bytes still in a write
      // buffer): wait for the next wakeup instead of trying again at once,
      // which would spin on microtasks and starve the I/O that makes them
      // readable.
      if (this.#dispatched === before && !this.#woken && !this.#closed) {
        await new Promise<void>((resolve) => this.#wake = resolve);
      }
    }
  }

  #fail(error: unknown): void {
    this.#failure ??= error instanceof MqStoreError ? error : new MqStoreError(
      "IO_ERROR",
      `Dispatch stopped at commit-log offset ${this.#dispatched}: ${String(error)}`,
      { cause: error },
    );
    this.#options.onError(this.#failure);
  }

  #progressed(): void {
    this.#sequence++;
    this.#options.onDispatched?.(this.#dispatched);
  }

  /**
   * The common case of {@link dispatchNow}: one record below the limit, in
   * the segment dispatched last, described by the only hint (a producer in
   * step with the dispatcher, one record a put). It is dispatched from its
   * hint, checked against the record header as {@link Dispatcher.#walk}
   * checks it, without the walk's segment lookup and general cases.
   * Anything else (several hints: a batch's run, or a dispatcher behind; no
   * hint; another segment; a record that needs I/O) is left to
   * {@link Dispatcher.#dispatchSlice}, which walks from the dispatched
   * offset on (a record done again is harmless).
   *
   * @returns Whether it reached the limit.
   */
  #dispatchHinted(limit: number): boolean {
    const hints = this.#hints;
    const file = this.#bytesFile;
    const bytes = this.#bytes;
    if (
      hints === undefined || hints.length !== 1 || file === undefined || bytes === undefined ||
      !file.isAvailable
    ) {
      return false;
    }
    const offset = this.#dispatched;
    const at = offset - file.fileFromOffset;
    const end = Math.min(limit - file.fileFromOffset, file.readPosition);
    if (at < 0 || at >= end) return false;
    const slot = hints.find(offset);
    if (slot < 0) return false;
    const size = hints.sizes[slot]!;
    if (
      at + size > end ||
      (checksHeaders(file) &&
        (readInt32(bytes, at) !== size ||
          readInt32(bytes, at + MAGIC_POSITION) !== MESSAGE_MAGIC_CODE)) ||
      !this.#dispatchHintNow(hints, slot, offset, size)
    ) {
      return false;
    }
    hints.consume();
    this.#hintedCount++;
    this.#dispatched = offset + size;
    this.#lastTimestamp = hints.storeTimestamps[slot]!;
    return this.#dispatched >= limit;
  }

  /**
   * The synchronous slice of {@link dispatchNow}.
   *
   * @returns Whether it reached the limit (false: the loop has more to do).
   */
  #dispatchSlice(limit: number): boolean {
    const queue = this.#options.commitLog;
    let budget = SLICE_RECORDS_MAX;
    // Bounded by the budget: each round dispatches a record or leaves a segment.
    while (this.#dispatched < limit && budget > 0) {
      const offset = this.#dispatched;
      const file = queue.findMappedFileByOffset(offset);
      if (file === undefined || !file.readsThroughMapping) return false;
      const position = offset - file.fileFromOffset;
      const end = Math.min(limit - file.fileFromOffset, file.fileSizeBytes, file.readPosition);
      if (end <= position) return false;
      // The whole segment's bytes, bounded by `end`: no view, range
      // object or DataView made per put. The slice runs synchronously, so
      // a segment that is still available stays mapped until it returns.
      const bytes = this.#segmentBytes(file);
      if (bytes === undefined || !file.isAvailable) return false;
      this.#checkHeaders = checksHeaders(file);
      const stop = this.#walk(bytes, file.fileFromOffset, file.fileSizeBytes, budget, end);
      budget -= this.#walkedRecords;
      if (stop === WALK_BUDGET || stop === WALK_IO || stop === WALK_CUT) return false;
    }
    return this.#dispatched >= limit;
  }

  /**
   * A view of all of `file`'s mapping (the last one asked for is kept),
   * or undefined when the file has no mapping or is closing.
   */
  #segmentBytes(file: MappedFile): Uint8Array | undefined {
    if (file === this.#bytesFile) return this.#bytes;
    const range = file.selectView(0, 0);
    if (range === undefined) return undefined;
    const view = range.bytes;
    range.release();
    const size = file.fileSizeBytes;
    this.#bytesFile = file;
    this.#bytes = view.byteOffset + size <= view.buffer.byteLength
      ? new Uint8Array(view.buffer, view.byteOffset, size)
      : undefined;
    return this.#bytes;
  }

  /** Dispatches up to `limit`; a background run stops early at close. */
  async #dispatch(limit: number, background: boolean): Promise<void> {
    const queue = this.#options.commitLog;
    const start = this.#dispatched;
    try {
      // Bounded: each round dispatches at least one record, leaves a
      // segment, or ends the run.
      while (this.#dispatched < limit && !(background && this.#closed)) {
        const offset = this.#dispatched;
        const file = queue.findMappedFileByOffset(offset);
        if (file === undefined) {
          const first = queue.firstFile;
          if (first !== undefined && offset < first.fileFromOffset) {
            // Retention deleted segments not dispatched yet: nothing to index there.
            this.#dispatched = first.fileFromOffset;
            continue;
          }
          throw new MqStoreError(
            "INVALID_FILE",
            `Cannot dispatch offset ${offset}: no commit-log segment holds it (log ends at ${queue.maxWrotePosition})`,
          );
        }
        const position = offset - file.fileFromOffset;
        const end = Math.min(limit - file.fileFromOffset, file.fileSizeBytes, file.readPosition);
        if (end <= position) return;
        const mapped = file.readsThroughMapping;
        // A record the window cut at its start is read again whole.
        const want = Math.max(
          Math.min(end - position, this.#options.windowBytes),
          this.#cutClaimBytes,
        );
        const length = mapped ? end - position : Math.min(end - position, want);
        this.#cutClaimBytes = 0;
        const range = mapped
          ? file.selectView(position, length)
          : await file.selectRange(position, length);
        if (range === undefined) return;
        let stop: number;
        try {
          const segmentRest = file.fileSizeBytes - position;
          this.#checkHeaders = checksHeaders(file);
          stop = this.#walk(range.bytes, offset, segmentRest, Number.POSITIVE_INFINITY);
          // Bounded by the range: each round dispatches one record.
          while (stop === WALK_IO && !(background && this.#closed)) {
            await this.#dispatchPending();
            stop = this.#walk(range.bytes, offset, segmentRest, Number.POSITIVE_INFINITY);
          }
        } finally {
          range.release();
        }
        if (stop !== WALK_CUT) continue;
        const claimBytes = this.#cutClaimBytes;
        this.#cutClaimBytes = 0;
        // Records were dispatched: the next round reads from the cut one.
        if (this.#dispatched !== offset) continue;
        // The first record read goes past the bytes read. Cut by the read
        // window only: read it again, whole. Past the limit (a recovery
        // step, or not all readable yet): it waits for the next run.
        if (!mapped && length < claimBytes && position + claimBytes <= end) {
          this.#cutClaimBytes = claimBytes;
          continue;
        }
        return;
      }
    } finally {
      this.#pending = undefined;
      if (this.#dispatched !== start) this.#progressed();
    }
  }

  /**
   * Dispatches, without awaiting, the records of `bytes` (commit-log
   * offset `rangeOffset`, `segmentRest` bytes from its start to the
   * segment end) from the dispatched offset on, at most `maxRecords`;
   * only `bytes[0, length)` may be read.
   *
   * @returns Why it stopped ({@link WALK_RANGE_END}, ...).
   * @throws {MqStoreError} `CORRUPT_RECORD` for a record that is neither a
   *   message, nor a BLANK filling its segment, nor cut by the range end.
   */
  #walk(
    bytes: Uint8Array,
    rangeOffset: number,
    segmentRest: number,
    maxRecords: number,
    length: number = bytes.length,
  ): number {
    let at = this.#dispatched - rangeOffset;
    // Checked with an if: assert()'s message (a number formatted) would be
    // built on every put.
    if (!(at >= 0 && at <= length)) {
      assert(false, `dispatched offset ${this.#dispatched} is in the range`);
    }
    this.#walkedRecords = 0;
    const lean = this.#view;
    const indexed = this.#options.index !== undefined;
    const hints = this.#hints;
    const checkHeaders = this.#checkHeaders;
    for (; this.#walkedRecords < maxRecords; this.#walkedRecords++) {
      if (at >= length) return WALK_RANGE_END;
      const recordOffset = rangeOffset + at;
      if (hints !== undefined && hints.length > 0) {
        const slot = hints.find(recordOffset);
        // The hint, checked against the record's header: its size and
        // magic (a put that failed after the hint was staged never
        // committed it, so this is belt and braces).
        if (slot >= 0) {
          const size = hints.sizes[slot]!;
          if (
            at + size <= length &&
            (!checkHeaders ||
              (readInt32(bytes, at) === size &&
                readInt32(bytes, at + MAGIC_POSITION) === MESSAGE_MAGIC_CODE))
          ) {
            // Records of one queue in a row (a batch's): their units in one
            // append. The next hint says whether there is a run at all.
            const left = maxRecords - this.#walkedRecords;
            if (left > 1 && hints.runCounts[slot]! > 1) {
              const run = this.#dispatchUniformRun(
                hints,
                slot,
                bytes,
                at,
                recordOffset,
                length,
                Math.max(left, SLICE_UNIFORM_RUN_RECORDS_MAX),
              );
              if (run > 0) {
                at += run * size;
                this.#dispatched = rangeOffset + at;
                // The loop counts the last one.
                this.#walkedRecords += run - 1;
                continue;
              }
            }
            if (
              left > 1 && hints.length > 1 &&
              hints.counters[hints.slotAt(1)] === hints.counters[slot] &&
              hints.offsets[hints.slotAt(1)] === recordOffset + size
            ) {
              const run = this.#dispatchHintRun(hints, slot, bytes, at, recordOffset, length, left);
              if (run > 0 || this.#pending !== undefined) {
                at += this.#runBytes;
                this.#dispatched = rangeOffset + at;
                if (this.#pending !== undefined) {
                  this.#walkedRecords += run;
                  return WALK_IO;
                }
                // The loop counts the last one.
                this.#walkedRecords += run - 1;
                continue;
              }
            }
            if (!this.#dispatchHintNow(hints, slot, recordOffset, size)) {
              const withKeys = indexed && recordOffset > this.#indexSkipThrough;
              // The hint stays: a slice drops its pending record, and the
              // loop walks to it again.
              this.#pending = pendingOfHint(hints, slot, recordOffset, size, withKeys);
              return WALK_IO;
            }
            hints.consume();
            this.#hintedCount++;
            at += size;
            this.#dispatched = rangeOffset + at;
            this.#lastTimestamp = hints.storeTimestamps[slot]!;
            continue;
          }
        }
      }
      const withKeys = indexed && recordOffset > this.#indexSkipThrough;
      if (lean.load(bytes, at, recordOffset, withKeys, length)) {
        if (!this.#dispatchViewNow(lean)) {
          this.#pending = pendingOf(lean);
          return WALK_IO;
        }
        this.#decodedCount++;
        at += lean.size;
        this.#dispatched = rangeOffset + at;
        this.#lastTimestamp = lean.storeTimestamp;
        continue;
      }
      // Not a message the lean decode takes: the checker says what it is.
      const view = this.#checker.check(
        length === bytes.length ? bytes : bytes.subarray(0, length),
        at,
        recordOffset,
      );
      assert(
        view.kind !== "message",
        `the lean decode and the checker agree on the message at ${recordOffset}`,
      );
      if (
        (view.kind === "blank" || view.kind === "invalid") && at + BLANK_HEADER_BYTES <= length &&
        isBlankFilling(bytes, at, segmentRest - at)
      ) {
        this.#dispatched = rangeOffset + segmentRest;
        this.#walkedRecords++;
        return WALK_SEGMENT_END;
      }
      if (
        view.kind === "invalid" && view.reason === "TRUNCATED" && view.size <= segmentRest - at
      ) {
        this.#cutClaimBytes = Math.max(view.size, BLANK_HEADER_BYTES);
        return WALK_CUT;
      }
      throw new MqStoreError(
        "CORRUPT_RECORD",
        `Cannot dispatch the record at commit-log offset ${recordOffset}: ${
          view.kind === "invalid" ? `${view.reason} (${view.detail})` : view.kind
        }`,
      );
    }
    return WALK_BUDGET;
  }

  /**
   * Dispatches the record `view` holds when that needs no I/O.
   *
   * @returns False when it needs I/O; its unit may be written already
   *   (the repeat is skipped when {@link Dispatcher.#dispatchPending} does
   *   it again), its keys are not.
   */
  #dispatchViewNow(view: DispatchView): boolean {
    const options = this.#options;
    if (hasConsumeQueueEntry(view.sysFlag)) {
      // A new queue (its first unit) takes units in memory while its file
      // is created off this path.
      const cq = options.consumeQueues.find(view.topic, view.queueId) ??
        (view.queueOffset === 0
          ? options.consumeQueues.findOrCreateNow(view.topic, view.queueId)
          : undefined);
      if (cq === undefined) return false;
      const put = cq.putUnitNow(view.physicalOffset, view.size, view.tagsCode, view.queueOffset);
      if (put === undefined) return false;
    }
    // keyCount is 0 unless the record is to be indexed (see #walk).
    if (view.keyCount > 0) {
      return options.index!.buildIndexHashesNow(
        view.keyHashes,
        view.keyCount,
        view.physicalOffset,
        view.storeTimestamp,
      );
    }
    return true;
  }

  /**
   * {@link Dispatcher.#dispatchViewNow} for the record at `offset`
   * described by hint `slot`.
   */
  #dispatchHintNow(hints: DispatchHints, slot: number, offset: number, size: number): boolean {
    const options = this.#options;
    if (hasConsumeQueueEntry(hints.transactionTypes[slot]!)) {
      const counter = hints.counters[slot]!;
      let cq = counter.dispatchCache as ConsumeQueue | undefined;
      if (cq === undefined) {
        const topic = hints.topics[slot]!;
        const queueId = hints.queueIds[slot]!;
        // A new queue (its first unit) takes units in memory while its
        // file is created off this path.
        cq = options.consumeQueues.find(topic, queueId) ??
          (hints.queueOffsets[slot] === 0
            ? options.consumeQueues.findOrCreateNow(topic, queueId)
            : undefined);
        if (cq === undefined) return false;
        counter.dispatchCache = cq;
      }
      const put = cq.putUnitNow(offset, size, hints.tagsCodes[slot]!, hints.queueOffsets[slot]!);
      if (put === undefined) return false;
    }
    const index = options.index;
    const keyCount = hints.keyCounts[slot]!;
    if (index === undefined || keyCount <= 0 || offset <= this.#indexSkipThrough) return true;
    const keys = this.#hintKeys;
    const base = slot * HINT_KEYS_MAX;
    for (let i = 0; i < keyCount; i++) keys[i] = hints.keyHashes[base + i]!;
    return index.buildIndexHashesNow(keys, keyCount, offset, hints.storeTimestamps[slot]!);
  }

  /**
   * Dispatches the run of hinted records from `slot` (the oldest hint, for
   * the record at `bytes[at]`, checked): consecutive records of one queue
   * with consecutive queue offsets, each checked against its header, at
   * most `maxCount`. Their units go in with one `putUnitsNow`, then their
   * keys into the index one record at a time; a record whose keys need I/O
   * becomes {@link Dispatcher.#pending} (its unit is in: the repeat is
   * skipped). Sets {@link Dispatcher.#runBytes} to the bytes of the records
   * dispatched.
   *
   * @returns Records dispatched (their hints consumed); 0 with no pending
   *   record when there is no run: the caller dispatches the record alone.
   */
  #dispatchHintRun(
    hints: DispatchHints,
    slot: number,
    bytes: Uint8Array,
    at: number,
    offset: number,
    length: number,
    maxCount: number,
  ): number {
    this.#runBytes = 0;
    if (!hasConsumeQueueEntry(hints.transactionTypes[slot]!)) return 0;
    const counter = hints.counters[slot];
    const cq = counter?.dispatchCache as ConsumeQueue | undefined;
    if (cq === undefined) return 0;
    const queueOffset = hints.queueOffsets[slot]!;
    const offsets = this.#runOffsets;
    const sizes = this.#runSizes;
    const tagsCodes = this.#runTagsCodes;
    const slots = this.#runSlots;
    const limit = Math.min(maxCount, hints.length, RUN_RECORDS_MAX);
    let keys = 0;
    let count = 0;
    let position = at;
    let next = offset;
    // Bounded by limit.
    while (count < limit) {
      const s = hints.slotAt(count);
      const size = hints.sizes[s]!;
      if (
        hints.offsets[s] !== next || size === 0 || hints.counters[s] !== counter ||
        hints.queueOffsets[s] !== queueOffset + count ||
        !hasConsumeQueueEntry(hints.transactionTypes[s]!) ||
        position + size > length ||
        (this.#checkHeaders &&
          (readInt32(bytes, position) !== size ||
            readInt32(bytes, position + MAGIC_POSITION) !== MESSAGE_MAGIC_CODE))
      ) {
        break;
      }
      offsets[count] = next;
      sizes[count] = size;
      tagsCodes[count] = hints.tagsCodes[s]!;
      slots[count] = s;
      keys += hints.keyCounts[s]!;
      count++;
      position += size;
      next += size;
    }
    if (count < 2) return 0;
    const put = cq.putUnitsNow(count, queueOffset, offsets, sizes, tagsCodes);
    if (put === 0) return 0;
    const index = this.#options.index;
    let done = 0;
    if (index === undefined || keys === 0) {
      // No keys (a size-0 hint ended the run, so no count is NO_HINT): the units were all.
      done = put;
    } else if (offset > this.#indexSkipThrough) {
      done = index.buildIndexRunNow(
        put,
        slots,
        hints.keyCounts,
        hints.keyHashes,
        HINT_KEYS_MAX,
        offsets,
        hints.storeTimestamps,
      );
      if (done < put) {
        // The hint stays (see #walk): the loop walks to it again.
        this.#pending = pendingOfHint(hints, slots[done]!, offsets[done]!, sizes[done]!, true);
      }
    } else {
      done = this.#indexRunFromSkip(hints, put);
    }
    if (done > 0) {
      this.#lastTimestamp = hints.storeTimestamps[slots[done - 1]!]!;
      this.#runBytes = offsets[done - 1]! + sizes[done - 1]! - offset;
    }
    hints.consumeRun(done);
    this.#hintedCount += done;
    return done;
  }

  /**
   * Dispatches the uniform run marked at hint `slot` (see
   * `DispatchHints.runCounts`; the oldest hint, for the record at
   * `bytes[at]`, checked): its records have one size and no keys, so their
   * units are computed from the slot alone (`putUniformRunNow`), each
   * record's header checked as {@link Dispatcher.#walk} checks it; at most
   * `maxCount`.
   *
   * @returns Records dispatched (their hints consumed); 0 when it did
   *   nothing: the caller dispatches them another way.
   */
  #dispatchUniformRun(
    hints: DispatchHints,
    slot: number,
    bytes: Uint8Array,
    at: number,
    offset: number,
    length: number,
    maxCount: number,
  ): number {
    if (!hasConsumeQueueEntry(hints.transactionTypes[slot]!)) return 0;
    const cq = hints.counters[slot]?.dispatchCache as ConsumeQueue | undefined;
    if (cq === undefined) return 0;
    const size = hints.sizes[slot]!;
    const limit = Math.min(hints.runCounts[slot]!, maxCount, Math.floor((length - at) / size));
    if (limit < 2) return 0;
    // One view a run: a big-endian word a load, where readInt32 takes four.
    const view = new DataView(bytes.buffer, bytes.byteOffset + at, limit * size);
    let count = 0;
    // Bounded by limit: the hints are a cache, each record's header says.
    // Checked here in every mode (one look at each header of the run): reading
    // the checksHeaders choice in this function made the JavaScriptCore
    // runtime's ASYNC batch1000 row 4× slower (p50 0.10 → 1.2 ms a batch),
    // though it was true there.
    for (let position = 0; count < limit; count++, position += size) {
      if (
        view.getInt32(position) !== size ||
        view.getInt32(position + MAGIC_POSITION) !== MESSAGE_MAGIC_CODE
      ) {
        break;
      }
    }
    if (count < 2) return 0;
    const put = cq.putUniformRunNow(
      count,
      hints.queueOffsets[slot]!,
      offset,
      size,
      hints.tagsCodes[slot]!,
    );
    if (put === 0) return 0;
    this.#lastTimestamp = hints.storeTimestamps[slot]!;
    hints.consumeRun(put);
    this.#hintedCount += put;
    return put;
  }

  /**
   * The keys of the first `put` records of the run in
   * {@link Dispatcher.#runOffsets} when it starts at or below
   * `indexSkipThrough` (a re-dispatch at open): one record at a time.
   *
   * @returns Records done; the one after them is {@link Dispatcher.#pending}.
   */
  #indexRunFromSkip(hints: DispatchHints, put: number): number {
    const index = this.#options.index!;
    const offsets = this.#runOffsets;
    const sizes = this.#runSizes;
    let done = 0;
    for (; done < put; done++) {
      const s = hints.slotAt(done);
      const recordOffset = offsets[done]!;
      const size = sizes[done]!;
      const keyCount = hints.keyCounts[s]!;
      if (keyCount > 0 && recordOffset > this.#indexSkipThrough) {
        const keys = this.#hintKeys;
        const base = s * HINT_KEYS_MAX;
        for (let i = 0; i < keyCount; i++) keys[i] = hints.keyHashes[base + i]!;
        if (
          !index.buildIndexHashesNow(keys, keyCount, recordOffset, hints.storeTimestamps[s]!)
        ) {
          // The hint stays (see #walk): the loop walks to it again.
          this.#pending = pendingOfHint(hints, s, recordOffset, size, true);
          break;
        }
      }
    }
    return done;
  }

  /** Dispatches {@link Dispatcher.#pending}, awaiting its I/O, and moves past it. */
  async #dispatchPending(): Promise<void> {
    const record = this.#pending;
    assert(record !== undefined && record.offset === this.#dispatched, "a pending record");
    this.#pending = undefined;
    const options = this.#options;
    if (hasConsumeQueueEntry(record.sysFlag)) {
      const cq = options.consumeQueues.find(record.topic, record.queueId) ??
        await options.consumeQueues.findOrCreate(record.topic, record.queueId);
      await cq.putUnit(record.offset, record.size, record.tagsCode, record.queueOffset);
    }
    if (record.keyHashes.length > 0) {
      await options.index!.buildIndexHashes(
        record.keyHashes,
        record.keyHashes.length,
        record.offset,
        record.storeTimestamp,
      );
    }
    this.#lastTimestamp = record.storeTimestamp;
    this.#dispatched = record.offset + record.size;
    if (record.hinted) {
      const hints = this.#hints!;
      if (hints.find(record.offset) >= 0) hints.consume();
      this.#hintedCount++;
    } else {
      this.#decodedCount++;
    }
  }
}

/** A copy of what {@link DispatchView} holds, to dispatch after I/O. */
function pendingOf(view: DispatchView): PendingRecord {
  return {
    offset: view.physicalOffset,
    size: view.size,
    topic: view.topic,
    queueId: view.queueId,
    queueOffset: view.queueOffset,
    sysFlag: view.sysFlag,
    storeTimestamp: view.storeTimestamp,
    tagsCode: view.tagsCode,
    keyHashes: view.keyHashes.slice(0, view.keyCount),
    hinted: false,
  };
}

/** What hint `slot` says of the record at `offset`, to dispatch after I/O. */
function pendingOfHint(
  hints: DispatchHints,
  slot: number,
  offset: number,
  size: number,
  withKeys: boolean,
): PendingRecord {
  const keyCount = withKeys ? Math.max(0, hints.keyCounts[slot]!) : 0;
  const base = slot * HINT_KEYS_MAX;
  return {
    offset,
    size,
    topic: hints.topics[slot]!,
    queueId: hints.queueIds[slot]!,
    queueOffset: hints.queueOffsets[slot]!,
    sysFlag: hints.transactionTypes[slot]!,
    storeTimestamp: hints.storeTimestamps[slot]!,
    tagsCode: hints.tagsCodes[slot]!,
    keyHashes: hints.keyHashes.slice(base, base + keyCount),
    hinted: true,
  };
}

/** Whether `bytes[at]` is a BLANK of exactly `rest` bytes. */
function isBlankFilling(bytes: Uint8Array, at: number, rest: number): boolean {
  const view = new DataView(bytes.buffer, bytes.byteOffset + at, BLANK_HEADER_BYTES);
  return view.getInt32(0) === rest && view.getUint32(4) === BLANK_MAGIC;
}
