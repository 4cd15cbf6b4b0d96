/**
 * The `bun-ffi` adapter's libc binding: `Bun.mmap` for writable views,
 * `bun:ffi` for everything else.
 *
 * Mappings:
 * - A writable mapping is `Bun.mmap(path, { shared: true, offset, size })`,
 *   a `MAP_SHARED` `PROT_READ|PROT_WRITE` view. It is made of
 *   `/proc/self/fd/<fd>`, so it is the descriptor's file even if the path
 *   was renamed or replaced since it was opened. Bun unmaps it only when its
 *   buffer is garbage-collected or transferred: {@link NativeLibc.retire}
 *   calls `bytes.buffer.transfer(0)`, which detaches every view (length 0)
 *   and unmaps the range at once (checked in /proc/self/maps). It is never
 *   `munmap`ed directly, which would leave Bun a view that faults.
 * - `Bun.mmap` cannot map read-only: it opens the path `O_RDWR` and maps
 *   `PROT_READ|PROT_WRITE` (seen with strace), so it fails with `EACCES` on
 *   a file the process may only read and would let a read-only handle write.
 *   A read-only mapping is therefore libc `mmap(PROT_READ, MAP_SHARED)` on
 *   the handle's descriptor, wrapped by `toArrayBuffer(address, 0, length,
 *   length, munmap)`: Bun calls the deallocator as `munmap(address,
 *   length)` when that buffer is collected or transferred, so it has the
 *   same lifecycle as a `Bun.mmap` view. A write through it is a SIGSEGV,
 *   as with a read-only mapping on every adapter.
 * - Offsets of 2^32 and beyond work (a 5 GiB sparse file mapped at 4 GiB
 *   writes land at 2^32 + x). One view is at most 4 GiB (JavaScriptCore's
 *   ArrayBuffer limit; larger sizes fail with "RangeError: Out of memory").
 *
 * Flushing and pre-faulting off the JavaScript thread (`bun:ffi` calls
 * block): two ways were implemented and measured on this machine (Bun
 * 1.4.5, Linux 6.18, ext4 on virtio, 2 cores; 64 MiB fallocated file under
 * `MADV_RANDOM`; methods interleaved per iteration):
 *
 * | flush                              | 4 KiB dirty, p50 / p99 (500 runs) | 64 MiB dirty, p50 (10 runs) |
 * |------------------------------------|-----------------------------------|-----------------------------|
 * | `fs.fdatasync` (Bun's thread pool) | 0.35–0.46 ms / 0.9–3.6 ms         | 144–205 ms                  |
 * | worker `msync`, postMessage        | 0.39–0.50 ms / 1.1–2.6 ms         | 129–235 ms                  |
 * | worker `msync`, SAB + waitAsync    | 0.36–0.40 ms / 1.7–4.3 ms         | —                           |
 * | `msync` on the JS thread (blocks)  | 0.30–0.35 ms / 0.6–1.2 ms         | —                           |
 *
 * The two are equal within run-to-run noise (the device write dominates);
 * during a 64 MiB `fdatasync` a 1 ms `setInterval` kept ticking (largest
 * gap 1.5–6.5 ms). This binding keeps `fdatasync`: it cannot queue behind a
 * pre-fault on the worker (a 256 MiB `MADV_POPULATE_WRITE` holds it for
 * 0.4–1 s), flushes of different files run in parallel, and it never acts
 * on an address that may have been unmapped and reused. On Linux
 * `msync(MS_SYNC)` is itself `vfs_fsync_range(..., datasync)`, and
 * `fdatasync` writes back pages dirtied through a shared mapping too
 * (`cachestat` shows them dirty before and 0 after); it syncs the whole
 * file, not only the range, which is never less durable. Each mapping holds
 * its own descriptor (`F_DUPFD_CLOEXEC`), because the file handle may be
 * closed while its mappings live on and a reused descriptor number would
 * sync another file. Through the port (`Mapping.sync`) this gives 4 KiB:
 * p50 0.34–0.37 ms, p99 1.3–1.7 ms; 64 MiB: 178–184 ms; and 4 KiB flushes
 * issued while a 256 MiB pre-fault ran on the worker kept completing
 * (about 1,900 of them during it, p50 0.17–0.21 ms, max 10–16 ms).
 *
 * Pre-faulting (`madviseAsync`) runs on a worker thread regardless
 * (`_bun_worker.ts`): `MADV_POPULATE_WRITE` of a fresh 256 MiB mapping of a
 * fallocated file took 395–1009 ms there while a 1 ms `setInterval` kept
 * ticking (356–894 ticks, largest gap 2.5–5.9 ms); on the JS thread the same
 * call blocks for 470–800 ms. The worker costs ~7.5 MiB RSS and 35–50 ms to
 * start, on first use.
 *
 * @module
 */

import fs from "node:fs";
import { errnoError, MqStoreError, systemError } from "../errors.ts";
import { AdviceWorker } from "./_bun_worker.ts";
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
import type { PageCacheState } from "./port.ts";

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

/** Advice that only faults pages in: harmless if the range was unmapped meanwhile. */
const ASYNC_ADVICE: ReadonlySet<number> = new Set([
  LINUX.MADV_WILLNEED,
  LINUX.MADV_POPULATE_READ,
  LINUX.MADV_POPULATE_WRITE,
]);

/** The part of the `Bun` global this binding uses. */
interface BunGlobal {
  mmap(
    path: string,
    options: { shared: boolean; offset: number; size: number },
  ): Uint8Array<ArrayBuffer>;
}

/** The libc functions bound through `bun:ffi`. */
interface LibcSymbols {
  sysconf(name: number): number;
  posix_fallocate(fd: number, offset: number, length: number): number;
  posix_fadvise(fd: number, offset: number, length: number, advice: number): number;
  mmap(
    address: null,
    length: number,
    protection: number,
    flags: number,
    fd: number,
    offset: number,
  ): number;
  munmap: { readonly ptr: number };
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
  ptr(view: Uint8Array): number;
  toArrayBuffer(
    address: number,
    byteOffset: number,
    byteLength: number,
    deallocatorContext: number,
    deallocator: number,
  ): ArrayBuffer;
  read: { i32(address: number): number };
}

/** `bun:ffi` declarations: `i64_fast` returns a number while it is exact. */
const SYMBOLS = {
  sysconf: { args: ["i32"], returns: "i64_fast" },
  posix_fallocate: { args: ["i32", "i64", "i64"], returns: "i32" },
  posix_fadvise: { args: ["i32", "i64", "i64", "i32"], returns: "i32" },
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
 * `syncFd` is this mapping's own descriptor of the file for `fdatasync`
 * (-1 once closed); `inFlight` counts `fdatasync` and worker `madvise`
 * calls not yet answered, so `syncFd` is closed only when none uses it.
 */
interface BunMappingState {
  /** Address of the first mapped byte (page-aligned). */
  readonly address: number;
  syncFd: number;
  inFlight: number;
  retired: boolean;
}

function errnoOf(error: NodeJS.ErrnoException): number {
  // Bun and Node report errno negated (-5 for EIO).
  return typeof error.errno === "number" && error.errno !== 0 ? Math.abs(error.errno) : EIO;
}

/** Closes a descriptor used only for `fdatasync`. */
function closeSyncFd(state: BunMappingState): void {
  const fd = state.syncFd;
  if (fd < 0) return;
  state.syncFd = -1;
  // Every fdatasync on this descriptor has reported to its caller; a close
  // error (EINTR, EIO on Linux) does not leave the descriptor open and
  // concerns no data, so there is no one to tell.
  fs.close(fd, () => {});
}

/** Mapping descriptors of mappings collected without being retired. */
const ORPHANS = new FinalizationRegistry<number>((fd) => fs.close(fd, () => {}));

class BunLibc implements NativeLibc {
  readonly runtime = "bun" as const;
  readonly adapter = "bun-ffi" as const;
  readonly pageSizeBytes: number;
  #bun: BunGlobal;
  #ffi: BunFfi;
  #libc: LibcSymbols;
  #errnoAddress: number;
  #procFd: boolean;
  #worker = new AdviceWorker(LIBC_PATH);
  #flock = new Uint8Array(FLOCK.SIZE);
  #flockView = new DataView(this.#flock.buffer);
  #range = new Uint8Array(CACHESTAT.RANGE_SIZE);
  #rangeView = new DataView(this.#range.buffer);
  #stat = new Uint8Array(CACHESTAT.STAT_SIZE);
  #statView = new DataView(this.#stat.buffer);

  constructor(bun: BunGlobal, ffi: BunFfi) {
    this.#bun = bun;
    this.#ffi = ffi;
    this.#libc = ffi.dlopen(LIBC_PATH, SYMBOLS).symbols;
    // errno is thread-local; this is the JavaScript thread's, read right
    // after each failed call with nothing in between that could change it.
    this.#errnoAddress = this.#libc.__errno_location();
    this.pageSizeBytes = this.#libc.sysconf(LINUX._SC_PAGESIZE);
    if (!(this.pageSizeBytes > 0 && (this.pageSizeBytes & (this.pageSizeBytes - 1)) === 0)) {
      throw new Error(`sysconf(_SC_PAGESIZE) returned ${this.pageSizeBytes}`);
    }
    this.#procFd = fs.existsSync("/proc/self/fd");
  }

  fallocate(fd: number, offset: number, length: number): number {
    return this.#libc.posix_fallocate(fd, offset, length);
  }

  fadvise(fd: number, offset: number, length: number, advice: number): number {
    return this.#libc.posix_fadvise(fd, offset, length, advice);
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
    // Mapping past the end of the file would fault on access (libc mmap) or
    // be clamped (Bun.mmap); the handle's size may be stale.
    const fileSizeBytes = fs.fstatSync(file.fd).size;
    if (fileOffset + length > fileSizeBytes) {
      throw new MqStoreError(
        "INVALID_FILE",
        `Cannot map ${file.path}: range [${fileOffset}, ${
          fileOffset + length
        }) exceeds its size ${fileSizeBytes}`,
      );
    }
    const bytes = writable
      ? this.#mapShared(file, fileOffset, length)
      : this.#mapReadOnly(file, fileOffset, length);
    const address = this.#ffi.ptr(bytes);
    if (bytes.length !== length || address % this.pageSizeBytes !== 0) {
      bytes.buffer.transfer(0);
      throw new Error(
        `Mapping ${file.path} gave ${bytes.length} bytes at 0x${
          address.toString(16)
        }, expected ${length} page-aligned`,
      );
    }
    const syncFd = this.#libc.fcntl(file.fd, F_DUPFD_CLOEXEC, null);
    if (syncFd < 0) {
      const errno = this.#errno();
      bytes.buffer.transfer(0);
      throw errnoError(errno, "duplicate the descriptor of", file.path);
    }
    const state: BunMappingState = { address, syncFd, inFlight: 0, retired: false };
    ORPHANS.register(state, syncFd, state);
    return { bytes, length, handle: state };
  }

  retire(mapping: NativeMapping): void {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return;
    state.retired = true;
    // Detaches every view of the buffer; its deallocator (Bun's for
    // Bun.mmap, munmap for a read-only mapping) unmaps the range now.
    const buffer = mapping.bytes.buffer as ArrayBuffer;
    if (!buffer.detached) buffer.transfer(0);
    ORPHANS.unregister(state);
    if (state.inFlight === 0) closeSyncFd(state);
  }

  msync(mapping: NativeMapping, _position: number, _length: number): Promise<number> {
    const state = mapping.handle as BunMappingState;
    if (state.retired) return Promise.resolve(ENOMEM);
    state.inFlight++;
    return new Promise<number>((resolve) => {
      fs.fdatasync(state.syncFd, (error) => {
        state.inFlight--;
        if (state.retired && state.inFlight === 0) closeSyncFd(state);
        resolve(error ? errnoOf(error) : 0);
      });
    });
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
  ): Promise<number> {
    // Advice that drops or changes pages stays on this thread: if the
    // mapping were retired and its range reused while a worker call is
    // queued, it would hit someone else's memory.
    if (!ASYNC_ADVICE.has(advice)) return this.madvise(mapping, position, length, advice);
    const state = mapping.handle as BunMappingState;
    if (state.retired) return ENOMEM;
    const [address, alignedLength] = this.#align(state, position, length);
    state.inFlight++;
    try {
      const errno = await this.#worker.madvise(address, alignedLength, advice);
      // Retired meanwhile: the range is gone and there is nothing to fault in.
      return state.retired ? 0 : errno;
    } finally {
      state.inFlight--;
      if (state.retired && state.inFlight === 0) closeSyncFd(state);
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

  #mapShared(
    file: NativeFile,
    fileOffset: number,
    length: number,
  ): Uint8Array<ArrayBuffer> {
    const path = this.#procFd ? `/proc/self/fd/${file.fd}` : file.path;
    try {
      return this.#bun.mmap(path, { shared: true, offset: fileOffset, size: length });
    } catch (error) {
      throw systemError(error, "map", file.path);
    }
  }

  #mapReadOnly(
    file: NativeFile,
    fileOffset: number,
    length: number,
  ): Uint8Array<ArrayBuffer> {
    const address = this.#libc.mmap(
      null,
      length,
      LINUX.PROT_READ,
      LINUX.MAP_SHARED,
      file.fd,
      fileOffset,
    );
    if (address === MAP_FAILED) throw errnoError(this.#errno(), "map", file.path);
    // Bun calls the deallocator as munmap(address, context) once the buffer
    // is collected or transferred away.
    return new Uint8Array(
      this.#ffi.toArrayBuffer(address, 0, length, length, this.#libc.munmap.ptr),
    );
  }

  /** 0 for a libc call that returned 0, else the errno it set. */
  #check(result: number): number {
    return result === 0 ? 0 : this.#errno();
  }

  #errno(): number {
    return this.#ffi.read.i32(this.#errnoAddress);
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
  const bun = (globalThis as { Bun?: Partial<BunGlobal> }).Bun;
  if (typeof bun?.mmap !== "function") {
    throw new MqStoreError("UNSUPPORTED", "The bun-ffi adapter needs Bun (Bun.mmap is missing)");
  }
  // A variable specifier keeps deno check (which has no Bun types) from
  // resolving bun:ffi.
  const specifier = "bun:ffi";
  const ffi = await import(specifier) as BunFfi;
  return new BunLibc(bun as BunGlobal, ffi);
}
