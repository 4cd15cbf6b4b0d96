/**
 * CommitRealTimeService (SPEC §6): under ASYNC_FLUSH with the transient
 * store pool, copies appended bytes from the pool buffers into the files
 * (positional writes), then wakes the flusher.
 *
 * ```
 * loop: leastPages = commitCommitLogLeastPages, or 0 once per thorough interval
 *       queue.commit(leastPages); data moved → wake the flusher
 *       sleep commitIntervalCommitLog (a put wakes it once leastPages
 *       whole pages wait: onAppended)
 * close: stop the loop, then commit(0) until everything is in the files
 * ```
 *
 * @module
 */

import type { Clock } from "../segment/clock.ts";
import { isAbleTo } from "../segment/mapped_file.ts";
import type { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import { FINAL_FLUSH_ATTEMPTS } from "./constants.ts";
import type { StoreStats } from "./store_stats.ts";
import { Wakeup } from "./_wakeup.ts";

/** Options of {@link CommitRealTimeService}. */
export interface CommitRealTimeServiceOptions {
  /** The commit-log segments (in pool mode). */
  queue: MappedFileQueue;
  /** Time and timers. */
  clock: Clock;
  /** Sleep between commits (`commitIntervalCommitLog`). */
  intervalMs: number;
  /** Whole 4 KiB pages a commit waits for (`commitCommitLogLeastPages`). */
  leastPages: number;
  /** Everything is committed at least this often (`commitCommitLogThoroughInterval`). */
  thoroughIntervalMs: number;
  /** Commit counters. */
  stats: StoreStats;
  /** Called after a commit that moved data (wakes the flusher). */
  onCommitted(committedWhere: number): void;
  /** Called once when a commit fails; the service stops. */
  onError(error: unknown): void;
}

/**
 * The background committer of pool mode.
 *
 * @example
 * ```ts ignore
 * const committer = new CommitRealTimeService({
 *   queue, clock, intervalMs: 200, leastPages: 4, thoroughIntervalMs: 200,
 *   stats, onCommitted: () => flusher.wakeup(), onError: (error) => refuseWrites(error),
 * });
 * committer.start();
 * // ... appends into pool buffers ...
 * await committer.close(); // commits everything left
 * ```
 */
export class CommitRealTimeService {
  #options: CommitRealTimeServiceOptions;
  #wakeup: Wakeup;
  #loop: Promise<void> | undefined;
  #stopped = false;
  #closing: Promise<void> | undefined;
  #lastCommitMs: number;

  /** @param options Queue, timing and hooks. */
  constructor(options: CommitRealTimeServiceOptions) {
    this.#options = options;
    this.#wakeup = new Wakeup(options.clock);
    this.#lastCommitMs = options.clock.nowMs();
  }

  /** Starts the loop. */
  start(): void {
    if (this.#loop !== undefined || this.#stopped) return;
    this.#loop = this.#run();
  }

  /** Ends the current sleep. */
  wakeup(): void {
    this.#wakeup.wake();
  }

  /**
   * Tells the committer the log now ends at `wroteOffset`: wakes it only
   * when a commit would move data (`leastPages` whole pages appended since
   * the last commit). A wake-up per put, most of them finding too little
   * to commit, cost a timer and a loop turn each.
   */
  onAppended(wroteOffset: number): void {
    const { queue, leastPages } = this.#options;
    if (isAbleTo(queue.committedWhere, wroteOffset, false, leastPages)) this.#wakeup.wake();
  }

  /**
   * Stops the loop and commits everything. Idempotent.
   *
   * @throws The commit error, when the final commit fails.
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
    for (let attempt = 0; attempt < FINAL_FLUSH_ATTEMPTS; attempt++) {
      if (queue.committedWhere >= queue.maxWrotePosition) break;
      await this.#commit(0);
    }
  }

  async #run(): Promise<void> {
    const options = this.#options;
    while (!this.#stopped) {
      let leastPages = options.leastPages;
      const now = options.clock.nowMs();
      if (now >= this.#lastCommitMs + options.thoroughIntervalMs) {
        this.#lastCommitMs = now;
        leastPages = 0;
      }
      try {
        if (await this.#commit(leastPages)) this.#lastCommitMs = options.clock.nowMs();
      } catch (error) {
        options.onError(error);
        return;
      }
      await this.#wakeup.sleep(options.intervalMs);
    }
  }

  async #commit(leastPages: number): Promise<boolean> {
    const { queue, stats } = this.#options;
    const moved = await queue.commit(leastPages);
    if (moved) {
      stats.commitCount++;
      this.#options.onCommitted(queue.committedWhere);
    }
    return moved;
  }
}
