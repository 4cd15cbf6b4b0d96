/**
 * The `bun-ffi` adapter's libc binding, through `bun:ffi`.
 *
 * Mappings:
 * - A mapping is libc `mmap(PROT_READ[|PROT_WRITE], MAP_SHARED)` of the
 *   handle's descriptor; a file mapping's view, `toArrayBuffer(address, 0,
 *   length)` without a deallocator (so Bun never unmaps it on its own), is
 *   made at its first use (see `BunFileMapping`).
 *   {@link NativeLibc.retire} calls `buffer.transfer(0)`, which detaches
 *   every view at once (length 0, reads `undefined`), and unmaps the range
 *   itself when no worker call on it (flush or pre-fault) is in flight,
 *   else when the last one answers: a worker never meets a range that was
 *   unmapped, or unmapped and reused. A mapping dropped without being
 *   retired is unmapped by a `FinalizationRegistry` once its mapping object
 *   and its view (if made) are both collected (no view of it is left then;
 *   a call in flight keeps the mapping object reachable).
 * - `Bun.mmap` is not used: it unmaps as soon as its buffer is transferred
 *   (nothing can wait for a worker call), it cannot map read-only (it opens
 *   the path `O_RDWR` and maps `PROT_READ|PROT_WRITE`, seen with strace),
 *   and it maps by path, not by descriptor. A write through a read-only
 *   mapping is a SIGSEGV, as with a read-only mapping on every adapter.
 * - Offsets of 2^32 and beyond work (a 5 GiB sparse file mapped at 4 GiB
 *   writes land at 2^32 + x). One view is at most 4 GiB (JavaScriptCore's
 *   ArrayBuffer limit; larger sizes fail with "RangeError: Out of memory").
 *
 * Flushing: `bun:ffi` calls block, so `msync(MS_SYNC)` of the page-aligned
 * range runs on a flush worker thread (`_bun_worker.ts`; up to
 * `FLUSH_WORKERS_MAX` of them, a second one started only when flushes
 * overlap), apart from the pre-fault thread, so a flush never queues behind
 * a pre-fault. The first of each is booted by the first writable mapping (a thread
 * takes 35–90 ms to start), and idle threads do not keep the process
 * alive. The flush has to be range-accurate: the segment layer pre-faults
 * with `MADV_POPULATE_WRITE`, which marks every page of the segment dirty
 * (65,536 dirty pages after populating 256 MiB, per `cachestat`), and
 * `fdatasync` (which this binding used before) writes all of them on the
 * first flush, 1 GiB for a 1 GiB segment, while `msync` writes the range
 * (on Linux it is `vfs_fsync_range` of the range, with the same journal
 * commit). Measured on this machine (Bun 1.4.5, Linux 6.18, ext4 on
 * virtio, 2 cores shared with other jobs at load 1.5–5, so ranges are
 * wide): a 256 MiB fallocated file mapped through the port under
 * `MADV_RANDOM`, one freshly dirtied 4 KiB page flushed per iteration,
 * threads warmed up, methods interleaved, device writes from
 * `/sys/block/vda/stat`:
 *
 * | file                                  | flush                          | p50          | p99          | written per flush |
 * |---------------------------------------|--------------------------------|--------------|--------------|-------------------|
 * | after `MADV_POPULATE_WRITE` of it all | `fdatasync` (before)           | 512–649 ms   | 700–1,050 ms | 256 MiB           |
 * | after `MADV_POPULATE_WRITE` of it all | worker `msync` of the page     | 1.1–4.0 ms   | 4.6–60 ms    | 8–12 KiB          |
 * | never populated                       | `fdatasync` (before)           | 0.44–2.9 ms  | 3.7–11 ms    | 12 KiB            |
 * | never populated                       | worker `msync` of the page     | 0.48–3.6 ms  | 5.0–16 ms    | 12 KiB            |
 * | never populated                       | `msync` on the JS thread       | 0.38–2.8 ms  | 3.2–12 ms    | 12 KiB            |
 *
 * (300 flushes per run, 100 for the populated `fdatasync`; the 60 ms p99
 * is with 256 MiB `fdatasync`s interleaved.) On a file that was never
 * populated the worker `msync` is 1.05–1.25 times the `fdatasync` p50 (1.9
 * in one run at load 4.8)
 * (the hop to the worker and back costs 13–27 µs p50, 50–100 µs p99 for a
 * no-op call, like a `node:fs` call on Bun's pool); after a pre-fault it is
 * 130–590 times faster and writes 4 KiB of data instead of the whole
 * file. The zero pages a pre-fault dirtied are still written back by the
 * kernel's flusher (after `dirty_expire_centisecs`, 30 s here), off the
 * flush's latency path. A `SharedArrayBuffer` + `Atomics.waitAsync`
 * channel was tried: 4–16 µs for a no-op call, but a 4 KiB flush through
 * it took p50 0.40–2.5 ms against 0.43–0.56 ms with `postMessage`, so
 * messages are kept. While a 256 MiB pre-fault ran on its own thread
 * (0.7–1.3 s), 4 KiB flushes of another file kept completing: 418–1,211
 * `msync`s (p50 0.34–0.66 ms, max 14–36 ms) against 892–1,320 `fdatasync`s
 * (p50 0.28–0.36 ms, max 20–25 ms).
 *
 * If no flush thread can start, `msync` falls back to `fdatasync` of the
 * whole file (never less durable) on the mapping's own descriptor: each
 * mapping holds one (`F_DUPFD_CLOEXEC`), because the file handle may be
 * closed while its mappings live on and a reused descriptor number would
 * sync another file.
 *
 * Pre-faulting (`madviseAsync`) runs on its own worker thread:
 * `MADV_POPULATE_WRITE` of a fresh 256 MiB mapping of a fallocated file
 * took 395–1009 ms there while a 1 ms `setInterval` kept ticking (356–894
 * ticks, largest gap 2.5–5.9 ms); on the JS thread the same call blocks
 * for 470–800 ms. Each worker costs ~7.5 MiB RSS.
 *
 * @module
 */

import fs from "node:fs";
import { assert } from "../assert.ts";
import { errnoError, MqStoreError } from "../errors.ts";
import { LIBC_CALL, LibcWorker, LibcWorkerPool } from "./_bun_worker.ts";
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

/** `fcntl` command: duplicate a descriptor with `FD_CLOEXEC` set. */
const F_DUPFD_CLOEXEC = 0x406;
const EPERM = 0x1;
/** What the kernel answers for a range that is not mapped. */
const ENOMEM = 0xc;
const EIO = 0x5;
/** `MAP_FAILED`, as the signed 64-bit return of `mmap`. */
const MAP_FAILED = -1;
/** Largest single view JavaScriptCore allows (its ArrayBuffer limit). */
const VIEW_SIZE_MAX_BYTES = 0x1_0000_0000;
/**
 * Most flush worker threads: flushes of different files (commit log,
 * consume queues) overlap, and one large flush should not hold up a small
 * one behind it; each thread costs ~7.5 MiB RSS.
 */
const FLUSH_WORKERS_MAX = 2;

/**
 * Advice that only faults pages in, so it may run on the worker while this
 * thread writes; advice that drops pages stays in program order here.
 */
const ASYNC_ADVICE: ReadonlySet<number> = new Set([
  LINUX.MADV_WILLNEED,
  LINUX.MADV_POPULATE_READ,
  LINUX.MADV_POPULATE_WRITE,
]);

/** The libc functions bound through `bun:ffi`. */
interface LibcSymbols {
  sysconf(name: number): number;
  posix_fallocate(fd: number, offset: number, length: number): number;
  posix_fadvise(fd: number, offset: number, length: number, advice: number): number;
  lseek(fd: number, offset: number, whence: number): number;
  mmap(
    address: null,
    length: number,
    protection: number,
    flags: number,
    fd: number,
    offset: number,
  ): number;
  munmap(address: number, length: number): number;
  madvise(address: number, length: number, advice: number): number;
  mlock(address: number, length: number): number;
  munlock(address: number, length: number): number;
  fcntl(fd: number, cmd: number, argument: Uint8Array | null): number;
  syscall(
    number: number,
    fd: number,
    range: Uint8Array,
    stat: Uint8Array,
    flags: number,
  ): number;
  __errno_location(): number;
}

/** The part of `bun:ffi` this binding uses. */
interface BunFfi {
  dlopen(
    path: string,
    symbols: Record<string, { args: string[]; returns: string }>,
  ): { symbols: LibcSymbols };
  toArrayBuffer(address: number, byteOffset: number, byteLength: number): ArrayBuffer;
  read: { i32(address: number): number };
}

/** `bun:ffi` declarations: `i64_fast` returns a number while it is exact. */
const SYMBOLS = {
  sysconf: { args: ["i32"], returns: "i64_fast" },
  posix_fallocate: { args: ["i32", "i64", "i64"], returns: "i32" },
  posix_fadvise: { args: ["i32", "i64", "i64", "i32"], returns: "i32" },
  lseek: { args: ["i32", "i64", "i32"], returns: "i64_fast" },
  mmap: { args: ["ptr", "usize", "i32", "i32", "i32", "i64"], returns: "i64_fast" },
  munmap: { args: ["ptr", "usize"], returns: "i32" },
  madvise: { args: ["ptr", "usize", "i32"], returns: "i32" },
  mlock: { args: ["ptr", "usize"], returns: "i32" },
  munlock: { args: ["ptr", "usize"], returns: "i32" },
  // fcntl is variadic; its third argument is passed in an integer register
  // on x86_64 and arm64, so a pointer slot also carries F_DUPFD's 0.
  fcntl: { args: ["i32", "i32", "ptr"], returns: "i32" },
  // syscall(SYS_cachestat, fd, &range, &stat, flags); variadic longs.
  syscall: { args: ["i64", "i64", "ptr", "ptr", "i64"], returns: "i64_fast" },
  __errno_location: { args: [], returns: "ptr" },
};

/**
 * Binding-private state of one mapping (the {@link NativeMapping.handle}).
 *
 * `inFlight` counts worker calls (`msync`, `madvise`) and fallback
 * `fdatasync`s not yet answered: the range stays mapped, and `syncFd` (this
 * mapping's own descriptor of the file, for the `fdatasync` fallback) open,
 * until none is left after the mapping was retired. `released` is set once
 * both are gone. It holds no reference to the mapping's buffer, so that an
 * unretired mapping can be collected (see `BunLibc.#orphans`).
 */
interface BunMappingState {
  /** Address of the first mapped byte (page-aligned). */
  readonly address: number;
  /** Mapped length in bytes. */
  readonly length: number;
  /** The mapping's own descriptor of its file; -1 for anonymous memory. */
  readonly syncFd: number;
  inFlight: number;
  retired: boolean;
  released: boolean;
  /**
   * Objects whose collection an unretired mapping waits for before it is
   * released: its {@link BunFileMapping} (or, for anonymous memory, its
   * buffer) and, once made, the file mapping's view.
   */
  holders: number;
}

/**
 * A file mapping whose view (`toArrayBuffer`) is made at its first use, not
 * at `mmap`. JavaScriptCore counts a foreign buffer's whole length as heap
 * (`heapStats().extraMemorySize`) for as long as the buffer lives, and
 * sizes its collection budget by it: after `putMessages` kept allocating,
 * the JavaScript heap of a probe holding 256 MiB of views had grown to
 * 567 MiB RSS, 2.2 GiB with 1 GiB and 3.3 GiB with 2.5 GiB (63 MiB with
 * none). A fresh store mapped 2.4 GiB at open (the active commit-log
 * segment, the one allocated ahead, and the index file); made at first
 * use, only what the writer and readers reach is counted. The pre-fault
 * and `msync` work on the address and need no view.
 */
class BunFileMapping implements NativeMapping {
  /** Bytes mapped. */
  readonly length: number;
  /** The binding's state of the range. */
  readonly handle: BunMappingState;
  /** The view, once made. */
  #bytes: Uint8Array | undefined;
  /** Makes the view and registers it as a holder of the range. */
  readonly #makeView: (state: BunMappingState) => Uint8Array;

  constructor(state: BunMappingState, makeView: (state: BunMappingState) => Uint8Array) {
    this.length = state.length;
    this.handle = state;
    this.#makeView = makeView;
  }

  /**
   * The mapped bytes: the view, made at the first read. A mapping retired
   * before any read has an empty view (nothing is mapped there any more).
   */
  get bytes(): Uint8Array {
    if (this.#bytes !== undefined) return this.#bytes;
    if (this.handle.retired) return new Uint8Array(0);
    return this.#bytes = this.#makeView(this.handle);
  }

  /** Whether the view was made (before the mapping was retired). */
  get viewed(): boolean {
    return this.#bytes !== undefined;
  }
}

function errnoOf(error: NodeJS.ErrnoException): number {
  // Bun and Node report errno negated (-5 for EIO).
  return typeof error.errno === "number" && error.errno !== 0 ? Math.abs(error.errno) : EIO;
}

/** `fdatasync` on Bun's thread pool: 0 or errno. */
function fdatasync(fd: number): Promise<number> {
  return new Promise<number>((resolve) => {
    fs.fdatasync(fd, (error) => resolve(error ? errnoOf(error) : 0));
  });
}

class BunLibc implements NativeLibc {
  readonly runtime = "bun" as const;
  readonly adapter = "bun-ffi" as const;
  readonly pageSizeBytes: number;
  /**
   * Two flushes in flight won here: 256 SYNC producers of 1 KiB, one flush
   * at a time made 0.92× the acks/s of two (see `GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES`).
   */
  readonly overlapFlushes = true;
  #ffi: BunFfi;
  #libc: LibcSymbols;
  #errnoAddress: number;
  /** Pre-faults: long calls, on their own thread so flushes never queue behind them. */
  #adviceWorker = new LibcWorker(LIBC_PATH, "madvise");
  #flushWorkers = new LibcWorkerPool(LIBC_PATH, "msync", FLUSH_WORKERS_MAX);
  /**
   * Releases mappings collected without being retired: once every holder
   * (`BunMappingState.holders`: the mapping object or anonymous buffer,
   * and a file mapping's view once made) is collected, no view of the
   * range is left, so unmapping cannot fault anyone. Each holder is
   * registered with the state (which unregisters them all at retirement).
   */
  #orphans = new FinalizationRegistry<BunMappingState>((state) => {
    state.holders--;
    if (state.holders === 0) this.#release(state);
  });
  /** Makes the view of a file mapping (at its first use, see {@link BunFileMapping}). */
  readonly #makeView = (state: BunMappingState): Uint8Array => {
    const buffer = this.#ffi.toArrayBuffer(state.address, 0, state.length);
    state.holders++;
    this.#orphans.register(buffer, state, state);
    return new Uint8Array(buffer);
  };
  /** `mlock2`, where libc has it (glibc 2.27 and later). */
  #mlock2: ((address: number, length: number, flags: number) => number) | undefined;
  #flock = new Uint8Array(FLOCK.SIZE);
  #flockView = new DataView(this.#flock.buffer);
  #range = new Uint8Array(CACHESTAT.RANGE_SIZE);
  #rangeView = new DataView(this.#range.buffer);
  #stat = new Uint8Array(CACHESTAT.STAT_SIZE);
  #statView = new DataView(this.#stat.buffer);

  constructor(ffi: BunFfi) {
    this.#ffi = ffi;
    this.#libc = ffi.dlopen(LIBC_PATH, SYMBOLS).symbols;
    this.#mlock2 = bindMlock2(ffi);
    // errno is thread-local; this is the JavaScript thread's, read right
    // after each failed call with nothing in between that could change it.
    this.#errnoAddress = this.#libc.__errno_location();
    this.pageSizeBytes = this.#libc.sysconf(LINUX._SC_PAGESIZE);
    if (!(this.pageSizeBytes > 0 && (this.pageSizeBytes & (this.pageSizeBytes - 1)) === 0)) {
      throw new Error(`sysconf(_SC_PAGESIZE) returned ${this.pageSizeBytes}`);
    }
  }

  fallocate(fd: number, offset: number, length: number): number {
    return this.#libc.posix_fallocate(fd, offset, length);
  }

  fadvise(fd: number, offset: number, length: number, advice: number): number {
    return this.#libc.posix_fadvise(fd, offset, length, advice);
  }

  lseek(fd: number, offset: number, whence: number): number {
    const reached = this.#libc.lseek(fd, offset, whence);
    return reached === -1 ? -this.#errno() : reached;
  }

  mmap(
    file: NativeFile,
    fileOffset: number,
    length: number,
    writable: boolean,
  ): NativeMapping {
    if (length > VIEW_SIZE_MAX_BYTES) {
      throw new MqStoreError(
        "UNSUPPORTED",
        `Cannot map ${file.path}: ${length} bytes exceed Bun's view limit of ${VIEW_SIZE_MAX_BYTES}`,
      );
    }
    // Mapping past the end of the file would fault on access; the handle's
    // size may be stale.
    const fileSizeBytes = fs.fstatSync(file.fd).size;
    if (fileOffset + length > fileSizeBytes) {
      throw new MqStoreError(
        "INVALID_FILE",
        `Cannot map ${file.path}: range [${fileOffset}, ${
          fileOffset + length
        }) exceeds its size ${fileSizeBytes}`,
      );
    }
    const syncFd = this.#libc.fcntl(file.fd, F_DUPFD_CLOEXEC, null);
    if (syncFd < 0) throw errnoError(this.#errno(), "duplicate the descriptor of", file.path);
    const protection = writable ? LINUX.PROT_READ | LINUX.PROT_WRITE : LINUX.PROT_READ;
    const address = this.#libc.mmap(
      null,
      length,
      protection,
      LINUX.MAP_SHARED,
      file.fd,
      fileOffset,
    );
    if (address === MAP_FAILED) {
      const errno = this.#errno();
      fs.closeSync(syncFd);
      throw errnoError(errno, "map", file.path);
    }
    assert(
      address % this.pageSizeBytes === 0,
      `mmap returned 0x${address.toString(16)}, not page-aligned`,
    );
    // The view is made at first use, without a deallocator: Bun would
    // unmap the range as soon as the buffer is transferred, while a worker
    // call may still use it. The binding unmaps it itself (#release).
    const state: BunMappingState = {
      address,
      length,
      syncFd,
      inFlight: 0,
      retired: false,
      released: false,
      holders: 1,
    };
    const mapping = new BunFileMapping(state, this.#makeView);
    this.#orphans.register(mapping, state, state);
    // A writable mapping will be flushed and pre-faulted: boot a flush
    // thread and the pre-fault thread now rather than on the first
    // (latency-critical) flush, or on the first pre-fault, which a store's
    // open waits for (35–90 ms of booting on it).
    if (writable) {
      this.#flushWorkers.warm();
      this.#adviceWorker.warm();
    }
    return mapping;
  }

  retire(mapping: NativeMapping): void {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return;
    state.retired = true;
    // Detaches every view of the buffer (length 0); without a deallocator
    // the range itself stays mapped until the calls in flight answered. A
    // file mapping never viewed has no buffer to detach.
    if (!(mapping instanceof BunFileMapping) || mapping.viewed) {
      const buffer = mapping.bytes.buffer as ArrayBuffer;
      if (!buffer.detached) buffer.transfer(0);
    }
    assert(mapping.bytes.length === 0, "the view of a retired mapping is detached");
    this.#orphans.unregister(state);
    if (state.inFlight === 0) this.#release(state);
  }

  async msync(mapping: NativeMapping, position: number, length: number): Promise<number> {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return ENOMEM;
    const [address, alignedLength] = this.#align(state, position, length);
    state.inFlight++;
    try {
      return await this.#flushWorkers.call(
        LIBC_CALL.MSYNC,
        address,
        alignedLength,
        LINUX.MS_SYNC,
      );
    } catch {
      // No flush thread could start (or it died mid-call): fdatasync syncs
      // the whole file, never less durable than msync of the range.
      return await fdatasync(state.syncFd);
    } finally {
      this.#settle(state, mapping);
    }
  }

  madvise(
    mapping: NativeMapping,
    position: number,
    length: number,
    advice: number,
  ): number {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return ENOMEM;
    const [address, alignedLength] = this.#align(state, position, length);
    return this.#check(this.#libc.madvise(address, alignedLength, advice));
  }

  async madviseAsync(
    mapping: NativeMapping,
    position: number,
    length: number,
    advice: number,
    options?: PopulateOptions,
  ): Promise<number> {
    // Advice that drops or changes pages stays on this thread, in program
    // order with the writes around it.
    if (!ASYNC_ADVICE.has(advice)) return this.madvise(mapping, position, length, advice);
    const state = mapping.handle as BunMappingState;
    if (state.retired) return ENOMEM;
    const [address, alignedLength] = this.#align(state, position, length);
    state.inFlight++;
    try {
      const errno = await this.#adviceWorker.call(
        options?.read === true ? LIBC_CALL.MADVISE_THEN_READ : LIBC_CALL.MADVISE,
        address,
        alignedLength,
        advice,
      );
      // Retired meanwhile: nobody will write there, nothing to report.
      return state.retired ? 0 : errno;
    } finally {
      this.#settle(state, mapping);
    }
  }

  mlock(mapping: NativeMapping): number {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return ENOMEM;
    return this.#check(this.#libc.mlock(state.address, mapping.length));
  }

  munlock(mapping: NativeMapping): number {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return ENOMEM;
    return this.#check(this.#libc.munlock(state.address, mapping.length));
  }

  mmapAnonymous(length: number): NativeMapping {
    if (!Number.isSafeInteger(length) || length <= 0 || length > VIEW_SIZE_MAX_BYTES) {
      throw new RangeError(
        `Cannot map ${length} bytes of anonymous memory: the size must be in [1, ${VIEW_SIZE_MAX_BYTES}]`,
      );
    }
    const address = this.#libc.mmap(
      null,
      length,
      LINUX.PROT_READ | LINUX.PROT_WRITE,
      LINUX.MAP_PRIVATE | LINUX.MAP_ANONYMOUS,
      -1,
      0,
    );
    if (address === MAP_FAILED) {
      throw errnoError(this.#errno(), `map ${length} bytes of`, "anonymous memory");
    }
    // As for a file mapping: no deallocator, released by #release.
    const buffer = this.#ffi.toArrayBuffer(address, 0, length);
    const state: BunMappingState = {
      address,
      length,
      syncFd: -1,
      inFlight: 0,
      retired: false,
      released: false,
      holders: 1,
    };
    this.#orphans.register(buffer, state, state);
    return { bytes: new Uint8Array(buffer), length, handle: state };
  }

  mlockOnFault(mapping: NativeMapping): number {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return ENOMEM;
    const mlock2 = this.#mlock2;
    return this.#check(
      mlock2 === undefined
        ? this.#libc.mlock(state.address, state.length)
        : mlock2(state.address, state.length, LINUX.MLOCK_ONFAULT),
    );
  }

  fcntlLock(
    fd: number,
    cmd: number,
    type: number,
  ): { errno: number; type: number; pid: number } {
    encodeFlock(this.#flockView, type);
    const errno = this.#check(this.#libc.fcntl(fd, cmd, this.#flock));
    const reported = decodeFlock(this.#flockView);
    return { errno, type: reported.type, pid: reported.pid };
  }

  cachestat(fd: number, offset: number, length: number): PageCacheState | undefined {
    encodeCachestatRange(this.#rangeView, offset, length);
    const result = this.#libc.syscall(LINUX.SYS_CACHESTAT, fd, this.#range, this.#stat, 0);
    if (result !== 0) {
      const errno = this.#errno();
      // ENOSYS: a kernel before 6.5; EPERM: a seccomp filter (containers)
      // that refuses system calls it does not know.
      if (errno === LINUX.ENOSYS || errno === EPERM) return undefined;
      throw errnoError(errno, "read the page-cache state (cachestat) of", `fd ${fd}`);
    }
    return decodeCachestat(this.#statView);
  }

  /** The page-aligned start address and length covering `[position, position + length)`. */
  #align(state: BunMappingState, position: number, length: number): [number, number] {
    const offsetInPage = position % this.pageSizeBytes;
    return [state.address + position - offsetInPage, length + offsetInPage];
  }

  /**
   * Ends a worker call on a mapping; releases the mapping after the last
   * one if it was retired meanwhile. Taking the mapping keeps an unretired
   * one from being collected (and unmapped) while the call ran.
   */
  #settle(state: BunMappingState, mapping: NativeMapping): void {
    state.inFlight--;
    assert(state.inFlight >= 0, `${state.inFlight} calls in flight on a mapping`);
    if (!(mapping instanceof BunFileMapping) || mapping.viewed) {
      assert(
        (mapping.bytes.buffer as ArrayBuffer).detached === state.retired,
        "a mapping's buffer is detached exactly when it is retired",
      );
    }
    if (state.retired && state.inFlight === 0) this.#release(state);
  }

  /** Unmaps a mapping's range and closes its descriptor, once. */
  #release(state: BunMappingState): void {
    if (state.released) return;
    state.released = true;
    if (this.#libc.munmap(state.address, state.length) !== 0) {
      // munmap fails only on an invalid range: a bug, never a runtime state.
      throw errnoError(this.#errno(), `unmap ${state.length} bytes at`, "a retired mapping");
    }
    // Every call on this descriptor has answered; a close error (EINTR, EIO
    // on Linux) does not leave it open and concerns no data of ours.
    if (state.syncFd >= 0) fs.close(state.syncFd, () => {});
  }

  /** 0 for a libc call that returned 0, else the errno it set. */
  #check(result: number): number {
    return result === 0 ? 0 : this.#errno();
  }

  #errno(): number {
    return this.#ffi.read.i32(this.#errnoAddress);
  }
}

/** `mlock2` from libc, or undefined where libc lacks it (before glibc 2.27). */
function bindMlock2(
  ffi: BunFfi,
): ((address: number, length: number, flags: number) => number) | undefined {
  try {
    // A library of its own: a missing symbol fails only this dlopen.
    const library = ffi.dlopen(LIBC_PATH, {
      mlock2: { args: ["ptr", "usize", "u32"], returns: "i32" },
    }) as unknown as {
      symbols: { mlock2(address: number, length: number, flags: number): number };
    };
    return library.symbols.mlock2;
  } catch {
    return undefined;
  }
}

/**
 * Loads the `bun-ffi` binding of libc. Throws where `Bun` or `bun:ffi` is
 * missing or libc cannot be opened; `createPort` then falls back to the
 * portable adapter.
 *
 * @example
 * ```ts ignore
 * import { loadLibc } from "./bun.ts";
 *
 * const libc = await loadLibc();
 * console.log(libc.adapter, libc.pageSizeBytes); // "bun-ffi" 4096
 * ```
 *
 * @returns The binding.
 */
export async function loadLibc(): Promise<NativeLibc> {
  if ((globalThis as { Bun?: unknown }).Bun === undefined) {
    throw new MqStoreError(
      "UNSUPPORTED",
      "The bun-ffi adapter needs Bun (the Bun global is missing)",
    );
  }
  // A variable specifier keeps deno check (which has no Bun types) from
  // resolving bun:ffi.
  const specifier = "bun:ffi";
  const ffi = await import(specifier) as BunFfi;
  return new BunLibc(ffi);
}
