/**
 * The next queue offset of every topic/queue (RocketMQ's
 * `topicQueueTable`, keyed `topic-queueId`).
 *
 * Held as topic → queueId → counter object so the put path neither builds
 * a key string nor writes a map entry per message: it bumps a counter it
 * found once (and keeps the last one at hand).
 *
 * @module
 */

/**
 * Queue ids below this are also kept in an array per topic: producers
 * spread messages over a few queues of one topic (RocketMQ's default is 4
 * or 8 queues), and an array index costs less than a `Map` lookup.
 */
const DENSE_QUEUE_IDS = 0x40;

/** One queue's next offset; mutated in place by the put path. */
export interface QueueCounter {
  /** Queue offset the next message of this queue gets. */
  next: number;
  /**
   * What the dispatcher keeps for this queue (its consume queue), so that
   * a record dispatched from a dispatch hint, which points here, needs no
   * lookup by topic and queue id. Opaque to the commit log.
   */
  dispatchCache: object | undefined;
}

/**
 * Next queue offsets by topic and queue.
 *
 * @example
 * ```ts
 * import { TopicQueueTable } from "./topic_queue_table.ts";
 *
 * const table = new TopicQueueTable();
 * table.counter("Orders", 0).next++;
 * console.log(table.get("Orders", 0)); // 1
 * console.log([...table.entries()]); // [["Orders-0", 1]]
 * ```
 */
export class TopicQueueTable {
  #topics = new Map<string, Map<number, QueueCounter>>();
  /** Per topic, the counters of queue ids below {@link DENSE_QUEUE_IDS} (holes until used). */
  #dense = new Map<string, (QueueCounter | undefined)[]>();
  /** The topic of the last lookup, and its queues: producers mostly repeat the topic. */
  #lastTopic = "";
  #lastQueues: Map<number, QueueCounter> | undefined;
  #lastDense: (QueueCounter | undefined)[] = [];

  /** The counter of a queue, created at 0 if new. */
  counter(topic: string, queueId: number): QueueCounter {
    if (topic !== this.#lastTopic || this.#lastQueues === undefined) this.#selectTopic(topic);
    if (queueId < DENSE_QUEUE_IDS) {
      const counter = this.#lastDense[queueId];
      if (counter !== undefined) return counter;
    }
    const queues = this.#lastQueues!;
    let counter = queues.get(queueId);
    if (counter === undefined) {
      counter = { next: 0, dispatchCache: undefined };
      queues.set(queueId, counter);
    }
    if (queueId < DENSE_QUEUE_IDS) this.#lastDense[queueId] = counter;
    return counter;
  }

  #selectTopic(topic: string): void {
    let queues = this.#topics.get(topic);
    if (queues === undefined) {
      queues = new Map();
      this.#topics.set(topic, queues);
    }
    let dense = this.#dense.get(topic);
    if (dense === undefined) {
      dense = [];
      this.#dense.set(topic, dense);
    }
    this.#lastTopic = topic;
    this.#lastQueues = queues;
    this.#lastDense = dense;
  }

  /** The next queue offset of a queue, or undefined for a queue never written. */
  get(topic: string, queueId: number): number | undefined {
    return this.#topics.get(topic)?.get(queueId)?.next;
  }

  /** Every queue as `["topic-queueId", next]`, RocketMQ's keys. */
  *entries(): IterableIterator<[string, number]> {
    for (const [topic, queues] of this.#topics) {
      for (const [queueId, counter] of queues) yield [`${topic}-${queueId}`, counter.next];
    }
  }

  /** Forgets every queue. */
  clear(): void {
    this.#topics.clear();
    this.#dense.clear();
    this.#lastTopic = "";
    this.#lastQueues = undefined;
    this.#lastDense = [];
  }
}
