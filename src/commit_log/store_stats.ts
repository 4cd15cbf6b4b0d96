/**
 * Counters of the put path and the flush services, and the plain snapshot
 * `MessageStore.stats()` returns.
 *
 * Updating a counter allocates nothing: per-topic counters are objects
 * created once per topic, histograms are fixed arrays.
 *
 * @module
 */

import { PUT_LATENCY_BUCKET_LABELS, PUT_LATENCY_BUCKET_LIMITS_MS } from "./constants.ts";

/**
 * Put counters of one topic.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "../store/message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * await store.putMessage({ topic: "Orders", queueId: 0, body: new Uint8Array(1) });
 * const orders = store.stats().topics["Orders"];
 * console.log(orders?.putCount, orders?.putBytes); // 1 and the record's size
 * await store.close();
 * ```
 */
export interface TopicPutStats {
  /** Messages stored. */
  putCount: number;
  /** Record bytes stored. */
  putBytes: number;
}

/**
 * A snapshot of {@link StoreStats}.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "../store/message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * await store.putMessage({ topic: "Orders", queueId: 0, body: new Uint8Array(1) });
 * const stats = store.stats();
 * console.log(stats.putCount, stats.flushCount, stats.putLatency);
 * await store.close();
 * ```
 */
export interface StoreStatsSnapshot {
  /** Messages stored, every topic. */
  putCount: number;
  /** Record bytes stored, every topic. */
  putBytes: number;
  /** Puts answered with something other than PUT_OK, by status. */
  putFailures: Record<string, number>;
  /** Per topic. */
  topics: Record<string, TopicPutStats>;
  /**
   * Put latency (call to answer: the append, or the flush it waited for),
   * RocketMQ's `putMessageDistributeTime` buckets.
   */
  putLatency: Record<string, number>;
  /** Flushes done (every service). */
  flushCount: number;
  /** Total time spent in flushes, ms. */
  flushTimeMsTotal: number;
  /** Longest flush, ms. */
  flushTimeMsMax: number;
  /** Commits done (transient store pool). */
  commitCount: number;
  /** Group-commit flushes (SYNC_FLUSH). */
  groupCommitCount: number;
  /** Puts acknowledged by group-commit flushes. */
  groupCommitRequests: number;
  /** Largest number of puts one group-commit flush acknowledged. */
  groupCommitBatchMax: number;
  /** Mean puts per group-commit flush (0 before any). */
  groupCommitBatchMean: number;
  /**
   * Messages dispatched into the consume queues and the index from what
   * the put path said of them (no decode) since open.
   */
  dispatchHintedCount: number;
  /**
   * Messages dispatched by decoding them since open: re-dispatch at open,
   * the first record of a segment, puts that were queued, and what did
   * not fit the hint ring. A high share at full speed is worth reporting.
   */
  dispatchDecodedCount: number;
}

/**
 * The mutable counters; one instance per store.
 *
 * @example
 * ```ts
 * import { StoreStats } from "./store_stats.ts";
 *
 * const stats = new StoreStats();
 * stats.recordPut("Orders", 1, 180);
 * stats.recordPutLatency(3);
 * console.log(stats.snapshot().putLatency["0~10ms"]); // 1
 * ```
 */
export class StoreStats {
  /** Messages stored. */
  putCount = 0;
  /** Record bytes stored. */
  putBytes = 0;
  /** Flushes done. */
  flushCount = 0;
  /** Total flush time, ms. */
  flushTimeMsTotal = 0;
  /** Longest flush, ms. */
  flushTimeMsMax = 0;
  /** Commits done. */
  commitCount = 0;
  /** Group-commit flushes. */
  groupCommitCount = 0;
  /** Puts acknowledged by group-commit flushes. */
  groupCommitRequests = 0;
  /** Largest group-commit batch. */
  groupCommitBatchMax = 0;
  /** Put latency histogram (see {@link PUT_LATENCY_BUCKET_LIMITS_MS}). */
  readonly putLatency: number[] = new Array(PUT_LATENCY_BUCKET_LABELS.length).fill(0);
  /** Per-topic counters. */
  readonly #topics = new Map<string, TopicPutStats>();
  /** Failures by status. */
  readonly #failures = new Map<string, number>();
  /** One-entry cache: producers mostly repeat the topic. */
  #lastTopic = "";
  #lastTopicStats: TopicPutStats | undefined;

  /** Counts `count` stored messages of `bytes` record bytes in `topic`. */
  recordPut(topic: string, count: number, bytes: number): void {
    let stats = this.#lastTopicStats;
    if (topic !== this.#lastTopic || stats === undefined) {
      stats = this.#topics.get(topic);
      if (stats === undefined) {
        stats = { putCount: 0, putBytes: 0 };
        this.#topics.set(topic, stats);
      }
      this.#lastTopic = topic;
      this.#lastTopicStats = stats;
    }
    stats.putCount += count;
    stats.putBytes += bytes;
    this.putCount += count;
    this.putBytes += bytes;
  }

  /** Counts a put answered with `status` (not PUT_OK). */
  recordFailure(status: string): void {
    this.#failures.set(status, (this.#failures.get(status) ?? 0) + 1);
  }

  /** Adds one put latency to the histogram. */
  recordPutLatency(latencyMs: number): void {
    const limits = PUT_LATENCY_BUCKET_LIMITS_MS;
    let bucket = 0;
    while (bucket < limits.length && latencyMs > limits[bucket]!) bucket++;
    this.putLatency[bucket]!++;
  }

  /** Counts one flush that took `durationMs`. */
  recordFlush(durationMs: number): void {
    this.flushCount++;
    this.flushTimeMsTotal += durationMs;
    if (durationMs > this.flushTimeMsMax) this.flushTimeMsMax = durationMs;
  }

  /** Counts one group-commit flush acknowledging `requests` puts. */
  recordGroupCommit(requests: number): void {
    this.groupCommitCount++;
    this.groupCommitRequests += requests;
    if (requests > this.groupCommitBatchMax) this.groupCommitBatchMax = requests;
  }

  /** A plain, detached copy of every counter. */
  snapshot(): StoreStatsSnapshot {
    const topics: Record<string, TopicPutStats> = {};
    for (const [topic, stats] of this.#topics) topics[topic] = { ...stats };
    const putLatency: Record<string, number> = {};
    PUT_LATENCY_BUCKET_LABELS.forEach((label, i) => putLatency[label] = this.putLatency[i]!);
    return {
      putCount: this.putCount,
      putBytes: this.putBytes,
      putFailures: Object.fromEntries(this.#failures),
      topics,
      putLatency,
      flushCount: this.flushCount,
      flushTimeMsTotal: this.flushTimeMsTotal,
      flushTimeMsMax: this.flushTimeMsMax,
      commitCount: this.commitCount,
      groupCommitCount: this.groupCommitCount,
      groupCommitRequests: this.groupCommitRequests,
      groupCommitBatchMax: this.groupCommitBatchMax,
      groupCommitBatchMean: this.groupCommitCount === 0
        ? 0
        : this.groupCommitRequests / this.groupCommitCount,
      // The dispatcher's counters: MessageStore.stats() fills them in.
      dispatchHintedCount: 0,
      dispatchDecodedCount: 0,
    };
  }
}
