/**
 * One index file: a fixed-size hash table from message keys to commit-log
 * offsets (RocketMQ's `IndexFile`). See `_index_file_constants.ts` for the
 * byte layout.
 *
 * ```
 * | header 40 B | hashSlotNum × int32 slot | indexNum × 20 B entry |
 *                 slot[h % hashSlotNum] = newest entry number of hash h's chain
 *                 entry = keyHash | phyOffset | timeDiffSec | prevIndex
 * ```
 *
 * Entries are numbered from 1 (`indexCount` starts at 1, entry 0 stays
 * zero); each new entry becomes the head of its slot's chain and links to
 * the previous head. The file is full when `indexCount` reaches
 * `indexNum`, so it holds `indexNum − 1` entries, as in RocketMQ.
 *
 * Lookups compare key hashes only, never the key text: a query returns
 * every offset whose key hashes like the asked key (RocketMQ does the
 * same); the caller decodes the messages and filters.
 *
 * Where the port can map files the table is the mapping; elsewhere (the
 * portable adapter) it is a copy of the whole file in memory, written back
 * on {@link IndexFile.flush}.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import { javaHashCode } from "../record/mod.ts";
import type { FileHandle, Mapping, RuntimePort } from "../runtime/port.ts";
import { readInt64, writeInt64 } from "./_consume_queue_int64.ts";
import {
  ENTRY_KEY_HASH_POSITION,
  ENTRY_PHY_OFFSET_POSITION,
  ENTRY_PREV_INDEX_POSITION,
  ENTRY_TIME_DIFF_POSITION,
  HASH_SLOT_SIZE_BYTES,
  HEADER_BEGIN_PHY_OFFSET_POSITION,
  HEADER_BEGIN_TIMESTAMP_POSITION,
  HEADER_END_PHY_OFFSET_POSITION,
  HEADER_END_TIMESTAMP_POSITION,
  HEADER_HASH_SLOT_COUNT_POSITION,
  HEADER_INDEX_COUNT_POSITION,
  INDEX_ENTRY_SIZE_BYTES,
  INDEX_HEADER_SIZE_BYTES,
  INDEX_POPULATE_CHUNK_BYTES,
  INT32_MAX,
  INVALID_INDEX,
  PREPARED_TIMESTAMP,
} from "./_index_file_constants.ts";

/** Keys a run's scratch arrays hold at first (they grow to a run's keys). */
const RUN_KEYS_INITIAL = 0x100;

/**
 * What `IndexFile.#touchSlots` worked out for the run being written, key
 * by key in run order: each key's hash as stored (`indexKeyHashOf`) and
 * its slot's position, so the writing loop neither hashes nor divides
 * again. One pair of arrays for every index file: a run is written within
 * one synchronous call, so no two runs ever use them at once.
 */
const runScratch = {
  keyHashes: new Int32Array(RUN_KEYS_INITIAL),
  slotPositions: new Int32Array(RUN_KEYS_INITIAL),
};

/** Options shared by {@link IndexFile.create} and {@link IndexFile.open}. */
export interface IndexFileOptions {
  /** The runtime port. */
  port: RuntimePort;
  /** Path of the file. */
  path: string;
  /** Number of hash slots (`maxHashSlotNum`). */
  hashSlotNum: number;
  /** Number of entries, entry 0 included (`maxIndexNum`). */
  indexNum: number;
}

/** Options of {@link IndexFile.create}. */
export interface CreateIndexFileOptions extends IndexFileOptions {
  /**
   * endPhyOffset of the previous file: the new file's begin and end until
   * its first entry (RocketMQ passes it on a roll).
   *
   * @default {0}
   */
  endPhyOffset?: number;
  /**
   * endTimestamp of the previous file: the base of the first entry's
   * timeDiffSec, as in RocketMQ.
   *
   * @default {0}
   */
  endTimestamp?: number;
  /**
   * Create a sparse file (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
}

/** Options of {@link IndexFile.prepare}. */
export interface PrepareIndexFileOptions extends IndexFileOptions {
  /**
   * Create a sparse file (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
}

/** Options of {@link IndexFile.open}. */
export interface OpenIndexFileOptions extends IndexFileOptions {
  /**
   * Open without write access.
   *
   * @default {false}
   */
  readOnly?: boolean;
}

/** One decoded index entry. */
export interface IndexEntry {
  /** Hash of `topic#key` ({@link indexKeyHash}). */
  keyHash: number;
  /** Commit-log offset of the message. */
  phyOffset: number;
  /** Seconds from the file's beginTimestamp to the message's storeTimestamp. */
  timeDiffSec: number;
  /** Previous entry of the same slot, 0 = none. */
  prevIndex: number;
}

/**
 * The hash RocketMQ indexes a key under: `abs(String.hashCode(key))`, 0
 * when that is still negative (`Integer.MIN_VALUE`).
 *
 * @example
 * ```ts
 * import { indexKeyHash } from "./index_file.ts";
 *
 * indexKeyHash("TopicTest#bulk-key"); // 842971942
 * ```
 *
 * @param key The full index key, `topic#key`.
 * @returns A non-negative int32.
 */
export function indexKeyHash(key: string): number {
  return indexKeyHashOf(javaHashCode(key));
}

/**
 * {@link indexKeyHash} from the Java hash of the full key (as
 * `DispatchView` computes it without building the key).
 *
 * @example
 * ```ts
 * import { indexKeyHashOf } from "./index_file.ts";
 *
 * indexKeyHashOf(-5); // 5
 * indexKeyHashOf(-0x80000000); // 0
 * ```
 *
 * @param javaHash `String.hashCode()` of `topic#key`, an int32.
 * @returns A non-negative int32.
 */
export function indexKeyHashOf(javaHash: number): number {
  const hash = Math.abs(javaHash);
  // Math.abs of -2^31 is 2^31 in JS; Java's stays -2^31, which RocketMQ maps to 0.
  return hash > INT32_MAX ? 0 : hash;
}

/**
 * Size of an index file for the given slot and entry counts.
 *
 * @example
 * ```ts
 * import { indexFileSizeBytes } from "./index_file.ts";
 *
 * indexFileSizeBytes(64, 256); // 5416
 * ```
 */
export function indexFileSizeBytes(hashSlotNum: number, indexNum: number): number {
  return INDEX_HEADER_SIZE_BYTES + hashSlotNum * HASH_SLOT_SIZE_BYTES +
    indexNum * INDEX_ENTRY_SIZE_BYTES;
}

/**
 * An index file.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { IndexFile } from "./index_file.ts";
 *
 * const port = new MemoryPort("deno");
 * await port.makeDirectory("/store/index");
 * const file = await IndexFile.create({
 *   port, path: "/store/index/20261129121453504", hashSlotNum: 64, indexNum: 256,
 * });
 * file.putKey("Orders#order-1", 0, 1795954493497);
 * const offsets: number[] = [];
 * file.selectPhyOffset(offsets, "Orders#order-1", 64, 0, Number.MAX_SAFE_INTEGER);
 * console.log(offsets); // [0]
 * await file.flush();
 * await file.close();
 * ```
 */
export class IndexFile {
  /** Path of the file. */
  readonly path: string;
  /** Number of hash slots. */
  readonly hashSlotNum: number;
  /** Number of entries, entry 0 included. */
  readonly indexNum: number;
  /** Size of the file. */
  readonly fileSizeBytes: number;

  #port: RuntimePort;
  #handle: FileHandle;
  /** The mapping, on ports that map; undefined for an in-memory copy. */
  #mapping: Mapping | undefined;
  /**
   * The whole file: the mapping's view, or an in-memory copy. A mapping's
   * view is made at the first entry or lookup ({@link #ensureView}): some
   * runtimes count a view's whole length as heap while it lives (401 MiB
   * for the default file), and a store opens and prepares its index file
   * before any key is put, often with none ever put. Empty until then.
   */
  #bytes: Uint8Array = new Uint8Array(0);
  #view: DataView = new DataView(new ArrayBuffer(0));
  /** Whether {@link #bytes} and {@link #view} cover the file. */
  #viewed = false;
  /**
   * The header while the mapping has no view: written into the file by a
   * positional write at {@link flush}, and into the view when it is made.
   */
  #header: Uint8Array | undefined;
  #headerView: DataView | undefined;
  /** What {@link #touchSlots} read (kept so that the reads are not dropped). */
  #touched = 0;
  #readOnly: boolean;
  /**
   * Where a file prepared ahead lies until {@link IndexFile.activate}
   * renames it to {@link IndexFile.path}; undefined once in use.
   */
  #preparedPath: string | undefined;
  /** Changed byte range not yet durable (`dirtyStart >= dirtyEnd`: none). */
  #dirtyStart = Number.POSITIVE_INFINITY;
  #dirtyEnd = 0;
  #closed = false;
  /**
   * Where the entries are pre-faulted up to (see {@link #populateAhead}):
   * the end of the last chunk asked for.
   */
  #populatedTo = 0;
  /**
   * A changed range ending past this starts the next pre-fault chunk: the
   * start of the chunk asked for last, which the writer enters next;
   * +Infinity after a failed chunk, and where there is nothing to
   * pre-fault (no mapping, the file's end reached).
   */
  #populateMark = Number.POSITIVE_INFINITY;
  // The header, mirrored in memory (RocketMQ's IndexHeader).
  #beginTimestamp = 0;
  #endTimestamp = 0;
  #beginPhyOffset = 0;
  #endPhyOffset = 0;
  #hashSlotCount = 0;
  #indexCount = 1;

  private constructor(
    options: IndexFileOptions,
    handle: FileHandle,
    mapping: Mapping | undefined,
    bytes: Uint8Array | undefined,
    fileSizeBytes: number,
    readOnly: boolean,
  ) {
    this.path = options.path;
    this.hashSlotNum = options.hashSlotNum;
    this.indexNum = options.indexNum;
    this.fileSizeBytes = fileSizeBytes;
    this.#port = options.port;
    this.#handle = handle;
    this.#mapping = mapping;
    if (bytes !== undefined) this.#setBytes(bytes);
    this.#readOnly = readOnly;
    // The first entry written starts the pre-fault; a write of the header
    // or of a slot never reaches past the slots.
    if (mapping !== undefined && !readOnly) {
      this.#populateMark = INDEX_HEADER_SIZE_BYTES + this.hashSlotNum * HASH_SLOT_SIZE_BYTES;
    }
  }

  /**
   * Advises the header and the slots (up to the page where the entries
   * start) `MADV_RANDOM`, and the entries `MADV_HUGEPAGE`.
   *
   * The entries are written in order, 40 bytes a message of two keys, and
   * pre-faulted ahead (see {@link #populateAhead}). Under the default
   * advice their folios were 4–64 KiB, each 4 KiB page mapped on its own,
   * and on this VM the first store into each such page costs the writer
   * 8–20 µs of user time that the guest kernel never sees (by all signs a
   * page-table fill of the hypervisor's; the commit log, PMD-mapped, does
   * not pay it): one slow entry write in about every 100 messages,
   * 125–140 ns a message of the JavaScript thread (awaited single 1 KiB
   * puts, one engine, per-call timers; 180–200 ns on the other two).
   * Under `MADV_HUGEPAGE` the kernel reads the entries in as 2 MiB folios
   * and maps each with one PMD: 10 of 10 full blocks so mapped, entry
   * writes over 1.5 µs 3,211 → 214 in 300 k puts (one run each). The
   * flush cost stays what SPEC §2 says of the default advice (a flush
   * ending inside a folio writes up to 2 MiB).
   *
   * The slots are read and written at random. `MADV_RANDOM` keeps them in
   * 4 KiB folios, as SPEC §2 asks, and is also, measured, what lets the
   * entries keep 2 MiB folios: with hugepage advice on the entries alone,
   * the folios after the first two blocks were 16 KiB again (2 of 11
   * blocks PMD-mapped). The two regions share the file's read-ahead state,
   * which the slots' faults under the default advice presumably reset.
   *
   * Only the entries of a writable file with room for more are advised
   * hugepage: in a full one (loaded at open, never written again) a
   * lookup's read fault under that advice would read up to 4 MiB in.
   */
  #adviseRegions(): void {
    const mapping = this.#mapping;
    if (mapping === undefined) return;
    const entriesStart = INDEX_HEADER_SIZE_BYTES + this.hashSlotNum * HASH_SLOT_SIZE_BYTES;
    const page = this.#port.pageSizeBytes;
    const entriesPage = entriesStart - entriesStart % page;
    assert(entriesPage < this.fileSizeBytes, "the entries start inside the file");
    // A file of few slots (tests) has them in the entries' first page.
    if (entriesPage > 0) mapping.advise(0, entriesPage, "random");
    if (this.#readOnly || this.#indexCount >= this.indexNum) return;
    mapping.advise(entriesPage, this.fileSizeBytes - entriesPage, "hugepage");
  }

  /**
   * Creates a new, empty index file (allocated up front unless `sparse`).
   *
   * @throws {MqStoreError} `ALREADY_EXISTS` when the file exists.
   */
  static async create(options: CreateIndexFileOptions): Promise<IndexFile> {
    const size = checkedFileSize(options);
    const handle = await options.port.createFile(options.path, size, { sparse: options.sparse });
    const file = await IndexFile.#attach(options, handle, false, true);
    file.#adviseRegions();
    // A full file is made durable on a roll; its name must be durable too.
    await options.port.syncDirectory(options.path.slice(0, options.path.lastIndexOf("/")));
    const endPhyOffset = options.endPhyOffset ?? 0;
    const endTimestamp = options.endTimestamp ?? 0;
    if (endPhyOffset > 0) {
      file.#beginPhyOffset = endPhyOffset;
      file.#endPhyOffset = endPhyOffset;
    }
    if (endTimestamp > 0) {
      file.#beginTimestamp = endTimestamp;
      file.#endTimestamp = endTimestamp;
    }
    file.#writeHeader();
    return file;
  }

  /**
   * Creates an index file ahead of need (allocated up front unless
   * `sparse`) under `<path>.tmp`, its header marked with
   * {@link PREPARED_TIMESTAMP} and made durable, so that a crash leaves a
   * file neither mqstore nor RocketMQ puts in use (see the constant). It
   * takes no entry before {@link IndexFile.activate}; the directory is not
   * synced (the name changes at activation).
   *
   * @throws {MqStoreError} `NO_SPACE` when the disk cannot hold it.
   */
  static async prepare(options: PrepareIndexFileOptions): Promise<IndexFile> {
    const size = checkedFileSize(options);
    const preparedPath = `${options.path}.tmp`;
    // A leftover of an interrupted preparation (load removes them too).
    await options.port.remove(preparedPath);
    const handle = await options.port.createFile(preparedPath, size, { sparse: options.sparse });
    const file = await IndexFile.#attach(options, handle, false, true);
    file.#adviseRegions();
    file.#preparedPath = preparedPath;
    try {
      file.#beginTimestamp = PREPARED_TIMESTAMP;
      file.#endTimestamp = PREPARED_TIMESTAMP;
      file.#writeHeader();
      await file.flush();
    } catch (error) {
      await file.destroy();
      throw error;
    }
    return file;
  }

  /**
   * Puts a file made by {@link IndexFile.prepare} in use: renames it to
   * its path and writes the header a {@link IndexFile.create} with the
   * same `endPhyOffset`/`endTimestamp` writes (the previous file's end).
   * The new name is durable once the caller syncs the directory; the
   * header once the file is flushed.
   */
  async activate(endPhyOffset: number, endTimestamp: number): Promise<void> {
    this.#checkNotReadOnly();
    const preparedPath = this.#preparedPath;
    assert(preparedPath !== undefined, `${this.path} is a prepared file`);
    assert(this.#indexCount === 1, `prepared ${this.path} holds no entry`);
    await this.#port.rename(preparedPath, this.path);
    this.#preparedPath = undefined;
    this.#beginPhyOffset = this.#endPhyOffset = Math.max(endPhyOffset, 0);
    this.#beginTimestamp = this.#endTimestamp = Math.max(endTimestamp, 0);
    this.#writeHeader();
  }

  /** Whether the file is prepared ahead and not yet activated. */
  get isPrepared(): boolean {
    return this.#preparedPath !== undefined;
  }

  /** Whether the header marks a prepared file a crash left under its real name. */
  get isPreparedMark(): boolean {
    return this.#endTimestamp === PREPARED_TIMESTAMP;
  }

  /**
   * Opens an existing index file and loads its header.
   *
   * @throws {MqStoreError} `INVALID_FILE` when its size does not match
   *   `hashSlotNum`/`indexNum` (RocketMQ would remap it to another size).
   */
  static async open(options: OpenIndexFileOptions): Promise<IndexFile> {
    const size = checkedFileSize(options);
    const readOnly = options.readOnly === true;
    const handle = await options.port.openFile(options.path, { readOnly });
    if (handle.sizeBytes !== size) {
      await handle.close();
      throw new MqStoreError(
        "INVALID_FILE",
        `Index file ${options.path} is ${handle.sizeBytes} bytes; ${options.hashSlotNum} slots and ${options.indexNum} entries make ${size}`,
      );
    }
    const file = await IndexFile.#attach(options, handle, readOnly, false);
    if (file.#viewed) {
      file.#loadHeader(file.#view);
    } else {
      // Read, not through the mapping: that would make its view.
      const header = new Uint8Array(INDEX_HEADER_SIZE_BYTES);
      try {
        await readFully(handle, header, 0, options.path);
      } catch (error) {
        await file.close();
        throw error;
      }
      file.#loadHeader(new DataView(header.buffer));
    }
    file.#adviseRegions();
    return file;
  }

  /**
   * Maps the file, or (without mmap) reads into memory the bytes a lookup
   * or a put can reach: the header, every slot and the entries up to
   * `indexCount` (a slot or chain link may name entry `indexCount`, never
   * one past it). A `fresh` file is all zeros and is not read. The rest
   * stays zero in memory, and entries written there are flushed over
   * whatever a crash left on disk.
   */
  static async #attach(
    options: IndexFileOptions,
    handle: FileHandle,
    readOnly: boolean,
    fresh: boolean,
  ): Promise<IndexFile> {
    try {
      const size = handle.sizeBytes;
      if (options.port.canMap) {
        const mapping = await handle.map(0, size);
        return new IndexFile(options, handle, mapping, undefined, size, readOnly);
      }
      const bytes = new Uint8Array(size);
      if (!fresh) {
        const header = bytes.subarray(0, INDEX_HEADER_SIZE_BYTES);
        await readFully(handle, header, 0, options.path);
        const storedCount = new DataView(header.buffer).getInt32(HEADER_INDEX_COUNT_POSITION);
        const lastEntry = Math.min(Math.max(storedCount, 1), options.indexNum - 1);
        const end = INDEX_HEADER_SIZE_BYTES + options.hashSlotNum * HASH_SLOT_SIZE_BYTES +
          (lastEntry + 1) * INDEX_ENTRY_SIZE_BYTES;
        await readFully(
          handle,
          bytes.subarray(INDEX_HEADER_SIZE_BYTES, end),
          INDEX_HEADER_SIZE_BYTES,
          options.path,
        );
      }
      return new IndexFile(options, handle, undefined, bytes, size, readOnly);
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /** The file name (creation time `yyyyMMddHHmmssSSS`). */
  get fileName(): string {
    return this.path.slice(this.path.lastIndexOf("/") + 1);
  }

  /** storeTimestamp of the first entry (or the previous file's end before one). */
  get beginTimestamp(): number {
    return this.#beginTimestamp;
  }

  /** storeTimestamp of the last entry. */
  get endTimestamp(): number {
    return this.#endTimestamp;
  }

  /** Commit-log offset of the first entry. */
  get beginPhyOffset(): number {
    return this.#beginPhyOffset;
  }

  /** Commit-log offset of the last entry. */
  get endPhyOffset(): number {
    return this.#endPhyOffset;
  }

  /** Entries that found their slot empty. */
  get hashSlotCount(): number {
    return this.#hashSlotCount;
  }

  /** Number of the next entry (entries are 1..indexCount-1). */
  get indexCount(): number {
    return this.#indexCount;
  }

  /** Whether no entry fits any more. */
  get isWriteFull(): boolean {
    return this.#indexCount >= this.indexNum;
  }

  /** Whether changes are not yet durable. */
  get isDirty(): boolean {
    return this.#dirtyStart < this.#dirtyEnd;
  }

  /**
   * Adds an entry for `key` (RocketMQ's `putKey`): links it to its slot's
   * chain and makes it the slot's head; the header's end fields follow.
   * A slot value that is not a current entry number counts as empty.
   *
   * @param key The full key, `topic#key`.
   * @param phyOffset The message's commit-log offset.
   * @param storeTimestamp The message's storeTimestamp.
   * @returns False, writing nothing, when the file is full.
   */
  putKey(key: string, phyOffset: number, storeTimestamp: number): boolean {
    this.#checkPut(phyOffset, storeTimestamp);
    if (this.isWriteFull) return false;
    assert(this.#preparedPath === undefined, `${this.path} is activated before its first entry`);
    this.#put(indexKeyHash(key), phyOffset, storeTimestamp);
    this.#writeHeader();
    return true;
  }

  /**
   * Adds one entry per hash of `javaHashes[0, count)`, in order, for one
   * message: what `putKey` does for each key, the header written once.
   * All or nothing: false, writing nothing, when they do not all fit.
   *
   * @param javaHashes `String.hashCode()` of each full key (`topic#key`).
   * @param count How many of `javaHashes` to add.
   * @param phyOffset The message's commit-log offset.
   * @param storeTimestamp The message's storeTimestamp.
   * @returns False when the file has room for fewer than `count` entries.
   */
  putKeyHashes(
    javaHashes: Int32Array,
    count: number,
    phyOffset: number,
    storeTimestamp: number,
  ): boolean {
    this.#checkPut(phyOffset, storeTimestamp);
    if (!Number.isInteger(count) || count < 0 || count > javaHashes.length) {
      throw new RangeError(`count ${count} is outside [0, ${javaHashes.length}]`);
    }
    if (this.indexNum - this.#indexCount < count) return false;
    if (count === 0) return true;
    // The begin fields change only with the first entries (see #put).
    if (this.#indexCount <= 1) {
      for (let i = 0; i < count; i++) {
        this.#put(indexKeyHashOf(javaHashes[i]!), phyOffset, storeTimestamp);
      }
      this.#writeHeader();
      return true;
    }
    // #put's bytes for each key, with what every key of the message
    // shares (the time difference, the entries' range) worked out once.
    const firstEntry = this.#entryPosition(this.#indexCount);
    this.#appendEntries(
      javaHashes,
      0,
      count,
      phyOffset,
      storeTimestamp,
      this.#timeDiffSecOf(storeTimestamp),
    );
    this.#writeHeaderEnd();
    // The header (marked from 0) and the entries: the slots lie between
    // them, so the dirty range is what marking each slot would make it.
    this.#markDirty(firstEntry, this.#entryPosition(this.#indexCount));
    return true;
  }

  /**
   * The index service's synchronous build for each member of a run in
   * turn: member `i` (commit-log offset `phyOffsets[i]`, increasing) has
   * `keyCounts[slots[i]]` hashes (none when ≤ 0) at `keyHashes[slots[i] *
   * stride]` on, and storeTimestamp `storeTimestamps[slots[i]]`. A member
   * below {@link endPhyOffset} is skipped (already in); one whose keys do
   * not all fit ends the run. The entries and the header are the bytes
   * {@link putKeyHashes} writes member by member; the header is written
   * once.
   *
   * @returns Members done, from the first (skipped ones and those without
   *   keys count); below `count` when the next one's keys do not fit.
   */
  putKeyHashesRun(
    count: number,
    slots: Int32Array,
    keyCounts: Int32Array,
    keyHashes: Int32Array,
    stride: number,
    phyOffsets: Float64Array,
    storeTimestamps: Float64Array,
  ): number {
    this.#checkWritable();
    this.#touchSlots(count, slots, keyCounts, keyHashes, stride);
    let indexCount = this.#indexCount;
    let firstEntry = -1;
    let timestamp = Number.NaN;
    let timeDiffSec = 0;
    let done = 0;
    // The first of the member's keys in #touchSlots's arrays.
    let key = 0;
    for (; done < count; done++) {
      const slot = slots[done]!;
      const keyCount = keyCounts[slot]!;
      if (keyCount <= 0) continue;
      const firstKey = key;
      key += keyCount;
      // The service's order: room first, then a repeat.
      if (this.indexNum - indexCount < keyCount) break;
      const phyOffset = phyOffsets[done]!;
      if (phyOffset < this.#endPhyOffset) continue;
      const storeTimestamp = storeTimestamps[slot]!;
      if (indexCount <= 1) {
        // The begin fields change with the first entries: the general path.
        const base = slot * stride;
        this.putKeyHashes(
          keyHashes.subarray(base, base + keyCount),
          keyCount,
          phyOffset,
          storeTimestamp,
        );
        indexCount = this.#indexCount;
        continue;
      }
      if (!Number.isSafeInteger(phyOffset) || phyOffset < 0) {
        this.#checkPut(phyOffset, storeTimestamp);
      }
      // A batch's members share one storeTimestamp: its difference once.
      if (storeTimestamp !== timestamp) {
        this.#checkPut(phyOffset, storeTimestamp);
        timestamp = storeTimestamp;
        timeDiffSec = this.#timeDiffSecOf(storeTimestamp);
      }
      if (firstEntry < 0) firstEntry = this.#entryPosition(indexCount);
      this.#appendTouched(firstKey, keyCount, phyOffset, storeTimestamp, timeDiffSec);
      indexCount = this.#indexCount;
    }
    if (firstEntry >= 0) {
      this.#writeHeaderEnd();
      this.#markDirty(firstEntry, this.#entryPosition(indexCount));
    }
    return done;
  }

  /**
   * Reads the hash slot of every key of a run before any entry is written.
   * The slots are spread over megabytes, so most reads miss the caches;
   * these reads depend on nothing, and the CPU overlaps their misses,
   * where the writing loop would wait on each in turn (its read of a slot
   * comes after the last entry's writes).
   */
  #touchSlots(
    count: number,
    slots: Int32Array,
    keyCounts: Int32Array,
    keyHashes: Int32Array,
    stride: number,
  ): void {
    const view = this.#view;
    const slotNum = this.hashSlotNum;
    let runKeys = 0;
    for (let d = 0; d < count; d++) {
      const keyCount = keyCounts[slots[d]!]!;
      if (keyCount > 0) runKeys += keyCount;
    }
    if (runKeys > runScratch.keyHashes.length) {
      runScratch.keyHashes = new Int32Array(runKeys * 2);
      runScratch.slotPositions = new Int32Array(runKeys * 2);
    }
    const runKeyHashes = runScratch.keyHashes;
    const runSlotPositions = runScratch.slotPositions;
    let sum = 0;
    let key = 0;
    for (let d = 0; d < count; d++) {
      const slot = slots[d]!;
      const keyCount = keyCounts[slot]!;
      const base = slot * stride;
      for (let k = 0; k < keyCount; k++) {
        const keyHash = indexKeyHashOf(keyHashes[base + k]!);
        const slotPosition = INDEX_HEADER_SIZE_BYTES + (keyHash % slotNum) * HASH_SLOT_SIZE_BYTES;
        runKeyHashes[key] = keyHash;
        runSlotPositions[key++] = slotPosition;
        sum ^= view.getInt32(slotPosition);
      }
    }
    this.#touched = sum;
  }

  /**
   * Writes one entry (and its slot) per hash of `javaHashes[from, from +
   * count)` for one message past the file's first entries, and moves the
   * end fields to it; the caller writes the header and marks the range.
   */
  #appendEntries(
    javaHashes: Int32Array,
    from: number,
    count: number,
    phyOffset: number,
    storeTimestamp: number,
    timeDiffSec: number,
  ): void {
    let indexCount = this.#indexCount;
    for (let i = from; i < from + count; i++) {
      this.#writeEntry(indexKeyHashOf(javaHashes[i]!), phyOffset, timeDiffSec, indexCount++);
    }
    this.#indexCount = indexCount;
    this.#endPhyOffset = phyOffset;
    this.#endTimestamp = storeTimestamp;
  }

  /**
   * {@link #appendEntries} for keys `[from, from + count)` of the run
   * {@link #touchSlots} went through: their hashes and slot positions from
   * there. The entry's writes are inlined here, as in {@link #writeEntry},
   * rather than calling a helper shared with it: with the call the index
   * run took 44–45 ns a record of 2 keys on V8, inlined 38–39 (both versions
   * in one run, alternated).
   */
  #appendTouched(
    from: number,
    count: number,
    phyOffset: number,
    storeTimestamp: number,
    timeDiffSec: number,
  ): void {
    const view = this.#view;
    const runKeyHashes = runScratch.keyHashes;
    const runSlotPositions = runScratch.slotPositions;
    let indexCount = this.#indexCount;
    let entry = this.#entryPosition(indexCount);
    for (let key = from; key < from + count; key++) {
      const slotPosition = runSlotPositions[key]!;
      let slotValue = view.getInt32(slotPosition);
      if (slotValue <= INVALID_INDEX || slotValue > indexCount) {
        slotValue = INVALID_INDEX;
        this.#hashSlotCount++;
      }
      view.setInt32(entry + ENTRY_KEY_HASH_POSITION, runKeyHashes[key]!);
      writeInt64(view, entry + ENTRY_PHY_OFFSET_POSITION, phyOffset);
      view.setInt32(entry + ENTRY_TIME_DIFF_POSITION, timeDiffSec);
      view.setInt32(entry + ENTRY_PREV_INDEX_POSITION, slotValue);
      view.setInt32(slotPosition, indexCount++);
      entry += INDEX_ENTRY_SIZE_BYTES;
    }
    this.#indexCount = indexCount;
    this.#endPhyOffset = phyOffset;
    this.#endTimestamp = storeTimestamp;
  }

  #checkPut(phyOffset: number, storeTimestamp: number): void {
    this.#checkWritable();
    if (!Number.isSafeInteger(phyOffset) || phyOffset < 0) {
      throw new RangeError(`Commit-log offset ${phyOffset} must be a non-negative integer`);
    }
    if (!Number.isSafeInteger(storeTimestamp)) {
      throw new RangeError(`storeTimestamp ${storeTimestamp} must be an integer`);
    }
  }

  /** Writes entry `indexCount` and its slot; the caller writes the header. */
  #put(keyHash: number, phyOffset: number, storeTimestamp: number): void {
    // Checked with an if: the message would be built on every entry.
    if (this.#indexCount >= this.indexNum) assert(false, `${this.path} has room for an entry`);
    const slotPosition = this.#writeEntry(
      keyHash,
      phyOffset,
      this.#timeDiffSecOf(storeTimestamp),
      this.#indexCount,
    );
    const entry = this.#entryPosition(this.#indexCount);
    this.#markDirty(slotPosition, slotPosition + HASH_SLOT_SIZE_BYTES);
    this.#markDirty(entry, entry + INDEX_ENTRY_SIZE_BYTES);
    // After the entry, as RocketMQ's putKey: its timeDiff is from the old begin.
    if (this.#indexCount <= 1) {
      this.#beginPhyOffset = phyOffset;
      this.#beginTimestamp = storeTimestamp;
    }
    this.#indexCount++;
    this.#endPhyOffset = phyOffset;
    this.#endTimestamp = storeTimestamp;
  }

  /**
   * Writes entry `indexCount` (chained to what its slot held) and points
   * the slot at it; counts the slot when it was empty.
   *
   * @returns The slot's position.
   */
  #writeEntry(keyHash: number, phyOffset: number, timeDiffSec: number, indexCount: number): number {
    const view = this.#view;
    const slotPosition = this.#slotPosition(keyHash);
    let slotValue = view.getInt32(slotPosition);
    if (slotValue <= INVALID_INDEX || slotValue > indexCount) {
      slotValue = INVALID_INDEX;
      this.#hashSlotCount++;
    }
    const entry = this.#entryPosition(indexCount);
    view.setInt32(entry + ENTRY_KEY_HASH_POSITION, keyHash);
    writeInt64(view, entry + ENTRY_PHY_OFFSET_POSITION, phyOffset);
    view.setInt32(entry + ENTRY_TIME_DIFF_POSITION, timeDiffSec);
    view.setInt32(entry + ENTRY_PREV_INDEX_POSITION, slotValue);
    view.setInt32(slotPosition, indexCount);
    return slotPosition;
  }

  /** An entry's timeDiff field: whole seconds from the begin timestamp, clamped. */
  #timeDiffSecOf(storeTimestamp: number): number {
    if (this.#beginTimestamp <= 0) return 0;
    const timeDiffSec = Math.trunc((storeTimestamp - this.#beginTimestamp) / 1000);
    return timeDiffSec > INT32_MAX ? INT32_MAX : timeDiffSec < 0 ? 0 : timeDiffSec;
  }

  /**
   * Whether the file's time span meets `[begin, end]` (RocketMQ's
   * `isTimeMatched`).
   */
  isTimeMatched(begin: number, end: number): boolean {
    const fileBegin = this.#beginTimestamp;
    const fileEnd = this.#endTimestamp;
    return (begin < fileBegin && end > fileEnd) ||
      (begin >= fileBegin && begin <= fileEnd) ||
      (end >= fileBegin && end <= fileEnd);
  }

  /**
   * Appends to `phyOffsets` the offsets of the entries whose key hash is
   * `key`'s and whose time (second precision) lies in `[begin, end]`,
   * newest first, until `phyOffsets` holds `maxNum` (RocketMQ's
   * `selectPhyOffset`). The walk stops at a link that is not a current
   * entry number, a self link, a negative time, or an entry older than
   * `begin`; it visits at most `indexCount` entries even in a corrupted
   * file.
   *
   * @param phyOffsets Receives the offsets.
   * @param key The full key, `topic#key`.
   * @param maxNum Stop when `phyOffsets` holds this many.
   * @param begin Earliest storeTimestamp, ms.
   * @param end Latest storeTimestamp, ms.
   */
  selectPhyOffset(
    phyOffsets: number[],
    key: string,
    maxNum: number,
    begin: number,
    end: number,
  ): void {
    this.#checkOpen();
    this.#ensureView();
    const keyHash = indexKeyHash(key);
    const slotValue = this.#view.getInt32(this.#slotPosition(keyHash));
    const indexCount = this.#indexCount;
    if (slotValue <= INVALID_INDEX || slotValue > indexCount || indexCount <= 1) return;
    let next = slotValue;
    for (let visited = 0; visited < indexCount; visited++) {
      if (phyOffsets.length >= maxNum) return;
      const entry = this.#entryPosition(next);
      const keyHashRead = this.#view.getInt32(entry + ENTRY_KEY_HASH_POSITION);
      const phyOffsetRead = readInt64(this.#view, entry + ENTRY_PHY_OFFSET_POSITION);
      const timeDiffSec = this.#view.getInt32(entry + ENTRY_TIME_DIFF_POSITION);
      const prevIndexRead = this.#view.getInt32(entry + ENTRY_PREV_INDEX_POSITION);
      if (timeDiffSec < 0) return;
      const timeRead = this.#beginTimestamp + timeDiffSec * 1000;
      if (keyHash === keyHashRead && timeRead >= begin && timeRead <= end) {
        phyOffsets.push(phyOffsetRead);
      }
      if (
        prevIndexRead <= INVALID_INDEX || prevIndexRead > indexCount || prevIndexRead === next ||
        timeRead < begin
      ) {
        return;
      }
      next = prevIndexRead;
    }
  }

  /** Entry number `entryNo` (1 ≤ entryNo < indexCount), decoded. */
  entryAt(entryNo: number): IndexEntry {
    this.#checkOpen();
    this.#ensureView();
    if (!Number.isInteger(entryNo) || entryNo < 1 || entryNo >= this.#indexCount) {
      throw new RangeError(`Entry ${entryNo} is outside [1, ${this.#indexCount}) of ${this.path}`);
    }
    const entry = this.#entryPosition(entryNo);
    return {
      keyHash: this.#view.getInt32(entry + ENTRY_KEY_HASH_POSITION),
      phyOffset: readInt64(this.#view, entry + ENTRY_PHY_OFFSET_POSITION),
      timeDiffSec: this.#view.getInt32(entry + ENTRY_TIME_DIFF_POSITION),
      prevIndex: this.#view.getInt32(entry + ENTRY_PREV_INDEX_POSITION),
    };
  }

  /** The value of hash slot `slot` (0 ≤ slot < hashSlotNum). */
  slotAt(slot: number): number {
    this.#checkOpen();
    this.#ensureView();
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.hashSlotNum) {
      throw new RangeError(`Slot ${slot} is outside [0, ${this.hashSlotNum}) of ${this.path}`);
    }
    return this.#view.getInt32(INDEX_HEADER_SIZE_BYTES + slot * HASH_SLOT_SIZE_BYTES);
  }

  /**
   * Cuts the file back to its entries for records before `phyOffset`, as
   * it stood when the dispatcher reached that offset (after an unclean
   * exit, to the checkpoint's index point, instead of dropping the file):
   * entries go in in commit-log order and each links to an earlier one of
   * its slot, so the entries past the cut are the last ones, and each slot
   * whose head is past the cut is walked back along its chain to the first
   * entry before the cut (or emptied). The header's count, end fields and
   * hashSlotCount are set to the cut; the end timestamp, which the entries
   * keep to the second only, to the latest the last kept entry's time may
   * be, but not past `timestampMs` (the checkpoint's index time) when that
   * is within it. The caller flushes.
   *
   * Validated as it goes: an all-zero entry (a page a power loss kept
   * unwritten), a phyOffset that grows towards older entries, a link
   * that does not go back, a slot or link past the written count (also
   * with nothing to cut), or an entry whose hash is not its slot's make it
   * give up and return -1, the file unchanged; the caller then drops it.
   *
   * @param phyOffset The first commit-log offset whose entries go.
   * @param timestampMs storeTimestamp of the last record before `phyOffset` (≤ 0: unknown).
   * @returns Entries removed (0: none was past the cut), or -1.
   */
  cutBefore(phyOffset: number, timestampMs: number): number {
    this.#checkWritable();
    const view = this.#view;
    const count = this.#indexCount;
    // The entries past the cut, newest first: [cut, count) once found.
    let cut = count;
    let newerOffset = Number.POSITIVE_INFINITY;
    let emptied = 0;
    while (cut > 1) {
      const entryNo = cut - 1;
      const entry = this.#entryPosition(entryNo);
      const keyHash = view.getInt32(entry + ENTRY_KEY_HASH_POSITION);
      const entryOffset = readInt64(view, entry + ENTRY_PHY_OFFSET_POSITION);
      const timeDiffSec = view.getInt32(entry + ENTRY_TIME_DIFF_POSITION);
      const prevIndex = view.getInt32(entry + ENTRY_PREV_INDEX_POSITION);
      if (keyHash === 0 && entryOffset === 0 && timeDiffSec === 0 && prevIndex === 0) return -1;
      if (
        keyHash < 0 || entryOffset < 0 || entryOffset > newerOffset || timeDiffSec < 0 ||
        prevIndex < INVALID_INDEX || prevIndex >= entryNo
      ) {
        return -1;
      }
      if (entryOffset < phyOffset) break;
      if (prevIndex === INVALID_INDEX) emptied++;
      newerOffset = entryOffset;
      cut = entryNo;
    }
    // Every slot is looked at, even with no entry past the cut (a power
    // loss may have kept a slot page newer than the header's count), and
    // not only those of the removed entries' hashes: a slot whose head is
    // past the cut and not of its hash would be missed. A head left past
    // the count makes the next entry with that number link to itself.
    // 20 MB of slots with the defaults: tens of milliseconds.
    const slotNum = this.hashSlotNum;
    // Slot position → its head at the cut; written once all are checked.
    const heads = new Map<number, number>();
    for (let slot = 0; slot < slotNum; slot++) {
      const slotPosition = INDEX_HEADER_SIZE_BYTES + slot * HASH_SLOT_SIZE_BYTES;
      let next = view.getInt32(slotPosition);
      // Empty, or never moved past the cut (its page older than the entries).
      if (next < cut) continue;
      let newer = Number.POSITIVE_INFINITY;
      // Bounded: each step goes to a lower entry number.
      while (next >= cut) {
        if (next >= count) return -1;
        const entry = this.#entryPosition(next);
        const chainOffset = readInt64(view, entry + ENTRY_PHY_OFFSET_POSITION);
        const prevIndex = view.getInt32(entry + ENTRY_PREV_INDEX_POSITION);
        if (
          view.getInt32(entry + ENTRY_KEY_HASH_POSITION) % slotNum !== slot ||
          chainOffset > newer || prevIndex >= next
        ) {
          return -1;
        }
        newer = chainOffset;
        next = prevIndex;
      }
      if (next > INVALID_INDEX) {
        const entry = this.#entryPosition(next);
        if (
          view.getInt32(entry + ENTRY_KEY_HASH_POSITION) % slotNum !== slot ||
          readInt64(view, entry + ENTRY_PHY_OFFSET_POSITION) > newer
        ) {
          return -1;
        }
      }
      heads.set(slotPosition, next);
    }
    if (cut === count && heads.size === 0) return 0;
    for (const [slotPosition, head] of heads) {
      view.setInt32(slotPosition, head);
      this.#markDirty(slotPosition, slotPosition + HASH_SLOT_SIZE_BYTES);
    }
    this.#indexCount = cut;
    this.#hashSlotCount = Math.max(this.#hashSlotCount - emptied, 0);
    if (cut > 1) {
      const last = this.#entryPosition(cut - 1);
      this.#endPhyOffset = readInt64(view, last + ENTRY_PHY_OFFSET_POSITION);
      this.#endTimestamp = cut === 2
        // Entry 1's time is the begin's (its own time diff is from the previous file's end).
        ? this.#beginTimestamp
        : lastEntryTimestamp(
          this.#beginTimestamp,
          view.getInt32(last + ENTRY_TIME_DIFF_POSITION),
          timestampMs,
        );
    }
    this.#writeHeader();
    return count - cut;
  }

  /**
   * Makes every change durable (msync, or write-back and fdatasync). A
   * header staged while the mapping has no view (see {@link #ensureView})
   * goes in by a positional write first.
   */
  async flush(): Promise<void> {
    this.#checkOpen();
    if (!this.isDirty) return;
    const start = this.#dirtyStart;
    const end = this.#dirtyEnd;
    this.#dirtyStart = Number.POSITIVE_INFINITY;
    this.#dirtyEnd = 0;
    try {
      if (this.#mapping !== undefined) {
        const header = this.#header;
        let from = start - start % this.#port.pageSizeBytes;
        if (header !== undefined) {
          // No view yet: the header goes in by a positional write, into the
          // same page cache the mapping shares, which the sync below covers.
          await this.#handle.write(header.slice(), 0);
          from = 0;
          // An entry put during the write made the view and wrote a newer
          // header there, which the write has just overwritten: again.
          if (this.#viewed) this.#writeHeader();
        }
        await this.#mapping.sync(from, end - from);
      } else {
        await this.#handle.write(this.#bytes.subarray(start, end), start);
        await this.#handle.datasync();
      }
    } catch (error) {
      // Still dirty: a later flush retries the whole range.
      this.#markDirty(start, end);
      throw error;
    }
  }

  /** Unmaps and closes the file (flush first). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#mapping?.unmap();
    await this.#handle.close();
  }

  /** Closes and removes the file (under its prepared name if not activated). */
  async destroy(): Promise<void> {
    await this.close();
    await this.#port.remove(this.#preparedPath ?? this.path);
  }

  #slotPosition(keyHash: number): number {
    return INDEX_HEADER_SIZE_BYTES + (keyHash % this.hashSlotNum) * HASH_SLOT_SIZE_BYTES;
  }

  #entryPosition(entryNo: number): number {
    return INDEX_HEADER_SIZE_BYTES + this.hashSlotNum * HASH_SLOT_SIZE_BYTES +
      entryNo * INDEX_ENTRY_SIZE_BYTES;
  }

  #loadHeader(view: DataView): void {
    this.#beginTimestamp = readInt64(view, HEADER_BEGIN_TIMESTAMP_POSITION);
    this.#endTimestamp = readInt64(view, HEADER_END_TIMESTAMP_POSITION);
    this.#beginPhyOffset = readInt64(view, HEADER_BEGIN_PHY_OFFSET_POSITION);
    this.#endPhyOffset = readInt64(view, HEADER_END_PHY_OFFSET_POSITION);
    this.#hashSlotCount = view.getInt32(HEADER_HASH_SLOT_COUNT_POSITION);
    const indexCount = view.getInt32(HEADER_INDEX_COUNT_POSITION);
    // A file created but never flushed has 0 here; RocketMQ reads it as 1.
    // A count past indexNum would index outside the file: clamp it.
    this.#indexCount = Math.min(Math.max(indexCount, 1), this.indexNum);
  }

  #writeHeader(): void {
    let view = this.#view;
    if (!this.#viewed) {
      this.#headerView ??= new DataView(
        (this.#header = new Uint8Array(INDEX_HEADER_SIZE_BYTES)).buffer,
      );
      view = this.#headerView;
    }
    writeInt64(view, HEADER_BEGIN_TIMESTAMP_POSITION, this.#beginTimestamp);
    writeInt64(view, HEADER_END_TIMESTAMP_POSITION, this.#endTimestamp);
    writeInt64(view, HEADER_BEGIN_PHY_OFFSET_POSITION, this.#beginPhyOffset);
    writeInt64(view, HEADER_END_PHY_OFFSET_POSITION, this.#endPhyOffset);
    view.setInt32(HEADER_HASH_SLOT_COUNT_POSITION, this.#hashSlotCount);
    view.setInt32(HEADER_INDEX_COUNT_POSITION, this.#indexCount);
    this.#markDirty(0, INDEX_HEADER_SIZE_BYTES);
  }

  /**
   * {@link IndexFile.#writeHeader} after entries that left the begin
   * fields as they were: the same header bytes, fewer of them written.
   */
  #writeHeaderEnd(): void {
    if (!this.#viewed) {
      this.#writeHeader();
      return;
    }
    const view = this.#view;
    writeInt64(view, HEADER_END_TIMESTAMP_POSITION, this.#endTimestamp);
    writeInt64(view, HEADER_END_PHY_OFFSET_POSITION, this.#endPhyOffset);
    view.setInt32(HEADER_HASH_SLOT_COUNT_POSITION, this.#hashSlotCount);
    view.setInt32(HEADER_INDEX_COUNT_POSITION, this.#indexCount);
    this.#markDirty(0, INDEX_HEADER_SIZE_BYTES);
  }

  /**
   * A pre-fault chunk failed: no further one (see {@link #populateAhead});
   * the writer takes its own faults. An error that is not the port's
   * (`MqStoreError`) is a bug, thrown on.
   */
  readonly #onPopulateFailed = (error: unknown): void => {
    this.#populateMark = Number.POSITIVE_INFINITY;
    if (!(error instanceof MqStoreError)) throw error;
  };

  #markDirty(start: number, end: number): void {
    if (start < this.#dirtyStart) this.#dirtyStart = start;
    if (end > this.#dirtyEnd) this.#dirtyEnd = end;
    if (end > this.#populateMark) this.#populateAhead(end);
  }

  /**
   * Pre-faults the next {@link INDEX_POPULATE_CHUNK_BYTES} of entries
   * past `end` (where the writer is) off the JavaScript thread
   * (`MADV_POPULATE_WRITE`): the next chunk is asked for when the writer
   * comes into the one before, done or not. Not when it is done: a
   * completion reaches this thread only on a turn of the event loop, which
   * a producer that never yields gives rarely (measured in the keyed
   * batch64 row: completions came 170–330 ms after the calls, and the
   * writer overtook the chunks). The entries are written in order,
   * and a fresh page of the file costs its first writer a fault that
   * zeroes the page cache's folio: on this VM about 2.6 ns a byte, 100 ns
   * of the JavaScript thread a record of two keys (a third of the index's
   * time in `bench/commit_log_bench.ts --filter "async batch64 128 B"`),
   * which the other core now does ahead of it.
   *
   * The entries are advised `MADV_HUGEPAGE` (see {@link #adviseRegions}),
   * not SPEC §2's `MADV_RANDOM`: under the default advice the writer's own
   * faults already read large folios in. SPEC §2 asks for `MADV_RANDOM`
   * because a flush of a range that ends inside a large dirty folio writes
   * the whole folio, and index files are flushed while written (with the
   * consume queues): a flush can write up to a folio (2 MiB) past the last
   * entry, with or without this pre-fault.
   *
   * The pages pre-faulted are dirty zeros until written, at most two
   * chunks and a folio past the writer. A writer slower than a chunk in the kernel's
   * dirty expiry (4 MiB in 30 s by default: under about 3,500 messages of
   * two keys a second) sees the kernel write those zeros before its
   * entries: up to one more chunk written per chunk of entries.
   *
   * A failed pre-fault only costs speed: the writer takes its own faults
   * as before, and no further chunk is asked for. A kernel without
   * `MADV_POPULATE_WRITE` (before 5.14) is not a failure: the port answers
   * it as done, and each chunk costs a call that does nothing.
   */
  #populateAhead(end: number): void {
    const mapping = this.#mapping;
    assert(mapping !== undefined, "only a mapped index file is pre-faulted");
    const page = this.#port.pageSizeBytes;
    // The page holding byte `end` (the next entry's first) is the writer's.
    const from = Math.max(this.#populatedTo, Math.ceil((end + 1) / page) * page);
    if (from >= this.fileSizeBytes) {
      this.#populateMark = Number.POSITIVE_INFINITY;
      return;
    }
    const to = Math.min(this.fileSizeBytes, from + INDEX_POPULATE_CHUNK_BYTES);
    this.#populatedTo = to;
    this.#populateMark = from;
    assert(from % page === 0, "a pre-fault chunk starts on a page");
    // Not read after (`PopulateOptions.read`): the entries are 2 MiB folios
    // (see #adviseRegions), whose first store does not cost what a 4 KiB
    // page's does. With the read, the keyed batch64 128 B row lost 3 of 3
    // alternated pairs on one runtime (2.56 / 2.72 / 2.28 M against
    // 2.79 / 2.79 / 2.37 M msgs/s) and was mixed on the other two.
    mapping.populate(from, to - from).catch(this.#onPopulateFailed);
  }

  #checkOpen(): void {
    if (this.#closed) throw new MqStoreError("CLOSED", `Index file ${this.path} is closed`);
  }

  /** Checks that entries may be written, and makes the view they go through. */
  #checkWritable(): void {
    this.#checkNotReadOnly();
    this.#ensureView();
  }

  #checkNotReadOnly(): void {
    this.#checkOpen();
    if (this.#readOnly) {
      throw new MqStoreError("UNSUPPORTED", `Cannot add to index file ${this.path}: read-only`);
    }
  }

  #setBytes(bytes: Uint8Array): void {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    this.#viewed = true;
  }

  /** Makes the mapping's view (once), with the header written while there was none. */
  #ensureView(): void {
    if (this.#viewed) return;
    const mapping = this.#mapping;
    assert(mapping !== undefined, "an index file without a mapping holds its bytes");
    this.#setBytes(mapping.bytes.subarray(0, this.fileSizeBytes));
    const header = this.#header;
    if (header !== undefined) {
      // Already marked dirty when it was written.
      this.#bytes.set(header, 0);
      this.#header = this.#headerView = undefined;
    }
  }
}

/**
 * The storeTimestamp to give a file cut back to an entry: entries keep
 * whole seconds from the begin (truncated), so the entry's time lies in
 * `[begin + diff s, begin + diff s + 999 ms]`; the latest of those, but
 * not past `timestampMs` (the time of the last record before the cut,
 * which no entry before it postdates unless the clock stepped back)
 * unless that is below the range.
 */
function lastEntryTimestamp(
  beginTimestamp: number,
  timeDiffSec: number,
  timestampMs: number,
): number {
  const earliest = beginTimestamp + timeDiffSec * MS_PER_SECOND;
  const latest = earliest + MS_PER_SECOND - 1;
  return timestampMs > 0 ? Math.max(earliest, Math.min(latest, timestampMs)) : latest;
}

/** Milliseconds in a second (entries keep time to the second). */
const MS_PER_SECOND = 1000;

function checkedFileSize(options: IndexFileOptions): number {
  const { hashSlotNum, indexNum } = options;
  if (!Number.isSafeInteger(hashSlotNum) || hashSlotNum <= 0) {
    throw new RangeError(`maxHashSlotNum ${hashSlotNum} must be a positive integer`);
  }
  if (!Number.isSafeInteger(indexNum) || indexNum <= 1) {
    throw new RangeError(`maxIndexNum ${indexNum} must be an integer above 1 (entry 0 is unused)`);
  }
  const size = indexFileSizeBytes(hashSlotNum, indexNum);
  if (size > INT32_MAX) {
    throw new RangeError(
      `An index file of ${hashSlotNum} slots and ${indexNum} entries is ${size} bytes; at most ${INT32_MAX}`,
    );
  }
  return size;
}

/** Reads `target.length` bytes at `position` of an index file, or fails. */
async function readFully(
  handle: FileHandle,
  target: Uint8Array,
  position: number,
  path: string,
): Promise<void> {
  const read = await handle.read(target, position);
  assert(read === target.length, `read ${read} of ${target.length} bytes of ${path}`);
}
