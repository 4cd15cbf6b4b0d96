/**
 * GroupCommitService (SPEC §6): under SYNC_FLUSH a put is answered only
 * once the commit log is durable up to its end offset.
 *
 * ```
 *  puts ──► waiters [end offsets, ascending] ──► flush k    (write + fdatasync)
 *                                            ──► flush k+1  (begun while k runs)
 *       answered in order: each settled flush ──► every waiter with end ≤ flushedWhere
 * ```
 *
 * Double-buffered like RocketMQ's, with one more buffer under a large
 * load: a flush covers everything appended when it begins, and once the
 * load (the bytes of the puts waiting when a flush settles) reaches
 * the split threshold, {@link GROUP_COMMIT_FLUSHES_MAX} (2) run at
 * once, each taking half of it, so one half's positional write and
 * `fdatasync` overlap the other's, and the JavaScript work between two
 * groups (encoding, answers, dispatch) overlaps the device. Below it one
 * flush runs at a time: a flush costs the device about the same whatever
 * small group it carries, and two half groups may cost more than the work
 * they hide. Where that turns depends on the device and the runtime, so the
 * threshold is measured (`SplitTuner`: it starts at 128 KiB, or at 1 MiB
 * where the port expects one flush at a time to win, as with the portable
 * adapter where the runtime's `fs.fdatasync` runs one call on a file at a
 * time, and moves toward whichever choice made more bytes durable per ms at
 * the load)
 * unless `splitMinBytes` fixes it. Flushes settle in the order they began (see
 * `MappedFileQueue.startFlush`): one that returns first answers nobody
 * until the earlier one is done, and fails when it failed.
 *
 * When a flush begins: as soon as the puts no flush covers reach the
 * share of the load one flush takes (the puts waiting when the last flush
 * settled, split evenly over the flushes allowed: the producers it
 * answered are back); else on the next event-loop turn when no flush runs
 * (some producer did not come back), or when the flush in flight settles.
 * That turn is taken only when the producers answered had
 * `TURN_DEFER_HOPS` microtask hops to come back and something is still
 * left to begin or report: the group's last put usually begins the next
 * flush within two, and an immediate per group cost the thread one more
 * pass of the event loop for nothing.
 * Splitting the load evenly keeps two groups of equal size alternating;
 * a flush begun on a turn for a few stragglers while another runs would
 * leave them as a small group of their own. A settling flush begins the
 * next one, for the puts that came while it ran, before it answers its
 * own.
 *
 * The device should never wait for the JavaScript thread. So `onFlushed`
 * (which dispatches: consume-queue units and index entries of what became
 * durable, 70–90 µs for a group of 64 1 KiB puts) is told of a
 * settled flush only once the next flush has begun, in a microtask after
 * it (the answered producers are back, and their puts begun it), or on the
 * next event-loop turn when none begins. Before that the producers' next
 * puts would wait behind the dispatch, and the device behind them. The
 * limit of dispatch is still the flushed offset; only the moment moves.
 * A read by queue or key first catches dispatch up to the flushed offset
 * (`MessageStore`), so a put answered PUT_OK is readable there at once.
 *
 * A lone producer (at most one put waited when the last flush settled,
 * one waits now, nothing in flight) is flushed on the next turn with the
 * `fdatasync` on the JavaScript thread (`MappedFileQueue.flushSync`),
 * where the port offers it: the thread blocks for the device's flush
 * (0.2–0.3 ms here) instead of paying two thread hops about as long (1 KiB
 * SYNC puts, one producer, medians of 3 runs here: Deno 2.9 k acks/s
 * instead of 1.9 k off the thread, Bun 4.4 k instead of 3.2 k; SQLite's
 * `synchronous=FULL` does the same at 4.1 k). Waiting for the turn keeps a
 * burst of producers putting in one turn out of it.
 *
 * On Deno an event-loop turn costs a lone put about as much CPU as the
 * rest of its work (25–30 µs of user CPU, against 55–60 µs for the whole
 * 128 B put here), so a producer that comes straight back is not made to
 * wait for one: when the lone flush's answer resumes it and it puts again
 * within {@link LONE_CHAIN_HOPS} microtask hops (`await putMessage()` in a
 * loop), that put is flushed in a microtask, after the ones queued before
 * it (a producer resumed beside it puts first and turns the flush into a
 * group's). A chain of such flushes gives the loop a turn after
 * {@link LONE_CHAIN_FLUSHES_MAX} flushes or {@link LONE_CHAIN_SPAN_MS} ms,
 * so timers and I/O wait about that long at most. A put from another
 * event (an HTTP request) never joins a chain: the hops run out in the
 * microtask checkpoint that opened it. Those wait for the turn, where puts
 * from the same turn's events share a flush.
 *
 * A waiter not answered within `syncFlushTimeout` gets FLUSH_DISK_TIMEOUT
 * (its message stays stored). A failed flush answers every waiter with
 * UNKNOWN_ERROR and reports the error: the store then refuses writes.
 *
 * Waiters live in parallel arrays (no object per put beyond its promise),
 * answered in order, so a timeout always ends a prefix of them.
 *
 * @module
 */

import { setImmediate } from "node:timers";
import { MqStoreError } from "../errors.ts";
import { type Clock, nextTurn } from "../segment/clock.ts";
import type { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import {
  FINAL_FLUSH_ATTEMPTS,
  GROUP_COMMIT_FLUSHES_MAX,
  GROUP_COMMIT_SPLIT_MIN_BYTES,
  GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
  LONE_CHAIN_FLUSHES_MAX,
  LONE_CHAIN_HOPS,
  LONE_CHAIN_SPAN_MS,
} from "./constants.ts";
import type { PutMessageResult } from "./put_message_result.ts";
import type { StoreCheckpoint } from "./store_checkpoint.ts";
import type { StoreStats } from "./store_stats.ts";
import { SplitTuner } from "./_split_tuner.ts";

/**
 * Microtask hops a group's producers get to put again before the group
 * commit takes an event-loop turn for stragglers or a report (see
 * `#deferTurn`): an answer reaches an `await store.putMessage()` in two.
 */
const TURN_DEFER_HOPS = 0x8;
/**
 * Waiter entries whose room is kept once every waiter is answered (see
 * GroupCommitService's #count): more than this many at once (a burst) give
 * theirs back.
 */
const WAITERS_ROOM_KEPT = 0x1000;

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
  /**
   * Called after flushes that moved the flushed offset, once the next
   * flush has begun or on the next event-loop turn (see the module doc):
   * the dispatch it drives then overlaps the device's flush.
   */
  onFlushed(flushedWhere: number): void;
  /** Called once when a flush fails. */
  onError(error: unknown): void;
  /**
   * Run a second flush beside the first only when the load is at least
   * this many bytes (see the module doc).
   *
   * @default {undefined} Tuned by measurement, from GROUP_COMMIT_SPLIT_MIN_BYTES
   * (or GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES: see `overlapFlushes`).
   */
  splitMinBytes?: number;
  /**
   * Where the tuned threshold starts (unless `splitMinBytes` is given): at
   * GROUP_COMMIT_SPLIT_MIN_BYTES when two flushes in flight are expected
   * to win on large loads, else at GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES (one
   * flush at a time at every load the tuner measures, until it finds that
   * splitting wins). The port's `overlapFlushes`: the tuner's first
   * decision comes after about a second of load, too late for a run of a
   * few hundred thousand puts to gain by it.
   *
   * @default {true}
   */
  overlapFlushes?: boolean;
}

type Resolve = (result: PutMessageResult) => void;

/**
 * Queues microtasks as reactions of one settled promise: Node's
 * `queueMicrotask` wraps each callback in an AsyncResource and a bound
 * function (about three times the cost, and a lone SYNC put queues three
 * or four).
 */
const settled = Promise.resolve();

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
  /** End offset each waiter needs durable, ascending (the first {@link #count}). */
  #ends: number[] = [];
  /** Answers each waiter; undefined once answered. */
  #resolvers: (Resolve | undefined)[] = [];
  /** The result each waiter gets; undefined once answered. */
  #results: (PutMessageResult | undefined)[] = [];
  /** When each waiter's put started, ms (latency and timeout). */
  #startsMs: number[] = [];
  /**
   * Waiters in the four arrays above: their entries from {@link #count} on
   * are left over from earlier groups. The arrays keep their room when a
   * group is answered (see {@link #compact}): emptied, each grew again
   * from nothing, five reallocations and copies per array for 256 waiters.
   */
  #count = 0;
  /** Index of the first waiter not answered. */
  #head = 0;
  /** Index of the first waiter no begun flush covers (below #head: none). */
  #uncovered = 0;
  /**
   * Puts waiting when the last flush settled (answered by it, covered by
   * the other one in flight, or not covered yet): the load's concurrency,
   * which the flushes in flight share (see the module doc).
   */
  #concurrency = 0;
  /** Flushes begun and not settled, at most {@link GroupCommitService.#flushesMax}. */
  #flushesInFlight = 0;
  /**
   * Flushes allowed in flight for the current load: 1, or
   * GROUP_COMMIT_FLUSHES_MAX once the load reaches `splitMinBytes`.
   */
  #flushesMax = 1;
  /** `splitMinBytes` when given. */
  #splitMinBytes: number;
  /** The flushed offset when the last flush begun by `#beginFlush` settled. */
  #settledWhere = 0;
  /** Tunes the split threshold when `splitMinBytes` is not given. */
  #tuner: SplitTuner | undefined;
  /** Settles after the last flush begun (and so after every earlier one). */
  #lastFlush: Promise<void> = Promise.resolve();
  /** A flush was asked for without a waiter ({@link wakeup}). */
  #wanted = false;
  #scheduled = false;
  #closed = false;
  #closing: Promise<void> | undefined;
  #failure: unknown;
  /**
   * Cancels the timeout timer, when armed. It may outlive the waiters it
   * was armed for: when it fires it answers those whose time is up and
   * re-arms for the first other one, if any.
   */
  #cancelTimer: (() => void) | undefined;
  /** When a put last asked for a flush or a flush last answered, clock ms. */
  #lastBusyMs = Number.NEGATIVE_INFINITY;
  /** Resolvers of {@link whenQuiet}, woken when no put waits. */
  #quietWaiters: Array<() => void> = [];
  /** A flush moved the flushed offset and `onFlushed` has not been told yet. */
  #unreported = false;
  /**
   * Microtask hops left in which a lone put is flushed in a microtask
   * instead of on the next turn (0: no chain of lone flushes is open).
   */
  #chainHops = 0;
  /** The microtask counting {@link GroupCommitService.#chainHops} down is queued. */
  #chainTicking = false;
  /** Lone flushes since the last event-loop turn. */
  #chainFlushes = 0;
  /** When the first of them began, clock ms. */
  #chainStartMs = 0;
  /** A lone flush is queued as a microtask. */
  #loneQueued = false;
  #runBound = () => {
    this.#scheduled = false;
    // A turn: the next lone flushes may chain again.
    this.#chainFlushes = 0;
    this.#run();
  };
  #runLoneBound = () => {
    this.#loneQueued = false;
    this.#run();
  };
  #chainTickBound = () => {
    if (--this.#chainHops > 0) settled.then(this.#chainTickBound);
    else this.#chainTicking = false;
  };
  #reportBound = () => this.#report();
  /**
   * Microtask hops left before the look {@link GroupCommitService.#deferTurn}
   * queued (0: none queued).
   */
  #deferHops = 0;
  #deferTickBound = () => {
    if (--this.#deferHops > 0) {
      settled.then(this.#deferTickBound);
      return;
    }
    // The producers answered had their hops to put again (their puts begin
    // the next flush): a turn only for what is left to begin or report.
    if (this.#unreported || this.#wanted || this.#uncoveredCount() > 0) this.#schedule();
    else this.#wakeQuiet();
  };
  /** The resolver {@link GroupCommitService.#takeResolveBound} was just handed. */
  #taken: Resolve | undefined;
  #takeResolveBound = (resolve: Resolve) => {
    this.#taken = resolve;
  };
  #onTimerBound = () => this.#onTimer();

  /** @param options Queue, timeout and hooks. */
  constructor(options: GroupCommitServiceOptions) {
    this.#options = options;
    this.#splitMinBytes = options.splitMinBytes ?? GROUP_COMMIT_SPLIT_MIN_BYTES;
    if (!Number.isSafeInteger(this.#splitMinBytes) || this.#splitMinBytes < 0) {
      throw new RangeError(`splitMinBytes ${this.#splitMinBytes} must be a non-negative integer`);
    }
    if (options.splitMinBytes === undefined) {
      this.#tuner = new SplitTuner(
        options.overlapFlushes ?? true ? this.#splitMinBytes : GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
      );
    }
  }

  /**
   * The load, in bytes, from which two flushes run at once: `splitMinBytes`
   * when given, else tuned by measurement between
   * `GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES` and `GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES`
   * (see `SplitTuner`).
   */
  get splitMinBytes(): number {
    return this.#tuner?.thresholdBytes ?? this.#splitMinBytes;
  }

  /** Nothing to start: flushes are driven by requests. Kept for symmetry with the other services. */
  start(): void {}

  /** Puts waiting for a flush. */
  get waitingCount(): number {
    return this.#count - this.#head;
  }

  /** Flushes begun and not settled yet. */
  get flushesInFlight(): number {
    return this.#flushesInFlight;
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
    // One executor for every put (it only hands the resolver over): no
    // closure per put.
    const answer = new Promise<PutMessageResult>(this.#takeResolveBound);
    const count = this.#count;
    this.#ends[count] = endOffset;
    this.#resolvers[count] = this.#taken;
    this.#taken = undefined;
    this.#results[count] = result;
    this.#startsMs[count] = startMs;
    this.#count = count + 1;
    // One timer for all waiters, armed by the first and left armed when
    // they are answered: it looks at whoever waits when it fires. Arming
    // and clearing one per put cost about a fifth of a lone SYNC put's
    // CPU on Deno (its timers go through the Rust timer queue).
    if (this.#cancelTimer === undefined) {
      this.#cancelTimer = options.clock.setTimer(options.syncFlushTimeoutMs, this.#onTimerBound);
    }
    this.#maybeFlush(false);
    return answer;
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
      (this.#flushesInFlight === 0 && !this.#scheduled && this.#deferHops === 0 &&
        this.#head === this.#count);
  }

  #wakeQuiet(): void {
    if (this.#quietWaiters.length === 0 || !this.isQuiet) return;
    const waiters = this.#quietWaiters;
    this.#quietWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Flushes soon without a waiter (a put with `WAIT=false`). */
  wakeup(): void {
    if (this.#closed || this.#failure !== undefined) return;
    this.#wanted = true;
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
    while (this.#flushesInFlight > 0 || this.#scheduled) {
      if (this.#flushesInFlight > 0) await this.#lastFlush;
      else await nextTurn();
    }
    this.#report();
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
    if (this.#scheduled || this.#closed) return;
    this.#scheduled = true;
    setImmediate(this.#runBound);
  }

  /**
   * Looks again after `TURN_DEFER_HOPS` microtask hops, and takes an
   * event-loop turn then only if something is left to do (see the module
   * doc). Each call gives the producers the full count again.
   */
  #deferTurn(): void {
    if (this.#scheduled || this.#closed) return;
    if (this.#deferHops === 0) settled.then(this.#deferTickBound);
    this.#deferHops = TURN_DEFER_HOPS;
  }

  /** Waiters no begun flush covers. */
  #uncoveredCount(): number {
    return this.#count - Math.max(this.#uncovered, this.#head);
  }

  /** A look on a turn, or in a chain of lone flushes. */
  #run(): void {
    this.#maybeFlush(true);
    this.#report();
    this.#wakeQuiet();
  }

  /**
   * Begins a flush when the module doc's rule says so, else schedules the
   * next look. `onTurn`: called on an event-loop turn, not by a request.
   */
  #maybeFlush(onTurn: boolean): void {
    if (this.#failure !== undefined || this.#closed) return;
    const uncovered = this.#count - Math.max(this.#uncovered, this.#head);
    if (uncovered === 0 && !this.#wanted) return;
    // A settling flush looks again.
    const flushesMax = this.#flushesMax;
    if (this.#flushesInFlight >= flushesMax) return;
    if (
      this.#concurrency <= 1 && this.#flushesInFlight === 0 && uncovered === 1 &&
      this.#count - this.#head === 1
    ) {
      // A lone producer: flushed on the thread, on the next turn (a burst
      // of producers puts in this one), or in a microtask when it came
      // straight back from the lone flush before (see the module doc).
      if (onTurn) {
        if (!this.#flushLone()) this.#beginFlush();
      } else if (this.#chainHops > 0) {
        if (!this.#loneQueued) {
          this.#loneQueued = true;
          settled.then(this.#runLoneBound);
        }
      } else {
        this.#schedule();
      }
      return;
    }
    const share = Math.ceil(this.#concurrency / flushesMax);
    if ((uncovered > 0 && uncovered >= share) || (onTurn && this.#flushesInFlight === 0)) {
      this.#beginFlush();
    } else if (!onTurn) {
      this.#deferTurn();
    }
  }

  #beginFlush(): void {
    const { queue, clock } = this.#options;
    this.#wanted = false;
    let flushed: Promise<void> | undefined;
    try {
      flushed = queue.startFlush();
    } catch (error) {
      this.#onFailure(error);
      return;
    }
    // Every waiter so far ends at or before what the flushes begun cover.
    this.#uncovered = this.#count;
    if (flushed === undefined) return;
    this.#flushesInFlight++;
    this.#lastFlush = this.#settle(flushed, clock.nowMs());
    // The device is busy: what the last flush made durable is reported
    // (and dispatched) now, overlapping it.
    if (this.#unreported) settled.then(this.#reportBound);
  }

  /** Tells `onFlushed` of the flushed offset, when a flush moved it since. */
  #report(): void {
    if (!this.#unreported) return;
    this.#unreported = false;
    this.#options.onFlushed(this.#options.queue.flushedWhere);
  }

  /**
   * Flushes for the one waiter on the JavaScript thread when the queue can
   * (`MappedFileQueue.flushSync`), and answers it.
   *
   * @returns Whether it flushed (false: nothing was done).
   */
  #flushLone(): boolean {
    const { queue, clock } = this.#options;
    const startMs = clock.nowMs();
    this.#wanted = false;
    try {
      if (!queue.flushSync()) return false;
    } catch (error) {
      this.#onFailure(error);
      return true;
    }
    this.#uncovered = this.#count;
    const endMs = clock.nowMs();
    this.#recordFlush(endMs - startMs);
    this.#answerUpTo(queue.flushedWhere, endMs);
    // No flush to overlap: the thread waited for this one.
    this.#unreported = true;
    this.#report();
    // The producer just answered may put again before the next turn: its
    // put is then flushed in a microtask, within the chain's bounds (a
    // turn between chains keeps timers and I/O going).
    if (this.#chainFlushes++ === 0) this.#chainStartMs = startMs;
    if (
      this.#chainFlushes < LONE_CHAIN_FLUSHES_MAX &&
      endMs - this.#chainStartMs < LONE_CHAIN_SPAN_MS
    ) {
      this.#chainHops = LONE_CHAIN_HOPS;
      if (!this.#chainTicking) {
        this.#chainTicking = true;
        settled.then(this.#chainTickBound);
      }
    } else {
      this.#chainHops = 0;
    }
    return true;
  }

  /** Answers what the flush made durable once it settled (in begin order). */
  async #settle(flushed: Promise<void>, startMs: number): Promise<void> {
    const flushedAtBegin = this.#options.queue.flushedWhere;
    try {
      await flushed;
    } catch (error) {
      this.#flushesInFlight--;
      this.#onFailure(error);
      return;
    }
    this.#flushesInFlight--;
    if (this.#failure !== undefined) return;
    // The load: the puts waiting when the flush settled, from where the
    // flush before it ended (it settled first) to the last waiter's end.
    // Not from the flushed offset when this flush began: with two in
    // flight that is where the flush before the other one ended, and the
    // load also counted the other one's puts, answered before: 1.5 times
    // the bytes waiting at a steady load, where one flush at a time
    // measured them once, so a threshold between the two kept either
    // choice once made (issue 5, session 12).
    const flushedWhere = this.#options.queue.flushedWhere;
    const flushedBefore = this.#settledWhere <= flushedWhere
      ? Math.max(flushedAtBegin, this.#settledWhere)
      : flushedAtBegin;
    this.#settledWhere = flushedWhere;
    const count = this.#count;
    const loadBytes = Math.max(flushedWhere, count === 0 ? 0 : this.#ends[count - 1]!) -
      flushedBefore;
    const clock = this.#options.clock;
    const split = this.#tuner === undefined ? loadBytes >= this.#splitMinBytes : this.#tuner.decide(
      loadBytes,
      flushedWhere,
      clock.monotonicMs?.() ?? clock.nowMs(),
    );
    this.#flushesMax = split ? GROUP_COMMIT_FLUSHES_MAX : 1;
    this.#afterFlush(startMs);
  }

  /** Records a flush that moved flushedWhere, answers, and looks at what waits. */
  #afterFlush(startMs: number): void {
    const { queue, clock } = this.#options;
    this.#recordFlush(clock.nowMs() - startMs);
    const flushedWhere = queue.flushedWhere;
    // Reported once the next flush began (the producers answered put
    // again first), else on the next turn.
    this.#unreported = true;
    // Puts that came during this flush go to the device before the
    // answers: it never waits for them. (The durable waiters are covered:
    // the rule counts them only where it asks for a lone one.)
    this.#maybeFlush(false);
    this.#answerUpTo(flushedWhere);
    if (this.#unreported) this.#deferTurn();
  }

  /**
   * Records a flush that moved flushedWhere (stats, checkpoint) and the
   * load it leaves: the puts waiting now.
   */
  #recordFlush(durationMs: number): void {
    const { queue, stats, checkpoint } = this.#options;
    stats.recordFlush(durationMs);
    const timestamp = queue.storeTimestampMs;
    if (timestamp > 0) checkpoint.physicMsgTimestamp = timestamp;
    checkpoint.commitLogOffset = queue.flushedWhere;
    this.#concurrency = this.#count - this.#head;
  }

  /** Refuses from now on: answers every waiter and reports the error (once). */
  #onFailure(error: unknown): void {
    if (this.#failure !== undefined) return;
    // What earlier flushes made durable stays durable.
    this.#answerUpTo(this.#options.queue.flushedWhere);
    this.#report();
    this.#failure = error;
    this.#failAll(error);
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#options.onError(error);
    this.#wakeQuiet();
  }

  /** One flush on its own (close): nothing else is in flight. */
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

  /**
   * Answers every waiter whose end offset is durable. `nowMs`: the clock
   * read just before, when the caller has one.
   */
  #answerUpTo(flushedWhere: number, nowMs = this.#options.clock.nowMs()): void {
    const stats = this.#options.stats;
    const ends = this.#ends;
    const resolvers = this.#resolvers;
    const results = this.#results;
    const count = this.#count;
    let head = this.#head;
    const first = head;
    this.#lastBusyMs = nowMs;
    while (head < count && ends[head]! <= flushedWhere) {
      const resolve = resolvers[head];
      if (resolve !== undefined) {
        stats.recordPutLatency(nowMs - this.#startsMs[head]!);
        resolve(results[head]!);
        resolvers[head] = undefined;
        results[head] = undefined;
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
    for (let i = this.#head; i < this.#count; i++) {
      const resolve = this.#resolvers[i];
      if (resolve === undefined) continue;
      const result = this.#results[i]!;
      this.#resolvers[i] = undefined;
      this.#results[i] = undefined;
      this.#fail(result, cause);
      resolve(result);
    }
    this.#head = this.#count;
    this.#compact();
  }

  #onTimer(): void {
    this.#cancelTimer = undefined;
    const { clock, syncFlushTimeoutMs, stats } = this.#options;
    const nowMs = clock.nowMs();
    const ends = this.#ends;
    const first = this.#head;
    while (this.#head < this.#count && this.#startsMs[this.#head]! + syncFlushTimeoutMs <= nowMs) {
      const i = this.#head++;
      const resolve = this.#resolvers[i];
      if (resolve === undefined) continue;
      const result = this.#results[i]!;
      this.#resolvers[i] = undefined;
      this.#results[i] = undefined;
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
    // The timed-out records stay stored and no waiter asks for them any
    // more: a flush still makes them durable (and so dispatched).
    if (this.#head > first) this.wakeup();
    this.#compact();
    if (this.#head < this.#count) {
      const delayMs = Math.max(0, this.#startsMs[this.#head]! + syncFlushTimeoutMs - nowMs);
      this.#cancelTimer = clock.setTimer(delayMs, this.#onTimerBound);
    }
  }

  /** Drops answered waiters from the front of the arrays. */
  #compact(): void {
    const head = this.#head;
    if (head === 0) return;
    if (head === this.#count) {
      // Answered entries hold no resolver or result (nothing kept alive):
      // the next group writes over them. Past WAITERS_ROOM_KEPT the room
      // is given back.
      if (this.#ends.length > WAITERS_ROOM_KEPT) this.#truncate(0);
      this.#count = 0;
      this.#head = 0;
      this.#uncovered = 0;
      // The timeout timer stays armed (see #onTimer).
    } else if (head >= 0x400 && head * 2 >= this.#count) {
      this.#truncate(this.#count);
      this.#count -= head;
      this.#ends.splice(0, head);
      this.#resolvers.splice(0, head);
      this.#results.splice(0, head);
      this.#startsMs.splice(0, head);
      this.#head = 0;
      this.#uncovered = Math.max(0, this.#uncovered - head);
    }
  }

  /** Cuts the four waiter arrays to `length` entries. */
  #truncate(length: number): void {
    this.#ends.length = length;
    this.#resolvers.length = length;
    this.#results.length = length;
    this.#startsMs.length = length;
  }
}
