/**
 * The worker thread that runs `madvise` for the `bun-ffi` adapter off the
 * JavaScript thread.
 *
 * `bun:ffi` has no non-blocking calls, and `MADV_POPULATE_WRITE` of a fresh
 * segment takes long (about 0.4–1 s for 256 MiB here), so pre-faulting goes
 * to a worker that `dlopen`s libc itself and calls `madvise` on the raw
 * address: both threads share one address space, so the address the main
 * thread got from `ptr()` is valid in the worker. The worker is started on
 * first use and does not keep the process alive while idle.
 *
 * The worker source is {@link adviceWorkerMain} serialised with
 * `Function.prototype.toString` and started with `eval: true`, rather than a
 * file URL, so it keeps working when mqstore is bundled or served from a
 * registry that renames `.ts` files.
 *
 * @module
 */

import { Worker } from "node:worker_threads";
import { MqStoreError } from "../errors.ts";

/** A request to the worker. */
interface AdviceRequest {
  id: number;
  address: number;
  length: number;
  advice: number;
}

/** The worker's answer: 0 or the errno of `madvise`. */
interface AdviceReply {
  id: number;
  errno: number;
}

/**
 * The worker's body. It is serialised to source text, so it must not refer
 * to anything outside itself: it imports what it needs by variable
 * specifiers (which also keeps `deno check` from resolving `bun:ffi`).
 *
 * @param libcPath The libc soname to `dlopen`.
 */
export async function adviceWorkerMain(libcPath: string): Promise<void> {
  interface Port {
    on(event: "message", listener: (request: AdviceRequest) => void): void;
    postMessage(reply: AdviceReply): void;
  }
  interface Ffi {
    dlopen(
      path: string,
      symbols: Record<string, { args: string[]; returns: string }>,
    ): {
      symbols: {
        madvise(address: number, length: number, advice: number): number;
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
    __errno_location: { args: [], returns: "ptr" },
  }).symbols;
  // errno is thread-local: this is the worker thread's own.
  const errnoAddress = libc.__errno_location();
  threads.parentPort.on("message", (request) => {
    const result = libc.madvise(request.address, request.length, request.advice);
    threads.parentPort.postMessage({
      id: request.id,
      errno: result === 0 ? 0 : ffi.read.i32(errnoAddress),
    });
  });
}

/**
 * Client side of the advice worker: one thread, requests answered in order.
 *
 * Fields: `#worker` is the running thread (undefined until first use and
 * after it died); `#pending` maps request ids to their settle functions;
 * `#nextId` numbers requests.
 */
export class AdviceWorker {
  #libcPath: string;
  #worker: Worker | undefined;
  #pending = new Map<
    number,
    { resolve: (errno: number) => void; reject: (error: Error) => void }
  >();
  #nextId = 1;

  /** @param libcPath The libc soname the worker `dlopen`s. */
  constructor(libcPath: string) {
    this.#libcPath = libcPath;
  }

  /**
   * `madvise(address, length, advice)` on the worker thread.
   *
   * @returns 0 or the errno.
   */
  madvise(address: number, length: number, advice: number): Promise<number> {
    const worker = this.#worker ?? this.#start();
    const id = this.#nextId++;
    return new Promise<number>((resolve, reject) => {
      // A pending request keeps the process alive until it is answered;
      // an idle worker does not.
      if (this.#pending.size === 0) worker.ref();
      this.#pending.set(id, { resolve, reject });
      worker.postMessage({ id, address, length, advice } satisfies AdviceRequest);
    });
  }

  #start(): Worker {
    const source = `(${adviceWorkerMain.toString()})(${JSON.stringify(this.#libcPath)})`;
    const worker = new Worker(source, { eval: true });
    worker.on("message", (reply: AdviceReply) => {
      const pending = this.#pending.get(reply.id);
      if (pending === undefined) {
        throw new Error(`The madvise worker answered unknown request ${reply.id}`);
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
        `The madvise worker thread stopped (${reason}) with ${this.#pending.size} requests pending`,
        { cause },
      );
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
