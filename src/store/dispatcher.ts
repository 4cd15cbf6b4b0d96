/**
 * The dispatcher (RocketMQ's `ReputMessageService`): follows the commit log
 * and turns each record into a consume-queue unit (NOT_TYPE and COMMIT
 * only) and index entries.
 *
 * ```
 * commit log  ─┬─ MESSAGE ─► putUnit(topic/queueId) ─► buildIndex(keys)
 *              ├─ BLANK   ─► next segment
 *              └─ limit   ─► wait for wakeup()
 *     dispatchedOffset ▲          limit(): flushed (SYNC_FLUSH) or appended (ASYNC_FLUSH)
 * ```
 *
 * The limit is a function the store gives: under SYNC_FLUSH it is the
 * flushed offset, so no consumer ever sees a message a crash could take
 * back; under ASYNC_FLUSH it is the appended offset. Dispatch is strictly
 * sequential (one record at a time, awaited), so units and index keys go
 * in commit-log order. Re-dispatching a record is harmless: the consume
 * queue skips a unit it has, and records at or below `indexSkipThrough`
 * are not indexed again.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import {
  decodeMessageView,
  dispatchTagsCode,
  hasConsumeQueueEntry,
  indexKeysOf,
  RecordChecker,
} from "../record/mod.ts";
import type { MappedFileQueue } from "../segment/mapped_file_queue.ts";
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
  /** Called after each run of dispatched records (subscribers wake). */
  onDispatched?: (dispatchedOffset: number) => void;
  /** Receives the error that stopped the dispatcher. */
  onError: (error: MqStoreError) => void;
}

/**
 * Follows the commit log into the consume queues and the index.
 *
 * @example
 * ```ts ignore
 * const dispatcher = new Dispatcher({ commitLog: queue, limit: () => queue.flushedWhere, ... });
 * await dispatcher.dispatchUpTo(queue.flushedWhere); // recovery: re-dispatch
 * dispatcher.start();
 * dispatcher.wakeup(); // after every put
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
  #checker = new RecordChecker({ checkCrc: false });
  /** The run loop, while started. */
  #loop: Promise<void> | undefined;
  /** A dispatch in progress (recovery or the loop): one at a time. */
  #busy: Promise<void> | undefined;
  #wake: (() => void) | undefined;
  #woken = false;
  #closed = false;
  #failure: MqStoreError | undefined;

  /** @param options The commit log, its limit, the queues and the index. */
  constructor(options: DispatcherOptions) {
    assert(Number.isSafeInteger(options.fromOffset) && options.fromOffset >= 0, "fromOffset");
    this.#options = options;
    this.#dispatched = options.fromOffset;
    this.#indexSkipThrough = options.indexSkipThrough ?? -1;
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
   * Dispatches every record below `offset` now (recovery, close). Not
   * while another dispatch runs: it waits for it.
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
      try {
        await this.#serial(() => this.#dispatch(limit, true));
      } catch (error) {
        this.#fail(error);
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

  /** Dispatches up to `limit`; a background run stops early at close. */
  async #dispatch(limit: number, background: boolean): Promise<void> {
    const queue = this.#options.commitLog;
    const start = this.#dispatched;
    // Bounded: each round dispatches at least one record or leaves a segment.
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
      const length = Math.min(end - position, this.#options.windowBytes);
      const range = await file.selectRange(position, length);
      if (range === undefined) return;
      try {
        await this.#dispatchRange(range.bytes, offset, file.fileSizeBytes - position, length);
      } finally {
        range.release();
      }
    }
    if (this.#dispatched !== start) {
      this.#sequence++;
      this.#options.onDispatched?.(this.#dispatched);
    }
  }

  /** Dispatches the records of `bytes` (commit-log offset `offset`, `segmentRest` bytes to the segment end). */
  async #dispatchRange(
    bytes: Uint8Array,
    offset: number,
    segmentRest: number,
    length: number,
  ): Promise<void> {
    const options = this.#options;
    let at = 0;
    while (at < length) {
      const view = this.#checker.check(bytes, at, offset + at);
      if (view.kind === "message") {
        const message = decodeMessageView(bytes, view);
        const recordOffset = offset + at;
        if (hasConsumeQueueEntry(message.sysFlag)) {
          const cq = options.consumeQueues.find(message.topic, message.queueId) ??
            await options.consumeQueues.findOrCreate(message.topic, message.queueId);
          await cq.putUnit(
            recordOffset,
            view.size,
            dispatchTagsCode(
              message.topic,
              message.properties,
              message.storeTimestamp,
              options.delayLevelsMs,
            ),
            message.queueOffset,
          );
        }
        if (options.index !== undefined && recordOffset > this.#indexSkipThrough) {
          const keys = indexKeysOf(message.sysFlag, message.properties);
          if (keys.length > 0) {
            await options.index.buildIndex({
              topic: message.topic,
              commitLogOffset: recordOffset,
              storeTimestamp: message.storeTimestamp,
              keys,
            });
          }
        }
        this.#lastTimestamp = message.storeTimestamp;
        at += view.size;
        this.#dispatched = offset + at;
        continue;
      }
      if (
        (view.kind === "blank" || view.kind === "invalid") && at + 8 <= length &&
        isBlankFilling(bytes, at, segmentRest - at)
      ) {
        this.#dispatched = offset + segmentRest;
        return;
      }
      // A record cut by the read window: read again from it.
      if (at > 0 && view.kind === "invalid" && view.reason === "TRUNCATED") return;
      throw new MqStoreError(
        "CORRUPT_RECORD",
        `Cannot dispatch the record at commit-log offset ${offset + at}: ${
          view.kind === "invalid" ? `${view.reason} (${view.detail})` : view.kind
        }`,
      );
    }
  }
}

/** Whether `bytes[at]` is a BLANK of exactly `rest` bytes. */
function isBlankFilling(bytes: Uint8Array, at: number, rest: number): boolean {
  const view = new DataView(bytes.buffer, bytes.byteOffset + at, 8);
  return view.getInt32(0) === rest && view.getUint32(4) === 0xCBD4_3194;
}
