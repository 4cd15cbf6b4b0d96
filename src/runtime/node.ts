/**
 * The `node-koffi` adapter: the {@link NativeLibc} binding for Node, calling
 * glibc through koffi (a prebuilt Node-API FFI, so no compiler is needed at
 * install time).
 *
 * Why not mmap-io (the design card's choice): evaluated on this kind of
 * machine (Linux x86_64, Node 20) it needs a C++ standard flag override to
 * build at all, it reads sizes and offsets as 32-bit integers (a mapping at
 * file offset 2^32 silently maps offset 0, so the second 4 GiB of a store
 * would alias the first), it flushes with a blocking `msync` on the
 * JavaScript thread, and it cannot unmap (the range is released only when
 * the Buffer happens to be collected). koffi gives 64-bit `off_t` and
 * addresses, runs `msync` and `MADV_POPULATE_WRITE` on the libuv thread pool
 * through `.async`, and leaves unmapping to us.
 *
 * How a mapping is retired: Node 20 has no `ArrayBuffer.prototype.transfer`
 * and a koffi view (an external ArrayBuffer) cannot be detached, so a view
 * the core still holds would fault after `munmap`. Instead {@link
 * NativeLibc.retire} maps private anonymous memory over the same range
 * (`MAP_FIXED`), which drops the file mapping at once and leaves a stale
 * view reading zeros. The address range itself is released (`munmap`) by a
 * `FinalizationRegistry` once the ArrayBuffer and the mapping object are
 * collected, when no view can reach it any more (a file mapping's view is
 * made at its first use: see `KoffiFileMapping`). The same registry
 * releases a mapping that was dropped without being retired.
 *
 * Limits: a view is at most `buffer.constants.MAX_LENGTH` bytes (4 GiB on
 * Node 20; a larger koffi view aborts the process, so {@link
 * NativeLibc.mmap} refuses it first). Addresses are kept as JS numbers:
 * user-space addresses on x86_64 and arm64 stay below 2^53.
 *
 * @module
 */

import buffer from "node:buffer";
import koffi from "koffi";
import { errnoError, MqStoreError } from "../errors.ts";
import {
  CACHESTAT,
  decodeCachestat,
  decodeFlock,
  encodeCachestatRange,
  encodeFlock,
  FLOCK,
  LIBC_PATH,
  LINUX,
  type NativeFile,
  type NativeLibc,
  type NativeMapping,
} from "./_native.ts";
import type { PageCacheState, PopulateOptions } from "./port.ts";

/** `MAP_FAILED`, `(void *)-1`, as koffi returns it for a `uintptr_t`. */
const MAP_FAILED = 0xffff_ffff_ffff_ffffn;
/** `EOPNOTSUPP`: `cachestat` on a file system that cannot report it. */
const EOPNOTSUPP = 0x5f;
/** What the kernel answers for a range that is not mapped (any more). */
const ENOMEM = 0x0c;

/**
 * The state behind one mapping. It holds no reference to the view, so the
 * finalization registry can keep it while waiting for the view to die.
 */
interface KoffiRange {
  /** Start address of the range (page-aligned). */
  readonly address: number;
  /** Length of the range in bytes. */
  readonly length: number;
  /** Whether the file mapping was replaced by the anonymous placeholder. */
  retired: boolean;
  /**
   * Objects whose collection the range waits for before it is released:
   * its {@link KoffiFileMapping} and, once made, its view.
   */
  holders: number;
}

/**
 * A file mapping whose view (`koffi.view`) is made at its first use, not
 * at `mmap`. V8 11 (Node 20) counts an external ArrayBuffer's length as
 * external memory when the buffer is made, and a GiB of new external
 * memory starts a full garbage collection ("external memory pressure"):
 * the commit-log segment allocated ahead is mapped while the writer is
 * still in the segment before, and its view made at `mmap` cost a
 * `putMessages` run of a fresh store one or two full collections of the
 * JavaScript heap (5–25 ms in 200). Made at first use, a segment's view
 * costs that collection when the writer reaches it (or never, for a
 * segment a short-lived store does not reach). The pre-fault and `msync`
 * work on the address and need no view.
 */
class KoffiFileMapping implements NativeMapping {
  /** Bytes mapped. */
  readonly length: number;
  /** The address range; released once this object and its view are collected. */
  readonly handle: KoffiRange;
  /** The view, once made. */
  #bytes: Uint8Array | undefined;
  /** Makes the view and registers it as a holder of the range. */
  readonly #makeView: (range: KoffiRange) => Uint8Array;

  constructor(range: KoffiRange, makeView: (range: KoffiRange) => Uint8Array) {
    this.length = range.length;
    this.handle = range;
    this.#makeView = makeView;
  }

  /** The mapped bytes: the view, made at the first read. */
  get bytes(): Uint8Array {
    return this.#bytes ??= this.#makeView(this.handle);
  }
}

/** A koffi function: callable, with a callback-style `.async`. */
interface KoffiFunction {
  (...args: unknown[]): unknown;
  async(...args: unknown[]): void;
}

function rangeOf(mapping: NativeMapping): KoffiRange {
  return mapping.handle as KoffiRange;
}

/**
 * Loads the binding: `libc.so.6` through koffi. Throws if koffi or the
 * library cannot be loaded (`createPort` then falls back to `portable`).
 *
 * @example
 * ```ts
 * import { loadLibc } from "./node.ts";
 *
 * const libc = loadLibc();
 * console.log(libc.adapter, libc.pageSizeBytes); // "node-koffi" 4096
 * ```
 *
 * @returns The binding (one per process: its finalization registry must
 * outlive every mapping it made, so it is never dropped).
 */
export function loadLibc(): NativeLibc {
  loaded ??= bindLibc();
  return loaded;
}

let loaded: NativeLibc | undefined;

function bindLibc(): NativeLibc {
  const lib = koffi.load(LIBC_PATH);
  const bind = (prototype: string): KoffiFunction => lib.func(prototype) as KoffiFunction;
  // Addresses are `uintptr_t` so koffi hands them over as plain numbers
  // (only MAP_FAILED, above 2^53, comes back as a bigint) and the pointer
  // arithmetic for ranges stays in doubles.
  const mmap = bind(
    "uintptr_t mmap(uintptr_t addr, size_t length, int prot, int flags, int fd, int64_t offset)",
  );
  const munmap = bind("int munmap(uintptr_t addr, size_t length)");
  const msync = bind("int msync(uintptr_t addr, size_t length, int flags)");
  const madvise = bind("int madvise(uintptr_t addr, size_t length, int advice)");
  const mlock = bind("int mlock(uintptr_t addr, size_t length)");
  const munlock = bind("int munlock(uintptr_t addr, size_t length)");
  // A range compared with itself: madviseAsync's read.
  const memcmp = bind("int memcmp(uintptr_t a, uintptr_t b, size_t length)");
  // glibc 2.27 and later; without it, mlockOnFault falls back to mlock.
  let mlock2: KoffiFunction | undefined;
  try {
    mlock2 = bind("int mlock2(uintptr_t addr, size_t length, unsigned int flags)");
  } catch {
    mlock2 = undefined;
  }
  const posixFallocate = bind(
    "int posix_fallocate(int fd, int64_t offset, int64_t length)",
  );
  const posixFadvise = bind(
    "int posix_fadvise(int fd, int64_t offset, int64_t length, int advice)",
  );
  const lseek = bind("int64_t lseek(int fd, int64_t offset, int whence)");
  // The lone SYNC put's write and flush: a koffi call costs about a third
  // of `fs.writeSync` and half of `fs.fdatasyncSync` in user CPU (Node 20:
  // 0.24 µs against 0.7–0.84 µs, 0.20 µs against 0.33–0.43 µs), which
  // validate their arguments and go through a libuv request.
  const pwrite = bind("long pwrite(int fd, const void *buf, size_t count, int64_t offset)");
  const fdatasync = bind("int fdatasync(int fd)");
  // Both are variadic in C; koffi's variadic calls pass each extra
  // argument with its type, as the ABI requires.
  const fcntl = bind("int fcntl(int fd, int cmd, ...)");
  const syscall = bind("long syscall(long number, ...)");
  const sysconf = bind("long sysconf(int name)");

  const pageSizeBytes = sysconf(LINUX._SC_PAGESIZE) as number;
  if (!(pageSizeBytes > 0 && (pageSizeBytes & (pageSizeBytes - 1)) === 0)) {
    throw new Error(`sysconf(_SC_PAGESIZE) returned ${pageSizeBytes}, not a power of two`);
  }
  const viewLengthMax = buffer.constants.MAX_LENGTH;

  // Scratch structs for the synchronous calls that take a pointer: koffi
  // passes a Uint8Array's memory directly.
  const flock = new Uint8Array(FLOCK.SIZE);
  const flockView = new DataView(flock.buffer);
  const cachestatRange = new Uint8Array(CACHESTAT.RANGE_SIZE);
  const cachestatRangeView = new DataView(cachestatRange.buffer);
  const cachestatStat = new Uint8Array(CACHESTAT.STAT_SIZE);
  const cachestatStatView = new DataView(cachestatStat.buffer);

  const released = new FinalizationRegistry<KoffiRange>((range) => {
    // Runs after each holder is collected; once the last one is, nothing
    // can touch the range any more, so giving it back cannot fault anyone.
    range.holders--;
    if (range.holders === 0) munmap(range.address, range.length);
  });
  /** Makes the view of a file mapping (at its first use, see {@link KoffiFileMapping}). */
  const makeView = (range: KoffiRange): Uint8Array => {
    const view = koffi.view(range.address, range.length);
    range.holders++;
    released.register(view, range);
    return new Uint8Array(view);
  };

  /** 0 for a call that returned 0, else the errno it left. */
  const status = (result: unknown): number => result === 0 ? 0 : koffi.errno();

  /**
   * Calls in flight on the libuv pool. Each entry holds its mapping object,
   * which holds the address range until it and its view (if made) are both
   * collected: the range cannot be released while the kernel works on it.
   */
  const inFlight = new Set<{ mapping: NativeMapping }>();

  /**
   * Runs `fn.async(address, length, flag)` on the libuv pool for the range
   * `[position, position + length)` of a mapping, its start aligned down to
   * a page as `msync` requires; without a flag, `fn.async(address, address,
   * length)` (`memcmp`).
   */
  const rangeAsync = (
    fn: KoffiFunction,
    name: string,
    mapping: NativeMapping,
    position: number,
    length: number,
    flag: number | undefined,
  ): Promise<number> => {
    const start = position - position % pageSizeBytes;
    const address = rangeOf(mapping).address + start;
    const alignedLength = position + length - start;
    const call = { mapping };
    return new Promise<number>((resolve, reject) => {
      const fail = (verb: string, error: unknown) =>
        reject(
          new MqStoreError("IO_ERROR", `Cannot ${verb} ${name}: ${String(error)}`, {
            cause: error,
          }),
        );
      try {
        const done = (error: unknown, result: unknown) => {
          inFlight.delete(call);
          if (error) fail("run", error);
          else resolve(status(result));
        };
        // Without a flag: memcmp of the range with itself.
        if (flag === undefined) fn.async(address, address, alignedLength, done);
        else fn.async(address, alignedLength, flag, done);
        inFlight.add(call);
      } catch (error) {
        // koffi throws when its queue of async calls (max_async_calls) is full.
        fail("queue", error);
      }
    });
  };

  return {
    runtime: "node",
    adapter: "node-koffi",
    pageSizeBytes,
    // Two flushes in flight won here: 256 SYNC producers of 1 KiB, one
    // flush at a time made 0.68× the acks/s of two (see
    // `GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES`).
    overlapFlushes: true,

    fallocate(fd: number, offset: number, length: number): number {
      // posix_fallocate returns the error number itself.
      return posixFallocate(fd, offset, length) as number;
    },

    mmap(
      file: NativeFile,
      fileOffset: number,
      length: number,
      writable: boolean,
    ): NativeMapping {
      if (length > viewLengthMax) {
        throw new MqStoreError(
          "UNSUPPORTED",
          `Cannot map ${file.path}: ${length} bytes exceeds the largest ArrayBuffer Node allows, ${viewLengthMax} bytes`,
        );
      }
      const prot = writable ? LINUX.PROT_READ | LINUX.PROT_WRITE : LINUX.PROT_READ;
      const raw = mmap(0, length, prot, LINUX.MAP_SHARED, file.fd, fileOffset);
      if (typeof raw !== "number") {
        const errno = raw === MAP_FAILED ? koffi.errno() : 0;
        if (errno !== 0) {
          throw errnoError(errno, `map ${length} bytes at offset ${fileOffset} of`, file.path);
        }
        munmap(raw, length);
        throw new MqStoreError(
          "UNSUPPORTED",
          `Cannot map ${file.path}: the kernel returned address ${String(raw)}, beyond 2^53`,
        );
      }
      const range: KoffiRange = { address: raw, length, retired: false, holders: 1 };
      const mapping = new KoffiFileMapping(range, makeView);
      released.register(mapping, range);
      return mapping;
    },

    mmapAnonymous(length: number): NativeMapping {
      if (!Number.isSafeInteger(length) || length <= 0 || length > viewLengthMax) {
        throw new RangeError(
          `Cannot map ${length} bytes of anonymous memory: the size must be in [1, ${viewLengthMax}]`,
        );
      }
      const raw = mmap(
        0,
        length,
        LINUX.PROT_READ | LINUX.PROT_WRITE,
        LINUX.MAP_PRIVATE | LINUX.MAP_ANONYMOUS,
        -1,
        0,
      );
      if (typeof raw !== "number") {
        const errno = raw === MAP_FAILED ? koffi.errno() : 0;
        if (errno !== 0) throw errnoError(errno, `map ${length} bytes of`, "anonymous memory");
        munmap(raw, length);
        throw new MqStoreError(
          "UNSUPPORTED",
          `Cannot map anonymous memory: the kernel returned address ${String(raw)}, beyond 2^53`,
        );
      }
      // Retired like a file mapping: the placeholder frees (and unlocks)
      // the memory at once, the registry releases the range later.
      const range: KoffiRange = { address: raw, length, retired: false, holders: 1 };
      const view = koffi.view(raw, length);
      released.register(view, range);
      return { bytes: new Uint8Array(view), length, handle: range };
    },

    mlockOnFault(mapping: NativeMapping): number {
      const range = rangeOf(mapping);
      if (range.retired) return ENOMEM;
      return status(
        mlock2 === undefined
          ? mlock(range.address, range.length)
          : mlock2(range.address, range.length, LINUX.MLOCK_ONFAULT),
      );
    },

    retire(mapping: NativeMapping): void {
      const range = rangeOf(mapping);
      if (range.retired) return;
      // Writable too, so a stale write lands in private memory instead of
      // faulting; MAP_NORESERVE so the placeholder costs no commit charge.
      const placeholder = mmap(
        range.address,
        range.length,
        LINUX.PROT_READ | LINUX.PROT_WRITE,
        LINUX.MAP_PRIVATE | LINUX.MAP_ANONYMOUS | LINUX.MAP_FIXED | LINUX.MAP_NORESERVE,
        -1,
        0,
      );
      // If the kernel refused (ENOMEM), the file mapping simply stays until
      // the view is collected: stale views then read the file, never fault.
      range.retired = placeholder === range.address;
    },

    msync(mapping: NativeMapping, position: number, length: number): Promise<number> {
      return rangeAsync(msync, "msync", mapping, position, length, LINUX.MS_SYNC);
    },

    madvise(
      mapping: NativeMapping,
      position: number,
      length: number,
      advice: number,
    ): number {
      const start = position - position % pageSizeBytes;
      return status(
        madvise(rangeOf(mapping).address + start, position + length - start, advice),
      );
    },

    async madviseAsync(
      mapping: NativeMapping,
      position: number,
      length: number,
      advice: number,
      options?: PopulateOptions,
    ): Promise<number> {
      const errno = await rangeAsync(madvise, "madvise", mapping, position, length, advice);
      if (errno !== 0 || options?.read !== true || rangeOf(mapping).retired) return errno;
      // Then the read: a second call, queued when the first one's answer
      // arrives. Only an optimisation: a failed one (koffi's queue of async
      // calls full) leaves the pre-fault's success standing.
      await rangeAsync(memcmp, "memcmp", mapping, position, length, undefined).catch(() => 0);
      return 0;
    },

    mlock(mapping: NativeMapping): number {
      const range = rangeOf(mapping);
      return status(mlock(range.address, range.length));
    },

    munlock(mapping: NativeMapping): number {
      const range = rangeOf(mapping);
      return status(munlock(range.address, range.length));
    },

    fcntlLock(
      fd: number,
      cmd: number,
      type: number,
    ): { errno: number; type: number; pid: number } {
      encodeFlock(flockView, type);
      const errno = status(fcntl(fd, cmd, "void *", flock));
      return { errno, ...decodeFlock(flockView) };
    },

    cachestat(fd: number, offset: number, length: number): PageCacheState | undefined {
      encodeCachestatRange(cachestatRangeView, offset, length);
      const result = syscall(
        LINUX.SYS_CACHESTAT,
        "long",
        fd,
        "void *",
        cachestatRange,
        "void *",
        cachestatStat,
        "long",
        0,
      );
      if (result === 0) return decodeCachestat(cachestatStatView);
      const errno = koffi.errno();
      if (errno === LINUX.ENOSYS || errno === EOPNOTSUPP) return undefined;
      throw errnoError(errno, "read the page-cache state (cachestat) of", `descriptor ${fd}`);
    },

    fadvise(fd: number, offset: number, length: number, advice: number): number {
      // posix_fadvise returns the error number itself.
      return posixFadvise(fd, offset, length, advice) as number;
    },

    lseek(fd: number, offset: number, whence: number): number {
      const reached = Number(lseek(fd, offset, whence));
      return reached === -1 ? -koffi.errno() : reached;
    },

    pwrite(fd: number, source: Uint8Array, position: number): number {
      // koffi passes the view's own bytes (its offset included), no copy.
      const written = Number(pwrite(fd, source, source.length, position));
      return written === -1 ? -koffi.errno() : written;
    },

    fdatasync(fd: number): number {
      return status(fdatasync(fd));
    },
  };
}
