/**
 * Allocation ahead (RocketMQ's `AllocateMappedFileService`): asking for
 * segment n also queues segment n+1, which is created, mapped and
 * prepared in the background so the writer never waits for file creation
 * or first-touch page faults when it rolls over.
 *
 * ```
 * request(n, n+1) ──► table: n (needed now), n+1 (ahead)
 *                          │ one creation at a time, bounded queue
 *                          ▼
 *          create (tmp → fallocate → sync → rename → sync dir)
 *          map, advise("random") unless told not to ◄── a request is answered
 *          prepare(): populate off the JS thread,     from here on: the rest
 *          optionally write the zeros through         runs under the writer
 * ```
 *
 * A segment is handed over as soon as it exists: a writer asking for one
 * whose preparation is still running gets it at once, and the preparation
 * goes on under it from the write position (see `MappedFile.prepare`), so
 * the first segment of a store costs only its creation. Preparations run
 * one at a time, in the worker, in request order.
 *
 * An ahead allocation that fails (for example `NO_SPACE`) is not swallowed:
 * the next {@link AllocateMappedFileService.request} rejects with it. A
 * preparation that fails under a writer leaves a usable segment (appends
 * take their page faults themselves) and is reported through `onWarning`.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import type { RuntimePort } from "../runtime/port.ts";
import { type Clock, nextTurn } from "./clock.ts";
import { ALLOCATE_QUEUE_CAPACITY, TEMPORARY_SUFFIX } from "./constants.ts";
import { MappedFile, type PrefaultPlan } from "./mapped_file.ts";
import type { TransientStorePool } from "./transient_store_pool.ts";

/** Options of {@link AllocateMappedFileService}. */
export interface AllocateMappedFileServiceOptions {
  /** The runtime port. */
  port: RuntimePort;
  /**
   * Give each new segment a write buffer from this pool.
   *
   * @default {undefined}
   */
  pool?: TransientStorePool;
  /**
   * Pre-fault new segments for writing (`MADV_POPULATE_WRITE`) off the JS
   * thread.
   *
   * @default {true}
   */
  populate?: boolean;
  /**
   * Also write each new segment's zeros through to the device, so that
   * later small flushes overwrite written blocks (SYNC_FLUSH,
   * `warmMapedFileEnable`). See `PrepareOptions.writeZeros`.
   *
   * @default {false}
   */
  writeZeros?: boolean;
  /**
   * Awaited before each chunk of zeros is written (see
   * `PrepareOptions.pace`).
   *
   * @default {undefined}
   */
  pace?: () => Promise<void> | undefined;
  /**
   * Asked before each pre-fault chunk of a new segment (see
   * `PrepareOptions.ahead`): lets the owner hold the pre-fault of a
   * segment allocated ahead until its writer comes near.
   *
   * @default {undefined}
   */
  ahead?: (offset: number) => Promise<void> | undefined;
  /**
   * Asked before each pre-fault chunk of a new segment, once `ahead` let
   * it go (see `PrepareOptions.plan`): the chunk's size cap and folios.
   *
   * @default {undefined}
   */
  plan?: (offset: number) => PrefaultPlan;
  /**
   * The writer's offset (see `PrepareOptions.writerOffset`).
   *
   * @default {undefined}
   */
  writerOffset?: () => number;
  /**
   * Checked between preparation chunks besides the service's own close:
   * true stops preparing (the owner is closing).
   *
   * @default {undefined}
   */
  stopped?: () => boolean;
  /**
   * Advise new segments `MADV_RANDOM` (SPEC §2); false leaves the default
   * advice, large folios (see `CreateMappedFileOptions.randomAccess`).
   *
   * @default {true}
   */
  randomAccess?: boolean;
  /**
   * Lock new mappings in memory (`mlock`); a refusal is warned once.
   *
   * @default {false}
   */
  lockMemory?: boolean;
  /**
   * Create sparse segments (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
  /**
   * Write-buffer size of `window` mode (ports that cannot map).
   *
   * @default {4 MiB}
   */
  writeBufferSizeBytes?: number;
  /**
   * New segments append into a write buffer committed with synchronous
   * positional writes (SYNC_FLUSH; see `MappedFileOptions.positionalWrites`).
   *
   * @default {false}
   */
  positionalWrites?: boolean;
  /**
   * Time source of the segments.
   *
   * @default {systemClock}
   */
  clock?: Clock;
  /**
   * Receives warnings (an `mlock` refusal, once).
   *
   * @default {console.warn}
   */
  onWarning?: (message: string) => void;
}

/** One segment to prepare. */
interface Allocation {
  readonly path: string;
  readonly fileSizeBytes: number;
  /** Asked for by a writer (not only prepared ahead). */
  requested: boolean;
  /** The segment, once created (possibly still being prepared). */
  file: MappedFile | undefined;
  /** Given to the writer (its promise resolved). */
  handedOver: boolean;
  readonly promise: Promise<MappedFile>;
  resolve(file: MappedFile): void;
  reject(error: unknown): void;
}

/**
 * Prepares segments ahead of the writer.
 *
 * @example
 * ```ts
 * import { createPort } from "../runtime/mod.ts";
 * import { AllocateMappedFileService } from "./allocate_mapped_file_service.ts";
 *
 * const port = await createPort({ adapter: "memory" });
 * await port.makeDirectory("/store/commitlog");
 * const allocator = new AllocateMappedFileService({ port });
 * allocator.start();
 * const file = await allocator.request(
 *   "/store/commitlog/00000000000000000000",
 *   "/store/commitlog/00000000000000065536",
 *   0x1_0000,
 * );
 * console.log(file.fileFromOffset); // 0
 * await file.close();
 * await allocator.close(); // removes the segment prepared ahead
 * ```
 */
export class AllocateMappedFileService {
  #options: AllocateMappedFileServiceOptions;
  /** Segments asked for or prepared ahead, by path; bounded by the queue capacity. */
  #table = new Map<string, Allocation>();
  /** Allocations waiting for the worker, oldest first. */
  #queue: Allocation[] = [];
  /** The running worker loop (creations), if any. */
  #worker: Promise<void> | undefined;
  /** Tail of the chain of preparations (never rejects). */
  #preparations: Promise<void> = Promise.resolve();
  /** An ahead allocation's error, thrown by the next request. */
  #failure: unknown;
  #started = false;
  #closed = false;
  #warnedLock = false;

  /** @param options Port, pool and warm-up settings. */
  constructor(options: AllocateMappedFileServiceOptions) {
    this.#options = options;
  }

  /** Starts serving requests. */
  start(): void {
    if (this.#closed) {
      throw new MqStoreError("CLOSED", "Cannot start the segment allocator: it was closed");
    }
    this.#started = true;
  }

  /** Segments waiting or being prepared. */
  get pendingCount(): number {
    return this.#table.size;
  }

  /** Resolves once no segment is being created or prepared (tests, shutdown ordering). */
  async whenIdle(): Promise<void> {
    for (;;) {
      const preparations = this.#preparations;
      while (this.#worker !== undefined) await this.#worker;
      await preparations;
      if (this.#worker === undefined && preparations === this.#preparations) return;
    }
  }

  /**
   * Returns segment `path` (prepared ahead, or created now) and queues
   * `nextPath` to be prepared in the background.
   *
   * @throws {MqStoreError} The error of a failed ahead allocation (once);
   *   `CLOSED` after {@link close}; creation errors of `path`.
   */
  async request(path: string, nextPath: string, fileSizeBytes: number): Promise<MappedFile> {
    if (this.#closed || !this.#started) {
      throw new MqStoreError(
        "CLOSED",
        `Cannot allocate ${path}: the segment allocator is ${
          this.#closed ? "closed" : "not started"
        }`,
      );
    }
    if (this.#failure !== undefined) {
      const failure = this.#failure;
      this.#failure = undefined;
      throw failure;
    }
    const allocation = this.#table.get(path) ?? this.#enqueue(path, fileSizeBytes);
    allocation.requested = true;
    const ahead = () => {
      if (!this.#closed && !this.#table.has(nextPath) && this.#canPrepareAhead()) {
        this.#enqueue(nextPath, fileSizeBytes);
      }
    };
    if (allocation.file !== undefined) {
      // Created (perhaps still being prepared): the writer takes it now.
      this.#handOver(allocation, allocation.file);
      // The segment is ready, so the only work left is the next one: queue
      // and start it on a later turn of the event loop, not inside the
      // writer's roll (the first steps of a creation cost 0.05–0.15 ms of
      // JavaScript-thread time on Deno and Bun, paid on every roll).
      this.#startWorker(ahead);
    } else {
      ahead();
      this.#startWorker();
    }
    try {
      return await allocation.promise;
    } finally {
      this.#table.delete(path);
    }
  }

  /**
   * Stops the service: waits for the creation in progress, deletes
   * segments prepared ahead that nobody asked for, rejects queued requests
   * with `CLOSED` and removes half-made files. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) {
      await this.#worker;
      return;
    }
    this.#closed = true;
    const queued = this.#queue;
    this.#queue = [];
    for (const allocation of queued) {
      this.#table.delete(allocation.path);
      allocation.reject(
        new MqStoreError("CLOSED", `Cannot allocate ${allocation.path}: the allocator closed`),
      );
    }
    await this.whenIdle();
    const ahead = [...this.#table.values()].filter((a) => !a.requested);
    for (const allocation of ahead) {
      this.#table.delete(allocation.path);
      await allocation.file?.destroy({ waitMs: 0 });
      await this.#options.port.remove(`${allocation.path}${TEMPORARY_SUFFIX}`);
    }
  }

  #canPrepareAhead(): boolean {
    if (this.#table.size >= ALLOCATE_QUEUE_CAPACITY) return false;
    // Each prepared segment holds a pool buffer: leave one for the writer.
    const pool = this.#options.pool;
    return pool === undefined || pool.availableCount > this.#queue.length;
  }

  #enqueue(path: string, fileSizeBytes: number): Allocation {
    let resolve!: (file: MappedFile) => void;
    let reject!: (error: unknown) => void;
    const promise = new Promise<MappedFile>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // An ahead allocation may fail with nobody awaiting it yet; its error
    // is kept for the next request instead.
    promise.catch(() => {});
    const allocation: Allocation = {
      path,
      fileSizeBytes,
      requested: false,
      file: undefined,
      handedOver: false,
      promise,
      resolve,
      reject,
    };
    this.#table.set(path, allocation);
    this.#queue.push(allocation);
    return allocation;
  }

  /**
   * Starts the worker loop unless it runs. With `later`, the loop starts
   * on a later turn of the event loop (a macrotask) and runs `later` first,
   * so that neither runs inside the caller's turn; `#worker` is set at
   * once, so {@link whenIdle} waits for it. A running loop picks up what
   * `later` queues, so it is then called at once.
   */
  #startWorker(later?: () => void): void {
    if (this.#worker !== undefined) {
      later?.();
      return;
    }
    const work = later === undefined ? this.#work() : nextTurn().then(() => {
      later();
      return this.#work();
    });
    this.#worker = work.finally(() => {
      this.#worker = undefined;
      // A request queued while the loop was finishing.
      if (this.#queue.length > 0 && !this.#closed) this.#startWorker();
    });
  }

  async #work(): Promise<void> {
    for (;;) {
      const allocation = this.#queue.shift();
      if (allocation === undefined) return;
      let file: MappedFile;
      try {
        file = await this.#create(allocation);
      } catch (error) {
        this.#table.delete(allocation.path);
        if (!allocation.requested) this.#failure = error;
        allocation.reject(error);
        continue;
      }
      allocation.file = file;
      // Preparations run one at a time on a chain of their own, never in
      // this loop: a paced preparation must not hold back the creation of
      // a segment a writer is waiting for. The chain is extended before a
      // waiting writer gets the file, so its whenPrepared() covers it.
      const preparing = this.#preparations.then(() => this.#prepareAndHandOver(allocation, file));
      this.#preparations = preparing.catch(() => {});
      if (allocation.requested) this.#handOver(allocation, file);
    }
  }

  async #prepareAndHandOver(allocation: Allocation, file: MappedFile): Promise<void> {
    try {
      await this.#prepare(allocation, file);
    } catch (error) {
      if (allocation.handedOver) {
        // The writer has it: a failed pre-fault or write-back only costs
        // speed (a failing device shows in the flushes themselves).
        if (file.isAvailable) {
          this.#warn(
            `mqstore: cannot prepare segment ${allocation.path}: ${
              messageOf(error)
            }; appends take their page faults themselves`,
          );
        }
      } else {
        this.#table.delete(allocation.path);
        // The preparation's error is the one to report; a failed removal
        // leaves a whole segment, which the next load opens as usual.
        await file.destroy({ waitMs: 0 }).catch(() => {});
        if (!allocation.requested) this.#failure = error;
        allocation.reject(error);
        return;
      }
    }
    this.#handOver(allocation, file);
  }

  #handOver(allocation: Allocation, file: MappedFile): void {
    if (allocation.handedOver) return;
    allocation.handedOver = true;
    allocation.resolve(file);
  }

  #create(allocation: Allocation): Promise<MappedFile> {
    const options = this.#options;
    return MappedFile.create({
      port: options.port,
      path: allocation.path,
      fileSizeBytes: allocation.fileSizeBytes,
      pool: options.pool,
      sparse: options.sparse,
      writeBufferSizeBytes: options.writeBufferSizeBytes,
      positionalWrites: options.positionalWrites,
      randomAccess: options.randomAccess,
      clock: options.clock,
    });
  }

  async #prepare(allocation: Allocation, file: MappedFile): Promise<void> {
    const options = this.#options;
    const populate = options.populate !== false;
    const writeZeros = options.writeZeros === true;
    const lock = options.lockMemory === true;
    if (!populate && !writeZeros && !lock) return;
    const locked = await file.prepare({
      populate,
      writeZeros,
      randomAccess: options.randomAccess,
      lock,
      pace: options.pace,
      ahead: options.ahead,
      plan: options.plan,
      writerOffset: options.writerOffset,
      stopped: () => this.#closed || options.stopped?.() === true,
    });
    if (lock && !locked && !this.#warnedLock && !this.#closed) {
      this.#warnedLock = true;
      this.#warn(
        `mqstore: cannot lock segment ${allocation.path} in memory (mlock refused, or the segment is not mapped); continuing unlocked`,
      );
    }
  }

  #warn(message: string): void {
    (this.#options.onWarning ?? console.warn)(message);
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
