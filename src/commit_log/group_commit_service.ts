/**
 * GroupCommitService (SPEC §6): under SYNC_FLUSH a put is answered only
 * once the commit log is durable up to its end offset.
 *
 * ```
 *  puts ──► waiters [end offsets, ascending] ──► one flush in flight
 *                                               │ done: answer every waiter
 *  puts arriving meanwhile wait for the next ◄──┘ with end ≤ flushedWhere
 * ```
 *
 * Double-buffered like RocketMQ's: whatever arrives while a flush runs is
 * covered by the next single flush. That flush starts as soon as as many
 * puts wait as took part in the last flush (the producers it answered are
 * back), or else on the next event-loop turn (some producer did not come
 * back). Starting it at once, not a turn later, matters: what the last
 * flush made durable is dispatched (consume queues, index) in that same
 * turn, which then overlaps the device's flush instead of preceding it
 * (measured: about 0.4 ms of 1.4 ms per group of 64 here). A waiter not
 * answered within `syncFlushTimeout` gets FLUSH_DISK_TIMEOUT (its message
 * stays stored). A failed flush answers every waiter with UNKNOWN_ERROR
 * and reports the error: the store then refuses writes.
 *
 * Waiters live in parallel arrays (no object per put beyond its promise),
 * answered in order, so a timeout always ends a prefix of them.
 *
 * @module
 */

import { setImmediate } from "node:timers";
import { MqStoreError } from "../errors.ts";
import type { Clock } from "../segment/clock.ts";
import type { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import { FINAL_FLUSH_ATTEMPTS } from "./constants.ts";
import type { PutMessageResult } from "./put_message_result.ts";
import type { StoreCheckpoint } from "./store_checkpoint.ts";
import type { StoreStats } from "./store_stats.ts";

/** Options of {@link GroupCommitService}. */
export interface GroupCommitServiceOptions {
  /** The commit-log segments. */
  queue: MappedFileQueue;
  /** Time and timers. */
  clock: Clock;
  /** How long a put waits for its flush (`syncFlushTimeout`). */
  syncFlushTimeoutMs: number;
  /** Receives physicMsgTimestamp and the flushed offset. */
  checkpoint: StoreCheckpoint;
  /** Flush, group and latency counters. */
  stats: StoreStats;
  /** Called after each flush that moved the flushed offset. */
  onFlushed(flushedWhere: number): void;
  /** Called once when a flush fails. */
  onError(error: unknown): void;
}

type Resolve = (result: PutMessageResult) => void;

/**
 * The flusher of SYNC_FLUSH.
 *
 * @example
 * ```ts ignore
 * const groupCommit = new GroupCommitService({
 *   queue, clock, syncFlushTimeoutMs: 5_000, checkpoint, stats,
 *   onFlushed: () => {}, onError: (error) => refuseWrites(error),
 * });
 * // After appending a record that ends at `end`:
 * const answer = await groupCommit.request(end, { status: "PUT_OK" }, clock.nowMs());
 * answer.status; // "PUT_OK" once durable, or "FLUSH_DISK_TIMEOUT"
 * ```
 */
export class GroupCommitService {
  #options: GroupCommitServiceOptions;
  /** End offset each waiter needs durable, ascending. */
  #ends: number[] = [];
  /** Answers each waiter; undefined once answered. */
  #resolvers: (Resolve | undefined)[] = [];
  /** The result each waiter gets. */
  #results: PutMessageResult[] = [];
  /** When each waiter's put started, ms (latency and timeout). */
  #startsMs: number[] = [];
  /** Index of the first waiter not answered. */
  #head = 0;
  /**
   * Puts that took part in the last flush (answered by it, or still
   * waiting when it ended): once this many wait, the group is complete
   * and the next flush starts without waiting for the event-loop turn.
   */
  #groupTarget = 0;
  #flushing = false;
  #scheduled = false;
  #closed = false;
  #closing: Promise<void> | undefined;
  #failure: unknown;
  /** Cancels the timeout timer, when armed. */
  #cancelTimer: (() => void) | undefined;
  /** When a put last asked for a flush or a flush last answered, clock ms. */
  #lastBusyMs = Number.NEGATIVE_INFINITY;
  /** Resolvers of {@link whenQuiet}, woken when no put waits. */
  #quietWaiters: Array<() => void> = [];
  #runBound = () => {
    this.#scheduled = false;
    void this.#run();
  };
  #onTimerBound = () => this.#onTimer();

  /** @param options Queue, timeout and hooks. */
  constructor(options: GroupCommitServiceOptions) {
    this.#options = options;
  }

  /** Nothing to start: flushes are driven by requests. Kept for symmetry with the other services. */
  start(): void {}

  /** Puts waiting for a flush. */
  get waitingCount(): number {
    return this.#ends.length - this.#head;
  }

  /**
   * Resolves with `result` once the log is durable up to `endOffset` (or
   * with FLUSH_DISK_TIMEOUT / UNKNOWN_ERROR).
   *
   * @param endOffset The end of the put's records.
   * @param result What to answer; its status changes on timeout or failure.
   * @param startMs When the put started (clock ms).
   */
  request(endOffset: number, result: PutMessageResult, startMs: number): Promise<PutMessageResult> {
    const options = this.#options;
    if (options.queue.flushedWhere >= endOffset) {
      options.stats.recordPutLatency(options.clock.nowMs() - startMs);
      return Promise.resolve(result);
    }
    if (this.#failure !== undefined || this.#closed) {
      this.#fail(result, this.#failure);
      return Promise.resolve(result);
    }
    if (startMs > this.#lastBusyMs) this.#lastBusyMs = startMs;
    return new Promise<PutMessageResult>((resolve) => {
      this.#ends.push(endOffset);
      this.#resolvers.push(resolve);
      this.#results.push(result);
      this.#startsMs.push(startMs);
      if (this.#cancelTimer === undefined) {
        this.#cancelTimer = options.clock.setTimer(options.syncFlushTimeoutMs, this.#onTimerBound);
      }
      if (this.#ends.length - this.#head >= this.#groupTarget && !this.#flushing && !this.#closed) {
        // The group is complete: flush now (see the module doc).
        void this.#run();
      } else {
        this.#schedule();
      }
    });
  }

  /**
   * Resolves once no put waits for a flush and none is in flight (at once
   * when idle): background device writes (segment preparation) go in the
   * gaps, not in front of acknowledged puts.
   */
  whenQuiet(): Promise<void> {
    if (this.isQuiet) return Promise.resolve();
    return new Promise<void>((resolve) => this.#quietWaiters.push(resolve));
  }

  /**
   * How long no put has waited for a flush, ms (0 while one waits or a
   * flush runs; Infinity once stopped). Background device writes use it to
   * go only in gaps of the put load, not between two group commits.
   */
  idleMs(nowMs: number): number {
    if (this.#closed || this.#failure !== undefined) return Number.POSITIVE_INFINITY;
    return this.isQuiet ? nowMs - this.#lastBusyMs : 0;
  }

  /** No put waits for a flush and none is in flight (or the service stopped). */
  get isQuiet(): boolean {
    return this.#closed || this.#failure !== undefined ||
      (!this.#flushing && !this.#scheduled && this.#head === this.#ends.length);
  }

  #wakeQuiet(): void {
    if (this.#quietWaiters.length === 0 || !this.isQuiet) return;
    const waiters = this.#quietWaiters;
    this.#quietWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Flushes soon without a waiter (a put with `WAIT=false`). */
  wakeup(): void {
    this.#schedule();
  }

  /**
   * Flushes what is appended, answers the remaining waiters, and stops.
   * Idempotent.
   *
   * @throws The flush error, when the final flush fails.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    while (this.#flushing || this.#scheduled) {
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    const { queue } = this.#options;
    try {
      if (this.#failure === undefined) {
        for (let attempt = 0; attempt < FINAL_FLUSH_ATTEMPTS; attempt++) {
          if (queue.flushedWhere >= queue.maxOffset) break;
          await this.#flushOnce();
        }
      }
    } finally {
      this.#answerUpTo(queue.flushedWhere);
      // Whatever is left could not be made durable.
      this.#failAll(
        this.#failure ?? new MqStoreError("CLOSED", "The store closed before the flush was done"),
      );
      this.#cancelTimer?.();
      this.#cancelTimer = undefined;
      this.#wakeQuiet();
    }
  }

  #schedule(): void {
    if (this.#flushing || this.#scheduled || this.#closed) return;
    this.#scheduled = true;
    setImmediate(this.#runBound);
  }

  async #run(): Promise<void> {
    // A flush started early by a complete group, before the turn came.
    if (this.#failure !== undefined || this.#flushing) return;
    this.#flushing = true;
    try {
      await this.#flushOnce();
      const waiting = this.#ends.length - this.#head;
      this.#answerUpTo(this.#options.queue.flushedWhere);
      this.#groupTarget = waiting;
    } catch (error) {
      this.#failure = error;
      this.#failAll(error);
      this.#options.onError(error);
    } finally {
      this.#flushing = false;
    }
    if (this.#head < this.#ends.length) this.#schedule();
    else this.#wakeQuiet();
  }

  async #flushOnce(): Promise<void> {
    const { queue, clock, stats, checkpoint } = this.#options;
    const startMs = clock.nowMs();
    if (!await queue.flush(0)) return;
    stats.recordFlush(clock.nowMs() - startMs);
    const timestamp = queue.storeTimestampMs;
    if (timestamp > 0) checkpoint.physicMsgTimestamp = timestamp;
    checkpoint.commitLogOffset = queue.flushedWhere;
    this.#options.onFlushed(queue.flushedWhere);
  }

  /** Answers every waiter whose end offset is durable. */
  #answerUpTo(flushedWhere: number): void {
    const { clock, stats } = this.#options;
    const ends = this.#ends;
    let head = this.#head;
    const first = head;
    const nowMs = clock.nowMs();
    this.#lastBusyMs = nowMs;
    while (head < ends.length && ends[head]! <= flushedWhere) {
      const resolve = this.#resolvers[head];
      if (resolve !== undefined) {
        stats.recordPutLatency(nowMs - this.#startsMs[head]!);
        resolve(this.#results[head]!);
      }
      head++;
    }
    if (head > first) stats.recordGroupCommit(head - first);
    this.#head = head;
    this.#compact();
  }

  #fail(result: PutMessageResult, cause: unknown): void {
    result.status = "UNKNOWN_ERROR";
    result.error = cause instanceof MqStoreError ? cause : new MqStoreError(
      "IO_ERROR",
      `The flush of the commit log failed: ${String(cause)}`,
      { cause },
    );
    this.#options.stats.recordFailure(result.status);
  }

  #failAll(cause: unknown): void {
    for (let i = this.#head; i < this.#ends.length; i++) {
      const resolve = this.#resolvers[i];
      if (resolve === undefined) continue;
      const result = this.#results[i]!;
      this.#fail(result, cause);
      resolve(result);
    }
    this.#head = this.#ends.length;
    this.#compact();
  }

  #onTimer(): void {
    this.#cancelTimer = undefined;
    const { clock, syncFlushTimeoutMs, stats } = this.#options;
    const nowMs = clock.nowMs();
    const ends = this.#ends;
    while (this.#head < ends.length && this.#startsMs[this.#head]! + syncFlushTimeoutMs <= nowMs) {
      const i = this.#head++;
      const resolve = this.#resolvers[i];
      if (resolve === undefined) continue;
      const result = this.#results[i]!;
      result.status = "FLUSH_DISK_TIMEOUT";
      result.error = new MqStoreError(
        "FLUSH_DISK_TIMEOUT",
        `The flush did not reach offset ${
          ends[i]
        } within syncFlushTimeout ${syncFlushTimeoutMs} ms; the message is stored but not confirmed durable`,
      );
      stats.recordFailure(result.status);
      stats.recordPutLatency(nowMs - this.#startsMs[i]!);
      resolve(result);
    }
    this.#compact();
    if (this.#head < ends.length) {
      const delayMs = Math.max(0, this.#startsMs[this.#head]! + syncFlushTimeoutMs - nowMs);
      this.#cancelTimer = clock.setTimer(delayMs, this.#onTimerBound);
    }
  }

  /** Drops answered waiters from the front of the arrays. */
  #compact(): void {
    const head = this.#head;
    if (head === 0) return;
    if (head === this.#ends.length) {
      this.#ends.length = 0;
      this.#resolvers.length = 0;
      this.#results.length = 0;
      this.#startsMs.length = 0;
      this.#head = 0;
      this.#cancelTimer?.();
      this.#cancelTimer = undefined;
    } else if (head >= 0x400 && head * 2 >= this.#ends.length) {
      this.#ends.splice(0, head);
      this.#resolvers.splice(0, head);
      this.#results.splice(0, head);
      this.#startsMs.splice(0, head);
      this.#head = 0;
    }
  }
}
