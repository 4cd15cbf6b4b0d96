/**
 * Worker threads that run `madvise` and `msync` for the `bun-ffi` adapter
 * off the JavaScript thread.
 *
 * `bun:ffi` has no non-blocking calls: `MADV_POPULATE_WRITE` of a fresh
 * segment takes long (about 0.4–1 s for 256 MiB here) and `msync(MS_SYNC)`
 * waits for the device. Both go to workers that `dlopen` libc themselves
 * and call it on the raw address: all threads share one address space, so
 * the address the main thread got from `ptr()` is valid in a worker. The
 * adapter keeps that range mapped until every call on it has answered.
 *
 * A {@link LibcWorker} is one thread answering its requests in order; a
 * {@link LibcWorkerPool} spreads calls over a few of them, started one at a
 * time as calls overlap, so one slow call (a large flush) does not hold up
 * the others. Workers start on first use and do not keep the process alive
 * while idle.
 *
 * The worker source is {@link libcWorkerMain} serialised with
 * `Function.prototype.toString` and started with `eval: true`, rather than a
 * file URL, so it keeps working when mqstore is bundled or served from a
 * registry that renames `.ts` files.
 *
 * @module
 */

import { Worker } from "node:worker_threads";
import { MqStoreError } from "../errors.ts";

/** The libc call a worker request runs. */
export const LIBC_CALL = {
  /** `madvise(address, length, argument)`. */
  MADVISE: 0x0,
  /** `msync(address, length, argument)`. */
  MSYNC: 0x1,
  /**
   * `madvise(address, length, argument)`, then, when it succeeded, every
   * byte of the range read on the worker thread (`NativeLibc.madviseAsync`
   * with `read`): in one request, with no answer to wait for in between.
   */
  MADVISE_THEN_READ: 0x2,
} as const;

/** One of {@link LIBC_CALL}. */
export type LibcCall = typeof LIBC_CALL[keyof typeof LIBC_CALL];

/** A request to a worker. */
interface LibcRequest {
  id: number;
  call: LibcCall;
  address: number;
  length: number;
  argument: number;
}

/** A worker's answer: 0 or the errno of the call. Id 0 says "ready". */
interface LibcReply {
  id: number;
  errno: number;
}

/** The reply id a worker sends once it has bound libc. */
const READY_ID = 0;

/**
 * The worker's body. It is serialised to source text, so it must not refer
 * to anything outside itself: it imports what it needs by variable
 * specifiers (which also keeps `deno check` from resolving `bun:ffi`), and
 * its call codes repeat {@link LIBC_CALL}.
 *
 * @param libcPath The libc soname to `dlopen`.
 */
export async function libcWorkerMain(libcPath: string): Promise<void> {
  interface Port {
    on(event: "message", listener: (request: LibcRequest) => void): void;
    postMessage(reply: LibcReply): void;
  }
  interface Ffi {
    dlopen(
      path: string,
      symbols: Record<string, { args: string[]; returns: string }>,
    ): {
      symbols: {
        madvise(address: number, length: number, advice: number): number;
        msync(address: number, length: number, flags: number): number;
        memcmp(a: number, b: number, length: number): number;
        __errno_location(): number;
      };
    };
    read: { i32(address: number): number };
  }
  const threadsSpecifier = "node:worker_threads";
  const ffiSpecifier = "bun:ffi";
  const threads = await import(threadsSpecifier) as { parentPort: Port };
  const ffi = await import(ffiSpecifier) as Ffi;
  const libc = ffi.dlopen(libcPath, {
    madvise: { args: ["ptr", "usize", "i32"], returns: "i32" },
    msync: { args: ["ptr", "usize", "i32"], returns: "i32" },
    memcmp: { args: ["ptr", "ptr", "usize"], returns: "i32" },
    __errno_location: { args: [], returns: "ptr" },
  }).symbols;
  // errno is thread-local: this is the worker thread's own.
  const errnoAddress = libc.__errno_location();
  threads.parentPort.on("message", (request) => {
    const result = request.call === 0x1
      ? libc.msync(request.address, request.length, request.argument)
      : libc.madvise(request.address, request.length, request.argument);
    // The range compared with itself: every byte read, nothing written.
    if (request.call === 0x2 && result === 0) {
      libc.memcmp(request.address, request.address, request.length);
    }
    threads.parentPort.postMessage({
      id: request.id,
      errno: result === 0 ? 0 : ffi.read.i32(errnoAddress),
    });
  });
  threads.parentPort.postMessage({ id: 0, errno: 0 });
}

/**
 * Client side of one worker thread: requests are answered in order.
 *
 * Fields: `#worker` is the running thread (undefined until first use and
 * after it died); `#ready` says it has bound libc; `#startError` is set for
 * good once a thread died before getting ready (it would again); `#pending`
 * maps request ids to their settle functions; `#nextId` numbers requests.
 */
export class LibcWorker {
  #libcPath: string;
  #name: string;
  #worker: Worker | undefined;
  #ready = false;
  #startError: MqStoreError | undefined;
  #pending = new Map<
    number,
    { resolve: (errno: number) => void; reject: (error: Error) => void }
  >();
  #nextId = READY_ID + 1;

  /**
   * @param libcPath The libc soname the worker `dlopen`s.
   * @param name What the thread does, for error messages ("madvise").
   */
  constructor(libcPath: string, name: string) {
    this.#libcPath = libcPath;
    this.#name = name;
  }

  /** Requests sent and not yet answered. */
  get pendingCount(): number {
    return this.#pending.size;
  }

  /** Whether the thread is running (or starting). */
  get started(): boolean {
    return this.#worker !== undefined;
  }

  /**
   * Runs `call(address, length, argument)` on the worker thread.
   *
   * @returns 0 or the errno. Rejects with an `IO_ERROR` {@link MqStoreError}
   * when the thread cannot start or dies before answering.
   */
  call(call: LibcCall, address: number, length: number, argument: number): Promise<number> {
    if (this.#startError !== undefined) return Promise.reject(this.#startError);
    const worker = this.#worker ?? this.#start();
    const id = this.#nextId++;
    return new Promise<number>((resolve, reject) => {
      // A pending request keeps the process alive until it is answered;
      // an idle worker does not.
      if (this.#pending.size === 0) worker.ref();
      this.#pending.set(id, { resolve, reject });
      worker.postMessage({ id, call, address, length, argument } satisfies LibcRequest);
    });
  }

  /**
   * Starts the thread now if it is not running, so that the first call
   * does not wait for it to boot (35–50 ms here). It does not keep the
   * process alive.
   */
  warm(): void {
    if (this.#worker === undefined && this.#startError === undefined) this.#start();
  }

  #start(): Worker {
    const source = `(${libcWorkerMain.toString()})(${JSON.stringify(this.#libcPath)})`;
    const worker = new Worker(source, { eval: true });
    this.#ready = false;
    worker.on("message", (reply: LibcReply) => {
      if (reply.id === READY_ID) {
        this.#ready = true;
        return;
      }
      const pending = this.#pending.get(reply.id);
      if (pending === undefined) {
        throw new Error(`The ${this.#name} worker answered unknown request ${reply.id}`);
      }
      this.#pending.delete(reply.id);
      if (this.#pending.size === 0) worker.unref();
      pending.resolve(reply.errno);
    });
    const fail = (reason: string, cause?: unknown): void => {
      if (this.#worker !== worker) return;
      this.#worker = undefined;
      const error = new MqStoreError(
        "IO_ERROR",
        `The ${this.#name} worker thread stopped (${reason}) ${
          this.#ready ? "" : "before it was ready "
        }with ${this.#pending.size} requests pending`,
        { cause },
      );
      if (!this.#ready) this.#startError = error;
      for (const pending of this.#pending.values()) pending.reject(error);
      this.#pending.clear();
    };
    worker.on("error", (error: Error) => fail(error.message, error));
    worker.on("exit", (code: number) => fail(`exit code ${code}`));
    // After the listeners: Bun refs a worker again when a "message"
    // listener is added.
    worker.unref();
    this.#worker = worker;
    return worker;
  }
}

/**
 * Up to `sizeMax` {@link LibcWorker}s. A call goes to an idle thread; when
 * every started thread is busy and fewer than `sizeMax` run, a new one is
 * started for it; otherwise it queues on the least busy thread.
 *
 * Fields: `#workers` are the threads, started or not, in start order.
 */
export class LibcWorkerPool {
  #workers: LibcWorker[];

  /**
   * @param libcPath The libc soname the workers `dlopen`.
   * @param name What the threads do, for error messages ("msync").
   * @param sizeMax Most threads to start.
   */
  constructor(libcPath: string, name: string, sizeMax: number) {
    if (!Number.isSafeInteger(sizeMax) || sizeMax < 1) {
      throw new RangeError(`A worker pool needs at least 1 thread, got ${sizeMax}`);
    }
    this.#workers = Array.from({ length: sizeMax }, () => new LibcWorker(libcPath, name));
  }

  /** Starts the first thread if none runs (see {@link LibcWorker.warm}). */
  warm(): void {
    if (!this.#workers.some((worker) => worker.started)) this.#workers[0]?.warm();
  }

  /** As {@link LibcWorker.call}, on the thread chosen as described above. */
  call(call: LibcCall, address: number, length: number, argument: number): Promise<number> {
    return this.#choose().call(call, address, length, argument);
  }

  #choose(): LibcWorker {
    let leastBusy: LibcWorker | undefined;
    for (const worker of this.#workers) {
      // Every thread before this one is busy (an idle one was returned).
      if (!worker.started) return worker;
      if (worker.pendingCount === 0) return worker;
      if (leastBusy === undefined || worker.pendingCount < leastBusy.pendingCount) {
        leastBusy = worker;
      }
    }
    if (leastBusy === undefined) throw new Error("Invariant: a worker pool has no thread");
    return leastBusy;
  }
}
