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

/** The JavaScript runtime the process runs on. */
export type RuntimeName = "deno" | "bun" | "node";

/** The adapter serving a {@link RuntimePort}. */
export type AdapterName =
  | "deno-ffi"
  | "bun-ffi"
  | "node-koffi"
  | "portable"
  | "memory";

/**
 * Access-pattern advice for a mapped range (`madvise`) or a file range
 * (`posix_fadvise`).
 */
export type Advice = "normal" | "random" | "sequential" | "willneed" | "dontneed";

/** Page-cache state of a file range, from `cachestat(2)` (Linux ≥ 6.5). */
export interface PageCacheState {
  /** Pages of the range present in the page cache. */
  cachedPages: number;
  /** Cached pages modified and not yet written back. */
  dirtyPages: number;
  /** Pages being written back right now. */
  writebackPages: number;
}

/**
 * A shared, writable (or read-only) memory mapping of a file range.
 *
 * After {@link Mapping.unmap} (or when the file it belongs to is retired) the
 * `bytes` view the core may still hold is either detached (length 0, on Deno
 * and Bun) or reads zeros (on Node): touching it can never crash the process.
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
   */
  populate(position: number, length: number): Promise<void>;
  /** Pins the mapping in memory (`mlock`); returns false when refused. */
  lock(): boolean;
  /** Undoes {@link Mapping.lock}. */
  unlock(): void;
  /** Releases the mapping; idempotent. Views become detached or read zeros. */
  unmap(): void;
}

/** An open file. */
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
  /** `fdatasync`, off the JavaScript thread. */
  datasync(): Promise<void>;
  /** Page-cache state of a range (`cachestat`), or undefined where unavailable. */
  pageCacheState(position: number, length: number): PageCacheState | undefined;
  /** Advice for the page cache about a file range (`posix_fadvise`). */
  adviseCache(position: number, length: number, advice: Advice): void;
  /** Closes the descriptor; idempotent. Existing mappings stay valid. */
  close(): Promise<void>;
}

/** Free and total space of the file system holding a path. */
export interface DiskSpace {
  /** Size of the file system. */
  totalBytes: number;
  /** Bytes available to this (unprivileged) process. */
  availableBytes: number;
}

/** What {@link RuntimePort.stat} reports. */
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

/** A held store-directory lock. */
export interface DirectoryLock {
  /** The lock file. */
  readonly path: string;
  /** Releases the lock; idempotent. */
  release(): Promise<void>;
}

/** Options of {@link RuntimePort.createFile}. */
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

/** Options of {@link RuntimePort.openFile}. */
export interface OpenFileOptions {
  /**
   * Open without write access.
   *
   * @default {false}
   */
  readOnly?: boolean;
}

/** The port every adapter implements. */
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
   * Takes the single-writer lock of a store directory: an OFD lock
   * (`F_OFD_SETLK`) on byte 0 of `<dir>/lock`, or a pid file where OFD
   * locks are unavailable. Fails with `LOCKED`, naming the holder where one
   * was recorded, if another process, another open in this process, or a
   * RocketMQ broker holds it.
   */
  lockDirectory(path: string): Promise<DirectoryLock>;
}
