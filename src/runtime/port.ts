/**
 * The runtime port: the one narrow interface between mqstore's
 * runtime-agnostic core and the host (Deno, Bun or Node).
 *
 * Everything the core needs from the operating system goes through a
 * {@link RuntimePort}: creating a segment file of an exact size, mapping it,
 * flushing a range off the JavaScript thread, pre-faulting, detaching a
 * mapping safely, locking a store directory, and a few directory operations.
 * One adapter implements it per runtime (`deno-ffi`, `bun-ffi`,
 * `node-koffi`), plus `portable` (no mmap: positional reads and writes) and
 * `memory` (an in-memory file system that can simulate a crash).
 *
 * Positions and lengths are JS numbers (exact to 2^53); file offsets of 2^32
 * and beyond are supported by every adapter.
 *
 * @module
 */

/**
 * The JavaScript runtime the process runs on.
 *
 * @example
 * ```ts
 * import { runtimeName, type RuntimeName } from "./mod.ts";
 *
 * const runtime: RuntimeName = runtimeName();
 * console.log(runtime); // "deno", "bun" or "node"
 * ```
 */
export type RuntimeName = "deno" | "bun" | "node";

/**
 * The adapter serving a {@link RuntimePort}.
 *
 * @example
 * ```ts
 * import { type AdapterName, createPort } from "./mod.ts";
 *
 * const adapter: AdapterName = "memory";
 * const port = await createPort({ adapter });
 * console.log(port.adapter); // "memory"
 * ```
 */
export type AdapterName =
  | "deno-ffi"
  | "bun-ffi"
  | "node-koffi"
  | "portable"
  | "memory";

/**
 * Access-pattern advice for a mapped range (`madvise`) or a file range
 * (`posix_fadvise`). `"hugepage"` (`MADV_HUGEPAGE`) is for mappings only
 * (as file-cache advice it does nothing): the kernel backs the range with
 * 2 MiB folios from the first fault on, where the default advice ramps
 * up to them from 4 KiB over the first megabytes (measured here,
 * pre-faulting 4 MiB of a fresh ext4 file: 1.4–1.6 ms instead of 6–8 ms).
 * Kernels without transparent huge pages ignore it. `"nohugepage"`
 * (`MADV_NOHUGEPAGE`, mappings only too) takes it back: `"random"` alone
 * does not, and a fault in a range advised both still makes 2 MiB folios
 * (Linux 6.18: `FilePmdMapped` in smaps).
 *
 * @example
 * ```ts
 * import { type Advice, MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * const file = await port.createFile("/s/segment", 0x1000);
 * const advice: Advice = "sequential";
 * file.adviseCache(0, 0x1000, advice);
 * await file.close();
 * ```
 */
export type Advice =
  | "normal"
  | "random"
  | "sequential"
  | "willneed"
  | "dontneed"
  | "hugepage"
  | "nohugepage";

/**
 * Page-cache state of a file range, from `cachestat(2)` (Linux ≥ 6.5).
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * const file = await port.createFile("/s/segment", 0x1000);
 * await file.write(new Uint8Array([1]), 0);
 * const state = file.pageCacheState(0, 0x1000); // undefined without cachestat
 * console.log(state?.dirtyPages ?? "unknown");
 * await file.close();
 * ```
 */
export interface PageCacheState {
  /** Pages of the range present in the page cache. */
  cachedPages: number;
  /** Cached pages modified and not yet written back. */
  dirtyPages: number;
  /** Pages being written back right now. */
  writebackPages: number;
}

/**
 * Options of {@link Mapping.populate}.
 *
 * @example
 * ```ts
 * import type { PopulateOptions } from "./port.ts";
 *
 * const options: PopulateOptions = { read: true };
 * ```
 */
export interface PopulateOptions {
  /**
   * After the pre-fault, read every byte of the range from another thread
   * (nothing is written). On this VM the kernel's pre-fault of 4 KiB pages
   * did not always spare the first store from user space to each page: at
   * some hours that store still cost 7–13 µs a page (no fault counted in
   * the guest), and a read of the page from another thread of the process
   * took that cost instead (the first store then 30 ns). At other hours
   * the pre-fault itself took it, and the read cost 0.2 µs a page. For
   * ranges of 4 KiB pages written soon after (consume-queue units); the
   * 2 MiB folios of the commit log and the index entries did not need it.
   * Adapters without a native thread ignore it.
   *
   * @default {false}
   */
  read?: boolean;
}

/**
 * A shared, writable (or read-only) memory mapping of a file range.
 *
 * After {@link Mapping.unmap} (or when the file it belongs to is retired) the
 * `bytes` view the core may still hold is either detached (length 0, on Deno
 * and Bun) or reads zeros (on Node): touching it can never crash the process.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * const file = await port.createFile("/s/segment", port.pageSizeBytes);
 * const mapping = await file.map(0, port.pageSizeBytes);
 * mapping.bytes.set([1, 2, 3], 0);
 * await mapping.sync(0, 3);
 * mapping.unmap();
 * await file.close();
 * ```
 */
export interface Mapping {
  /** The view over the mapped range; index 0 is file offset `fileOffset`. */
  readonly bytes: Uint8Array;
  /** File offset of the first mapped byte (a multiple of the page size). */
  readonly fileOffset: number;
  /** Length of the mapped range in bytes. */
  readonly length: number;
  /**
   * Makes `[position, position + length)` of the mapping durable
   * (`msync(MS_SYNC)` or an equivalent `fdatasync`) without blocking the
   * JavaScript thread where the runtime allows it. Resolves once durable;
   * rejects with an {@link MqStoreError} (`IO_ERROR`, `NO_SPACE`).
   */
  sync(position: number, length: number): Promise<void>;
  /** Gives the kernel access-pattern advice for a range (`madvise`). */
  advise(position: number, length: number, advice: Advice): void;
  /**
   * Pre-faults a range for writing (`MADV_POPULATE_WRITE`) off the
   * JavaScript thread, so later appends do not take first-touch faults.
   * With `options.read`, the range is then also read, every byte, from a
   * thread other than the JavaScript one before the promise resolves (see
   * {@link PopulateOptions.read}).
   */
  populate(position: number, length: number, options?: PopulateOptions): Promise<void>;
  /** Pins the mapping in memory (`mlock`); returns false when refused. */
  lock(): boolean;
  /** Undoes {@link Mapping.lock}. */
  unlock(): void;
  /** Releases the mapping; idempotent. Views become detached or read zeros. */
  unmap(): void;
}

/**
 * An open file.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * const file = await port.createFile("/s/data", 0x1000);
 * await file.write(new Uint8Array([1, 2, 3]), 0);
 * await file.datasync();
 * const back = new Uint8Array(3);
 * console.log(await file.read(back, 0), back); // 3 Uint8Array(3) [ 1, 2, 3 ]
 * await file.close();
 * ```
 */
export interface FileHandle {
  /** The path it was opened with. */
  readonly path: string;
  /** Whether it was opened read-only. */
  readonly readOnly: boolean;
  /** The file size in bytes (as of open or create, or the last resize). */
  readonly sizeBytes: number;
  /**
   * Maps `[fileOffset, fileOffset + length)` shared. `fileOffset` must be a
   * multiple of {@link RuntimePort.pageSizeBytes}; the range must lie inside
   * the file. Throws `UNSUPPORTED` where {@link RuntimePort.canMap} is false.
   *
   * The mapping is read-only when the file was opened read-only: writing into
   * its `bytes` then faults (no runtime has read-only array buffers), so the
   * core never writes through such a view. On Node a single view is limited
   * to `buffer.constants.MAX_LENGTH` (4 GiB on Node 20). Never unmap a
   * mapping while an asynchronous read or write still uses a view of it.
   */
  map(fileOffset?: number, length?: number): Promise<Mapping>;
  /** Reads into `target` from `position` until it is full or the file ends; returns the bytes read. */
  read(target: Uint8Array, position: number): Promise<number>;
  /** Writes all of `source` at `position` (positional write). */
  write(source: Uint8Array, position: number): Promise<void>;
  /**
   * {@link FileHandle.write} on the JavaScript thread: a copy into the page
   * cache, for small writes whose thread hop would cost more than the copy
   * (a SYNC_FLUSH group commit writes a few hundred KiB right before its
   * `fdatasync`). Not for bulk writes: a write held up by dirty-page
   * throttling blocks the event loop.
   */
  writeSync(source: Uint8Array, position: number): void;
  /** `fdatasync`, off the JavaScript thread. */
  datasync(): Promise<void>;
  /**
   * `fdatasync` on the JavaScript thread, blocking it for the device's
   * flush (0.2 ms here): the SYNC_FLUSH group commit uses it only for a
   * lone put with nothing else in flight, where the thread hop of
   * {@link FileHandle.datasync} costs about as much as the flush. Absent
   * where an adapter (or a wrapper that must see every flush) offers only
   * the asynchronous call.
   */
  datasyncSync?(): void;
  /** Page-cache state of a range (`cachestat`), or undefined where unavailable. */
  pageCacheState(position: number, length: number): PageCacheState | undefined;
  /** Advice for the page cache about a file range (`posix_fadvise`). */
  adviseCache(position: number, length: number, advice: Advice): void;
  /**
   * The parts of `[position, position + length)` that may hold data, in
   * order, disjoint, inside the range (`lseek` `SEEK_DATA`/`SEEK_HOLE`):
   * holes, and extents allocated but never written (`fallocate`), read as
   * zeros and are left out; pages in the page cache count as data. The
   * whole range where the file system or the adapter cannot tell (the
   * portable and memory adapters). At most {@link FILE_DATA_RANGES_MAX}
   * ranges: the last one then reaches the end of the range.
   */
  dataRanges(position: number, length: number): FileRange[];
  /** Closes the descriptor; idempotent. Existing mappings stay valid. */
  close(): Promise<void>;
}

/**
 * A byte range of a file, as {@link FileHandle.dataRanges} lists them.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * const file = await port.createFile("/s/segment", 0x1000);
 * for (const range of file.dataRanges(0, 0x1000)) {
 *   console.log(range.position, range.length); // the memory adapter lists it all: 0 4096
 * }
 * await file.close();
 * ```
 */
export interface FileRange {
  /** First byte. */
  position: number;
  /** Bytes. */
  length: number;
}

/** Ranges {@link FileHandle.dataRanges} lists at most. */
export const FILE_DATA_RANGES_MAX = 0x400;

/**
 * Free and total space of the file system holding a path.
 *
 * @example
 * ```ts
 * import { createPort } from "./mod.ts";
 *
 * const port = await createPort({ adapter: "portable" });
 * const space = await port.diskSpace(".");
 * console.log(`${(100 * space.availableBytes / space.totalBytes).toFixed(1)} % available`);
 * ```
 */
export interface DiskSpace {
  /**
   * Bytes in use plus {@link DiskSpace.availableBytes}: the file system's
   * size less the blocks reserved for the superuser, as `df` and RocketMQ
   * 4.9's disk ratio count it.
   */
  totalBytes: number;
  /** Bytes available to this (unprivileged) process. */
  availableBytes: number;
}

/**
 * What {@link RuntimePort.stat} reports.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * await port.writeFileAtomic("/s/config", new TextEncoder().encode("{}"));
 * const stat = await port.stat("/s/config");
 * console.log(stat?.isFile, stat?.sizeBytes); // true 2
 * ```
 */
export interface FileStat {
  /** Size in bytes. */
  sizeBytes: number;
  /** Last modification time, ms since the epoch. */
  modifiedMs: number;
  /** A regular file. */
  isFile: boolean;
  /** A directory. */
  isDirectory: boolean;
}

/**
 * A held store-directory lock.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/store");
 * const lock = await port.lockDirectory("/store");
 * try {
 *   // The single writer of /store works here.
 * } finally {
 *   await lock.release();
 * }
 * ```
 */
export interface DirectoryLock {
  /** The lock file. */
  readonly path: string;
  /** Releases the lock; idempotent. */
  release(): Promise<void>;
}

/**
 * Options of {@link RuntimePort.createFile}.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * const file = await port.createFile("/s/scratch", 0x10_0000, { sparse: true });
 * await file.close();
 * ```
 */
export interface CreateFileOptions {
  /**
   * Create a sparse file instead of allocating every block with
   * `posix_fallocate`. Only for tests and the portable adapter: a sparse
   * file written through a mapping turns a full disk into SIGBUS.
   *
   * @default {false}
   */
  sparse?: boolean;
}

/**
 * Options of {@link RuntimePort.openFile}.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * await port.makeDirectory("/s");
 * await (await port.createFile("/s/data", 0x1000)).close();
 * const file = await port.openFile("/s/data", { readOnly: true });
 * console.log(file.readOnly, file.sizeBytes); // true 4096
 * await file.close();
 * ```
 */
export interface OpenFileOptions {
  /**
   * Open without write access.
   *
   * @default {false}
   */
  readOnly?: boolean;
}

/**
 * The port every adapter implements: the file-system, mapping and locking
 * calls the store makes, and nothing else.
 *
 * @example
 * ```ts
 * import { createPort, type RuntimePort } from "./mod.ts";
 *
 * async function writeMarker(port: RuntimePort, directory: string): Promise<void> {
 *   await port.makeDirectory(directory);
 *   await port.writeFileAtomic(`${directory}/marker`, new TextEncoder().encode("ok"));
 * }
 * await writeMarker(await createPort({ adapter: "memory" }), "/store");
 * ```
 */
export interface RuntimePort {
  /** The runtime the process runs on. */
  readonly runtime: RuntimeName;
  /** The adapter serving this port. */
  readonly adapter: AdapterName;
  /** Whether {@link FileHandle.map} is available. */
  readonly canMap: boolean;
  /** The memory page size (mapping offsets are multiples of it). */
  readonly pageSizeBytes: number;
  /**
   * Whether two flushes in flight at once, each carrying half of the bytes,
   * are expected to make more bytes durable per ms on this adapter than one
   * flush at a time carrying all of them, for loads of a few hundred KiB.
   * A starting point for a caller that goes on measuring: the SYNC_FLUSH
   * group commit starts its split threshold from it (`SplitTuner`).
   *
   * @default {true}
   */
  readonly overlapFlushes?: boolean;
  /**
   * Whether a run of bytes appended to a mapped file (KiBs: a batch's
   * consume-queue units) goes in faster as one positional write
   * ({@link FileHandle.writeSync}, the kernel copying into the page cache)
   * than as stores through the mapping. On this VM the writer's first
   * store to each 4 KiB page of a `MADV_RANDOM` mapping costs 8–22 µs even
   * after `MADV_POPULATE_WRITE`, which a write of the same pages does not
   * pay: consume-queue units of 1000-record runs, staged and written, took
   * 7–29 ns each against 48–84 through the mapping (Deno, measured).
   *
   * @default {false}
   */
  readonly positionalRunWrites?: boolean;
  /**
   * Creates a new file of exactly `sizeBytes` (fails with `ALREADY_EXISTS`
   * if it exists), allocated up front with `posix_fallocate` unless
   * `sparse` is set, so a full disk is a `NO_SPACE` error here and never a
   * SIGBUS later. A failed creation removes the partial file.
   */
  createFile(
    path: string,
    sizeBytes: number,
    options?: CreateFileOptions,
  ): Promise<FileHandle>;
  /** Opens an existing file (`NOT_FOUND` if missing). */
  openFile(path: string, options?: OpenFileOptions): Promise<FileHandle>;
  /** Creates a directory and its parents; no error if it exists. */
  makeDirectory(path: string): Promise<void>;
  /** Names in a directory, sorted. `NOT_FOUND` if missing. */
  list(path: string): Promise<string[]>;
  /** Status of a path, or undefined if it does not exist. */
  stat(path: string): Promise<FileStat | undefined>;
  /** Renames a file (atomic within a file system). */
  rename(from: string, to: string): Promise<void>;
  /** Removes a file; no error if it is already gone. */
  remove(path: string): Promise<void>;
  /** Makes a directory's entries durable (`fsync` of the directory). */
  syncDirectory(path: string): Promise<void>;
  /**
   * {@link RuntimePort.createFile} on the JavaScript thread (`open` +
   * `posix_fallocate`, 0.3–0.5 ms for a 6 MB file on ext4 here): for
   * consume-queue files, created while a producer that never yields the
   * event loop keeps the thread busy, where each awaited step of the
   * asynchronous call would wait for a turn that does not come. Makes nothing durable.
   * Absent where the adapter offers only the asynchronous call: callers
   * fall back to it.
   */
  createFileSync?(path: string, sizeBytes: number, options?: CreateFileOptions): FileHandle;
  /** {@link RuntimePort.openFile} on the JavaScript thread; see {@link RuntimePort.createFileSync}. */
  openFileSync?(path: string, options?: OpenFileOptions): FileHandle;
  /** {@link RuntimePort.stat} on the JavaScript thread; see {@link RuntimePort.createFileSync}. */
  statSync?(path: string): FileStat | undefined;
  /**
   * {@link RuntimePort.rename} on the JavaScript thread; see
   * {@link RuntimePort.createFileSync}. Not durable until the directory
   * is synced.
   */
  renameSync?(from: string, to: string): void;
  /** {@link RuntimePort.remove} on the JavaScript thread; see {@link RuntimePort.createFileSync}. */
  removeSync?(path: string): void;
  /**
   * {@link RuntimePort.makeDirectory} on the JavaScript thread; see
   * {@link RuntimePort.createFileSync}: a new consume queue's directory,
   * made while a producer that never yields keeps the thread busy.
   */
  makeDirectorySync?(path: string): void;
  /** {@link RuntimePort.list} on the JavaScript thread; see {@link RuntimePort.makeDirectorySync}. */
  listSync?(path: string): string[];
  /** Reads a whole (small) file, or undefined if it does not exist. */
  readFile(path: string): Promise<Uint8Array | undefined>;
  /**
   * Replaces a (small) file atomically and durably: write a temporary
   * file, fdatasync, rename, sync the directory.
   */
  writeFileAtomic(path: string, bytes: Uint8Array): Promise<void>;
  /** Space of the file system holding `path`. */
  diskSpace(path: string): Promise<DiskSpace>;
  /**
   * An identifier of the running boot of the machine (Linux:
   * `/proc/sys/kernel/random/boot_id`), the same for every process until
   * the next reboot; undefined where the system offers none. A store left
   * open by a process of this boot lost nothing its process wrote: the
   * page cache outlives the process, and only a power loss or a kernel
   * crash (a new boot) can lose a written page and keep a later one.
   */
  bootId(): Promise<string | undefined>;
  /**
   * Takes the single-writer lock of a store directory: an OFD lock
   * (`F_OFD_SETLK`) on byte 0 of `<dir>/lock`, or a pid file where OFD
   * locks are unavailable. Fails with `LOCKED`, naming the holder where one
   * was recorded, if another process, another open in this process, or a
   * RocketMQ broker holds it.
   */
  lockDirectory(path: string): Promise<DirectoryLock>;
  /**
   * Allocates a zero-filled write buffer of `sizeBytes` (a transient store
   * pool buffer), locked in memory where the runtime allows it: the FFI
   * adapters map private anonymous memory, lock it (`mlock2` with
   * `MLOCK_ONFAULT`) and fault it in off the JavaScript thread
   * (`MADV_POPULATE_WRITE`). Where the lock is refused (`RLIMIT_MEMLOCK`
   * without `CAP_IPC_LOCK`) the buffer is heap memory instead, and the
   * first refusal in the process is reported once through the port's
   * notice callback, naming the limit and the size; never an error. The
   * portable and memory adapters always answer heap memory, silently.
   *
   * @throws {RangeError} When `sizeBytes` is not a positive integer.
   */
  allocateLockedBuffer(sizeBytes: number): Promise<LockedBuffer>;
}

/**
 * A write buffer from {@link RuntimePort.allocateLockedBuffer}.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "./mod.ts";
 *
 * const port = new MemoryPort("node");
 * const buffer = await port.allocateLockedBuffer(0x1_0000);
 * buffer.bytes[0] = 1;
 * console.log(buffer.locked); // false: the memory adapter never locks
 * await buffer.release();
 * ```
 */
export interface LockedBuffer {
  /**
   * The buffer. After {@link LockedBuffer.release} a view of locked memory
   * is detached (length 0, on Deno and Bun) or reads zeros (on Node), never
   * dangling; release it only when nothing reads or writes it any more.
   */
  readonly bytes: Uint8Array;
  /** Whether its pages are locked in memory (false: heap memory). */
  readonly locked: boolean;
  /** Gives the memory back (`munmap`); idempotent. */
  release(): Promise<void>;
}
