/**
 * A {@link RuntimePort} built on `node:fs` (present in Deno, Bun and Node)
 * plus an optional {@link NativeLibc} binding for what `node:fs` lacks:
 * `mmap`, `msync`, `madvise`, `mlock`, `posix_fallocate`, OFD locks and
 * `cachestat`.
 *
 * Without a binding it is the `portable` adapter: no mapping, sparse file
 * creation, a pid-file lock, no page-cache probe.
 *
 * @module
 */

import fs from "node:fs";
import process from "node:process";
import { errnoError, MqStoreError, systemError } from "../errors.ts";
import { LINUX, type NativeLibc, type NativeMapping } from "./_native.ts";
import type {
  AdapterName,
  Advice,
  CreateFileOptions,
  DirectoryLock,
  DiskSpace,
  FileHandle,
  FileRange,
  FileStat,
  LockedBuffer,
  Mapping,
  OpenFileOptions,
  PageCacheState,
  PopulateOptions,
  RuntimeName,
  RuntimePort,
} from "./port.ts";
import { FILE_DATA_RANGES_MAX } from "./port.ts";

const LOCK_FILE = "lock";
const PID_FILE = "lock.pid";
/** What RocketMQ writes at byte 0 of its lock file; kept for compatibility. */
const LOCK_MAGIC = "lock";
/** Largest file mqstore creates or maps: offsets stay exact JS integers. */
const FILE_SIZE_MAX_BYTES = Number.MAX_SAFE_INTEGER;

const MADVICE: Readonly<Record<Advice, number>> = {
  normal: LINUX.MADV_NORMAL,
  random: LINUX.MADV_RANDOM,
  sequential: LINUX.MADV_SEQUENTIAL,
  willneed: LINUX.MADV_WILLNEED,
  dontneed: LINUX.MADV_DONTNEED,
  hugepage: LINUX.MADV_HUGEPAGE,
  nohugepage: LINUX.MADV_NOHUGEPAGE,
};

/** No file-cache advice stands for `"hugepage"` or `"nohugepage"`: they are for mappings only. */
const FADVICE: Readonly<Record<Exclude<Advice, "hugepage" | "nohugepage">, number>> = {
  normal: LINUX.POSIX_FADV_NORMAL,
  random: LINUX.POSIX_FADV_RANDOM,
  sequential: LINUX.POSIX_FADV_SEQUENTIAL,
  willneed: LINUX.POSIX_FADV_WILLNEED,
  dontneed: LINUX.POSIX_FADV_DONTNEED,
};

function call<T>(
  operation: string,
  path: string,
  run: (done: (error: NodeJS.ErrnoException | null, value?: T) => void) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    run((error, value) => {
      if (error) reject(systemError(error, operation, path));
      else resolve(value as T);
    });
  });
}

function checkRange(
  what: string,
  position: number,
  length: number,
  limit: number,
): void {
  if (
    !Number.isSafeInteger(position) || !Number.isSafeInteger(length) ||
    position < 0 || length < 0 || position + length > limit
  ) {
    throw new RangeError(
      `Cannot ${what}: range [${position}, ${position + length}) is outside [0, ${limit})`,
    );
  }
}

/** A {@link Mapping} over a {@link NativeMapping}. */
class NativeBackedMapping implements Mapping {
  readonly fileOffset: number;
  readonly length: number;
  #native: NativeLibc;
  #mapping: NativeMapping;
  #path: string;
  #retired = false;

  constructor(
    native: NativeLibc,
    mapping: NativeMapping,
    path: string,
    fileOffset: number,
  ) {
    this.#native = native;
    this.#mapping = mapping;
    this.#path = path;
    this.fileOffset = fileOffset;
    this.length = mapping.length;
  }

  get bytes(): Uint8Array {
    return this.#mapping.bytes;
  }

  async sync(position: number, length: number): Promise<void> {
    checkRange("sync a mapping", position, length, this.length);
    if (length === 0) return;
    this.#checkLive("sync");
    const errno = await this.#native.msync(this.#mapping, position, length);
    if (errno !== 0) throw errnoError(errno, "msync", this.#path);
  }

  advise(position: number, length: number, advice: Advice): void {
    checkRange("advise a mapping", position, length, this.length);
    if (length === 0 || this.#retired) return;
    this.#native.madvise(this.#mapping, position, length, MADVICE[advice]);
  }

  async populate(position: number, length: number, options?: PopulateOptions): Promise<void> {
    checkRange("populate a mapping", position, length, this.length);
    if (length === 0) return;
    this.#checkLive("populate");
    // Pre-faulting is an optimisation: a kernel without
    // MADV_POPULATE_WRITE (before 5.14) answers EINVAL and the writer
    // simply takes the first-touch faults itself.
    const errno = await this.#native.madviseAsync(
      this.#mapping,
      position,
      length,
      LINUX.MADV_POPULATE_WRITE,
      options,
    );
    if (errno !== 0 && errno !== 22) {
      throw errnoError(errno, "pre-fault (MADV_POPULATE_WRITE)", this.#path);
    }
  }

  lock(): boolean {
    if (this.#retired) return false;
    return this.#native.mlock(this.#mapping) === 0;
  }

  unlock(): void {
    if (!this.#retired) this.#native.munlock(this.#mapping);
  }

  unmap(): void {
    if (this.#retired) return;
    this.#retired = true;
    this.#native.retire(this.#mapping);
  }

  #checkLive(operation: string): void {
    if (this.#retired) {
      throw new MqStoreError(
        "CLOSED",
        `Cannot ${operation} ${this.#path}: the mapping was unmapped`,
      );
    }
  }
}

/** A {@link FileHandle} on a `node:fs` descriptor. */
class FsFileHandle implements FileHandle {
  readonly path: string;
  readonly readOnly: boolean;
  sizeBytes: number;
  #fd: number;
  #native: NativeLibc | undefined;
  #closed = false;

  constructor(
    fd: number,
    path: string,
    readOnly: boolean,
    sizeBytes: number,
    native: NativeLibc | undefined,
  ) {
    this.#fd = fd;
    this.path = path;
    this.readOnly = readOnly;
    this.sizeBytes = sizeBytes;
    this.#native = native;
  }

  map(fileOffset = 0, length = this.sizeBytes - fileOffset): Promise<Mapping> {
    try {
      return Promise.resolve(this.#map(fileOffset, length));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #map(fileOffset: number, length: number): Mapping {
    const native = this.#native;
    if (native === undefined) {
      throw new MqStoreError(
        "UNSUPPORTED",
        `Cannot map ${this.path}: the portable adapter has no mmap`,
      );
    }
    checkRange(`map ${this.path}`, fileOffset, length, this.sizeBytes);
    if (fileOffset % native.pageSizeBytes !== 0 || length === 0) {
      throw new RangeError(
        `Cannot map ${this.path}: offset ${fileOffset} must be a multiple of ${native.pageSizeBytes} and length ${length} positive`,
      );
    }
    this.#checkOpen("map");
    const mapping = native.mmap(
      { fd: this.#fd, path: this.path },
      fileOffset,
      length,
      !this.readOnly,
    );
    return new NativeBackedMapping(native, mapping, this.path, fileOffset);
  }

  async read(target: Uint8Array, position: number): Promise<number> {
    checkRange(`read ${this.path}`, position, target.length, FILE_SIZE_MAX_BYTES);
    this.#checkOpen("read");
    let done = 0;
    while (done < target.length) {
      const n = await call<number>("read", this.path, (cb) =>
        fs.read(
          this.#fd,
          target,
          done,
          target.length - done,
          position + done,
          cb,
        ));
      if (n === 0) break;
      done += n;
    }
    return done;
  }

  async write(source: Uint8Array, position: number): Promise<void> {
    this.#checkWrite(source, position);
    let done = 0;
    while (done < source.length) {
      done += await call<number>("write", this.path, (cb) =>
        fs.write(
          this.#fd,
          source,
          done,
          source.length - done,
          position + done,
          cb,
        ));
    }
    if (position + source.length > this.sizeBytes) {
      this.sizeBytes = position + source.length;
    }
  }

  /** Throws unless `source` may be written at `position` (open, writable, in range). */
  #checkWrite(source: Uint8Array, position: number): void {
    checkRange(`write ${this.path}`, position, source.length, FILE_SIZE_MAX_BYTES);
    this.#checkOpen("write");
    if (this.readOnly) {
      throw new MqStoreError(
        "PERMISSION_DENIED",
        `Cannot write ${this.path}: the file was opened read-only`,
      );
    }
  }

  writeSync(source: Uint8Array, position: number): void {
    this.#checkWrite(source, position);
    if (this.#native?.pwrite !== undefined) {
      this.#pwrite(this.#native, source, position);
      return;
    }
    let done = 0;
    try {
      while (done < source.length) {
        done += fs.writeSync(this.#fd, source, done, source.length - done, position + done);
      }
    } catch (error) {
      throw systemError(error, "write", this.path);
    }
    if (position + source.length > this.sizeBytes) {
      this.sizeBytes = position + source.length;
    }
  }

  /** {@link writeSync} through the binding's `pwrite`. */
  #pwrite(native: NativeLibc, source: Uint8Array, position: number): void {
    let done = 0;
    while (done < source.length) {
      const rest = done === 0 ? source : source.subarray(done);
      const written = native.pwrite!(this.#fd, rest, position + done);
      // A signal before any byte went: try again, as libuv does.
      if (written === -LINUX.EINTR) continue;
      if (written < 0) throw errnoError(-written, "write", this.path);
      if (written === 0) {
        throw new MqStoreError(
          "IO_ERROR",
          `Cannot write ${this.path}: pwrite of ${rest.length} bytes at ${
            position + done
          } wrote none`,
        );
      }
      done += written;
    }
    if (position + source.length > this.sizeBytes) {
      this.sizeBytes = position + source.length;
    }
  }

  datasync(): Promise<void> {
    this.#checkOpen("fdatasync");
    const native = this.#native;
    if (native?.fdatasyncAsync !== undefined) return this.#datasyncNative(native);
    return call<void>(
      "fdatasync",
      this.path,
      (cb) => fs.fdatasync(this.#fd, cb),
    );
  }

  /** {@link datasync} through the binding's `fdatasyncAsync`. */
  #datasyncNative(native: NativeLibc): Promise<void> {
    return native.fdatasyncAsync!(this.#fd).then((errno) => {
      if (errno !== 0) throw errnoError(errno, "fdatasync", this.path);
    });
  }

  datasyncSync(): void {
    this.#checkOpen("fdatasync");
    const native = this.#native;
    if (native?.fdatasync !== undefined) {
      let errno = native.fdatasync(this.#fd);
      while (errno === LINUX.EINTR) errno = native.fdatasync(this.#fd);
      if (errno !== 0) throw errnoError(errno, "fdatasync", this.path);
      return;
    }
    try {
      fs.fdatasyncSync(this.#fd);
    } catch (error) {
      throw systemError(error, "fdatasync", this.path);
    }
  }

  pageCacheState(position: number, length: number): PageCacheState | undefined {
    if (this.#native === undefined || this.#closed) return undefined;
    // cachestat reads a length of 0 as "to the end of the file".
    if (length === 0) return { cachedPages: 0, dirtyPages: 0, writebackPages: 0 };
    return this.#native.cachestat(this.#fd, position, length);
  }

  adviseCache(position: number, length: number, advice: Advice): void {
    if (
      this.#native === undefined || this.#closed || advice === "hugepage" ||
      advice === "nohugepage"
    ) {
      return;
    }
    this.#native.fadvise(this.#fd, position, length, FADVICE[advice]);
  }

  dataRanges(position: number, length: number): FileRange[] {
    checkRange(`list the data of ${this.path}`, position, length, FILE_SIZE_MAX_BYTES);
    if (length === 0) return [];
    const whole = [{ position, length }];
    const native = this.#native;
    if (native === undefined || this.#closed) return whole;
    // lseek moves the descriptor's offset, which nothing else uses: every
    // read and write is positional.
    const end = position + length;
    const ranges: FileRange[] = [];
    // Bounded by the ranges listed: each round lists one or ends.
    for (let at = position; at < end;) {
      const data = native.lseek(this.#fd, at, LINUX.SEEK_DATA);
      if (data === -LINUX.ENXIO) break;
      // EINVAL: a file system without SEEK_DATA; nothing can be skipped.
      if (data < 0) return whole;
      if (data >= end) break;
      const hole = native.lseek(this.#fd, data, LINUX.SEEK_HOLE);
      if (hole < 0) return whole;
      const stop = ranges.length === FILE_DATA_RANGES_MAX - 1 ? end : Math.min(hole, end);
      ranges.push({ position: data, length: stop - data });
      at = stop;
    }
    return ranges;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await call<void>("close", this.path, (cb) => fs.close(this.#fd, cb));
  }

  #checkOpen(operation: string): void {
    if (this.#closed) {
      throw new MqStoreError(
        "CLOSED",
        `Cannot ${operation} ${this.path}: the file is closed`,
      );
    }
  }
}

/** Paths locked by this process (a pid file cannot tell two opens apart). */
const PORTABLE_LOCKS = new Set<string>();

function parseHolder(text: string): string | undefined {
  const match = /pid (\d+)(?: ([a-z-]+))?/.exec(text);
  if (!match) return undefined;
  return match[2] ? `pid ${match[1]} (${match[2]})` : `pid ${match[1]}`;
}

/** The holder recorded in a lock or pid file, if that process is alive. */
function liveHolder(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  const pid = Number(/pid (\d+)/.exec(text)?.[1] ?? NaN);
  return Number.isInteger(pid) && isAlive(pid) ? parseHolder(text) : undefined;
}

function readIfExists(path: string): string | undefined {
  try {
    return fs.readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/**
 * Whether a process with this pid exists (signal 0 checks without
 * sending; EPERM: it exists, run by another user).
 *
 * @example Usage
 * ```ts ignore
 * isAlive(1234);
 * ```
 *
 * @param pid The process id.
 * @returns Whether it runs.
 */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether this process already reported a write buffer it could not lock. */
let unlockedBufferNoticed = false;

/** `EINVAL`: what a kernel before 5.14 answers for `MADV_POPULATE_WRITE`. */
const EINVAL = 0x16;

/** A heap buffer: what {@link FsPort.allocateLockedBuffer} falls back to. */
function heapBuffer(sizeBytes: number): LockedBuffer {
  return { bytes: new Uint8Array(sizeBytes), locked: false, release: () => Promise.resolve() };
}

/**
 * This process's `RLIMIT_MEMLOCK` soft limit as text ("8388608 bytes",
 * "unlimited"), from `/proc/self/limits`.
 */
function memlockLimitText(): string {
  const limits = readIfExists("/proc/self/limits");
  const match = limits === undefined ? null : /^Max locked memory\s+(\S+)/m.exec(limits);
  if (match === null) return "unknown";
  return match[1] === "unlimited" ? "unlimited" : `${match[1]} bytes`;
}

/** Refuses a size {@link FsPort.createFile} cannot give a file. */
function checkCreateSize(path: string, sizeBytes: number): void {
  if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0) {
    throw new RangeError(`Cannot create ${path}: size ${sizeBytes} must be a positive integer`);
  }
}

/**
 * Gives the file just created its blocks with `posix_fallocate` (a
 * synchronous call); false where the caller must size it instead
 * (`ftruncate`): a sparse file, or no native library.
 */
function allocate(
  native: NativeLibc | undefined,
  fd: number,
  sizeBytes: number,
  options: CreateFileOptions,
  path: string,
): boolean {
  if (native === undefined || options.sparse === true) return false;
  const errno = native.fallocate(fd, 0, sizeBytes);
  if (errno !== 0) throw errnoError(errno, "allocate", path);
  return true;
}

/** Closes and removes a file whose creation failed, and throws why. */
function discardCreated(fd: number, path: string, error: unknown): never {
  fs.closeSync(fd);
  fs.rmSync(path, { force: true });
  throw systemError(error, "create", path);
}

/** The handle of the file just opened, refused unless it is a regular file. */
function regularFileHandle(
  fd: number,
  path: string,
  readOnly: boolean,
  stat: fs.Stats,
  native: NativeLibc | undefined,
): FsFileHandle {
  if (!stat.isFile()) {
    throw new MqStoreError("INVALID_FILE", `Cannot open ${path}: not a regular file`);
  }
  return new FsFileHandle(fd, path, readOnly, stat.size, native);
}

/** The `node:fs` based port; see the module doc. */
export class FsPort implements RuntimePort {
  readonly runtime: RuntimeName;
  readonly adapter: AdapterName;
  readonly canMap: boolean;
  readonly pageSizeBytes: number;
  /**
   * The binding's; for the portable adapter as measured with `node:fs`'s
   * `fdatasync` on each runtime (the bench's raw group commit: one in
   * flight won on Deno, whose `node:fs` runs the calls on one file one at
   * a time, two on Bun).
   */
  readonly overlapFlushes: boolean;
  /** Where the port maps (see {@link RuntimePort.positionalRunWrites}). */
  readonly positionalRunWrites: boolean;
  #native: NativeLibc | undefined;
  #onNotice: (message: string) => void;

  /**
   * @param runtime The host runtime.
   * @param native The libc binding, or undefined for the portable adapter.
   * @param onNotice Receives one-line notices (a write buffer that could
   *   not be locked in memory, once per process).
   * @default onNotice console.warn
   */
  constructor(
    runtime: RuntimeName,
    native: NativeLibc | undefined,
    onNotice: (message: string) => void = (message) => console.warn(message),
  ) {
    this.runtime = runtime;
    this.#native = native;
    this.#onNotice = onNotice;
    this.adapter = native?.adapter ?? "portable";
    this.canMap = native !== undefined;
    this.pageSizeBytes = native?.pageSizeBytes ?? 4096;
    this.overlapFlushes = native?.overlapFlushes ?? runtime !== "deno";
    this.positionalRunWrites = native !== undefined;
  }

  async createFile(
    path: string,
    sizeBytes: number,
    options: CreateFileOptions = {},
  ): Promise<FileHandle> {
    checkCreateSize(path, sizeBytes);
    const fd = await call<number>(
      "create",
      path,
      (cb) => fs.open(path, "wx+", 0o644, cb),
    );
    try {
      if (!allocate(this.#native, fd, sizeBytes, options, path)) {
        await call<void>("size", path, (cb) => fs.ftruncate(fd, sizeBytes, cb));
      }
    } catch (error) {
      discardCreated(fd, path, error);
    }
    return new FsFileHandle(fd, path, false, sizeBytes, this.#native);
  }

  async openFile(
    path: string,
    options: OpenFileOptions = {},
  ): Promise<FileHandle> {
    const readOnly = options.readOnly === true;
    const fd = await call<number>(
      "open",
      path,
      (cb) => fs.open(path, readOnly ? "r" : "r+", cb),
    );
    try {
      const stat = await call<fs.Stats>("stat", path, (cb) => fs.fstat(fd, cb));
      return regularFileHandle(fd, path, readOnly, stat, this.#native);
    } catch (error) {
      fs.closeSync(fd);
      throw systemError(error, "open", path);
    }
  }

  createFileSync(path: string, sizeBytes: number, options: CreateFileOptions = {}): FileHandle {
    checkCreateSize(path, sizeBytes);
    let fd: number;
    try {
      fd = fs.openSync(path, "wx+", 0o644);
    } catch (error) {
      throw systemError(error, "create", path);
    }
    try {
      if (!allocate(this.#native, fd, sizeBytes, options, path)) fs.ftruncateSync(fd, sizeBytes);
    } catch (error) {
      discardCreated(fd, path, error);
    }
    return new FsFileHandle(fd, path, false, sizeBytes, this.#native);
  }

  openFileSync(path: string, options: OpenFileOptions = {}): FileHandle {
    const readOnly = options.readOnly === true;
    let fd: number;
    try {
      fd = fs.openSync(path, readOnly ? "r" : "r+");
    } catch (error) {
      throw systemError(error, "open", path);
    }
    try {
      return regularFileHandle(fd, path, readOnly, fs.fstatSync(fd), this.#native);
    } catch (error) {
      fs.closeSync(fd);
      throw systemError(error, "open", path);
    }
  }

  statSync(path: string): FileStat | undefined {
    // existsSync first: the usual answer (a name about to be created) is
    // "missing", which statSync reports by building an error, at 35 µs
    // on Deno against 5 µs (measured).
    if (!fs.existsSync(path)) return undefined;
    let stat: fs.Stats | undefined;
    try {
      stat = fs.statSync(path, { throwIfNoEntry: false });
    } catch (error) {
      throw systemError(error, "stat", path);
    }
    if (stat === undefined) return undefined;
    return {
      sizeBytes: stat.size,
      modifiedMs: stat.mtimeMs,
      isFile: stat.isFile(),
      isDirectory: stat.isDirectory(),
    };
  }

  renameSync(from: string, to: string): void {
    try {
      fs.renameSync(from, to);
    } catch (error) {
      throw systemError(error, "rename", from);
    }
  }

  removeSync(path: string): void {
    // As statSync: a missing file, the usual case, answered cheaply.
    if (!fs.existsSync(path)) return;
    try {
      fs.rmSync(path, { force: true });
    } catch (error) {
      throw systemError(error, "remove", path);
    }
  }

  makeDirectorySync(path: string): void {
    try {
      fs.mkdirSync(path, { recursive: true });
    } catch (error) {
      throw systemError(error, "create directory", path);
    }
  }

  listSync(path: string): string[] {
    try {
      return fs.readdirSync(path).sort();
    } catch (error) {
      throw systemError(error, "list", path);
    }
  }

  async makeDirectory(path: string): Promise<void> {
    await call<string | undefined>(
      "create directory",
      path,
      (cb) => fs.mkdir(path, { recursive: true }, cb),
    );
  }

  async list(path: string): Promise<string[]> {
    const names = await call<string[]>(
      "list",
      path,
      (cb) => fs.readdir(path, cb),
    );
    return names.sort();
  }

  async stat(path: string): Promise<FileStat | undefined> {
    try {
      const stat = await call<fs.Stats>("stat", path, (cb) => fs.stat(path, cb));
      return {
        sizeBytes: stat.size,
        modifiedMs: stat.mtimeMs,
        isFile: stat.isFile(),
        isDirectory: stat.isDirectory(),
      };
    } catch (error) {
      if (error instanceof MqStoreError && error.code === "NOT_FOUND") {
        return undefined;
      }
      throw error;
    }
  }

  async rename(from: string, to: string): Promise<void> {
    await call<void>("rename", from, (cb) => fs.rename(from, to, cb));
  }

  async remove(path: string): Promise<void> {
    await call<void>("remove", path, (cb) => fs.rm(path, { force: true }, cb));
  }

  async syncDirectory(path: string): Promise<void> {
    const fd = await call<number>(
      "open directory",
      path,
      (cb) => fs.open(path, "r", cb),
    );
    try {
      await call<void>("sync directory", path, (cb) => fs.fsync(fd, cb));
    } finally {
      fs.closeSync(fd);
    }
  }

  async readFile(path: string): Promise<Uint8Array | undefined> {
    try {
      const bytes = await call<Uint8Array>(
        "read",
        path,
        (cb) => fs.readFile(path, cb),
      );
      return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    } catch (error) {
      if (error instanceof MqStoreError && error.code === "NOT_FOUND") {
        return undefined;
      }
      throw error;
    }
  }

  async writeFileAtomic(path: string, bytes: Uint8Array): Promise<void> {
    const temporary = `${path}.tmp`;
    await this.remove(temporary);
    const fd = await call<number>(
      "create",
      temporary,
      (cb) => fs.open(temporary, "wx", 0o644, cb),
    );
    try {
      let done = 0;
      while (done < bytes.length) {
        done += await call<number>(
          "write",
          temporary,
          (cb) => fs.write(fd, bytes, done, bytes.length - done, done, cb),
        );
      }
      await call<void>("fdatasync", temporary, (cb) => fs.fdatasync(fd, cb));
    } finally {
      fs.closeSync(fd);
    }
    await this.rename(temporary, path);
    await this.syncDirectory(parentOf(path));
  }

  bootId(): Promise<string | undefined> {
    return bootIdOfHost();
  }

  async diskSpace(path: string): Promise<DiskSpace> {
    const stats = await call<fs.StatsFs>(
      "measure disk space of",
      path,
      (cb) => fs.statfs(path, cb),
    );
    // Blocks reserved for the superuser are neither used nor this
    // process's to use: the total is used + available, as `df` counts it
    // and as RocketMQ 4.9 does (UtilAll.getDiskPartitionTotalSpace).
    // Counting them as used put a disk with 150 GB reserved of 252 GB at
    // 70 % when `df` said 24 %, past the 75 % ratio after a few GB more.
    return {
      totalBytes: (stats.blocks - stats.bfree + stats.bavail) * stats.bsize,
      availableBytes: stats.bavail * stats.bsize,
    };
  }

  async allocateLockedBuffer(sizeBytes: number): Promise<LockedBuffer> {
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0) {
      throw new RangeError(`Cannot allocate a write buffer of ${sizeBytes} bytes`);
    }
    const native = this.#native;
    if (native === undefined) return heapBuffer(sizeBytes);
    let mapping: NativeMapping;
    try {
      mapping = native.mmapAnonymous(sizeBytes);
    } catch (error) {
      this.#noticeUnlocked(sizeBytes, error instanceof Error ? error.message : String(error));
      return heapBuffer(sizeBytes);
    }
    const errno = native.mlockOnFault(mapping);
    if (errno !== 0) {
      native.retire(mapping);
      this.#noticeUnlocked(sizeBytes, errnoError(errno, "mlock", `${sizeBytes} bytes`).message);
      return heapBuffer(sizeBytes);
    }
    // Fault every page in, and with it lock it, off the JavaScript thread
    // (a GiB takes a few hundred milliseconds). Where that fails (EINVAL:
    // a kernel before 5.14) the first writes fault the pages in instead,
    // and they are locked then.
    const populated = await native.madviseAsync(
      mapping,
      0,
      sizeBytes,
      LINUX.MADV_POPULATE_WRITE,
    );
    if (populated !== 0 && populated !== EINVAL) {
      native.retire(mapping);
      this.#noticeUnlocked(
        sizeBytes,
        errnoError(populated, "fault in (MADV_POPULATE_WRITE)", `${sizeBytes} bytes`).message,
      );
      return heapBuffer(sizeBytes);
    }
    let released = false;
    return {
      bytes: mapping.bytes,
      locked: true,
      release: () => {
        if (!released) {
          released = true;
          native.retire(mapping);
        }
        return Promise.resolve();
      },
    };
  }

  /** Reports, once per process, a write buffer left unlocked. */
  #noticeUnlocked(sizeBytes: number, reason: string): void {
    if (unlockedBufferNoticed) return;
    unlockedBufferNoticed = true;
    this.#onNotice(
      `mqstore: a ${sizeBytes}-byte write buffer is not locked in memory (${reason}; RLIMIT_MEMLOCK is ${memlockLimitText()}); write buffers that cannot be locked use ordinary memory (raise ulimit -l or grant CAP_IPC_LOCK to lock them)`,
    );
  }

  lockDirectory(path: string): Promise<DirectoryLock> {
    return this.#native === undefined
      ? this.#lockWithPidFile(path)
      : this.#lockWithOfd(path, this.#native);
  }

  async #lockWithOfd(path: string, native: NativeLibc): Promise<DirectoryLock> {
    const lockPath = `${path}/${LOCK_FILE}`;
    const fd = await call<number>(
      "open lock file",
      lockPath,
      (cb) => fs.open(lockPath, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o644, cb),
    );
    const result = native.fcntlLock(fd, LINUX.F_OFD_SETLK, LINUX.F_WRLCK);
    if (result.errno !== 0) {
      try {
        const holder = native.fcntlLock(fd, LINUX.F_OFD_GETLK, LINUX.F_WRLCK);
        const recorded = parseHolder(fs.readFileSync(lockPath, "utf8"));
        // OFD holders report pid -1; a classic POSIX lock (a RocketMQ
        // broker's FileChannel.tryLock) reports the holder's pid.
        const who = holder.pid > 0
          ? `pid ${holder.pid} (a POSIX record lock, e.g. a RocketMQ broker)`
          : recorded ?? "another open file description";
        throw new MqStoreError(
          "LOCKED",
          `Cannot lock store directory ${path}: it is held by ${who}`,
        );
      } finally {
        fs.closeSync(fd);
      }
    }
    // A process on the portable adapter cannot see OFD locks: honour its
    // pid file, as it honours the record written below.
    const portableHolder = liveHolder(readIfExists(`${path}/${PID_FILE}`));
    if (portableHolder !== undefined) {
      native.fcntlLock(fd, LINUX.F_OFD_SETLK, LINUX.F_UNLCK);
      fs.closeSync(fd);
      throw new MqStoreError(
        "LOCKED",
        `Cannot lock store directory ${path}: it is held by ${portableHolder}`,
      );
    }
    const record = `${LOCK_MAGIC}\npid ${process.pid} ${native.adapter}\n`;
    fs.ftruncateSync(fd, 0);
    fs.writeSync(fd, record, 0);
    let released = false;
    return {
      path: lockPath,
      release: () => {
        if (released) return Promise.resolve();
        released = true;
        // Clear the holder record so a portable opener sees the lock free.
        fs.ftruncateSync(fd, 0);
        fs.writeSync(fd, LOCK_MAGIC, 0);
        native.fcntlLock(fd, LINUX.F_OFD_SETLK, LINUX.F_UNLCK);
        return call<void>("close lock file", lockPath, (cb) => fs.close(fd, cb));
      },
    };
  }

  #lockWithPidFile(path: string): Promise<DirectoryLock> {
    try {
      return Promise.resolve(this.#lockWithPidFileNow(path));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #lockWithPidFileNow(path: string): DirectoryLock {
    const pidPath = `${path}/${PID_FILE}`;
    let key: string;
    try {
      key = fs.realpathSync(path);
    } catch (error) {
      throw systemError(error, "lock store directory", path);
    }
    if (PORTABLE_LOCKS.has(key)) {
      throw new MqStoreError(
        "LOCKED",
        `Cannot lock store directory ${path}: it is held by pid ${process.pid} (this process)`,
      );
    }
    // Two attempts: the second after removing a pid file whose process died.
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        fs.writeFileSync(pidPath, `pid ${process.pid} portable\n`, {
          flag: "wx",
        });
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") {
          throw systemError(error, "create lock file", pidPath);
        }
        const text = fs.readFileSync(pidPath, "utf8");
        const pid = Number(/pid (\d+)/.exec(text)?.[1] ?? NaN);
        if (attempt === 0 && Number.isInteger(pid) && !isAlive(pid)) {
          fs.rmSync(pidPath, { force: true });
          continue;
        }
        throw new MqStoreError(
          "LOCKED",
          `Cannot lock store directory ${path}: it is held by ${
            parseHolder(text) ?? "an unknown process"
          }`,
        );
      }
    }
    const lockPath = `${path}/${LOCK_FILE}`;
    // A live holder recorded by an FFI adapter (which holds an OFD lock this
    // adapter cannot test) keeps the directory.
    const nativeHolder = liveHolder(readIfExists(lockPath));
    if (nativeHolder !== undefined) {
      fs.rmSync(pidPath, { force: true });
      throw new MqStoreError(
        "LOCKED",
        `Cannot lock store directory ${path}: it is held by ${nativeHolder}`,
      );
    }
    if (!fs.existsSync(lockPath)) fs.writeFileSync(lockPath, LOCK_MAGIC);
    PORTABLE_LOCKS.add(key);
    let released = false;
    return {
      path: pidPath,
      release: async () => {
        if (released) return;
        released = true;
        PORTABLE_LOCKS.delete(key);
        await this.remove(pidPath);
      },
    };
  }
}

/** Where Linux tells the running boot's identifier (a UUID, one line). */
const BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id";

/** The host's boot identifier, read once per process (it cannot change while the process runs). */
let hostBootId: Promise<string | undefined> | undefined;

function bootIdOfHost(): Promise<string | undefined> {
  hostBootId ??= new Promise((resolve) => {
    fs.readFile(BOOT_ID_PATH, "utf8", (error, text) => {
      const id = error === null ? text.trim() : "";
      // Anything but a short single token is not the identifier asked for.
      resolve(id.length > 0 && id.length <= 64 && !/\s/.test(id) ? id : undefined);
    });
  });
  return hostBootId;
}

/** The directory part of a path. */
export function parentOf(path: string): string {
  const slash = path.lastIndexOf("/");
  if (slash < 0) return ".";
  return slash === 0 ? "/" : path.slice(0, slash);
}
