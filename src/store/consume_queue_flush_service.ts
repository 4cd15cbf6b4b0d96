/**
 * The consume-queue flusher (RocketMQ's `FlushConsumeQueueService`): every
 * `flushIntervalConsumeQueue` it flushes the consume queues under the
 * least-pages rule; at a thorough flush (every
 * `flushConsumeQueueThoroughInterval`) it flushes every queue and the index
 * whole and records in the checkpoint how far they are durable.
 *
 * ```
 * snapshot (dispatched offset, its timestamp) ─► flush queues (+ index)
 *   ─► checkpoint.consumeQueueOffset / logicsMsgTimestamp
 *      (indexOffset / indexMsgTimestamp) ─► checkpoint file
 * ```
 *
 * The snapshot is taken before the flush: everything dispatched before it
 * is durable once the flush returns, so recovery may start re-dispatch
 * there.
 *
 * A least-pages flush moves the consume-queue point too (and writes the
 * checkpoint file), but only when it happened to flush every queue up to
 * the end its units had at the snapshot (a queue with fewer dirty pages
 * than `flushConsumeQueueLeastPages` is left alone, and the point with
 * it). The index point moves with the queues' when no key went in since
 * the index's last flush, or when at least
 * {@link INDEX_FLUSH_LEAST_BYTES} of entries did, and the index is
 * flushed first; else it stays for a later flush (the thorough one at the
 * latest). So under a steady load an abnormal open rebuilds about one
 * interval of units, and at most that many entries' worth of keys or one
 * thorough interval of them (RocketMQ flushes an index file only when it
 * is full). Measured (1 M messages of 128 B with a distinct key each,
 * killed): with the index point unknown the reopen re-dispatched
 * the whole log, 0.6 s more than from the point.
 *
 * The threshold is there because a flush of the index writes every page
 * dirtied since the last: each hash slot a key touched (4 KiB pages
 * spread over 20 MB) and the entries' 2 MiB folio (see `IndexFile`).
 * Flushed at every least-pages flush, a store taking 2,000 1 KiB messages
 * a second with a random key each had the page cache write 7.3 bytes per
 * commit-log byte (dirtied bytes in `/proc/self/io`, 10 s; 3.1 without
 * keys).
 *
 * @module
 */

import type { StoreCheckpoint } from "../commit_log/store_checkpoint.ts";
import type { Clock } from "../segment/clock.ts";
import { CQ_UNIT_SIZE_BYTES } from "./_consume_queue_constants.ts";
import type { ConsumeQueue } from "./consume_queue.ts";
import type { ConsumeQueueTable } from "./consume_queue_table.ts";
import type { IndexService } from "./index_service.ts";

/**
 * Entries put since the index's last flush that make a least-pages flush
 * flush it (see the module doc): 4 MiB, about 210,000 keys, two of the
 * entries' 2 MiB folios. A crash re-dispatches at most about that many
 * keys' messages, or one thorough interval of them.
 */
export const INDEX_FLUSH_LEAST_BYTES = 0x40_0000;

/** How far dispatch has gone. */
export interface DispatchProgress {
  /** Offset of the next record to dispatch. */
  offset: number;
  /** storeTimestamp of the last dispatched record, ms (0 when none). */
  timestampMs: number;
}

/** Options of {@link ConsumeQueueFlushService}. */
export interface ConsumeQueueFlushServiceOptions {
  /** The queues flushed. */
  consumeQueues: ConsumeQueueTable;
  /** The index, flushed with the queues (see the module doc); undefined without the index. */
  index: IndexService | undefined;
  /** Receives the durable offsets and timestamps. */
  checkpoint: StoreCheckpoint;
  /** Timers. */
  clock: Clock;
  /** `flushIntervalConsumeQueue`, ms. */
  intervalMs: number;
  /** `flushConsumeQueueLeastPages`. */
  leastPages: number;
  /** `flushConsumeQueueThoroughInterval`, ms. */
  thoroughIntervalMs: number;
  /** Where dispatch is now. */
  progress: () => DispatchProgress;
  /** Receives a flush error (the service stops). */
  onError: (error: unknown) => void;
}

/**
 * Flushes the consume queues and the index in the background.
 *
 * @example
 * ```ts ignore
 * const service = new ConsumeQueueFlushService({ consumeQueues, index, checkpoint, clock,
 *   intervalMs: 1000, leastPages: 2, thoroughIntervalMs: 60_000,
 *   progress: () => ({ offset: dispatcher.dispatchedOffset, timestampMs: dispatcher.lastTimestampMs }),
 *   onError: console.error });
 * service.start();
 * await service.close();
 * await service.flushAll(); // close: everything durable, checkpoint written
 * ```
 */
export class ConsumeQueueFlushService {
  #options: ConsumeQueueFlushServiceOptions;
  #lastThoroughMs: number;
  #cancelTimer: (() => void) | undefined;
  /** The flush in progress (close waits for it). */
  #running: Promise<void> | undefined;
  #started = false;
  #closed = false;

  /** @param options Queues, index, checkpoint, clock and intervals. */
  constructor(options: ConsumeQueueFlushServiceOptions) {
    this.#options = options;
    this.#lastThoroughMs = options.clock.nowMs();
  }

  /** Starts the timer. */
  start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    this.#schedule();
  }

  /**
   * Flushes every queue and the index whole, then writes how far they are
   * durable to the checkpoint (in memory; `writeCheckpoint` also writes the
   * file).
   */
  async flushAll(writeCheckpoint = true): Promise<void> {
    await this.#running?.catch(() => {});
    await this.#flush(0, writeCheckpoint);
  }

  /** Stops the timer and waits for a flush in progress. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    await this.#running?.catch(() => {});
  }

  #schedule(): void {
    if (this.#closed) return;
    const options = this.#options;
    this.#cancelTimer = options.clock.setTimer(options.intervalMs, () => {
      this.#cancelTimer = undefined;
      if (this.#closed) return;
      const now = options.clock.nowMs();
      const thorough = now >= this.#lastThoroughMs + options.thoroughIntervalMs;
      if (thorough) this.#lastThoroughMs = now;
      const run = this.#flush(thorough ? 0 : options.leastPages, thorough);
      this.#running = run;
      run.then(
        () => this.#schedule(),
        (error) => {
          this.#closed = true;
          options.onError(error);
        },
      ).finally(() => {
        if (this.#running === run) this.#running = undefined;
      });
    });
  }

  async #flush(leastPages: number, thorough: boolean): Promise<void> {
    const options = this.#options;
    const progress = options.progress();
    if (leastPages !== 0) {
      await this.#flushLeastPages(leastPages, progress);
      return;
    }
    await options.consumeQueues.flush(0);
    const checkpoint = options.checkpoint;
    if (progress.timestampMs > 0) checkpoint.logicsMsgTimestamp = progress.timestampMs;
    checkpoint.consumeQueueOffset = progress.offset;
    if (options.index !== undefined) {
      await options.index.flush();
      if (progress.timestampMs > 0) checkpoint.indexMsgTimestamp = progress.timestampMs;
      checkpoint.indexOffset = progress.offset;
    }
    if (thorough) await checkpoint.flush();
  }

  /**
   * A least-pages flush; moves the checkpoint's points to `progress` when
   * it made every unit before it durable (see the module doc).
   */
  async #flushLeastPages(leastPages: number, progress: DispatchProgress): Promise<void> {
    const options = this.#options;
    const checkpoint = options.checkpoint;
    // In the turn of the progress snapshot: every unit of a record before
    // progress.offset is below its queue's end now.
    const ends: Array<[ConsumeQueue, number]> = [];
    for (const queue of options.consumeQueues.queues()) {
      ends.push([queue, queue.maxOffsetInQueue * CQ_UNIT_SIZE_BYTES]);
    }
    const indexFlushed = options.index?.isFlushed ?? true;
    const indexUnflushed = options.index?.unflushedEntryBytes ?? 0;
    await options.consumeQueues.flush(leastPages);
    if (progress.offset <= checkpoint.consumeQueueOffset) return;
    for (const [queue, end] of ends) {
      if (queue.flushedWhere < end) return;
    }
    if (progress.timestampMs > 0) checkpoint.logicsMsgTimestamp = progress.timestampMs;
    checkpoint.consumeQueueOffset = progress.offset;
    const index = options.index;
    if (index !== undefined && (indexFlushed || indexUnflushed >= INDEX_FLUSH_LEAST_BYTES)) {
      // Every key of a record before the snapshot went in before it: a
      // flush begun now makes them all durable.
      if (!indexFlushed) await index.flush();
      if (progress.timestampMs > 0) checkpoint.indexMsgTimestamp = progress.timestampMs;
      checkpoint.indexOffset = progress.offset;
    }
    await checkpoint.flush();
  }
}
