/**
 * A pool of segment-sized write buffers (RocketMQ's `TransientStorePool`).
 *
 * With the pool, appends go into a pool buffer instead of the mapping and a
 * commit copies them into the file with positional writes; the mapping (or
 * the file) is only read. This keeps appends away from page faults and
 * page-cache locks.
 *
 * Given a runtime port, {@link TransientStorePool.init} allocates the
 * buffers through {@link RuntimePort.allocateLockedBuffer}: locked in
 * memory and faulted in off the JavaScript thread on the FFI adapters, as
 * RocketMQ `mlock`s its direct buffers, so an append never takes a page
 * fault or waits for swap. Where the lock is refused (`RLIMIT_MEMLOCK`) a
 * buffer is heap memory and the port says so once per process; that is not
 * an error. Faulting a buffer in costs about as long as pre-faulting a
 * segment of its size (a few hundred milliseconds per GiB here), once, at
 * open. Without a port the buffers are heap memory, allocated at once.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import type { LockedBuffer, RuntimePort } from "../runtime/port.ts";
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
  /**
   * Allocate the buffers through this port in {@link TransientStorePool.init}
   * (locked in memory where the runtime allows). Without it they are heap
   * memory, allocated by the constructor, and `init()` does nothing.
   *
   * @default {undefined}
   */
  port?: RuntimePort;
}

/**
 * A fixed set of segment-sized buffers to borrow and give back.
 *
 * @example
 * ```ts
 * import { createPort } from "../runtime/mod.ts";
 * import { TransientStorePool } from "./transient_store_pool.ts";
 *
 * const port = await createPort({ adapter: "memory" });
 * const pool = new TransientStorePool({ fileSizeBytes: 0x1_0000, count: 2, port });
 * await pool.init();
 * const buffer = pool.borrow();
 * console.log(pool.availableCount, pool.lockedBuffers); // 1 false
 * pool.giveBack(buffer);
 * await pool.close();
 * ```
 */
export class TransientStorePool {
  /** Size of each buffer. */
  readonly fileSizeBytes: number;
  /** Number of buffers. */
  readonly count: number;
  /** Allocates the buffers in `init()`; undefined: heap buffers from the constructor. */
  #port: RuntimePort | undefined;
  /** Every buffer allocated, with how to release it, by its bytes. */
  #buffers = new Map<Uint8Array, LockedBuffer>();
  /** Buffers ready to borrow (a stack: the most recently used is warmest). */
  #available: Uint8Array[] = [];
  /** Buffers lent out, to reject foreign or double give-backs. */
  #lent = new Set<Uint8Array>();
  /** The allocation of `init()`, once started. */
  #initializing: Promise<void> | undefined;
  #closed = false;

  /**
   * Checks the options; without a port, allocates the (heap) buffers.
   *
   * @param options Buffer size, count and the port to allocate through.
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
    this.#port = options.port;
    if (this.#port === undefined) {
      for (let i = 0; i < count; i++) {
        const bytes = new Uint8Array(this.fileSizeBytes);
        this.#adopt({ bytes, locked: false, release: () => Promise.resolve() });
      }
      this.#initializing = Promise.resolve();
    }
  }

  /**
   * Allocates the buffers through the port, one after the other (RocketMQ's
   * `TransientStorePool.init()`). Idempotent; must have resolved before the
   * first {@link borrow} when the pool has a port.
   *
   * @throws {MqStoreError} `CLOSED` when the pool was closed meanwhile.
   */
  init(): Promise<void> {
    this.#initializing ??= this.#allocate();
    return this.#initializing;
  }

  /** Whether every buffer is locked in memory (false before `init()`). */
  get lockedBuffers(): boolean {
    return this.lockedCount === this.count;
  }

  /** Buffers locked in memory (by `mlock`). */
  get lockedCount(): number {
    let locked = 0;
    for (const buffer of this.#buffers.values()) if (buffer.locked) locked++;
    return locked;
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
    assert(
      this.#buffers.size === this.count,
      `a pool with a port is initialised (init() awaited) before its first borrow`,
    );
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

  /**
   * Returns a borrowed buffer. Its bytes need not be cleared: commits only
   * copy what was appended. After {@link close} the buffer is released.
   */
  giveBack(buffer: Uint8Array): void {
    if (!this.#lent.delete(buffer)) {
      throw new RangeError("Cannot give back a buffer this pool did not lend (or gave back twice)");
    }
    assert(buffer.length === this.fileSizeBytes, "a lent buffer keeps its size");
    if (this.#closed) {
      // Nothing uses it any more: the last commit out of it has finished.
      this.#release(buffer);
    } else {
      this.#available.push(buffer);
    }
  }

  /**
   * Releases the free buffers (their views detach or read zeros); buffers
   * still lent are released when given back. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // An allocation in flight ends first; what it makes after the close it
    // releases itself.
    await this.#initializing?.catch(() => {});
    const free = this.#available;
    this.#available = [];
    await Promise.all(free.map((buffer) => this.#release(buffer)));
  }

  async #allocate(): Promise<void> {
    const port = this.#port;
    assert(port !== undefined, "only a pool with a port allocates in init()");
    while (this.#buffers.size < this.count) {
      if (this.#closed) {
        throw new MqStoreError("CLOSED", "Cannot allocate write buffers: the pool is closed");
      }
      const buffer = await port.allocateLockedBuffer(this.fileSizeBytes);
      assert(buffer.bytes.length === this.fileSizeBytes, "the port allocates the size asked for");
      if (this.#closed) {
        await buffer.release();
        throw new MqStoreError("CLOSED", "Cannot allocate write buffers: the pool is closed");
      }
      this.#adopt(buffer);
    }
  }

  #adopt(buffer: LockedBuffer): void {
    this.#buffers.set(buffer.bytes, buffer);
    this.#available.push(buffer.bytes);
  }

  #release(bytes: Uint8Array): Promise<void> {
    const buffer = this.#buffers.get(bytes);
    assert(buffer !== undefined, "a released buffer belongs to the pool");
    return buffer.release();
  }
}
