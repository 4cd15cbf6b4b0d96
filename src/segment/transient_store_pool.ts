/**
 * A pool of segment-sized write buffers (RocketMQ's `TransientStorePool`).
 *
 * With the pool, appends go into a heap buffer instead of the mapping and a
 * commit copies them into the file with positional writes; the mapping (or
 * the file) is only read. This keeps appends away from page faults and
 * page-cache locks.
 *
 * RocketMQ `mlock`s its direct buffers. The runtime port can only lock
 * mappings, not heap memory, so these buffers are not locked:
 * {@link TransientStorePool.lockedBuffers} says so, and nothing is warned
 * per buffer.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import { TRANSIENT_POOL_COUNT_DEFAULT } from "./constants.ts";

/** Options of {@link TransientStorePool}. */
export interface TransientStorePoolOptions {
  /** Size of each buffer: the segment size. */
  fileSizeBytes: number;
  /**
   * Number of buffers (RocketMQ's `transientStorePoolSize`).
   *
   * @default {5}
   */
  count?: number;
}

/**
 * A fixed set of segment-sized buffers to borrow and give back.
 *
 * @example
 * ```ts
 * import { TransientStorePool } from "./transient_store_pool.ts";
 *
 * const pool = new TransientStorePool({ fileSizeBytes: 0x1_0000, count: 2 });
 * const buffer = pool.borrow();
 * console.log(pool.availableCount); // 1
 * pool.giveBack(buffer);
 * pool.close();
 * ```
 */
export class TransientStorePool {
  /** Size of each buffer. */
  readonly fileSizeBytes: number;
  /** Number of buffers. */
  readonly count: number;
  /** Whether buffers are pinned in memory; always false (see the module doc). */
  readonly lockedBuffers = false;
  /** Buffers ready to borrow (a stack: the most recently used is warmest). */
  #available: Uint8Array[] = [];
  /** Buffers lent out, to reject foreign or double give-backs. */
  #lent = new Set<Uint8Array>();
  #closed = false;

  /**
   * Allocates the buffers.
   *
   * @param options Buffer size and count.
   */
  constructor(options: TransientStorePoolOptions) {
    const count = options.count ?? TRANSIENT_POOL_COUNT_DEFAULT;
    if (!Number.isSafeInteger(options.fileSizeBytes) || options.fileSizeBytes <= 0) {
      throw new RangeError(`Pool buffer size ${options.fileSizeBytes} must be a positive integer`);
    }
    if (!Number.isSafeInteger(count) || count <= 0) {
      throw new RangeError(`Pool count ${count} must be a positive integer`);
    }
    this.fileSizeBytes = options.fileSizeBytes;
    this.count = count;
    for (let i = 0; i < count; i++) this.#available.push(new Uint8Array(this.fileSizeBytes));
  }

  /** Buffers that can be borrowed now. */
  get availableCount(): number {
    return this.#available.length;
  }

  /**
   * Borrows a buffer.
   *
   * @throws {MqStoreError} `POOL_EXHAUSTED` when every buffer is lent out
   *   (commits fall behind appends); `CLOSED` after {@link close}.
   */
  borrow(): Uint8Array {
    if (this.#closed) {
      throw new MqStoreError("CLOSED", "Cannot borrow a write buffer: the pool is closed");
    }
    const buffer = this.#available.pop();
    if (buffer === undefined) {
      throw new MqStoreError(
        "POOL_EXHAUSTED",
        `Cannot borrow a write buffer: all ${this.count} are in use (commits are behind appends)`,
      );
    }
    this.#lent.add(buffer);
    return buffer;
  }

  /** Returns a borrowed buffer. Its bytes need not be cleared: commits only copy what was appended. */
  giveBack(buffer: Uint8Array): void {
    if (!this.#lent.delete(buffer)) {
      throw new RangeError("Cannot give back a buffer this pool did not lend (or gave back twice)");
    }
    assert(buffer.length === this.fileSizeBytes, "a lent buffer keeps its size");
    if (!this.#closed) this.#available.push(buffer);
  }

  /** Drops the free buffers; buffers still lent are dropped when given back. Idempotent. */
  close(): void {
    this.#closed = true;
    this.#available = [];
  }
}
