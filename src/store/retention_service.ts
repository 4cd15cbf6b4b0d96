/**
 * Retention (RocketMQ's `CleanCommitLogService` and
 * `CleanConsumeQueueService`): deletes commit-log segments kept longer than
 * `fileReservedTime`, then the consume-queue and index files wholly below
 * the commit log's new min offset.
 *
 * ```
 * every cleanResourceInterval:
 *   hour in deleteWhen ─┐
 *   disk > diskMaxUsedSpaceRatio ─┴─► delete expired segments (oldest first,
 *   disk > diskSpaceCleanForciblyRatio ─► ... whatever their age)
 *   ─► consume-queue files below minOffset ─► index files below minOffset
 * ```
 *
 * A segment's age is taken from its successor's first storeTimestamp (when
 * the log moved on from it), on the store's clock, instead of the file's
 * modification time: a copied or touched store keeps its ages, and tests
 * drive it with a manual clock. The segment being written is never
 * deleted; one held by a reader is spared until `forceAfterMs`.
 *
 * @module
 */

import type { MappedFile } from "../segment/mapped_file.ts";
import type { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import type { Clock } from "../segment/clock.ts";
import type { ConsumeQueueTable } from "./consume_queue_table.ts";
import type { IndexService } from "./index_service.ts";

/** Options of {@link RetentionService}. */
export interface RetentionServiceOptions {
  /** The commit-log segments. */
  commitLog: MappedFileQueue;
  /** The consume queues. */
  consumeQueues: ConsumeQueueTable;
  /** The index; undefined without it. */
  index: IndexService | undefined;
  /** Time and timers. */
  clock: Clock;
  /** `cleanResourceInterval`, ms. */
  intervalMs: number;
  /** `fileReservedTime`, in ms. */
  fileReservedTimeMs: number;
  /** Hours of `deleteWhen`. */
  deleteWhenHours: readonly number[];
  /** `diskMaxUsedSpaceRatio`, percent. */
  diskMaxUsedSpaceRatio: number;
  /** `diskSpaceCleanForciblyRatio`, percent. */
  diskSpaceCleanForciblyRatio: number;
  /** `cleanFileForciblyEnable`. */
  cleanFileForciblyEnable: boolean;
  /** `destroyMapedFileIntervalForcibly`, ms. */
  forceAfterMs: number;
  /** Disk use of the store's file system, percent. */
  diskUsedPercent: () => Promise<number>;
  /** Receives a failed run's error (the service keeps running). */
  onWarning: (message: string) => void;
}

/**
 * What one run deleted.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * const report = await store.deleteExpiredFiles({ now: true });
 * console.log(report.segments, report.consumeQueueFiles, report.indexFiles, report.minOffset);
 * await store.close();
 * ```
 */
export interface RetentionReport {
  /** Commit-log segments deleted. */
  segments: number;
  /** Consume-queue files deleted. */
  consumeQueueFiles: number;
  /** Index files deleted. */
  indexFiles: number;
  /** The commit log's min offset after the run. */
  minOffset: number;
}

/** Options of {@link RetentionService.run}. */
export interface RetentionRunOptions {
  /**
   * Delete expired segments now, whatever the hour (RocketMQ's manual
   * delete).
   *
   * @default {false}
   */
  now?: boolean;
}

/** Largest segment count deleted in one run (RocketMQ's deleteFileBatchMax). */
const DELETE_FILES_BATCH_MAX = 10;
/** Bytes of a record header up to storeTimestamp with an IPv6 born host. */
const HEADER_BYTES_MAX = 76;
/** sysFlag position and the born-host-IPv6 bit. */
const SYS_FLAG_POSITION = 36;
const SYS_FLAG_BORN_HOST_V6 = 0x10;
const STORE_TIMESTAMP_POSITION_V4 = 56;
const HOST_V6_EXTRA_BYTES = 12;

/**
 * Deletes expired files on a timer, or when asked.
 *
 * @example
 * ```ts ignore
 * const retention = new RetentionService({ commitLog: queue, consumeQueues, index, clock, ... });
 * retention.start();
 * const report = await retention.run({ now: true });
 * await retention.close();
 * ```
 */
export class RetentionService {
  #options: RetentionServiceOptions;
  #cancelTimer: (() => void) | undefined;
  /** The run in progress (one at a time). */
  #running: Promise<RetentionReport> | undefined;
  #lastMinOffset = -1;
  #closed = false;

  /** @param options The files, the clock and the settings. */
  constructor(options: RetentionServiceOptions) {
    this.#options = options;
  }

  /** Starts the timer. */
  start(): void {
    if (this.#cancelTimer !== undefined || this.#closed) return;
    this.#schedule();
  }

  /** One run now (or the one in progress). */
  run(options: RetentionRunOptions = {}): Promise<RetentionReport> {
    const previous = this.#running?.catch(() => undefined) ?? Promise.resolve(undefined);
    const run = previous.then(() => this.#run(options.now === true));
    this.#running = run;
    return run.finally(() => {
      if (this.#running === run) this.#running = undefined;
    });
  }

  /** Stops the timer and waits for a run in progress. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    await this.#running?.catch(() => {});
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#cancelTimer = this.#options.clock.setTimer(this.#options.intervalMs, () => {
      if (this.#closed) return;
      this.run().catch((error) => {
        this.#options.onWarning(
          `mqstore: retention failed: ${error instanceof Error ? error.message : String(error)}`,
        );
      }).finally(() => this.#schedule());
    });
  }

  async #run(now: boolean): Promise<RetentionReport> {
    const options = this.#options;
    const queue = options.commitLog;
    const report: RetentionReport = {
      segments: 0,
      consumeQueueFiles: 0,
      indexFiles: 0,
      minOffset: queue.minOffset,
    };
    if (this.#closed && !now) return report;
    const hour = new Date(options.clock.nowMs()).getHours();
    const timeUp = options.deleteWhenHours.includes(hour);
    const usedPercent = await options.diskUsedPercent();
    const spaceFull = usedPercent > options.diskMaxUsedSpaceRatio;
    const cleanAtOnce = options.cleanFileForciblyEnable &&
      usedPercent > options.diskSpaceCleanForciblyRatio;
    if (now || timeUp || spaceFull || cleanAtOnce) {
      const count = cleanAtOnce
        ? Math.min(DELETE_FILES_BATCH_MAX, queue.files.length - 1)
        : await this.#expiredCount();
      if (count > 0) {
        report.segments = await queue.deleteExpiredByTime({
          expiredTimeMs: 0,
          cleanImmediately: true,
          forceAfterMs: options.forceAfterMs,
          maxCount: count,
        });
      }
    } else if (await queue.retryDeleteFirstFile(options.forceAfterMs)) {
      // A segment a reader held at the last run is gone now.
      report.segments = 1;
    }
    const minOffset = Math.max(0, queue.minOffset);
    report.minOffset = minOffset;
    if (minOffset > this.#lastMinOffset) {
      // Each call deletes a bounded batch per queue: repeat until none is left.
      for (let deleted = -1; deleted !== 0;) {
        deleted = await options.consumeQueues.deleteExpiredFiles(minOffset);
        report.consumeQueueFiles += deleted;
      }
      report.indexFiles = await options.index?.deleteExpiredFile(minOffset) ?? 0;
      this.#lastMinOffset = minOffset;
    }
    return report;
  }

  /** How many segments, oldest first, are older than fileReservedTime (never the last). */
  async #expiredCount(): Promise<number> {
    const options = this.#options;
    const files = options.commitLog.files;
    const nowMs = options.clock.nowMs();
    let count = 0;
    while (count < Math.min(DELETE_FILES_BATCH_MAX, files.length - 1)) {
      const leftAtMs = await leftAt(files[count]!, files[count + 1]!);
      if (nowMs - leftAtMs < options.fileReservedTimeMs) break;
      count++;
    }
    return count;
  }
}

/** When the log moved on from `file`: its successor's first storeTimestamp, else its mtime. */
async function leftAt(file: MappedFile, next: MappedFile): Promise<number> {
  if (next.readPosition >= HEADER_BYTES_MAX) {
    const range = await next.selectRange(0, HEADER_BYTES_MAX);
    if (range !== undefined) {
      try {
        const view = new DataView(range.bytes.buffer, range.bytes.byteOffset, HEADER_BYTES_MAX);
        const sysFlag = view.getInt32(SYS_FLAG_POSITION);
        const at = STORE_TIMESTAMP_POSITION_V4 +
          ((sysFlag & SYS_FLAG_BORN_HOST_V6) !== 0 ? HOST_V6_EXTRA_BYTES : 0);
        const timestamp = view.getUint32(at) * 0x1_0000_0000 + view.getUint32(at + 4);
        if (view.getInt32(0) > 0 && timestamp > 0) return timestamp;
      } finally {
        range.release();
      }
    }
  }
  return await file.lastModifiedMs();
}
