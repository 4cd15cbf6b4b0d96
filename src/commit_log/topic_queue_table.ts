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

/** One queue's next offset; mutated in place by the put path. */
export interface QueueCounter {
  /** Queue offset the next message of this queue gets. */
  next: number;
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
  #lastTopic = "";
  #lastQueueId = -1;
  #lastCounter: QueueCounter | undefined;

  /** The counter of a queue, created at 0 if new. */
  counter(topic: string, queueId: number): QueueCounter {
    if (topic === this.#lastTopic && queueId === this.#lastQueueId) return this.#lastCounter!;
    let queues = this.#topics.get(topic);
    if (queues === undefined) {
      queues = new Map();
      this.#topics.set(topic, queues);
    }
    let counter = queues.get(queueId);
    if (counter === undefined) {
      counter = { next: 0 };
      queues.set(queueId, counter);
    }
    this.#lastTopic = topic;
    this.#lastQueueId = queueId;
    this.#lastCounter = counter;
    return counter;
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
    this.#lastTopic = "";
    this.#lastQueueId = -1;
    this.#lastCounter = undefined;
  }
}
