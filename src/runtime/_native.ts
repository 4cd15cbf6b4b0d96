/**
 * The libc surface the FFI adapters bind (Deno `Deno.dlopen`, Bun
 * `bun:ffi` + `Bun.mmap`, Node koffi), and the Linux constants they share.
 *
 * Each FFI adapter implements {@link NativeLibc}; `_fs_port.ts` builds the
 * whole {@link RuntimePort} from it plus `node:fs`, which all three runtimes
 * provide. Only the pointer handling differs per runtime, so a mapping is an
 * opaque {@link NativeMapping} whose `handle` only its own binding reads.
 *
 * @module
 */

import type { AdapterName, PageCacheState, PopulateOptions, RuntimeName } from "./port.ts";

/** A live mapping created by a {@link NativeLibc}. */
export interface NativeMapping {
  /** The view over the mapped range. */
  readonly bytes: Uint8Array;
  /** Length in bytes. */
  readonly length: number;
  /** Binding-private state (address, pointer object, buffer). */
  readonly handle: unknown;
}

/** The file a mapping is made of. */
export interface NativeFile {
  /** Open descriptor (read-write unless `writable` is false). */
  readonly fd: number;
  /** Its path (Bun maps by path). */
  readonly path: string;
}

/**
 * libc calls one FFI adapter provides. Calls returning `number` return 0 on
 * success or a positive errno.
 */
export interface NativeLibc {
  /** The runtime this binding runs on. */
  readonly runtime: RuntimeName;
  /** The adapter name reported by the port. */
  readonly adapter: AdapterName;
  /** `sysconf(_SC_PAGESIZE)`. */
  readonly pageSizeBytes: number;
  /** The port's {@link RuntimePort.overlapFlushes}: measured per binding. */
  readonly overlapFlushes: boolean;
  /** `posix_fallocate(fd, offset, length)`: 0 or errno. */
  fallocate(fd: number, offset: number, length: number): number;
  /**
   * `mmap(NULL, length, PROT_READ[|PROT_WRITE], MAP_SHARED, fd, offset)`.
   * Throws an {@link MqStoreError} on failure.
   */
  mmap(
    file: NativeFile,
    fileOffset: number,
    length: number,
    writable: boolean,
  ): NativeMapping;
  /**
   * Retires a mapping: afterwards every view of it is detached (length 0)
   * or reads zeros, and the address range is (eventually) released. Never
   * leaves a view that could fault. Idempotent.
   */
  retire(mapping: NativeMapping): void;
  /** `msync(MS_SYNC)` of a range, off the JavaScript thread: 0 or errno. */
  msync(mapping: NativeMapping, position: number, length: number): Promise<number>;
  /** `madvise` of a range (page-aligned by the binding): 0 or errno. */
  madvise(
    mapping: NativeMapping,
    position: number,
    length: number,
    advice: number,
  ): number;
  /**
   * `madvise` off the JavaScript thread (for `MADV_POPULATE_WRITE`).
   *
   * With `options.read`, once `madvise` succeeded, every byte of the range is also
   * read from a thread other than the JavaScript one before the answer
   * (`PopulateOptions.read`): `memcmp` of the range with itself, nothing
   * written, its result unused. A writer storing into the range meanwhile
   * can only make it stop early (a byte changed between its two loads of
   * it): an optimisation missed.
   */
  madviseAsync(
    mapping: NativeMapping,
    position: number,
    length: number,
    advice: number,
    options?: PopulateOptions,
  ): Promise<number>;
  /** `mlock` of the whole mapping: 0 or errno. */
  mlock(mapping: NativeMapping): number;
  /** `munlock` of the whole mapping: 0 or errno. */
  munlock(mapping: NativeMapping): number;
  /**
   * `mmap(NULL, length, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS,
   * -1, 0)`: private zero-filled memory with a view over it (write
   * buffers), released with {@link NativeLibc.retire} like a file mapping.
   * Throws an {@link MqStoreError} on failure.
   */
  mmapAnonymous(length: number): NativeMapping;
  /**
   * Locks the whole mapping in memory from its first touch on
   * (`mlock2(MLOCK_ONFAULT)`): the call only checks `RLIMIT_MEMLOCK` and
   * marks the range, so it is quick even for a GiB, and the pages are
   * faulted in (and so locked) by a later `MADV_POPULATE_WRITE` off the
   * JavaScript thread. Falls back to `mlock` (which faults every page in
   * at once) where libc lacks `mlock2`. 0 or errno.
   */
  mlockOnFault(mapping: NativeMapping): number;
  /**
   * `fcntl(fd, cmd, &flock)` on byte 0 (length 1) with the given lock
   * type. Returns the errno (0 on success) and, for `F_OFD_GETLK`, the
   * type and pid the kernel reported.
   */
  fcntlLock(
    fd: number,
    cmd: number,
    type: number,
  ): { errno: number; type: number; pid: number };
  /** `cachestat(fd, {offset, length})`, or undefined if the kernel lacks it. */
  cachestat(fd: number, offset: number, length: number): PageCacheState | undefined;
  /** `posix_fadvise`: 0 or errno. */
  fadvise(fd: number, offset: number, length: number, advice: number): number;
  /**
   * `lseek(fd, offset, whence)` (for `SEEK_DATA`/`SEEK_HOLE`): the offset
   * reached, or minus the errno (`-ENXIO`: no data at or after `offset`).
   */
  lseek(fd: number, offset: number, whence: number): number;
  /**
   * `pwrite(fd, source, source.length, position)` on the calling thread:
   * the bytes written, or minus the errno. Optional: a binding offers it
   * where it costs less than the runtime's `fs.writeSync` (a lone SYNC put
   * writes and syncs once each), and `FileHandle.writeSync` uses `node:fs`
   * otherwise.
   */
  pwrite?(fd: number, source: Uint8Array, position: number): number;
  /**
   * `fdatasync(fd)` on the calling thread: 0 or errno. Optional, like
   * {@link NativeLibc.pwrite}.
   */
  fdatasync?(fd: number): number;
  /**
   * `fdatasync(fd)` off the JavaScript thread, for `FileHandle.datasync`:
   * resolves to 0 or an errno. Optional: a binding offers it where the
   * runtime's `fs.fdatasync` queues behind the calls in flight on the same
   * file, so that two flushes of a group commit cannot overlap.
   */
  fdatasyncAsync?(fd: number): Promise<number>;
}

/** Linux constants (identical on x86_64 and arm64). */
export const LINUX = {
  PROT_NONE: 0x0,
  PROT_READ: 0x1,
  PROT_WRITE: 0x2,
  MAP_SHARED: 0x01,
  MAP_PRIVATE: 0x02,
  MAP_FIXED: 0x10,
  MAP_ANONYMOUS: 0x20,
  MAP_NORESERVE: 0x4000,
  MS_SYNC: 0x4,
  MLOCK_ONFAULT: 0x1,
  MADV_NORMAL: 0,
  MADV_RANDOM: 1,
  MADV_SEQUENTIAL: 2,
  MADV_WILLNEED: 3,
  MADV_DONTNEED: 4,
  MADV_HUGEPAGE: 14,
  MADV_NOHUGEPAGE: 15,
  MADV_POPULATE_READ: 22,
  MADV_POPULATE_WRITE: 23,
  POSIX_FADV_NORMAL: 0,
  POSIX_FADV_RANDOM: 1,
  POSIX_FADV_SEQUENTIAL: 2,
  POSIX_FADV_WILLNEED: 3,
  POSIX_FADV_DONTNEED: 4,
  F_OFD_GETLK: 36,
  F_OFD_SETLK: 37,
  F_RDLCK: 0,
  F_WRLCK: 1,
  F_UNLCK: 2,
  SEEK_SET: 0,
  SEEK_DATA: 3,
  SEEK_HOLE: 4,
  EINTR: 4,
  ENXIO: 6,
  /** `cachestat` has the same number on every architecture (new-style syscall). */
  SYS_CACHESTAT: 451,
  _SC_PAGESIZE: 30,
  ENOSYS: 38,
  EAGAIN: 11,
  EACCES: 13,
} as const;

/**
 * `struct flock` on 64-bit Linux: `short l_type; short l_whence; off_t
 * l_start; off_t l_len; pid_t l_pid;` with padding, 32 bytes.
 */
export const FLOCK = {
  SIZE: 32,
  L_TYPE: 0,
  L_WHENCE: 2,
  L_START: 8,
  L_LEN: 16,
  L_PID: 24,
} as const;

/**
 * `struct cachestat_range { u64 off; u64 len; }` (16 bytes) and
 * `struct cachestat { u64 nr_cache, nr_dirty, nr_writeback, nr_evicted,
 * nr_recently_evicted; }` (40 bytes).
 */
export const CACHESTAT = {
  RANGE_SIZE: 16,
  STAT_SIZE: 40,
  NR_CACHE: 0,
  NR_DIRTY: 8,
  NR_WRITEBACK: 16,
} as const;

/** Writes the `struct flock` for a lock of `type` on byte 0, length 1. */
export function encodeFlock(view: DataView, type: number): void {
  for (let i = 0; i < FLOCK.SIZE; i++) view.setUint8(i, 0);
  view.setInt16(FLOCK.L_TYPE, type, true);
  view.setInt16(FLOCK.L_WHENCE, LINUX.SEEK_SET, true);
  view.setUint32(FLOCK.L_START, 0, true);
  view.setUint32(FLOCK.L_LEN, 1, true);
}

/** Reads `l_type` and `l_pid` back from a `struct flock`. */
export function decodeFlock(view: DataView): { type: number; pid: number } {
  return {
    type: view.getInt16(FLOCK.L_TYPE, true),
    pid: view.getInt32(FLOCK.L_PID, true),
  };
}

/** Writes a `struct cachestat_range`. */
export function encodeCachestatRange(
  view: DataView,
  offset: number,
  length: number,
): void {
  view.setBigUint64(0, BigInt(offset), true);
  view.setBigUint64(8, BigInt(length), true);
}

/** Reads a `struct cachestat`. */
export function decodeCachestat(view: DataView): PageCacheState {
  return {
    cachedPages: Number(view.getBigUint64(CACHESTAT.NR_CACHE, true)),
    dirtyPages: Number(view.getBigUint64(CACHESTAT.NR_DIRTY, true)),
    writebackPages: Number(view.getBigUint64(CACHESTAT.NR_WRITEBACK, true)),
  };
}

/** The libc soname for glibc Linux. */
export const LIBC_PATH = "libc.so.6";
