/**
 * FlushRealTimeService (SPEC §6): makes the commit log durable in the
 * background under ASYNC_FLUSH, with or without the transient store pool.
 *
 * ```
 * loop: leastPages = flushCommitLogLeastPages, or 0 once per thorough interval
 *       sleep flushIntervalCommitLog (timed) or until a put wakes it
 *       (once leastPages whole pages wait: onAppended)
 *       queue.flush(leastPages) off the JS thread, in steps of at most
 *       FLUSH_STEP_BYTES_MAX until caught up, each reporting progress
 *       → checkpoint timestamp
 * close: stop the loop, then flush(0) until everything is durable (a step
 *        that makes no progress is retried a bounded number of times)
 * ```
 *
 * Segments backed by large folios (`largeFolios`: ASYNC_FLUSH segments keep
 * the default advice, see `CommitLog`) are written back a whole folio at a
 * time, and a folio the writer dirties while it is being written back is
 * written again, whole, by the next flush. So a flush woken by puts ends at
 * the last {@link LARGE_FOLIO_BYTES} boundary the writer passed, never in
 * the writer's folio; everything is flushed once per `intervalMs` (and by
 * timed, thorough and final flushes), so the durability lag stays within
 * the interval. Measured (Deno, 1 KiB puts at 5 MB/s, flushCommitLogTimed
 * false): device bytes per data byte 17.5 flushing every 4 pages into large
 * folios, 1.5 under MADV_RANDOM.
 *
 * A failed flush is not swallowed: the loop stops and reports it through
 * `onError` (the store then refuses writes).
 *
 * @module
 */

import type { Clock } from "../segment/clock.ts";
import { isAbleTo } from "../segment/mapped_file.ts";
import type { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import { OS_PAGE_SIZE_BYTES } from "../segment/constants.ts";
import { FINAL_FLUSH_ATTEMPTS, FLUSH_STEP_BYTES_MAX } from "./constants.ts";
import type { StoreCheckpoint } from "./store_checkpoint.ts";
import type { StoreStats } from "./store_stats.ts";
import { Wakeup } from "./_wakeup.ts";

/**
 * The largest folio the page cache backs a mapped segment with where the
 * advice allows (a PMD: 2 MiB with 4 KiB pages on x86-64). Put-driven
 * flushes of large-folio segments end on a multiple of it.
 */
export const LARGE_FOLIO_BYTES = 0x20_0000;

/** Options of {@link FlushRealTimeService}. */
export interface FlushRealTimeServiceOptions {
  /** The commit-log segments. */
  queue: MappedFileQueue;
  /** Time and timers. */
  clock: Clock;
  /** Sleep between flushes (`flushIntervalCommitLog`). */
  intervalMs: number;
  /** Whole 4 KiB pages a flush waits for (`flushCommitLogLeastPages`). */
  leastPages: number;
  /** Everything is flushed at least this often (`flushCommitLogThoroughInterval`). */
  thoroughIntervalMs: number;
  /** Sleep the full interval (true) or wake on every put (false) (`flushCommitLogTimed`). */
  timed: boolean;
  /**
   * The segments are mapped under the default advice and flushed by range
   * (`mapping` mode), so their page cache may be made of folios up to
   * {@link LARGE_FOLIO_BYTES}: flushes woken by puts then stay out of the
   * writer's folio (see the module doc).
   *
   * @default {false}
   */
  largeFolios?: boolean;
  /** Receives physicMsgTimestamp and the flushed offset; written at thorough flushes. */
  checkpoint: StoreCheckpoint;
  /** Flush counters. */
  stats: StoreStats;
  /** Called after each flush that moved the flushed offset. */
  onFlushed(flushedWhere: number): void;
  /** Called once when a flush fails; the service stops flushing. */
  onError(error: unknown): void;
}

/**
 * The background flusher of ASYNC_FLUSH.
 *
 * @example
 * ```ts
 * import { createPort } from "../runtime/mod.ts";
 * import { ManualClock } from "../segment/clock.ts";
 * import { MappedFileQueue } from "../segment/mapped_file_queue.ts";
 * import { FlushRealTimeService } from "./flush_real_time_service.ts";
 * import { StoreCheckpoint } from "./store_checkpoint.ts";
 * import { StoreStats } from "./store_stats.ts";
 *
 * const port = await createPort({ adapter: "memory" });
 * const queue = new MappedFileQueue({ port, directory: "/s/commitlog", fileSizeBytes: 0x1_0000 });
 * await queue.load();
 * (await queue.getOrCreateLastMappedFile(0)).appendBytes(new Uint8Array(100));
 * const clock = new ManualClock();
 * const flusher = new FlushRealTimeService({
 *   queue, clock, intervalMs: 500, leastPages: 0, thoroughIntervalMs: 10_000, timed: true,
 *   checkpoint: await StoreCheckpoint.load(port, "/s/checkpoint"), stats: new StoreStats(),
 *   onFlushed: (offset) => console.log("durable up to", offset), onError: console.error,
 * });
 * flusher.start();
 * clock.advance(500); // the flush runs off the JS thread, then onFlushed(100)
 * await flusher.close(); // final flush
 * await queue.close();
 * ```
 */
export class FlushRealTimeService {
  #options: FlushRealTimeServiceOptions;
  #wakeup: Wakeup;
  /** The running loop. */
  #loop: Promise<void> | undefined;
  #stopped = false;
  #closing: Promise<void> | undefined;
  /** The error that stopped the loop. */
  #failure: unknown;
  #lastThoroughMs: number;
  /** When the last flush up to the writer (not to a folio boundary) began. */
  #lastFullMs: number;
  /** A {@link wakeup} (not a put) ended the sleep: flush up to the writer. */
  #fullRequested = false;

  /** @param options Queue, timing and hooks. */
  constructor(options: FlushRealTimeServiceOptions) {
    this.#options = options;
    this.#wakeup = new Wakeup(options.clock);
    this.#lastThoroughMs = options.clock.nowMs();
    this.#lastFullMs = this.#lastThoroughMs;
  }

  /** Starts the loop. */
  start(): void {
    if (this.#loop !== undefined || this.#stopped) return;
    this.#loop = this.#run();
  }

  /** Ends the current sleep (a commit, backpressure, a waiter); the flush then goes up to the writer. */
  wakeup(): void {
    this.#fullRequested = true;
    this.#wakeup.wake();
  }

  /**
   * Tells the flusher the log now ends at `wroteOffset` (a put under
   * `flushCommitLogTimed: false`): wakes it only when a flush would move
   * data (`leastPages` whole pages appended since the last flush), not for
   * every put.
   */
  onAppended(wroteOffset: number): void {
    const { queue, leastPages } = this.#options;
    if (isAbleTo(queue.flushedWhere, this.#flushEnd(wroteOffset), false, leastPages)) {
      this.#wakeup.wake();
    }
  }

  /**
   * Where a put-driven flush may end with the log ending at `wroteOffset`:
   * there, or the last folio boundary before it (see the module doc).
   */
  #flushEnd(wroteOffset: number): number {
    return this.#options.largeFolios === true
      ? wroteOffset - wroteOffset % LARGE_FOLIO_BYTES
      : wroteOffset;
  }

  /** Whether a flush failed (the service no longer flushes). */
  get failed(): boolean {
    return this.#failure !== undefined;
  }

  /**
   * Stops the loop and flushes everything, retrying a flush that makes no
   * progress. Idempotent.
   *
   * @throws The flush error, when the final flush fails.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#stopped = true;
    this.#wakeup.wake();
    await this.#loop;
    const { queue } = this.#options;
    for (let attempt = 0; attempt < FINAL_FLUSH_ATTEMPTS;) {
      if (queue.flushedWhere >= queue.maxOffset) break;
      // Steps that move count as progress, not as attempts.
      if (!await this.#flush(0)) attempt++;
    }
  }

  async #run(): Promise<void> {
    const options = this.#options;
    while (!this.#stopped) {
      let leastPages = options.leastPages;
      const now = options.clock.nowMs();
      if (now >= this.#lastThoroughMs + options.thoroughIntervalMs) {
        this.#lastThoroughMs = now;
        leastPages = 0;
      }
      await this.#wakeup.sleep(options.intervalMs);
      if (this.#stopped) break;
      // Up to the writer, unless this flush was woken by puts into large
      // folios less than an interval after the last such flush.
      const wokenMs = options.clock.nowMs();
      const requested = this.#fullRequested;
      this.#fullRequested = false;
      const full = options.largeFolios !== true || options.timed || leastPages === 0 ||
        requested || wokenMs - this.#lastFullMs >= options.intervalMs;
      if (full) this.#lastFullMs = wokenMs;
      const end = full ? Number.MAX_SAFE_INTEGER : this.#flushEnd(options.queue.maxOffset);
      try {
        let moved = false;
        for (;;) {
          const before = options.queue.flushedWhere;
          if (!full && !isAbleTo(before, end, false, leastPages)) break;
          // A bounded flush covers whole pages from the start of the
          // flushed position's page, so it ends exactly at `end`.
          const from = before - before % OS_PAGE_SIZE_BYTES;
          const bound = Math.min(FLUSH_STEP_BYTES_MAX, end - from);
          if (!await this.#flush(leastPages, bound)) break;
          moved = true;
          // A step that wrote less than its bound caught up (measured from
          // the page start: from the flushed position, the first step of
          // every round looked short and the loop slept with a backlog).
          if (this.#stopped || options.queue.flushedWhere - from < bound) break;
        }
        // The checkpoint file is rewritten at thorough flushes that moved
        // data (close writes it too), not at every interval.
        if (moved && leastPages === 0) await options.checkpoint.flush();
      } catch (error) {
        this.#failure = error;
        options.onError(error);
        return;
      }
    }
  }

  /** One flush; returns whether the flushed offset moved. */
  async #flush(leastPages: number, maxBytes: number = FLUSH_STEP_BYTES_MAX): Promise<boolean> {
    const { queue, clock, stats, checkpoint } = this.#options;
    const startMs = clock.nowMs();
    const moved = await queue.flush(leastPages, maxBytes);
    if (!moved) return false;
    stats.recordFlush(clock.nowMs() - startMs);
    const timestamp = queue.storeTimestampMs;
    if (timestamp > 0) checkpoint.physicMsgTimestamp = timestamp;
    checkpoint.commitLogOffset = queue.flushedWhere;
    this.#options.onFlushed(queue.flushedWhere);
    return true;
  }
}
