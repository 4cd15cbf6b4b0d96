/**
 * The `deno-ffi` binding: the {@link NativeLibc} calls bound with
 * `Deno.dlopen("libc.so.6")`, from which `_fs_port.ts` builds the Deno
 * runtime port.
 *
 * Pointers are Deno pointer objects; a mapping's view is the external
 * `ArrayBuffer` Deno builds over the mapped address
 * (`Deno.UnsafePointerView.getArrayBuffer`), so reads and writes through it
 * touch the page cache directly. Retiring a mapping detaches that buffer
 * before `munmap`, so no view the core still holds can reach the old
 * address: it has length 0 and reads `undefined`.
 *
 * `msync` and `madvise(MADV_POPULATE_WRITE)` are bound `nonblocking`: Deno
 * runs them on a thread of its blocking pool and returns a promise, so a
 * flush or a pre-fault never stalls the JavaScript thread. The address range
 * stays mapped until every such call in flight on it has returned.
 *
 * Needs the unscoped `--allow-ffi` (or `-A`). Without it {@link loadLibc}
 * throws and `createPort()` falls back to the portable adapter.
 *
 * @module
 */

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

/** `MAP_FAILED`, `(void *) -1`, as the unsigned address Deno reports. */
const MAP_FAILED_ADDRESS = 0xffff_ffff_ffff_ffffn;
const EPERM = 0x01;
const EINTR = 0x04;
/** Reported for every failed nonblocking call (see `#offThread`). */
const EIO = 0x05;
/** What `msync`/`madvise` answer for an address range that is not mapped. */
const ENOMEM = 0x0c;
const EINVAL = 0x16;
/** `cachestat` on a file system that has no page cache (hugetlbfs). */
const EOPNOTSUPP = 0x5f;
/** `posix_fallocate` is retried this often when a signal interrupts it. */
const FALLOCATE_ATTEMPTS_MAX = 8;

/**
 * The libc symbols, typed for 64-bit Linux: `size_t` is `usize`, `off_t`
 * is `i64`, so offsets and lengths of 2^32 and beyond pass unchanged.
 * `fcntl` and `syscall` are variadic in C; binding their arguments as fixed
 * integer and pointer parameters is correct on x86_64 and arm64 Linux,
 * where variadic integer arguments travel in the same registers (glibc's
 * `syscall` ignores `%al`, and `fcntl` only uses it to decide whether to
 * spill vector registers).
 */
const SYMBOLS = {
  mmap: {
    parameters: ["pointer", "usize", "i32", "i32", "i32", "i64"],
    result: "pointer",
  },
  munmap: { parameters: ["pointer", "usize"], result: "i32" },
  msync: { parameters: ["pointer", "usize", "i32"], result: "i32", nonblocking: true },
  madvise: { parameters: ["pointer", "usize", "i32"], result: "i32" },
  madvise_nonblocking: {
    name: "madvise",
    parameters: ["pointer", "usize", "i32"],
    result: "i32",
    nonblocking: true,
  },
  // A range compared with itself: madviseAsync's read.
  memcmp_nonblocking: {
    name: "memcmp",
    parameters: ["pointer", "pointer", "usize"],
    result: "i32",
    nonblocking: true,
  },
  mlock: { parameters: ["pointer", "usize"], result: "i32" },
  // glibc 2.27 and later; without it, mlockOnFault falls back to mlock.
  mlock2: { parameters: ["pointer", "usize", "u32"], result: "i32", optional: true },
  munlock: { parameters: ["pointer", "usize"], result: "i32" },
  fdatasync_nonblocking: {
    name: "fdatasync",
    parameters: ["i32"],
    result: "i32",
    nonblocking: true,
  },
  posix_fallocate: { parameters: ["i32", "i64", "i64"], result: "i32" },
  posix_fadvise: { parameters: ["i32", "i64", "i64", "i32"], result: "i32" },
  lseek: { parameters: ["i32", "i64", "i32"], result: "i64" },
  fcntl: { parameters: ["i32", "i32", "buffer"], result: "i32" },
  syscall: { parameters: ["i64", "i64", "buffer", "buffer", "i64"], result: "i64" },
  sysconf: { parameters: ["i32"], result: "i64" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

type Libc = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

/**
 * The binding-private state of one mapping (its {@link NativeMapping}
 * `handle`).
 */
class MappingState {
  /** The mapped address. */
  readonly pointer: Deno.PointerObject;
  /** The external buffer over it; detached on retire. */
  readonly buffer: ArrayBuffer;
  /** Length of the mapping in bytes. */
  readonly length: number;
  /** Nonblocking calls in flight on the address; `munmap` waits for them. */
  pending = 0;
  /** Retired: the buffer is detached and no new call may use the address. */
  retired = false;
  /** The address range has been released. */
  unmapped = false;

  constructor(pointer: Deno.PointerObject, buffer: ArrayBuffer, length: number) {
    this.pointer = pointer;
    this.buffer = buffer;
    this.length = length;
  }
}

/** The {@link NativeLibc} of Deno. */
class DenoLibc implements NativeLibc {
  readonly runtime = "deno";
  readonly adapter = "deno-ffi";
  readonly pageSizeBytes: number;
  /**
   * Two flushes in flight, as on Bun and Node, now that
   * {@link fdatasyncAsync} runs them side by side. Through `node:fs`
   * Deno runs the calls on one file one at a time, so the second
   * `fdatasync` began only once the first had returned, and one flush at
   * a time won (256 SYNC producers of 1 KiB: 1.31–1.34× the acks/s of two
   * "in flight", 46 of 46 alternated rounds, session 13). With them
   * overlapping, the bench's `sync 1 KiB 256p` row, two against one,
   * alternated pairs in separate processes: 10 of 10 won in two sittings
   * (medians 150 k against 133 k, 176 k against 153 k; p99 alike, 3.7–5.5
   * ms against 3.1–5.6 ms); against one through `node:fs` 3 of 8 in a
   * third (0.97×). At 64 producers one flush carries the load either way
   * (session 14).
   */
  readonly overlapFlushes = true;
  /** The bound symbols; the library stays open for the process lifetime. */
  #libc: Libc;
  /** Whether the kernel knows `MADV_POPULATE_WRITE` (Linux ≥ 5.14). */
  #canPopulateWrite: boolean;

  constructor(libc: Libc) {
    this.#libc = libc;
    this.pageSizeBytes = Number(libc.sysconf(LINUX._SC_PAGESIZE));
    if (!Number.isInteger(this.pageSizeBytes) || this.pageSizeBytes <= 0) {
      throw new MqStoreError(
        "UNSUPPORTED",
        `Cannot use ${LIBC_PATH}: sysconf(_SC_PAGESIZE) answered ${this.pageSizeBytes}`,
      );
    }
    // The kernel validates the advice before it looks at the (empty) range,
    // so this probe answers EINVAL exactly when the advice is unknown. The
    // nonblocking call cannot report EINVAL itself (see #offThread), and the
    // port treats EINVAL from a pre-fault as "not supported, skip it".
    this.#canPopulateWrite = libc.madvise(null, 0n, LINUX.MADV_POPULATE_WRITE) === 0 ||
      this.#errno() !== EINVAL;
  }

  /**
   * `fdatasync` on a thread of Deno's blocking pool. Not `fs.fdatasync`:
   * Deno runs the calls on one file one after another (the second starts
   * once the first has returned), so two flushes of a group commit could
   * not overlap. A failure is reported as EIO: the pool thread's errno is
   * out of reach (see `#offThread`); for `fdatasync` it is EIO, ENOSPC or
   * EDQUOT after a failed writeback, which the port reports as an I/O
   * error either way.
   */
  fdatasyncAsync(fd: number): Promise<number> {
    return this.#libc.fdatasync_nonblocking(fd).then((result) => result === 0 ? 0 : EIO);
  }

  fallocate(fd: number, offset: number, length: number): number {
    // posix_fallocate returns the error number instead of setting errno.
    let errno = EINTR;
    for (let attempt = 0; attempt < FALLOCATE_ATTEMPTS_MAX && errno === EINTR; attempt++) {
      errno = this.#libc.posix_fallocate(fd, BigInt(offset), BigInt(length));
    }
    return errno;
  }

  mmap(file: NativeFile, fileOffset: number, length: number, writable: boolean): NativeMapping {
    if (fileOffset % this.pageSizeBytes !== 0 || !(length > 0)) {
      throw new RangeError(
        `Cannot map ${file.path}: offset ${fileOffset} must be a multiple of ${this.pageSizeBytes} and length ${length} positive`,
      );
    }
    const protection = writable ? LINUX.PROT_READ | LINUX.PROT_WRITE : LINUX.PROT_READ;
    const pointer = this.#libc.mmap(
      null,
      BigInt(length),
      protection,
      LINUX.MAP_SHARED,
      file.fd,
      BigInt(fileOffset),
    );
    if (pointer === null || Deno.UnsafePointer.value(pointer) === MAP_FAILED_ADDRESS) {
      throw errnoError(
        this.#errno(),
        `map ${length} bytes at offset ${fileOffset} of`,
        file.path,
      );
    }
    const buffer = Deno.UnsafePointerView.getArrayBuffer(pointer, length);
    const state = new MappingState(pointer, buffer, length);
    return { bytes: new Uint8Array(buffer), length, handle: state };
  }

  retire(mapping: NativeMapping): void {
    const state = stateOf(mapping);
    if (state.retired) return;
    state.retired = true;
    // Detaching is what makes the unmap safe: every Uint8Array, DataView or
    // subarray over this buffer now has length 0, so no JavaScript access
    // can reach the address after munmap. transfer(0) detaches without
    // copying; the external backing store's deleter is a no-op.
    state.buffer.transfer(0);
    if (!state.buffer.detached || mapping.bytes.length !== 0) {
      throw new Error(`Invariant: the view of a retired mapping is still attached`);
    }
    if (state.pending === 0) this.#unmap(state);
  }

  msync(mapping: NativeMapping, position: number, length: number): Promise<number> {
    const state = stateOf(mapping);
    if (state.retired) return Promise.resolve(ENOMEM);
    const [pointer, alignedLength] = this.#pageRange(state, position, length);
    return this.#offThread(state, () => this.#libc.msync(pointer, alignedLength, LINUX.MS_SYNC));
  }

  madvise(mapping: NativeMapping, position: number, length: number, advice: number): number {
    const state = stateOf(mapping);
    if (state.retired) return ENOMEM;
    const [pointer, alignedLength] = this.#pageRange(state, position, length);
    return this.#libc.madvise(pointer, alignedLength, advice) === 0 ? 0 : this.#errno();
  }

  madviseAsync(
    mapping: NativeMapping,
    position: number,
    length: number,
    advice: number,
    options?: PopulateOptions,
  ): Promise<number> {
    const state = stateOf(mapping);
    if (state.retired) return Promise.resolve(ENOMEM);
    if (advice === LINUX.MADV_POPULATE_WRITE && !this.#canPopulateWrite) {
      return Promise.resolve(EINVAL);
    }
    const [pointer, alignedLength] = this.#pageRange(state, position, length);
    if (options?.read !== true) {
      return this.#offThread(
        state,
        () => this.#libc.madvise_nonblocking(pointer, alignedLength, advice),
      );
    }
    // Then the read: a second call, started when the first one's answer
    // arrives (the mapping stays while either is in flight).
    return this.#offThread(state, async () => {
      const errno = await this.#libc.madvise_nonblocking(pointer, alignedLength, advice);
      if (errno !== 0 || state.retired) return errno;
      await this.#libc.memcmp_nonblocking(pointer, pointer, alignedLength);
      return 0;
    });
  }

  mlock(mapping: NativeMapping): number {
    const state = stateOf(mapping);
    if (state.retired) return ENOMEM;
    return this.#libc.mlock(state.pointer, BigInt(state.length)) === 0 ? 0 : this.#errno();
  }

  munlock(mapping: NativeMapping): number {
    const state = stateOf(mapping);
    if (state.retired) return ENOMEM;
    return this.#libc.munlock(state.pointer, BigInt(state.length)) === 0 ? 0 : this.#errno();
  }

  mmapAnonymous(length: number): NativeMapping {
    if (!Number.isSafeInteger(length) || length <= 0) {
      throw new RangeError(`Cannot map ${length} bytes of anonymous memory: not a positive size`);
    }
    const pointer = this.#libc.mmap(
      null,
      BigInt(length),
      LINUX.PROT_READ | LINUX.PROT_WRITE,
      LINUX.MAP_PRIVATE | LINUX.MAP_ANONYMOUS,
      -1,
      0n,
    );
    if (pointer === null || Deno.UnsafePointer.value(pointer) === MAP_FAILED_ADDRESS) {
      throw errnoError(this.#errno(), `map ${length} bytes of`, "anonymous memory");
    }
    const buffer = Deno.UnsafePointerView.getArrayBuffer(pointer, length);
    return {
      bytes: new Uint8Array(buffer),
      length,
      handle: new MappingState(pointer, buffer, length),
    };
  }

  mlockOnFault(mapping: NativeMapping): number {
    const state = stateOf(mapping);
    if (state.retired) return ENOMEM;
    const length = BigInt(state.length);
    const mlock2 = this.#libc.mlock2;
    const result = mlock2 === null
      ? this.#libc.mlock(state.pointer, length)
      : mlock2(state.pointer, length, LINUX.MLOCK_ONFAULT);
    return result === 0 ? 0 : this.#errno();
  }

  fcntlLock(fd: number, cmd: number, type: number): { errno: number; type: number; pid: number } {
    const flock = new Uint8Array(FLOCK.SIZE);
    const view = new DataView(flock.buffer);
    encodeFlock(view, type);
    const errno = this.#libc.fcntl(fd, cmd, flock) === -1 ? this.#errno() : 0;
    return { errno, ...decodeFlock(view) };
  }

  cachestat(fd: number, offset: number, length: number): PageCacheState | undefined {
    const range = new Uint8Array(CACHESTAT.RANGE_SIZE);
    const stat = new Uint8Array(CACHESTAT.STAT_SIZE);
    encodeCachestatRange(new DataView(range.buffer), offset, length);
    const result = this.#libc.syscall(BigInt(LINUX.SYS_CACHESTAT), BigInt(fd), range, stat, 0n);
    if (result === -1n) {
      const errno = this.#errno();
      // ENOSYS: a kernel before 6.5. EPERM: a seccomp filter that does not
      // know the syscall (cachestat itself never answers EPERM).
      // EOPNOTSUPP: a file system without a page cache.
      if (errno === LINUX.ENOSYS || errno === EPERM || errno === EOPNOTSUPP) return undefined;
      throw errnoError(errno, "read the page-cache state of", `descriptor ${fd}`);
    }
    return decodeCachestat(new DataView(stat.buffer));
  }

  fadvise(fd: number, offset: number, length: number, advice: number): number {
    // posix_fadvise returns the error number instead of setting errno.
    return this.#libc.posix_fadvise(fd, BigInt(offset), BigInt(length), advice);
  }

  lseek(fd: number, offset: number, whence: number): number {
    const reached = this.#libc.lseek(fd, BigInt(offset), whence);
    return reached === -1n ? -this.#errno() : Number(reached);
  }

  /**
   * errno of this thread, read right after a synchronous call failed
   * (synchronous FFI calls run on the JavaScript thread).
   */
  #errno(): number {
    const location = this.#libc.__errno_location();
    if (location === null) throw new Error("Invariant: __errno_location() returned NULL");
    return new Deno.UnsafePointerView(location).getInt32();
  }

  /**
   * The page-aligned pointer and length covering `[position, position +
   * length)` of a mapping: `msync` and `madvise` reject an unaligned
   * address, so the start moves down to its page and the length grows by
   * as much. The range is checked here too, since advice such as
   * `MADV_DONTNEED` on an address outside the mapping would discard
   * another mapping's memory.
   */
  #pageRange(
    state: MappingState,
    position: number,
    length: number,
  ): [Deno.PointerObject, bigint] {
    if (
      !Number.isSafeInteger(position) || !Number.isSafeInteger(length) || position < 0 ||
      length < 0 || position + length > state.length
    ) {
      throw new RangeError(
        `Cannot address range [${position}, ${
          position + length
        }) of a ${state.length}-byte mapping`,
      );
    }
    const start = position - position % this.pageSizeBytes;
    const pointer = start === 0 ? state.pointer : Deno.UnsafePointer.offset(state.pointer, start);
    if (pointer === null) throw new Error("Invariant: a mapped address plus an offset is NULL");
    return [pointer, BigInt(length + position - start)];
  }

  /**
   * Runs a nonblocking call on a mapping's address, keeping the range
   * mapped until it returns.
   *
   * A nonblocking call runs on one of Deno's blocking-pool threads, and
   * errno is thread-local: this thread cannot read the errno of that call.
   * Every failure (-1) is therefore reported as EIO, which the port turns
   * into an `IO_ERROR` (for `msync` the real cause is EIO or, after a
   * failed writeback, ENOSPC; `madvise` pre-faulting fails on memory
   * pressure or a SIGBUS-range).
   */
  async #offThread(state: MappingState, call: () => Promise<number>): Promise<number> {
    state.pending++;
    try {
      return await call() === 0 ? 0 : EIO;
    } finally {
      state.pending--;
      if (state.retired && state.pending === 0) this.#unmap(state);
    }
  }

  #unmap(state: MappingState): void {
    if (state.unmapped) return;
    state.unmapped = true;
    if (this.#libc.munmap(state.pointer, BigInt(state.length)) !== 0) {
      // munmap fails only on an invalid range: a bug, never a runtime state.
      throw errnoError(this.#errno(), `unmap ${state.length} bytes at`, "a retired mapping");
    }
  }
}

function stateOf(mapping: NativeMapping): MappingState {
  if (!(mapping.handle instanceof MappingState)) {
    throw new TypeError("Cannot use a mapping made by another binding with deno-ffi");
  }
  return mapping.handle;
}

/** The binding of this process (of this isolate, in a Deno worker). */
let loaded: DenoLibc | undefined;

/**
 * Binds libc with `Deno.dlopen` (once per process; later calls return the
 * same binding).
 *
 * @example
 * ```ts ignore
 * import { loadLibc } from "./deno.ts";
 *
 * // Needs --allow-ffi.
 * const libc = loadLibc();
 * console.log(libc.adapter, libc.pageSizeBytes); // "deno-ffi" 4096
 * ```
 *
 * @returns The binding behind the `deno-ffi` adapter.
 * @throws {MqStoreError} `PERMISSION_DENIED` without the (unscoped) ffi
 *   permission, checked first so Deno never prompts; `UNSUPPORTED` if libc
 *   cannot be loaded.
 */
export function loadLibc(): NativeLibc {
  if (loaded !== undefined) return loaded;
  // Querying first means Deno never prompts. The permission must be the
  // unscoped one: Deno resolves a bare soname against a path-scoped
  // --allow-ffi=<path> as a file in the working directory.
  const permission = Deno.permissions.querySync({ name: "ffi" });
  if (permission.state !== "granted") {
    throw new MqStoreError(
      "PERMISSION_DENIED",
      `Cannot load ${LIBC_PATH}: the ffi permission is ${permission.state} (run deno with --allow-ffi, unscoped)`,
    );
  }
  let library: Deno.DynamicLibrary<typeof SYMBOLS>;
  try {
    library = Deno.dlopen(LIBC_PATH, SYMBOLS);
  } catch (error) {
    throw new MqStoreError(
      "UNSUPPORTED",
      `Cannot load ${LIBC_PATH}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  loaded = new DenoLibc(library.symbols);
  return loaded;
}
