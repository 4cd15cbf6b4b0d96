/**
 * Every consume queue of a store, by topic and queue id (RocketMQ's
 * `consumeQueueTable`), loaded from `<root>/consumequeue/<topic>/<queueId>/`.
 * Topic names may hold `%` and `|` (retry and long topics): they are
 * directory names as they are.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import type { RuntimePort } from "../runtime/port.ts";
import type { Clock } from "../segment/clock.ts";
import { CONSUME_QUEUE_DIRECTORY_NAME } from "./_consume_queue_constants.ts";
import { ConsumeQueueAllocator } from "./_consume_queue_allocator.ts";
import { ConsumeQueue } from "./consume_queue.ts";

/** Options of {@link ConsumeQueueTable}. */
export interface ConsumeQueueTableOptions {
  /** The runtime port. */
  port: RuntimePort;
  /** The store root. */
  rootDirectory: string;
  /**
   * Size of each consume-queue file; a whole number of 20-byte units.
   *
   * @default {6 000 000}
   */
  mappedFileSizeConsumeQueue?: number;
  /**
   * Open every queue read-only.
   *
   * @default {false}
   */
  readOnly?: boolean;
  /**
   * Create sparse files (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
  /**
   * Time source of the segment layer.
   *
   * @default {systemClock}
   */
  clock?: Clock;
  /**
   * Receives the error of a queue made by {@link ConsumeQueueTable.findOrCreateNow}
   * whose first file could not be created: units it took are in memory
   * only (dispatch must stop; re-dispatch on open puts them back).
   *
   * @default {undefined}
   */
  onError?: (error: unknown) => void;
}

/** A queue directory name: a decimal int32, as `Integer.parseInt` accepts it. */
const QUEUE_ID_PATTERN = /^[0-9]{1,10}$/;

/** Largest queue id (an int32). */
const QUEUE_ID_MAX = 0x7FFF_FFFF;

/**
 * The consume queues of a store.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { ConsumeQueueTable } from "./consume_queue_table.ts";
 *
 * const port = new MemoryPort("deno");
 * const table = new ConsumeQueueTable({ port, rootDirectory: "/store" });
 * await table.load();
 * await table.recover();
 * const cq = await table.findOrCreate("Orders", 0);
 * await cq.putUnit(0, 176, 0, 0);
 * await table.flush(0);
 * await table.close();
 * ```
 */
export class ConsumeQueueTable {
  /** `<root>/consumequeue`. */
  readonly directory: string;
  #options: ConsumeQueueTableOptions;
  /** topic → queue id → queue. */
  #table = new Map<string, Map<number, ConsumeQueue>>();
  /** Queues being created, so two callers share one. */
  #creating = new Map<string, Promise<ConsumeQueue>>();
  /** Creates every queue's next file ahead of need; none when read-only. */
  #allocator: ConsumeQueueAllocator | undefined;
  #closed = false;

  /** @param options Port, store root and queue settings. */
  constructor(options: ConsumeQueueTableOptions) {
    this.#options = options;
    this.directory = `${options.rootDirectory}/${CONSUME_QUEUE_DIRECTORY_NAME}`;
    if (options.readOnly !== true) {
      this.#allocator = new ConsumeQueueAllocator({
        port: options.port,
        sparse: options.sparse,
        clock: options.clock,
      });
      this.#allocator.start();
    }
  }

  /** Resolves once no file is being prepared ahead (tests, shutdown ordering). */
  async whenPrepared(): Promise<void> {
    await this.#allocator?.whenIdle();
  }

  /** Files prepared ahead and not yet in use (tests, stats). */
  get preparedFileCount(): number {
    return this.#allocator?.preparedCount ?? 0;
  }

  /**
   * Opens every queue directory under `consumequeue/` (RocketMQ's
   * `loadConsumeQueue`); directories whose name is not a queue id are
   * skipped, as RocketMQ does.
   */
  async load(): Promise<void> {
    const port = this.#options.port;
    const root = await port.stat(this.directory);
    if (root === undefined) return;
    if (!root.isDirectory) {
      throw new MqStoreError("INVALID_FILE", `${this.directory} is not a directory`);
    }
    for (const topic of await port.list(this.directory)) {
      const topicStat = await port.stat(`${this.directory}/${topic}`);
      if (topicStat === undefined || !topicStat.isDirectory) continue;
      for (const name of await port.list(`${this.directory}/${topic}`)) {
        if (!QUEUE_ID_PATTERN.test(name) || Number(name) > QUEUE_ID_MAX) continue;
        const queueStat = await port.stat(`${this.directory}/${topic}/${name}`);
        if (queueStat === undefined || !queueStat.isDirectory) continue;
        const queue = this.#newQueue(topic, Number(name));
        await queue.load();
        this.#put(queue);
      }
    }
  }

  /**
   * Recovers every queue ({@link ConsumeQueue.recover}); `afterCrash`
   * (the default) also zeroes stale units a torn crash may have left, and
   * with `fromCommitLogOffset` (where re-dispatch starts) ends each queue
   * before its first unit at or past it, for re-dispatch to rebuild.
   *
   * @returns The largest end (offset + size) of a message referenced by a
   *   unit, or -1 when no queue holds one.
   */
  async recover(
    options: { afterCrash?: boolean; fromCommitLogOffset?: number } = {},
  ): Promise<number> {
    let maxPhysicOffset = -1;
    for (const queue of this.queues()) {
      maxPhysicOffset = Math.max(maxPhysicOffset, await queue.recover(options));
    }
    return maxPhysicOffset;
  }

  /** The queue of `topic`/`queueId`, if it exists. */
  find(topic: string, queueId: number): ConsumeQueue | undefined {
    return this.#table.get(topic)?.get(queueId);
  }

  /** The queue of `topic`/`queueId`, created (empty) when missing. */
  findOrCreate(topic: string, queueId: number): Promise<ConsumeQueue> {
    const found = this.find(topic, queueId);
    if (found !== undefined) return Promise.resolve(found);
    if (this.#closed) {
      return Promise.reject(
        new MqStoreError("CLOSED", `Cannot create consume queue ${topic}/${queueId}: closed`),
      );
    }
    const key = `${queueId}/${topic}`;
    const pending = this.#creating.get(key);
    if (pending !== undefined) return pending;
    const creating = (async () => {
      const queue = this.#newQueue(topic, queueId);
      await queue.load();
      this.#put(queue);
      return queue;
    })();
    this.#creating.set(key, creating);
    return creating.finally(() => this.#creating.delete(key));
  }

  /**
   * The queue of `topic`/`queueId` without waiting: a missing one is made
   * at once and takes units in memory while its directory and first file
   * are created in the background ({@link ConsumeQueue.startInMemory}), so
   * a new queue does not stall dispatch. Undefined when that cannot be
   * done now (read-only, closed, an awaited creation of it in progress):
   * use {@link findOrCreate} then.
   */
  findOrCreateNow(topic: string, queueId: number): ConsumeQueue | undefined {
    const found = this.find(topic, queueId);
    if (found !== undefined) return found;
    if (this.#closed || this.#options.readOnly === true) return undefined;
    if (this.#creating.has(`${queueId}/${topic}`)) return undefined;
    // Every queue directory on disk was loaded at open, and queues made
    // since are in the table: this one has none.
    const queue = this.#newQueue(topic, queueId);
    queue.startInMemory((error) => this.#options.onError?.(error));
    this.#put(queue);
    return queue;
  }

  /** Every queue, topic by topic. */
  *queues(): IterableIterator<ConsumeQueue> {
    for (const byId of this.#table.values()) yield* byId.values();
  }

  /** Number of queues. */
  get size(): number {
    let count = 0;
    for (const byId of this.#table.values()) count += byId.size;
    return count;
  }

  /**
   * Flushes every queue under the least-pages rule.
   *
   * @returns Whether any queue's flushed offset moved.
   */
  async flush(leastPages: number): Promise<boolean> {
    let moved = false;
    for (const queue of this.queues()) moved = await queue.flush(leastPages) || moved;
    return moved;
  }

  /** {@link ConsumeQueue.truncateDirtyLogicFiles} on every queue. */
  async truncateDirtyLogicFiles(physicalOffset: number): Promise<void> {
    for (const queue of this.queues()) await queue.truncateDirtyLogicFiles(physicalOffset);
  }

  /** {@link ConsumeQueue.correctMinOffset} on every queue. */
  async correctMinOffset(minCommitLogOffset: number): Promise<void> {
    for (const queue of this.queues()) await queue.correctMinOffset(minCommitLogOffset);
  }

  /**
   * {@link ConsumeQueue.deleteExpiredFile} on every queue.
   *
   * @returns How many files were deleted.
   */
  async deleteExpiredFiles(minCommitLogOffset: number): Promise<number> {
    let deleted = 0;
    for (const queue of this.queues()) deleted += await queue.deleteExpiredFile(minCommitLogOffset);
    return deleted;
  }

  /** Closes every queue (flush first). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled(this.#creating.values());
    const results = await Promise.allSettled([...this.queues()].map((queue) => queue.close()));
    this.#table.clear();
    results.push(...await Promise.allSettled([this.#allocator?.close()]));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  #newQueue(topic: string, queueId: number): ConsumeQueue {
    const options = this.#options;
    return new ConsumeQueue({
      port: options.port,
      rootDirectory: options.rootDirectory,
      topic,
      queueId,
      mappedFileSizeConsumeQueue: options.mappedFileSizeConsumeQueue,
      readOnly: options.readOnly,
      sparse: options.sparse,
      clock: options.clock,
      allocator: this.#allocator,
      onFileError: (error) => this.#options.onError?.(error),
    });
  }

  #put(queue: ConsumeQueue): void {
    let byId = this.#table.get(queue.topic);
    if (byId === undefined) {
      byId = new Map();
      this.#table.set(queue.topic, byId);
    }
    byId.set(queue.queueId, queue);
  }
}
