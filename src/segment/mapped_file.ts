/**
 * One segment file: RocketMQ's `MappedFile`, written against the runtime
 * port so it runs on every adapter.
 *
 * ```
 *  position 0                                                   fileSizeBytes
 *  |== durable ==|== committed ==|== appended (write buffer) ==|    free     |
 *                ^flushed        ^committed                    ^wrote
 * ```
 *
 * Where appends go depends on what the runtime offers:
 *
 * | mode      | when                         | appends go to             | readers see            |
 * |-----------|------------------------------|---------------------------|------------------------|
 * | `mapping` | `port.canMap`, no pool       | the shared mapping        | up to wrote, via views |
 * | `pool`    | a {@link TransientStorePool} | a segment-sized pool buffer | up to committed      |
 * | `window`  | no mmap (portable adapter), or `positionalWrites` | a bounded write buffer | up to committed |
 * | `read-only` | opened with `readOnly`     | nowhere (appends throw)   | up to committed        |
 *
 * In `pool` and `window` mode a commit copies `[committed, wrote)` into the
 * file with positional writes; readers never see bytes that exist only in a
 * write buffer. With `positionalWrites` (SYNC_FLUSH segments) those writes
 * are synchronous, on the JavaScript thread, and a flush is that write plus
 * one `fdatasync`: on ext4 here 1.3–1.5 times faster than writing through
 * the mapping and `msync`ing the range, and {@link MappedFile.startFlush}
 * lets a second flush run while the first one does. Reads go through the
 * mapping where the port can map, and through positional reads (a copy of
 * the requested range, never of the segment) where it cannot.
 *
 * A segment is reference counted: the owner holds one reference, readers
 * take one per selected range. {@link MappedFile.close} and the destroy
 * methods drop the owner's reference, wait for readers, and only then unmap
 * and close; when readers outstay the timeout the mapping is retired
 * anyway, which detaches (or zeroes) their views instead of leaving them
 * dangling.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import type {
  FileHandle,
  FileRange,
  Mapping,
  PageCacheState,
  PopulateOptions,
  RuntimePort,
} from "../runtime/port.ts";
import { type Clock, systemClock } from "./clock.ts";
import {
  DESTROY_FORCE_AFTER_MS_DEFAULT,
  OS_PAGE_SIZE_BYTES,
  PREPARE_POPULATE_CHUNK_BYTES,
  PREPARE_WRITE_CHUNK_BYTES,
  WRITE_BUFFER_SIZE_BYTES_DEFAULT,
  ZERO_CHUNK_BYTES,
} from "./constants.ts";
import { createSegmentFile } from "./_create_segment.ts";
import { baseName, parseSegmentFileName } from "./_file_name.ts";
import type { TransientStorePool } from "./transient_store_pool.ts";

/**
 * The largest pre-fault chunk {@link MappedFile.prepare} grows to ahead of
 * a fast mapping writer (see `populateChunkBytes`): 64 MiB, about 60 ms of
 * zeroing here, the longest a flush reaching into the chunk in flight
 * waits for it.
 */
const POPULATE_CHUNK_MAX_BYTES = 0x400_0000;

/**
 * Detaches a throwaway buffer that a DataView has seen, once, when this
 * module loads. V8 (Deno, Node) compiles DataView accesses assuming no
 * such buffer was ever detached, until one is: then it throws away every
 * optimized function that assumed it. A segment's unmap detaches its
 * buffer (that is what makes the unmap safe), so the first segment closed
 * (a store's close, a retention delete) deoptimized the put
 * path (the batch encoder, the CRC, the consume-queue and int64 writers:
 * seen with `--trace-deopt --trace-protector-invalidation`), and the next
 * store's first batches ran unoptimized while V8 compiled them again.
 * Done up front, the code is compiled once, with the detach checks it
 * would carry after the first unmap anyway. JavaScriptCore (Bun) makes no
 * such assumption: there it costs one tiny copy.
 */
function assumeDetachedBuffers(): void {
  const buffer = new ArrayBuffer(0x8);
  new DataView(buffer).setUint8(0, 0);
  structuredClone(buffer, { transfer: [buffer] });
}
assumeDetachedBuffers();

/** Where appends of a {@link MappedFile} go; see the module doc. */
export type WriteMode = "mapping" | "pool" | "window" | "read-only";

/**
 * What an append callback writes into. One object per file, refreshed
 * before each call: valid only during the callback.
 */
export interface AppendTarget {
  /** The buffer to write into. */
  readonly bytes: Uint8Array;
  /** Index in {@link AppendTarget.bytes} of the first byte to write. */
  readonly index: number;
  /** Global offset the first written byte will have. */
  readonly fileOffset: number;
  /**
   * Bytes that may be written from {@link AppendTarget.index}. Equals
   * {@link AppendTarget.remainingBytes} except in `window` mode, where the
   * caller makes room first with {@link MappedFile.ensureWritable}.
   */
  readonly writableBytes: number;
  /** Free bytes left in the file (what decides an end-of-file marker). */
  readonly remainingBytes: number;
}

/** What an append callback reports. */
export interface AppendOutcome {
  /** Bytes written at {@link AppendTarget.index} (at most `writableBytes`). */
  readonly wroteBytes: number;
  /** Store timestamp of what was written, kept as the file's last. */
  readonly storeTimestampMs: number;
}

/** Writes one entry into an {@link AppendTarget} and says how much it wrote. */
export type AppendCallback<R extends AppendOutcome> = (target: AppendTarget) => R;

/**
 * A readable range of a segment, valid until {@link SelectedRange.release}.
 * Through a mapping it is a view: release it promptly, because a segment
 * being deleted waits for it (and retires the view after a timeout).
 */
export interface SelectedRange {
  /** The bytes; index 0 is {@link SelectedRange.position}. */
  readonly bytes: Uint8Array;
  /** Position of the first byte in the file. */
  readonly position: number;
  /** Global offset of the first byte. */
  readonly fileOffset: number;
  /** Gives the range back; idempotent. */
  release(): void;
}

/** Options shared by {@link MappedFile.create} and {@link MappedFile.open}. */
export interface MappedFileOptions {
  /** The runtime port. */
  port: RuntimePort;
  /** The segment path; its name is the 20-digit start offset. */
  path: string;
  /** The segment size. */
  fileSizeBytes: number;
  /**
   * Size of the bounded write buffer of `window` mode (ports that cannot
   * map); capped at the segment size.
   *
   * @default {4 MiB}
   */
  writeBufferSizeBytes?: number;
  /**
   * Time source for destroy timeouts.
   *
   * @default {systemClock}
   */
  clock?: Clock;
  /**
   * Append into the bounded write buffer (`window` mode) also where the
   * port can map, and copy it into the file with synchronous positional
   * writes at each commit and flush (SYNC_FLUSH segments; see the module
   * doc). Reads still go through the mapping, up to the committed
   * position, and {@link MappedFile.prepare} still pre-faults and zeroes
   * the file through it.
   *
   * @default {false}
   */
  positionalWrites?: boolean;
}

/** Options of {@link MappedFile.create}. */
export interface CreateMappedFileOptions extends MappedFileOptions {
  /**
   * Borrow a write buffer from this pool (`pool` mode).
   *
   * @default {undefined}
   */
  pool?: TransientStorePool;
  /**
   * Create a sparse file instead of allocating it (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
  /**
   * A creation whose file must appear (be renamed into place) before this
   * one's: files of one directory created in parallel keep their order.
   *
   * @default {undefined}
   */
  renameAfter?: Promise<unknown>;
  /**
   * Advise the mapping `MADV_RANDOM` before any page is touched (SPEC §2),
   * so its page cache is made of 4 KiB folios: a small flush then writes
   * only its pages. False advises `MADV_HUGEPAGE` instead (see
   * `PrepareOptions.randomAccess`), under which the kernel backs the
   * range with large folios (2 MiB): writeback
   * costs about half the CPU and a backlog drains about twice as fast,
   * but a folio dirtied while it is written back is written again whole
   * (see `FlushRealTimeService`).
   *
   * @default {true}
   */
  randomAccess?: boolean;
}

/** Options of {@link MappedFile.open}. */
export interface OpenMappedFileOptions extends MappedFileOptions {
  /**
   * Open without write access; appends throw.
   *
   * @default {false}
   */
  readOnly?: boolean;
  /**
   * `path` already open, with the access `readOnly` asks for (a consume
   * queue's file opened through `RuntimePort.openFileSync`, so that the
   * open takes no awaited I/O): mapped instead of opening `path` again,
   * owned by the file from then on, and closed if the open fails.
   *
   * @default {undefined}
   */
  handle?: FileHandle;
}

/** Options of the closing methods of {@link MappedFile}. */
export interface CloseMappedFileOptions {
  /**
   * How long to wait for readers still holding ranges before retiring the
   * mapping under them.
   *
   * @default {120 000}
   */
  waitMs?: number;
}

/** Options of {@link MappedFile.prepare}. */
export interface PrepareOptions {
  /**
   * Pre-fault the pages for writing (`MADV_POPULATE_WRITE`), so appends
   * never take first-touch faults (5–6 GB/s instead of 0.55 GB/s for
   * 1 KiB appends).
   *
   * @default {true}
   */
  populate?: boolean;
  /**
   * With `populate`, each pre-faulted chunk is also read from another
   * thread (`PopulateOptions.read`): for files of 4 KiB pages whose writer
   * follows soon (consume queues).
   *
   * @default {false}
   */
  read?: boolean;
  /**
   * Also write the pre-faulted zeros through to the device (`msync`): a
   * later flush then overwrites blocks that are already written, instead
   * of converting unwritten (fallocated) extents in a journal commit of its
   * own, which halves the latency of small synchronous flushes on ext4
   * (70 KB: 0.44 ms instead of 0.79 ms here). The pages are left clean, so
   * appends take one minor fault per page: for synchronous flushing.
   *
   * @default {false}
   */
  writeZeros?: boolean;
  /**
   * Advise the part prepared `MADV_RANDOM` (SPEC §2); false advises
   * `MADV_NORMAL` (large folios: see `CreateMappedFileOptions.randomAccess`)
   * and `MADV_HUGEPAGE`, so that the folios are 2 MiB from the first fault
   * on instead of after the kernel's ramp from 4 KiB over the first
   * megabytes. Measured (C, Linux 6.18, ext4, a fresh fallocated 1 GiB
   * file, 4 MiB chunks): `MADV_POPULATE_WRITE` of the first chunk 1.4–1.6
   * ms instead of 6–8 ms (of 128 MiB: 35 ms instead of 51, and 220 under
   * `MADV_RANDOM`); a writer faulting the fresh pages itself (memset), as
   * one that never yields does past the pre-fault chunk in flight, 2.7–2.9
   * GB/s instead of 1.5–1.9 (0.5 under `MADV_RANDOM`).
   *
   * @default {true}
   */
  randomAccess?: boolean;
  /**
   * Lock the mapping in memory (`mlock`) at the end.
   *
   * @default {false}
   */
  lock?: boolean;
  /**
   * Asked right before each chunk of zeros is written: undefined lets it
   * go now; a promise makes it wait for that promise and ask again. A
   * flusher with waiters uses it so that preparation never queues device
   * writes in front of puts waiting for their flush. The answer and the
   * write happen in one synchronous step, so nothing can start a flush in
   * between.
   *
   * @default {undefined}
   */
  pace?: () => Promise<void> | undefined;
  /**
   * Asked right before each pre-fault chunk with the offset (global, as
   * `fileFromOffset`) the chunk starts at: undefined lets it go now; a
   * promise makes it wait for that promise and ask again (the chunk then
   * starts past the writer's page as it is by then). The owner uses it to
   * keep the pre-fault a bounded distance ahead of its writer instead of
   * running to the segment's end, and on into the next segment, while the
   * writer is far behind: every page pre-faulted is a page of memory the
   * host hands the VM and a page written back (zeros) if the writer does
   * not get there within the kernel's dirty expiry.
   *
   * @default {undefined}
   */
  ahead?: (offset: number) => Promise<void> | undefined;
  /**
   * Asked right before each pre-fault chunk, once `ahead` let it go, with
   * the offset (global, as `fileFromOffset`) the chunk starts at: caps the
   * chunk's size and may ask for 4 KiB folios from the chunk on
   * (`MADV_RANDOM`, and `MADV_NOHUGEPAGE`, without which the random advice
   * does not stop 2 MiB folios), or for the segment's own advice again,
   * before it is pre-faulted. Its owner picks the folio size chunk by
   * chunk from its writer's rate (see `CommitLog`).
   *
   * @default {undefined}
   */
  plan?: (offset: number) => PrefaultPlan;
  /**
   * The writer's offset (global, as `fileFromOffset`), for a segment
   * prepared ahead of it: until the writer reaches the segment, its
   * pre-fault chunks grow to twice what the writer appended while the
   * last one ran (as they do past a writer inside the segment), instead of
   * staying at the smallest.
   *
   * @default {undefined}
   */
  writerOffset?: () => number;
  /**
   * With `populate`, pre-fault from this position on only (and from the
   * writer's next page if the writer is past it): the pages below it were
   * asked for already (a queue's file pre-faulted piecewise, see
   * `endPosition`).
   *
   * @default {0}
   */
  startPosition?: number;
  /**
   * With `populate`, pre-fault below this position only, not to the end
   * of the file: for a writer that is not known to fill the file yet, so
   * that it is pre-faulted a bounded distance ahead of the writer.
   *
   * @default {the file size}
   */
  endPosition?: number;
  /**
   * Checked before each chunk: true ends the preparation early (the
   * owner is shutting down).
   *
   * @default {undefined}
   */
  stopped?: () => boolean;
}

/** What {@link PrepareOptions.plan} answers for one pre-fault chunk. */
export interface PrefaultPlan {
  /**
   * 4 KiB folios: the chunk and the rest of the file are advised
   * `MADV_RANDOM` and `MADV_NOHUGEPAGE` before the chunk is pre-faulted
   * (unless they are already). False: the segment's own advice, given
   * back to the chunk and the rest of the file if they had the other.
   */
  randomAccess: boolean;
  /**
   * The chunk's largest size, bytes: rounded down to whole pages, at
   * least one; `Number.MAX_SAFE_INTEGER` for no cap.
   */
  chunkBytesMax: number;
}

/** The reusable {@link AppendTarget} of one file. */
class MutableAppendTarget implements AppendTarget {
  bytes: Uint8Array = new Uint8Array(0);
  index = 0;
  fileOffset = 0;
  writableBytes = 0;
  remainingBytes = 0;
}

/** A segment file; see the module doc. */
export class MappedFile {
  /** The segment path. */
  readonly path: string;
  /** Global offset of position 0 (RocketMQ's `fileFromOffset`). */
  readonly fileFromOffset: number;
  /** The segment size. */
  readonly fileSizeBytes: number;
  /** Where appends go; `pool` becomes `mapping` or `window` once the pool buffer is given back. */
  #writeMode: WriteMode;
  /** `window` mode with synchronous commits (see {@link MappedFileOptions.positionalWrites}). */
  #positionalWrites: boolean;

  #port: RuntimePort;
  #handle: FileHandle;
  /** The shared mapping of the whole file, where the port can map. */
  #mapping: Mapping | undefined;
  #clock: Clock;
  /** The pool lending {@link MappedFile.#poolBuffer} (`pool` mode). */
  #pool: TransientStorePool | undefined;
  /** Segment-sized write buffer; index = position. Returned once fully committed. */
  #poolBuffer: Uint8Array | undefined;
  /** Bounded write buffer of `window` mode; index 0 = position `#windowStart`. Allocated on first append. */
  #window: Uint8Array | undefined;
  /** Position of `#window[0]`; always equals `#committed` in `window` mode. */
  #windowStart = 0;
  #windowSizeBytes: number;
  /** Bytes appended. */
  #wrote = 0;
  /** Bytes in the file (write-buffer modes); tracks `#wrote` in `mapping` mode. */
  #committed = 0;
  /** Bytes known durable. */
  #flushed = 0;
  /** Store timestamp of the last append. */
  #storeTimestampMs = 0;
  #target = new MutableAppendTarget();
  /** Owner reference (1 until closed) plus one per held range. */
  #refCount = 1;
  /** False once closing began: no new holds. */
  #available = true;
  /**
   * When closing began (for forced retirement). Starts as a double (NaN:
   * not retired): a wall-clock ms value is no small integer, and a field
   * V8 holds as one changes representation at the first store of such a
   * value, which deprecates the class's object shape and deoptimizes
   * every function compiled against it (the put path, at the first
   * close; seen with `--trace-deopt`).
   */
  #retiredAtMs = Number.NaN;
  /** Resolvers waiting for the last reference to go. */
  #releaseWaiters: Array<() => void> = [];
  /** Unmap and close, started when the last reference goes (or by force). */
  #cleanup: Promise<void> | undefined;
  #removed = false;
  /** Tail of the chain serialising commits and flushes. */
  #ioTail: Promise<void> = Promise.resolve();
  /**
   * The last flush begun by {@link startFlush} (settles after every earlier
   * one); cleanup waits for it.
   */
  #startedFlush: Promise<number> | undefined;
  /** Flushes begun by {@link startFlush} and not settled. */
  #startedFlushCount = 0;
  /** Positional reads in flight (the descriptor must outlive them). */
  #reads = new Set<Promise<unknown>>();
  /** The preparation in progress (settled), awaited before unmapping. */
  #preparing: Promise<unknown> | undefined;
  /**
   * Settles once the latest preparation pre-faulted its first chunk (or
   * ended): what a writer starting on the segment needs first.
   */
  #headPrepared: Promise<void> | undefined;
  /**
   * The pre-fault chunk in flight, `[start, end)`, and its settlement. A
   * flush whose range reaches into it waits for it: the kernel walks the
   * chunk page by page, and a page that a flush had cleaned before the
   * walk reached it would be dirtied again (same bytes, written back twice,
   * and indistinguishable from an unflushed page to a `cachestat` probe).
   */
  #populating: { start: number; end: number; done: Promise<void> } | undefined;
  /**
   * The advice the mapping carries from `from` to its end, once advised:
   * `random` (`MADV_RANDOM`) or not (`MADV_NORMAL` and `MADV_HUGEPAGE`). A
   * preparation skips an advice the range already has. Each `madvise` of
   * advice takes the address space's mmap lock for writing on the JavaScript
   * thread, where it waits for every pre-fault in flight (they hold it for
   * reading): a consume-queue file was advised twice, at its creation and
   * again when its queue rolled into it (1 M puts over 64 queues of a
   * fresh store: 448 such calls on the JavaScript thread instead of 256,
   * single waits up to 21 ms, seen with the mmap_lock tracepoints).
   * `smallFrom`: from there to the end, `MADV_RANDOM` and
   * `MADV_NOHUGEPAGE` (4 KiB folios, see {@link #adviseFolios}), never
   * below `from`; undefined: the segment's own advice to the end.
   */
  #advised: { from: number; random: boolean; smallFrom?: number } | undefined;
  /** Resolves when closing begins: ends a preparation's wait for its pace. */
  #retiring: Promise<void> | undefined;
  #resolveRetiring: (() => void) | undefined;

  private constructor(
    options: MappedFileOptions,
    handle: FileHandle,
    mapping: Mapping | undefined,
    writeMode: WriteMode,
    pool: TransientStorePool | undefined,
    poolBuffer: Uint8Array | undefined,
  ) {
    this.path = options.path;
    this.fileFromOffset = startOffsetOf(options.path);
    this.fileSizeBytes = options.fileSizeBytes;
    this.#writeMode = writeMode;
    this.#positionalWrites = writeMode === "window" && options.positionalWrites === true;
    this.#port = options.port;
    this.#handle = handle;
    this.#mapping = mapping;
    this.#clock = options.clock ?? systemClock;
    this.#pool = pool;
    this.#poolBuffer = poolBuffer;
    this.#windowSizeBytes = Math.min(
      options.writeBufferSizeBytes ?? WRITE_BUFFER_SIZE_BYTES_DEFAULT,
      options.fileSizeBytes,
    );
  }

  /**
   * Creates a new segment atomically (temporary name, size, sync, rename,
   * sync directory) and maps it where the port can.
   *
   * @example
   * ```ts
   * import { createPort } from "../runtime/mod.ts";
   * import { MappedFile } from "./mapped_file.ts";
   *
   * const port = await createPort({ adapter: "memory" });
   * await port.makeDirectory("/store/commitlog");
   * const file = await MappedFile.create({
   *   port,
   *   path: "/store/commitlog/00000000000000000000",
   *   fileSizeBytes: 0x1_0000,
   * });
   * file.appendBytes(new Uint8Array([1, 2, 3]));
   * await file.flush(0);
   * console.log(file.flushedPosition); // 3
   * await file.close();
   * ```
   *
   * @throws {MqStoreError} `ALREADY_EXISTS`, `NO_SPACE`, `POOL_EXHAUSTED`.
   */
  static async create(options: CreateMappedFileOptions): Promise<MappedFile> {
    checkOptions(options);
    if (options.pool !== undefined && options.pool.fileSizeBytes !== options.fileSizeBytes) {
      throw new RangeError(
        `Pool buffers of ${options.pool.fileSizeBytes} bytes do not fit segments of ${options.fileSizeBytes}`,
      );
    }
    const poolBuffer = options.pool?.borrow();
    let handle: FileHandle | undefined;
    let mapping: Mapping | undefined;
    try {
      handle = await createSegmentFile(options.port, options.path, options.fileSizeBytes, {
        sparse: options.sparse === true,
        renameAfter: options.renameAfter,
      });
      if (options.port.canMap) {
        mapping = await handle.map(0, options.fileSizeBytes);
        // Before any page is touched: under the default advice the kernel
        // may back the range with large folios, and a later 4 KiB flush
        // then writes up to 2 MiB (SPEC §2).
        // Large folios asked for (randomAccess false): 2 MiB ones from the
        // first fault on, not after the kernel's ramp from 4 KiB (see
        // PrepareOptions.randomAccess).
        mapping.advise(
          0,
          options.fileSizeBytes,
          options.randomAccess !== false ? "random" : "hugepage",
        );
      }
    } catch (error) {
      if (poolBuffer !== undefined) options.pool?.giveBack(poolBuffer);
      await handle?.close();
      if (handle !== undefined) await options.port.remove(options.path);
      throw error;
    }
    const writeMode: WriteMode = poolBuffer !== undefined
      ? "pool"
      : mapping !== undefined && options.positionalWrites !== true
      ? "mapping"
      : "window";
    const file = new MappedFile(options, handle, mapping, writeMode, options.pool, poolBuffer);
    if (mapping !== undefined) file.#advised = { from: 0, random: options.randomAccess !== false };
    return file;
  }

  /**
   * Opens an existing segment. Positions start at 0; the owner sets them
   * with {@link MappedFile.resetPositions} (a queue loads segments as full,
   * recovery then trims the last).
   *
   * @throws {MqStoreError} `INVALID_FILE` when the file is not exactly
   *   `fileSizeBytes` long; `NOT_FOUND`.
   */
  static async open(options: OpenMappedFileOptions): Promise<MappedFile> {
    checkOptions(options);
    const readOnly = options.readOnly === true;
    const handle = options.handle ?? await options.port.openFile(options.path, { readOnly });
    let mapping: Mapping | undefined;
    try {
      if (handle.sizeBytes !== options.fileSizeBytes) {
        throw new MqStoreError(
          "INVALID_FILE",
          `Segment ${options.path} is ${handle.sizeBytes} bytes; segments of this queue are ${options.fileSizeBytes}`,
        );
      }
      if (options.port.canMap) mapping = await handle.map(0, options.fileSizeBytes);
    } catch (error) {
      await handle.close();
      throw error;
    }
    const writeMode: WriteMode = readOnly
      ? "read-only"
      : mapping !== undefined && options.positionalWrites !== true
      ? "mapping"
      : "window";
    return new MappedFile(options, handle, mapping, writeMode, undefined, undefined);
  }

  /** Where appends go; see the module doc. */
  get writeMode(): WriteMode {
    return this.#writeMode;
  }

  /** The file name: the start offset, zero-padded to 20 digits. */
  get fileName(): string {
    return baseName(this.path);
  }

  /** Bytes appended (RocketMQ's `wrotePosition`). */
  get wrotePosition(): number {
    return this.#wrote;
  }

  /** Bytes copied into the file (equals wrote in `mapping` mode). */
  get committedPosition(): number {
    return this.writeMode === "mapping" ? this.#wrote : this.#committed;
  }

  /** Bytes known durable. */
  get flushedPosition(): number {
    return this.#flushed;
  }

  /**
   * What readers may see: wrote in `mapping` mode, committed otherwise
   * (bytes only in a write buffer are not readable).
   */
  get readPosition(): number {
    return this.writeMode === "mapping" ? this.#wrote : this.#committed;
  }

  /** Whether every byte of the segment has been appended. */
  get isFull(): boolean {
    return this.#wrote === this.fileSizeBytes;
  }

  /** Store timestamp of the last append (0 before any). */
  get storeTimestampMs(): number {
    return this.#storeTimestampMs;
  }

  /** False once closing or destruction began: no new ranges are handed out. */
  get isAvailable(): boolean {
    return this.#available;
  }

  /** References held: the owner's (until closed) plus one per held range. */
  get refCount(): number {
    return this.#refCount;
  }

  /** Whether the owner still needs a pool buffer (`pool` mode, not fully committed). */
  get holdsPoolBuffer(): boolean {
    return this.#poolBuffer !== undefined;
  }

  /**
   * Bytes the next append may write without a commit: the free space of the
   * file, or less in `window` mode when the write buffer is filling.
   */
  get writableBytes(): number {
    const remaining = this.fileSizeBytes - this.#wrote;
    if (this.writeMode !== "window") return this.writeMode === "read-only" ? 0 : remaining;
    const buffered = this.#wrote - this.#windowStart;
    return Math.min(remaining, this.#windowSizeBytes - buffered);
  }

  /**
   * Appends one entry: calls `callback` with the target at the write
   * position and advances it by what the callback wrote.
   *
   * @example
   * ```ts ignore
   * const result = file.append((target) => {
   *   target.bytes.set(payload, target.index);
   *   return { wroteBytes: payload.length, storeTimestampMs: Date.now() };
   * });
   * ```
   *
   * @returns What the callback returned.
   * @throws {RangeError} When the file is full or the callback reports more
   *   than it could write.
   */
  append<R extends AppendOutcome>(callback: AppendCallback<R>): R {
    this.#checkAppendable();
    const target = this.#prepareTarget();
    const result = callback(target);
    const n = result.wroteBytes;
    if (!Number.isSafeInteger(n) || n < 0 || n > target.writableBytes) {
      throw new RangeError(
        `Append callback wrote ${n} bytes at position ${this.#wrote} of ${this.path}; at most ${target.writableBytes} fit`,
      );
    }
    this.#wrote += n;
    this.#storeTimestampMs = result.storeTimestampMs;
    return result;
  }

  /**
   * Appends raw bytes (fixed-size units such as consume-queue entries).
   *
   * @returns False, writing nothing, when the file lacks room for all of
   *   `source`.
   * @throws {RangeError} In `window` mode when the write buffer lacks room:
   *   await {@link MappedFile.ensureWritable} first.
   */
  appendBytes(source: Uint8Array): boolean {
    const wrote = this.#wrote;
    const end = wrote + source.length;
    if (this.#writeMode === "mapping" && this.#available && wrote < this.fileSizeBytes) {
      // The usual case (a consume-queue unit per dispatched message):
      // straight into the mapping, without refreshing the append target.
      if (end > this.fileSizeBytes) return false;
      (this.#mapping as Mapping).bytes.set(source, wrote);
      this.#wrote = end;
      return true;
    }
    this.#checkAppendable();
    if (end > this.fileSizeBytes) return false;
    const target = this.#prepareTarget();
    if (source.length > target.writableBytes) {
      throw new RangeError(
        `Cannot append ${source.length} bytes to ${this.path}: the write buffer has ${target.writableBytes} free; await ensureWritable() first`,
      );
    }
    target.bytes.set(source, target.index);
    this.#wrote += source.length;
    return true;
  }

  /** `wait`, or less: until the file starts to retire (a close must not wait for it). */
  #untilRetiring(wait: Promise<void>): Promise<void> {
    this.#retiring ??= new Promise<void>((resolve) => this.#resolveRetiring = resolve);
    return Promise.race([wait, this.#retiring]);
  }

  /**
   * Appends `source` in `mapping` mode with a positional write of the file
   * (`FileHandle.writeSync`) instead of stores through the mapping, which
   * sees the same page cache (see `RuntimePort.positionalRunWrites`).
   *
   * @returns False, writing nothing, when the file is not written through
   *   a mapping or lacks room for all of `source`.
   * @throws The write's error (nothing appended: wrotePosition stays).
   */
  appendPositional(source: Uint8Array): boolean {
    const wrote = this.#wrote;
    const end = wrote + source.length;
    if (this.#writeMode !== "mapping" || !this.#available || end > this.fileSizeBytes) {
      return false;
    }
    this.#handle.writeSync(source, wrote);
    this.#wrote = end;
    return true;
  }

  /**
   * Makes sure the next append may write `min(bytes, free space)` bytes,
   * committing the `window` write buffer when it is too full. Resolves at
   * once in the other modes.
   */
  async ensureWritable(bytes: number): Promise<void> {
    if (this.writeMode !== "window") return;
    if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes > this.#windowSizeBytes) {
      throw new RangeError(
        `Cannot make room for ${bytes} bytes: the write buffer of ${this.path} holds ${this.#windowSizeBytes}`,
      );
    }
    // Each commit empties what was buffered when it started, so this loop
    // ends unless appends keep refilling the buffer during every commit.
    while (this.writableBytes < Math.min(bytes, this.fileSizeBytes - this.#wrote)) {
      await this.commit(0);
    }
  }

  /**
   * Copies appended bytes from the write buffer into the file when the
   * least-pages rule allows: the file is full; or at least `leastPages`
   * 4 KiB pages changed since the last commit; or, when `leastPages` is 0,
   * anything changed. A fully committed file gives its pool buffer back.
   *
   * @returns The committed position (wrote in `mapping` mode: nothing to
   *   commit there).
   */
  commit(leastPages: number): Promise<number> {
    checkLeastPages(leastPages);
    if (this.writeMode === "mapping" || this.writeMode === "read-only") {
      return Promise.resolve(this.committedPosition);
    }
    return this.#exclusive(async () => {
      if (isAbleTo(this.#committed, this.#wrote, this.isFull, leastPages)) await this.#commitNow();
      return this.#committed;
    });
  }

  /**
   * Makes appended bytes durable when the least-pages rule allows (full
   * file; `leastPages` changed 4 KiB pages; anything when 0), off the
   * JavaScript thread (`msync` of the changed pages, or `fdatasync`). In
   * `window` mode the buffered bytes are committed first; in `pool` mode
   * only committed bytes are flushed, as in RocketMQ.
   *
   * @param leastPages Whole 4 KiB pages that must have changed (0: any).
   * @param maxBytes Flush at most about this many bytes past the flushed
   *   position (rounded to whole pages) where the flush is a range `msync`,
   *   so that one flush of a large backlog ends in bounded time and the
   *   caller can report progress and go on. Default: no bound.
   * @returns The flushed position.
   */
  flush(leastPages: number, maxBytes: number = Number.MAX_SAFE_INTEGER): Promise<number> {
    checkLeastPages(leastPages);
    if (!Number.isSafeInteger(maxBytes) || maxBytes <= 0) {
      throw new RangeError(`Flush bound ${maxBytes} must be a positive integer`);
    }
    if (this.writeMode === "read-only") return Promise.resolve(this.#flushed);
    return this.#exclusive(async () => {
      let target = this.writeMode === "pool" ? this.#committed : this.#wrote;
      if (!isAbleTo(this.#flushed, target, this.isFull, leastPages)) return this.#flushed;
      if (target === this.#flushed) return this.#flushed;
      if (this.writeMode === "window") await this.#commitNow();
      const mapping = this.#mapping;
      if (this.writeMode === "mapping" && mapping !== undefined) {
        const page = this.#port.pageSizeBytes;
        const start = this.#flushed - this.#flushed % page;
        if (target - start > maxBytes) {
          // Whole pages only, and at least one, so every bounded flush
          // moves the flushed position.
          target = start + Math.max(page, maxBytes - maxBytes % page);
        }
        // A page of this range inside the pre-fault chunk in flight is
        // flushed only after the chunk (see #populating).
        await this.#awaitPopulating(start, target);
        await mapping.sync(start, target - start);
        assert(target >= this.#flushed, "the flushed position only grows");
        this.#flushed = target;
      } else {
        await this.#awaitPopulating(this.#flushed, target);
        await this.#handle.datasync();
        // A flush begun by startFlush() meanwhile may have got further: a
        // fdatasync makes everything written before it durable, whoever
        // asked.
        if (target > this.#flushed) this.#flushed = target;
      }
      return this.#flushed;
    });
  }

  /**
   * Begins a flush without waiting for the flushes in flight, for a group
   * commit that keeps two going (`window` mode with positional writes):
   * copies the write buffer into the file now, on the JavaScript thread,
   * and starts one `fdatasync` off it, which makes durable everything
   * committed when it starts. Flushes begun this way settle in the order
   * they began: one whose `fdatasync` returns first waits for the earlier
   * ones, and fails when one of them failed (a write-back error is
   * reported to one `fdatasync` only, maybe the earlier one). In the other
   * modes it is {@link flush}`(0)`.
   *
   * @returns The flushed position.
   * @throws {MqStoreError} Through the promise: the write or `fdatasync`
   *   error, or `CLOSED`.
   */
  startFlush(): Promise<number> {
    if (!this.#positionalWrites) return this.flush(0);
    if (this.#cleanup !== undefined) {
      return Promise.reject(
        new MqStoreError("CLOSED", `Cannot flush ${this.path}: the segment is closed`),
      );
    }
    try {
      this.#commitSync();
    } catch (error) {
      return Promise.reject(error);
    }
    this.#startedFlushCount++;
    const flushed = this.#syncStarted(this.#committed, this.#startedFlush);
    this.#startedFlush = flushed;
    return flushed;
  }

  /**
   * {@link startFlush} with the `fdatasync` on the JavaScript thread
   * (`FileHandle.datasyncSync`), for a lone put with nothing else to do:
   * it saves the thread hops, and blocks the thread for the device's
   * flush. Only with positional writes, where the port offers it, with no
   * flush begun by startFlush in flight and no pre-fault chunk over the
   * range; otherwise it does nothing and answers undefined.
   *
   * @returns The flushed position, or undefined when it did nothing.
   * @throws {MqStoreError} The write or `fdatasync` error.
   */
  flushSync(): number | undefined {
    const handle = this.#handle;
    if (
      !this.#positionalWrites || handle.datasyncSync === undefined ||
      this.#cleanup !== undefined || this.#startedFlushCount > 0
    ) {
      return undefined;
    }
    if (this.#populatingOverlaps(this.#flushed, this.#wrote)) return undefined;
    this.#commitSync();
    handle.datasyncSync();
    if (this.#committed > this.#flushed) this.#flushed = this.#committed;
    return this.#flushed;
  }

  async #syncStarted(target: number, earlier: Promise<number> | undefined): Promise<number> {
    // The `fdatasync` starts in the caller's step unless a pre-fault chunk
    // covers the range: no microtask hop (the group commit queues the
    // dispatch of the last flush right behind this one) and no wrapper
    // promises between the device and the next group.
    let ownFailed = false;
    let ownError: unknown;
    try {
      if (this.#populatingOverlaps(this.#flushed, target)) {
        await this.#awaitPopulating(this.#flushed, target);
      }
      await this.#handle.datasync();
    } catch (error) {
      ownFailed = true;
      ownError = error;
    }
    try {
      // An earlier failure is reported first: it is what this one's bytes
      // sit behind.
      if (earlier !== undefined) await earlier;
    } finally {
      this.#startedFlushCount--;
    }
    if (ownFailed) throw ownError;
    if (target > this.#flushed) this.#flushed = target;
    return this.#flushed;
  }

  /** Whether the pre-fault chunk in flight overlaps the pages of `[from, to)`. */
  #populatingOverlaps(from: number, to: number): boolean {
    const chunk = this.#populating;
    return chunk !== undefined && from - from % this.#port.pageSizeBytes < chunk.end &&
      to > chunk.start;
  }

  /**
   * Waits while the pre-fault chunk in flight overlaps the pages of
   * `[from, to)` (see {@link MappedFile.#populating}); a later chunk starts
   * above the writer's page, so it cannot reach them.
   */
  async #awaitPopulating(from: number, to: number): Promise<void> {
    while (this.#populatingOverlaps(from, to)) await this.#populating!.done;
  }

  /**
   * Overwrites `[position, endPosition)` with zeros and makes them durable.
   * Recovery uses it after a cut, so that a stale record past the new end
   * can never reappear after a later crash. The range must lie at or past
   * the wrote position: appended bytes are never erased this way.
   */
  zeroRange(position: number, endPosition: number): Promise<void> {
    if (
      !Number.isSafeInteger(position) || !Number.isSafeInteger(endPosition) ||
      position < this.#wrote || endPosition < position || endPosition > this.fileSizeBytes
    ) {
      throw new RangeError(
        `Cannot zero [${position}, ${endPosition}) of ${this.path}: it must lie in [wrote ${this.#wrote}, ${this.fileSizeBytes})`,
      );
    }
    if (this.writeMode === "read-only") {
      throw new MqStoreError("UNSUPPORTED", `Cannot zero ${this.path}: opened read-only`);
    }
    return this.#exclusive(async () => {
      if (endPosition === position) return;
      const mapping = this.#mapping;
      // Through the mapping also with positional writes: the range lies at
      // or past wrote, where the write buffer holds nothing, and positional
      // writes into pages not cached yet would give the page cache large
      // folios, which every later flush of a page then writes whole.
      if (mapping !== undefined && (this.writeMode === "mapping" || this.#positionalWrites)) {
        mapping.bytes.fill(0, position, endPosition);
        const page = this.#port.pageSizeBytes;
        const start = position - position % page;
        await mapping.sync(start, endPosition - start);
        return;
      }
      // Positional writes of a bounded zero buffer, never a segment-sized one.
      const zeros = new Uint8Array(Math.min(ZERO_CHUNK_BYTES, endPosition - position));
      for (let at = position; at < endPosition; at += zeros.length) {
        await this.#handle.write(zeros.subarray(0, Math.min(zeros.length, endPosition - at)), at);
      }
      await this.#handle.datasync();
    });
  }

  /**
   * Hands out `[position, position + sizeBytes)` for reading, or undefined
   * when that range is not readable yet (past {@link readPosition}) or the
   * file is closing. Through a mapping the bytes are a view kept valid by a
   * reference until released; otherwise they are a copy read with a
   * positional read.
   *
   * @param position First byte.
   * @param sizeBytes Length. Default: up to the read position.
   */
  async selectRange(position: number, sizeBytes?: number): Promise<SelectedRange | undefined> {
    if (this.#mapping !== undefined) return this.selectView(position, sizeBytes);
    const size = this.#checkSelect(position, sizeBytes);
    if (size === undefined || !this.hold()) return undefined;
    const bytes = new Uint8Array(size);
    const read = this.#handle.read(bytes, position);
    this.#reads.add(read);
    try {
      const n = await read;
      assert(n === size, `read ${n} of ${size} committed bytes at ${position}`);
    } finally {
      this.#reads.delete(read);
      this.release();
    }
    return { bytes, position, fileOffset: this.fileFromOffset + position, release: () => {} };
  }

  /** Whether reads are views of a mapping ({@link selectView} works). */
  get readsThroughMapping(): boolean {
    return this.#mapping !== undefined;
  }

  /**
   * Asks the kernel to start reading `[position, position + length)` into
   * the page cache (`POSIX_FADV_WILLNEED`, what `MADV_WILLNEED` does for a
   * shared file mapping, without touching the mapping's `MADV_RANDOM`
   * advice) and returns without waiting for the reads. Does nothing where
   * the port cannot advise or once the file is closing.
   *
   * @throws {RangeError} For a range outside the file.
   */
  adviseWillNeed(position: number, length: number): void {
    checkFileRange(position, length, this.fileSizeBytes);
    if (length === 0 || !this.hold()) return;
    try {
      this.#handle.adviseCache(position, length, "willneed");
    } finally {
      this.release();
    }
  }

  /**
   * Page-cache state of `[position, position + length)` (`cachestat`), or
   * undefined where the port cannot tell or the file is closing.
   *
   * @throws {RangeError} For a range outside the file.
   */
  pageCacheState(position: number, length: number): PageCacheState | undefined {
    checkFileRange(position, length, this.fileSizeBytes);
    if (!this.hold()) return undefined;
    try {
      return this.#handle.pageCacheState(position, length);
    } finally {
      this.release();
    }
  }

  /**
   * The parts of `[position, position + length)` that may hold data (see
   * {@link FileHandle.dataRanges}): the rest reads as zeros. The whole
   * range once the file is closing.
   *
   * @throws {RangeError} For a range outside the file.
   */
  dataRanges(position: number, length: number): FileRange[] {
    checkFileRange(position, length, this.fileSizeBytes);
    if (!this.hold()) return length === 0 ? [] : [{ position, length }];
    try {
      return this.#handle.dataRanges(position, length);
    } finally {
      this.release();
    }
  }

  /**
   * The synchronous form of {@link selectRange} for files read through a
   * mapping: a view, held until released (no copy, no promise).
   *
   * @throws {MqStoreError} `UNSUPPORTED` when the port cannot map.
   */
  selectView(position: number, sizeBytes?: number): SelectedRange | undefined {
    const mapping = this.#mapping;
    if (mapping === undefined) {
      throw new MqStoreError(
        "UNSUPPORTED",
        `Cannot view ${this.path}: the port cannot map files; use selectRange()`,
      );
    }
    const size = this.#checkSelect(position, sizeBytes);
    if (size === undefined || !this.hold()) return undefined;
    let held = true;
    return {
      bytes: mapping.bytes.subarray(position, position + size),
      position,
      fileOffset: this.fileFromOffset + position,
      release: () => {
        if (!held) return;
        held = false;
        this.release();
      },
    };
  }

  /** The size to select, or undefined when the range is not readable yet. */
  #checkSelect(position: number, sizeBytes: number | undefined): number | undefined {
    const readPosition = this.readPosition;
    const size = sizeBytes ?? Math.max(0, readPosition - position);
    if (
      !Number.isSafeInteger(position) || !Number.isSafeInteger(size) || position < 0 || size < 0
    ) {
      throw new RangeError(`Cannot select ${size} bytes at position ${position}`);
    }
    return position + size > readPosition ? undefined : size;
  }

  /**
   * Takes a reference, so the file is not unmapped or closed until
   * {@link release}. Returns false when the file is closing.
   */
  hold(): boolean {
    if (!this.#available || this.#refCount <= 0) return false;
    this.#refCount++;
    return true;
  }

  /** Drops a reference taken by {@link hold}. */
  release(): void {
    if (this.#cleanup !== undefined && this.#refCount <= 0) return;
    assert(this.#refCount > 0, `release of ${this.path} without a hold`);
    this.#refCount--;
    if (this.#refCount === 0) {
      assert(!this.#available, `the owner of ${this.path} released its reference without closing`);
      this.#startCleanup();
      const waiters = this.#releaseWaiters;
      this.#releaseWaiters = [];
      for (const wake of waiters) wake();
    }
  }

  /**
   * Sets wrote, committed and flushed to `position` (loading, recovery,
   * truncation). Bytes buffered past it are dropped. Not while a commit
   * or flush is in flight.
   */
  resetPositions(position: number): void {
    if (!Number.isSafeInteger(position) || position < 0 || position > this.fileSizeBytes) {
      throw new RangeError(
        `Position ${position} is outside segment ${this.path} of ${this.fileSizeBytes} bytes`,
      );
    }
    this.#wrote = position;
    this.#committed = position;
    this.#flushed = position;
    this.#windowStart = position;
    if (position === this.fileSizeBytes) this.#releaseWriteBuffers();
  }

  /**
   * Warms the segment before use, off the JavaScript thread: advises random
   * access (so later 4 KiB flushes write 4 KiB, not 2 MiB), pre-faults
   * every page for writing, and optionally locks it in memory. Only
   * `mapping` mode and positional writes over a mapping prepare; elsewhere
   * this does nothing.
   *
   * @returns Whether the mapping is locked in memory.
   */
  warm(options: { lock?: boolean } = {}): Promise<boolean> {
    return this.prepare({ lock: options.lock });
  }

  /**
   * Prepares the part of the segment not written yet for appends and
   * flushes, off the JavaScript thread, in chunks from the write position
   * on: advises random access (SPEC §2), pre-faults for writing, and
   * optionally writes the zeros through to the device and locks the
   * mapping (see {@link PrepareOptions}).
   *
   * Appends, flushes and reads may run while it does: pre-faulting and
   * writing back pages never changes their bytes, and the flushed position
   * is only ever moved by {@link flush}. Each chunk starts above the
   * writer's page as it is when the chunk starts (pages the writer passed
   * are skipped), and a flush reaching into the pre-fault chunk in flight
   * waits for it, so a page made durable is never dirtied again by the
   * preparation. A close stops it after the chunk in flight.
   * Only `mapping` mode and positional writes over a mapping prepare
   * (positional writes then go into pages the mapping faulted in, which
   * keeps the page cache in single pages); elsewhere this does nothing.
   *
   * @returns Whether the mapping is locked in memory.
   * @throws {MqStoreError} When pre-faulting or writing back fails (the
   *   file stays usable: appends then take the faults themselves).
   */
  prepare(options: PrepareOptions = {}): Promise<boolean> {
    const mapping = this.#mapping;
    if (
      (this.writeMode !== "mapping" && !this.#positionalWrites) || mapping === undefined ||
      !this.#available || this.#wrote === this.fileSizeBytes
    ) {
      return Promise.resolve(false);
    }
    const previous = this.#preparing ?? Promise.resolve();
    let headDone!: () => void;
    const head = new Promise<void>((resolve) => headDone = resolve);
    const run = previous.then(() => this.#prepareNow(mapping, options, headDone));
    const preparing = run.catch(() => {});
    this.#preparing = preparing;
    // A preparation that ends before its first chunk (stopped, failed,
    // nothing left) settles the head too.
    this.#headPrepared = Promise.race([head, preparing.then(() => {})]);
    return run;
  }

  /**
   * Resolves once the latest preparation has pre-faulted (and, with
   * `writeZeros`, written through) its first chunk from the write
   * position, or ended: the pages the first appends go to are ready. A
   * store awaits it at open so that its first puts do not take the page
   * faults or wait for the segment. Never rejects.
   */
  whenHeadPrepared(): Promise<void> {
    return this.#headPrepared ?? Promise.resolve();
  }

  /**
   * Resolves once the preparations started so far ended (done, stopped or
   * failed: their callers see the outcome). Never rejects.
   */
  whenPrepared(): Promise<void> {
    return this.#preparing === undefined ? Promise.resolve() : this.#preparing.then(() => {});
  }

  /**
   * Gives the pages from `position` to the end of the file the folios
   * `plan` asks for, only where that changes their advice (see
   * `PrepareOptions.plan`): small ones are advised `MADV_RANDOM` and
   * `MADV_NOHUGEPAGE` to the end, large ones the segment's own advice
   * again. Advised to the end, not chunk by chunk: each advised range
   * with other advice than its neighbours is a mapping region of its own
   * (a line of `/proc/self/maps`), and a writer that overtook its
   * pre-fault between two chunks left a gap between their ranges, two
   * more regions a burst of a slow writer (a 1 GiB segment written in
   * 200 KB bursts would have made ~10,000, against the kernel's
   * `vm.max_map_count`, 65,530 by default). Each `madvise` takes the mmap lock for writing on the
   * JavaScript thread: now one a switch, not one a chunk.
   */
  #adviseFolios(mapping: Mapping, position: number, plan: PrefaultPlan): void {
    const advised = this.#advised;
    assert(advised !== undefined, "a preparation advised the mapping before its chunks");
    // A random segment's own advice could not be given back whole: no
    // advice clears MADV_NOHUGEPAGE but MADV_HUGEPAGE.
    assert(!advised.random, "folio plans are for segments of the default advice");
    const smallFrom = advised.smallFrom;
    const length = this.fileSizeBytes - position;
    if (plan.randomAccess) {
      if (smallFrom !== undefined && smallFrom <= position) return;
      mapping.advise(position, length, "random");
      mapping.advise(position, length, "nohugepage");
      advised.smallFrom = position;
      return;
    }
    if (smallFrom === undefined) return;
    if (advised.random) {
      mapping.advise(position, length, "random");
    } else {
      mapping.advise(position, length, "normal");
      mapping.advise(position, length, "hugepage");
    }
    advised.smallFrom = undefined;
  }

  async #prepareNow(
    mapping: Mapping,
    options: PrepareOptions,
    headDone: () => void,
  ): Promise<boolean> {
    const page = this.#port.pageSizeBytes;
    const size = this.fileSizeBytes;
    // Pre-faulted (and zeros written) below `limit` only; advised to the end.
    const limit = Math.min(size, options.endPosition ?? size);
    const writerPage = () => this.#wrote - this.#wrote % page;
    // A chunk starts at `at`, and above the writer's page once it wrote.
    const chunkStart = (at: number) => Math.max(at, this.#wrote === 0 ? 0 : writerPage() + page);
    const startPosition = options.startPosition ?? 0;
    assert(
      startPosition % page === 0 && startPosition >= 0,
      `a preparation starts at a page (${startPosition})`,
    );
    const from = Math.max(writerPage(), startPosition);
    if (!this.#available || from >= limit) return false;
    const random = options.randomAccess !== false;
    const advised = this.#advised;
    if (advised === undefined || advised.random !== random || advised.from > from) {
      if (random) {
        mapping.advise(from, size - from, "random");
      } else {
        mapping.advise(from, size - from, "normal");
        mapping.advise(from, size - from, "hugepage");
      }
      this.#advised = { from, random };
    }
    const populate = options.populate !== false;
    const writeZeros = options.writeZeros === true;
    let chunk = writeZeros ? PREPARE_WRITE_CHUNK_BYTES : PREPARE_POPULATE_CHUNK_BYTES;
    // Only pre-faulting ahead of a mapping writer adapts its chunks: with
    // positional writes a group commit's fdatasync waits for the chunk in
    // flight, and zeros written through are paced by the flusher.
    const adaptive = !writeZeros && !this.#positionalWrites;
    const live = () => this.#available && options.stopped?.() !== true;
    for (let at = from; at < limit;) {
      // The first chunk is done: the first appends find their pages ready.
      if (at > from) headDone();
      // Only pages past the writer's, re-read before each chunk: it faulted
      // the ones it wrote, and pre-faulting a page that a flush has cleaned
      // would make it dirty again (written back twice, and never durable
      // in the eyes of a page-cache probe). A flush that reaches into the
      // chunk while it runs waits for it (see #populating).
      let start = chunkStart(at);
      if (!live() || start >= limit) break;
      if (populate && options.ahead !== undefined) {
        for (
          let wait = options.ahead(this.fileFromOffset + start);
          wait !== undefined && live();
          wait = options.ahead(this.fileFromOffset + start)
        ) {
          // As for the pace below: a close must not wait for the writer.
          await this.#untilRetiring(wait);
          start = chunkStart(at);
        }
        if (!live() || start >= limit) break;
      }
      const plan = options.plan?.(this.fileFromOffset + start);
      // Whole pages, at least one, whatever the plan's unit.
      assert(plan === undefined || plan.chunkBytesMax > 0, "a plan's chunk cap is positive");
      const cap = plan === undefined
        ? chunk
        : Math.max(page, plan.chunkBytesMax - plan.chunkBytesMax % page);
      const end = Math.min(limit, start + Math.min(chunk, cap));
      at = end;
      if (plan !== undefined) this.#adviseFolios(mapping, start, plan);
      if (populate) {
        const writer = options.writerOffset;
        const wroteBefore = writer?.() ?? this.#wrote;
        await this.#populate(mapping, start, end, { read: options.read });
        if (adaptive && writer !== undefined && this.#wrote === 0) {
          // A segment ahead of its writer: no flush waits for its chunks,
          // and small ones, where a chunk's completion waits for a turn of
          // the event loop, cap the pre-fault below a fast writer's rate.
          chunk = populateChunkBytes(writer() - wroteBefore, 0, page);
        } else if (adaptive) {
          chunk = populateChunkBytes(this.#wrote - wroteBefore, end - this.#wrote, page);
        }
      }
      if (!writeZeros) continue;
      for (let wait = options.pace?.(); wait !== undefined && live(); wait = options.pace?.()) {
        // A close must not wait for the pace (it may wait for a quiet gap
        // that a closing store never gives).
        await this.#untilRetiring(wait);
      }
      // Zeros only past the writer's page, so appended bytes are left to
      // flush() (bytes appended into the chunk while it is written back may
      // become durable early, which is harmless). Decided in the same
      // synchronous step as the pace's answer.
      const zerosFrom = Math.max(start, this.#wrote === 0 ? 0 : writerPage() + page);
      if (!live() || zerosFrom >= end) continue;
      // Written back, the pages are clean and write-protected again, so an
      // append takes a (cheap, minor) fault per page. Pre-faulting them once
      // more would make the whole segment dirty a second time, and the
      // kernel's background writeback then writes the zeros again, in
      // front of the flushes (measured: SYNC acks/s down by a third).
      await mapping.sync(zerosFrom, end - zerosFrom);
    }
    return options.lock === true && live() ? mapping.lock() : false;
  }

  /**
   * Pre-faults `[start, end)` (and reads it: `populateOptions.read`), published as
   * {@link MappedFile.#populating} meanwhile.
   */
  async #populate(
    mapping: Mapping,
    start: number,
    end: number,
    populateOptions: PopulateOptions,
  ): Promise<void> {
    assert(this.#populating === undefined, "pre-fault chunks run one at a time");
    const running = mapping.populate(start, end - start, populateOptions);
    const chunk = { start, end, done: running.then(() => {}, () => {}) };
    this.#populating = chunk;
    try {
      await running;
    } finally {
      this.#populating = undefined;
    }
  }

  /** Last modification time of the file (for age-based deletion). */
  async lastModifiedMs(): Promise<number> {
    const stat = await this.#port.stat(this.path);
    if (stat === undefined) {
      throw new MqStoreError("NOT_FOUND", `Segment ${this.path} is gone`);
    }
    return stat.modifiedMs;
  }

  /**
   * Unmaps and closes the file once readers released their ranges, or
   * after `waitMs` anyway (their views are detached). Buffered bytes that
   * were not committed are dropped: commit and flush first. Idempotent.
   */
  async close(options: CloseMappedFileOptions = {}): Promise<void> {
    const waitMs = options.waitMs ?? DESTROY_FORCE_AFTER_MS_DEFAULT;
    this.#retire();
    if (this.#cleanup === undefined) await this.#waitForRelease(waitMs);
    await this.#startCleanup();
  }

  /** {@link close}, then removes the file. Idempotent. */
  async destroy(options: CloseMappedFileOptions = {}): Promise<void> {
    await this.close(options);
    await this.#remove();
  }

  /**
   * RocketMQ's `destroy(intervalForcibly)`: closes and removes the file if
   * no reader holds it; if one does, returns false unless `forceAfterMs`
   * passed since the first attempt, in which case the mapping is retired
   * under the readers. Never waits for readers.
   *
   * @returns Whether the file is gone.
   */
  async tryDestroy(forceAfterMs: number): Promise<boolean> {
    this.#retire();
    if (
      this.#cleanup === undefined &&
      this.#clock.nowMs() - this.#retiredAtMs < forceAfterMs
    ) {
      return false;
    }
    await this.#startCleanup();
    await this.#remove();
    return true;
  }

  #checkAppendable(): void {
    if (this.writeMode === "read-only") {
      throw new MqStoreError("UNSUPPORTED", `Cannot append to ${this.path}: opened read-only`);
    }
    if (!this.#available) {
      throw new MqStoreError("CLOSED", `Cannot append to ${this.path}: the segment is closed`);
    }
    if (this.#wrote >= this.fileSizeBytes) {
      throw new RangeError(`Cannot append to ${this.path}: the segment is full`);
    }
  }

  #prepareTarget(): MutableAppendTarget {
    const target = this.#target;
    const wrote = this.#wrote;
    target.fileOffset = this.fileFromOffset + wrote;
    target.remainingBytes = this.fileSizeBytes - wrote;
    target.writableBytes = target.remainingBytes;
    if (this.writeMode === "mapping") {
      target.bytes = (this.#mapping as Mapping).bytes;
      target.index = wrote;
    } else if (this.writeMode === "pool") {
      const buffer = this.#poolBuffer;
      assert(buffer !== undefined, "a file in pool mode keeps its buffer until fully committed");
      target.bytes = buffer;
      target.index = wrote;
    } else {
      // The window is allocated on first use so that loaded, full segments
      // cost no buffer.
      this.#window ??= new Uint8Array(this.#windowSizeBytes);
      assert(this.#windowStart === this.#committed, "the window starts at committed");
      target.bytes = this.#window;
      target.index = wrote - this.#windowStart;
      target.writableBytes = Math.min(target.remainingBytes, this.#window.length - target.index);
    }
    return target;
  }

  /** Writes `[committed, wrote)` from the write buffer into the file. */
  async #commitNow(): Promise<void> {
    if (this.#positionalWrites) {
      this.#commitSync();
      return;
    }
    const from = this.#committed;
    const to = this.#wrote;
    if (to > from) {
      let source: Uint8Array;
      if (this.writeMode === "pool") {
        const buffer = this.#poolBuffer;
        assert(buffer !== undefined, "uncommitted bytes keep the pool buffer");
        source = buffer.subarray(from, to);
      } else {
        const window = this.#window;
        assert(window !== undefined, "uncommitted bytes keep the window");
        source = window.subarray(from - this.#windowStart, to - this.#windowStart);
      }
      await this.#handle.write(source, from);
      assert(this.#committed === from, "commits are serialised");
      this.#committed = to;
      if (this.writeMode === "window" && this.#window !== undefined) {
        // Appends made while the write was in flight sit after the written
        // range; move them to the front so the window starts at committed.
        this.#window.copyWithin(0, to - this.#windowStart, this.#wrote - this.#windowStart);
        this.#windowStart = to;
      }
    }
    if (this.#committed === this.fileSizeBytes) this.#releaseWriteBuffers();
  }

  /**
   * {@link MappedFile.#commitNow} with a synchronous positional write (with
   * `positionalWrites`): nothing can be appended during it, so the window
   * is empty afterwards.
   */
  #commitSync(): void {
    const from = this.#committed;
    const to = this.#wrote;
    if (to > from) {
      const window = this.#window;
      assert(window !== undefined, "uncommitted bytes keep the window");
      this.#handle.writeSync(
        window.subarray(from - this.#windowStart, to - this.#windowStart),
        from,
      );
      this.#committed = to;
      this.#windowStart = to;
    }
    if (this.#committed === this.fileSizeBytes) this.#releaseWriteBuffers();
  }

  #releaseWriteBuffers(): void {
    this.#window = undefined;
    this.#windowStart = this.#committed;
    const buffer = this.#poolBuffer;
    if (buffer !== undefined) {
      this.#poolBuffer = undefined;
      this.#pool?.giveBack(buffer);
      // A later truncation may make the file writable again; it is then
      // written like a loaded segment (RocketMQ: writeBuffer null).
      this.#writeMode = this.#mapping !== undefined ? "mapping" : "window";
    }
  }

  /** Runs `operation` after every commit and flush started before it. */
  #exclusive<T>(operation: () => Promise<T>): Promise<T> {
    // Cleanup waits for operations queued before it started; later ones
    // would race the unmap and the close.
    if (this.#cleanup !== undefined) {
      return Promise.reject(
        new MqStoreError("CLOSED", `Cannot commit or flush ${this.path}: the segment is closed`),
      );
    }
    const result = this.#ioTail.then(operation);
    this.#ioTail = result.then(() => {}, () => {});
    return result;
  }

  /** Stops new holds and drops the owner's reference (once). */
  #retire(): void {
    if (!this.#available) return;
    this.#available = false;
    this.#resolveRetiring?.();
    this.#retiredAtMs = this.#clock.nowMs();
    this.release();
  }

  #waitForRelease(waitMs: number): Promise<void> {
    if (this.#refCount <= 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let cancel = () => {};
      const wake = () => {
        cancel();
        resolve();
      };
      this.#releaseWaiters.push(wake);
      cancel = this.#clock.setTimer(waitMs, () => {
        this.#releaseWaiters = this.#releaseWaiters.filter((w) => w !== wake);
        resolve();
      });
    });
  }

  /** Unmaps and closes once; by force when readers still hold ranges. */
  #startCleanup(): Promise<void> {
    if (this.#cleanup === undefined) {
      this.#cleanup = this.#cleanupNow();
      // Awaited by close()/destroy(); keep an unawaited start from being
      // reported as unhandled.
      this.#cleanup.catch(() => {});
    }
    return this.#cleanup;
  }

  async #cleanupNow(): Promise<void> {
    // Commits, flushes and positional reads in flight use the descriptor,
    // the mapping and the pool buffer: let them finish first.
    await this.#ioTail;
    await this.#startedFlush?.catch(() => {});
    await Promise.allSettled([...this.#reads]);
    await this.#preparing;
    this.#mapping?.unmap();
    this.#releaseWriteBuffers();
    await this.#handle.close();
  }

  async #remove(): Promise<void> {
    if (this.#removed) return;
    this.#removed = true;
    await this.#port.remove(this.path);
  }
}

function checkFileRange(position: number, length: number, fileSizeBytes: number): void {
  if (
    !Number.isSafeInteger(position) || !Number.isSafeInteger(length) || position < 0 ||
    length < 0 || position + length > fileSizeBytes
  ) {
    throw new RangeError(
      `Range of ${length} bytes at position ${position} is outside the ${fileSizeBytes}-byte file`,
    );
  }
}

/**
 * The next pre-fault chunk, from how far the writer advanced while the
 * last one ran (from its start to when its completion reached this
 * thread) and how far the pre-faulted pages now reach past it. At least
 * twice that advance ahead: the smallest chunk. Closer: twice the
 * advance, whole pages, within [{@link PREPARE_POPULATE_CHUNK_BYTES},
 * {@link POPULATE_CHUNK_MAX_BYTES}], so the pre-fault covers pages about
 * twice as fast as the writer fills them even where each chunk's
 * completion waits long for the JavaScript thread to notice it. Measured
 * (Deno, sustained 1 KiB ASYNC puts at ~300 MB/s, the producer yielding
 * with setImmediate): a nonblocking call's completion was noticed 60–140 ms
 * late, the writer passed 20–27 MiB of pages meanwhile and faulted them
 * itself (18–32 % of the main thread's samples, zeroing included; 5 %
 * with adaptive chunks, and ~30 % less main-thread CPU per MB). Where
 * completions come back at once (Bun's worker, an idle writer) the chunk
 * stays at the minimum.
 */
function populateChunkBytes(
  writerAdvancedBytes: number,
  leadBytes: number,
  pageBytes: number,
): number {
  const wanted = 2 * Math.max(0, writerAdvancedBytes);
  if (leadBytes >= wanted) return PREPARE_POPULATE_CHUNK_BYTES;
  const pages = Math.ceil(wanted / pageBytes) * pageBytes;
  return Math.min(POPULATE_CHUNK_MAX_BYTES, Math.max(PREPARE_POPULATE_CHUNK_BYTES, pages));
}

/**
 * The least-pages rule of RocketMQ's `isAbleToFlush` / `isAbleToCommit`:
 * a full file always; else whole 4 KiB pages between `done` and `target`
 * when `leastPages > 0` (so 4095 → 4097 counts as one page); else any
 * progress.
 *
 * @example
 * ```ts
 * import { isAbleTo } from "./mapped_file.ts";
 *
 * console.log(isAbleTo(4095, 4097, false, 1)); // true
 * console.log(isAbleTo(0, 4095, false, 1)); // false
 * ```
 */
export function isAbleTo(done: number, target: number, full: boolean, leastPages: number): boolean {
  if (full) return true;
  if (leastPages > 0) {
    return Math.floor(target / OS_PAGE_SIZE_BYTES) - Math.floor(done / OS_PAGE_SIZE_BYTES) >=
      leastPages;
  }
  return target > done;
}

function checkLeastPages(leastPages: number): void {
  if (!Number.isSafeInteger(leastPages) || leastPages < 0) {
    throw new RangeError(`leastPages ${leastPages} must be a non-negative integer`);
  }
}

function checkOptions(options: MappedFileOptions): void {
  if (!Number.isSafeInteger(options.fileSizeBytes) || options.fileSizeBytes <= 0) {
    throw new RangeError(`Segment size ${options.fileSizeBytes} must be a positive integer`);
  }
  const buffer = options.writeBufferSizeBytes;
  if (buffer !== undefined && (!Number.isSafeInteger(buffer) || buffer <= 0)) {
    throw new RangeError(`Write buffer size ${buffer} must be a positive integer`);
  }
  startOffsetOf(options.path);
}

function startOffsetOf(path: string): number {
  const offset = parseSegmentFileName(baseName(path));
  if (offset === undefined) {
    throw new RangeError(`Segment path ${path} must end in a 20-digit start offset`);
  }
  return offset;
}
