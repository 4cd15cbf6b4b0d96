/**
 * One consume queue: the per topic/queue list of where each message of the
 * queue sits in the commit log (RocketMQ's `ConsumeQueue`), stored as
 * fixed-size segments of 20-byte units.
 *
 * ```
 * <root>/consumequeue/<topic>/<queueId>/00000000000006000000
 *                                       ^ logical byte offset = queue offset × 20
 * unit = int64 commitLogOffset | int32 size | int64 tagsCode   (big-endian)
 * ```
 *
 * Queue offset `q` is the unit at logical byte offset `q × 20`. A queue
 * whose first file is created for a queue offset past 0 gets its first
 * positions filled with padding units `(0, 0x7FFFFFFF, 0)`, as RocketMQ
 * does, so every file stays a dense array indexed by queue offset.
 *
 * With an allocator (the table's), the next file is created in the
 * background once the written one is ⅛ full, and a roll does not wait for
 * it: if it is not there yet, the units past the roll are held in memory
 * (up to a file's worth), as a new queue's are (below), and written to it
 * once it is. Where the allocator creates files synchronously (the port
 * has the synchronous calls) a creation ends within microtasks, and the
 * hold at a roll lasts only until the microtasks of the hand-over run.
 * Where it does not (or the port cannot make and list a new queue's
 * directory synchronously, for its first file), one synchronous put in
 * `TURN_EVERY_UNITS` (from half the file on) defers to the awaited path
 * while such a creation runs, which lets the event loop turn: the
 * creation's I/O completes even under a producer that never yields.
 *
 * A new queue started with {@link ConsumeQueue.startInMemory} does not
 * wait for its first file either: its units go into an in-memory
 * buffer (readers see them there; up to a file's worth) while the file is created in the
 * background; once it exists the buffered units are written to it, in
 * order, and the queue goes on as any other. A flush waits for that, so
 * a checkpoint never counts a unit that is in memory only: a crash before
 * the file exists loses buffered units that re-dispatch puts back.
 *
 * Recovery after a clean close follows RocketMQ: walk from the third-last
 * file; the first unit with a negative offset or a size ≤ 0 ends the
 * queue. After a crash it does better: the walk starts at the file holding
 * the checkpoint's consume-queue point and the queue ends there (or at a
 * hole before it), so that re-dispatch rebuilds every unit a torn crash
 * may have lost, in any file (see {@link ConsumeQueue.recover}). Unlike
 * RocketMQ, units cut off by {@link ConsumeQueue.recover} or
 * {@link ConsumeQueue.truncateDirtyLogicFiles} are also zeroed on disk, so
 * a later crash cannot bring a stale unit back.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
// Byte stores of the unit written in place (no view of the mapping).
import { writeInt32 as putInt32, writeInt64 as putInt64 } from "../record/mod.ts";
import type { RuntimePort } from "../runtime/port.ts";
import { type Clock, nextTurn } from "../segment/clock.ts";
import type { AppendOutcome, AppendTarget, MappedFile } from "../segment/mapped_file.ts";
import { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import {
  CONSUME_QUEUE_DIRECTORY_NAME,
  CQ_PAD_UNIT_SIZE,
  CQ_UNIT_SIZE_BYTES,
  CQ_UNIT_SIZE_POSITION,
  CQ_UNIT_TAGS_CODE_POSITION,
  MAPPED_FILE_SIZE_CONSUME_QUEUE_DEFAULT,
} from "./_consume_queue_constants.ts";
import { readInt64, writeInt64 } from "./_consume_queue_int64.ts";
import type { ConsumeQueueAllocator } from "./_consume_queue_allocator.ts";
import { joinPath, parseSegmentFileName, segmentFileName } from "../segment/_file_name.ts";

/**
 * The next file is prepared when the written one is this share full
 * (numerator over {@link PREPARE_AHEAD_DENOMINATOR}): early, so an
 * awaited creation (five I/O steps, each needing a turn of the event
 * loop) has most of a file's units to finish in, but not at the
 * first unit, so the many queues that never fill a file do not each get
 * a second one on disk.
 */
const PREPARE_AHEAD_NUMERATOR = 1;
const PREPARE_AHEAD_DENOMINATOR = 8;
/**
 * A file that nothing pre-faulted (a queue's first, created on demand) is
 * pre-faulted piecewise once the queue wrote this many bytes into it
 * (819 units), until it is ⅛ full, when the rest is: at each position
 * `p` from here, doubling, up to {@link HEAD_POPULATE_LEAD} × `p`. Before,
 * a busy queue's writer faulted the first ⅛ of the file itself, 750 KB at
 * the default size: under this VM's shadow paging each fresh 4 KiB page
 * cost it 25–60 µs, 23 ms of a fresh store's first 400,000 single puts
 * (four queues). A queue that stays below it dirties no page ahead; one
 * that stops between the steps has at most three times what it wrote
 * pre-faulted past its units. Those pages are dirty zeros: once the file
 * has been dirty for the kernel's dirty expiry (30 s) it writes them back,
 * and the writer dirties them again as it reaches them: small next to the
 * commit log's writes, a unit being 20 bytes a message (under 2.25 MB
 * past a default-size file's units, three times its ⅛).
 */
const HEAD_POPULATE_FROM_BYTES = 0x4000;
/** How far ahead each head piece reaches (see {@link HEAD_POPULATE_FROM_BYTES}). */
const HEAD_POPULATE_LEAD = 4;
/**
 * While a file the queue will need is being created with awaited I/O (a
 * port without the synchronous calls) and
 * the last file is half full or more (or units wait in memory), one
 * synchronous put in this
 * many declines ({@link ConsumeQueue.putUnitNow} answers undefined) and
 * {@link ConsumeQueue.putUnit} first waits for a turn of the event loop:
 * a producer that never yields (a tight `await put()` loop) would
 * otherwise never let the creation's I/O complete. Not before half: a
 * declined put costs the producer a wait for dispatch (the lag bound),
 * and a creation started at ⅛ usually ends on the turns a producer
 * gives anyway.
 */
const TURN_EVERY_UNITS = 0x1000;
/**
 * Files prepared ahead by a queue that once rolled before its next file
 * was created: under writeback a creation can take longer than such a
 * queue takes to fill a whole file (6 MB is 300,000 units: 150 ms at
 * 2 M msgs/s). Others prepare one, sparing the disk.
 */
const FILES_AHEAD_FAST = 2;
/** The in-memory buffer's first size, in units; it doubles up to the max. */
const IN_MEMORY_UNITS_INITIAL = 0x40;
/**
 * Fewest units of a run written to a file with a positional write (where
 * the port says so: `RuntimePort.positionalRunWrites`): a write costs a
 * call, and a store through the mapping pays a page's first touch only
 * once every 205 units. Measured (the V8 runtime's FFI adapter, runs
 * into a populated `MADV_RANDOM` file, ns a unit, stores against writes):
 * 64 units 41–48 against 43–86, 128 units 39–55 against 30–46, 256 units
 * 39–44 against 18–35.
 */
const POSITIONAL_RUN_UNITS_MIN = 0x100;
/** Most units one positional write takes: the staging buffer's size. */
export const POSITIONAL_RUN_UNITS_MAX = 0x1000;
/**
 * Where runs are staged for a positional write: one buffer for every
 * queue (a store has thousands), only ever used within one synchronous
 * call.
 */
const RUN_STAGE = new Uint8Array(POSITIONAL_RUN_UNITS_MAX * CQ_UNIT_SIZE_BYTES);

/** Options of {@link ConsumeQueue}. */
export interface ConsumeQueueOptions {
  /** The runtime port. */
  port: RuntimePort;
  /** The store root (the queue lives in `<root>/consumequeue/<topic>/<queueId>`). */
  rootDirectory: string;
  /** The topic. */
  topic: string;
  /** The queue id. */
  queueId: number;
  /**
   * Size of each consume-queue file; a whole number of 20-byte units.
   *
   * @default {6 000 000}
   */
  mappedFileSizeConsumeQueue?: number;
  /**
   * Open without writing anything (no recovery writes, no new files).
   *
   * @default {false}
   */
  readOnly?: boolean;
  /**
   * Create sparse files (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
  /**
   * Time source of the segment layer.
   *
   * @default {systemClock}
   */
  clock?: Clock;
  /**
   * Creates files ahead of need (shared by the queues of a store);
   * without it a file is created when the queue rolls.
   *
   * @default {undefined}
   */
  allocator?: ConsumeQueueAllocator;
  /**
   * Told when the file a roll's buffered units wait for cannot be created
   * (they stay in memory; the next put or flush throws the error too).
   *
   * @default {undefined}
   */
  onFileError?: (error: unknown) => void;
}

/** One unit of a consume queue. */
export interface ConsumeQueueUnit {
  /** Commit-log offset of the message. */
  commitLogOffset: number;
  /** Record size of the message. */
  size: number;
  /** tagsCode (int64 as a number; may be negative). */
  tagsCode: number;
}

/**
 * A run of consecutive units read from one file, without an object per
 * unit. Valid until {@link ConsumeQueueUnits.release}; read the fields with
 * the `…At(i)` accessors.
 *
 * @example
 * ```ts ignore
 * const units = await cq.readUnits(queueOffset, 32);
 * if (units !== undefined) {
 *   try {
 *     for (let i = 0; i < units.count; i++) read(units.commitLogOffsetAt(i), units.sizeAt(i));
 *   } finally {
 *     units.release();
 *   }
 * }
 * ```
 */
export class ConsumeQueueUnits {
  /** Queue offset of unit 0. */
  readonly queueOffset: number;
  /** Number of units. */
  readonly count: number;
  #view: DataView;
  #release: () => void;

  /** @internal Built by {@link ConsumeQueue.readUnits}. */
  constructor(queueOffset: number, bytes: Uint8Array, release: () => void) {
    assert(bytes.length % CQ_UNIT_SIZE_BYTES === 0, `${bytes.length} bytes are whole units`);
    this.queueOffset = queueOffset;
    this.count = bytes.length / CQ_UNIT_SIZE_BYTES;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    this.#release = release;
  }

  /** Commit-log offset of unit `i`. */
  commitLogOffsetAt(i: number): number {
    return readInt64(this.#view, this.#position(i));
  }

  /** Record size of unit `i`. */
  sizeAt(i: number): number {
    return this.#view.getInt32(this.#position(i) + CQ_UNIT_SIZE_POSITION);
  }

  /** tagsCode of unit `i`. */
  tagsCodeAt(i: number): number {
    return readInt64(this.#view, this.#position(i) + CQ_UNIT_TAGS_CODE_POSITION);
  }

  /** Unit `i` as an object (allocates; for tests and tools). */
  unitAt(i: number): ConsumeQueueUnit {
    return {
      commitLogOffset: this.commitLogOffsetAt(i),
      size: this.sizeAt(i),
      tagsCode: this.tagsCodeAt(i),
    };
  }

  /** Gives the underlying file range back; idempotent. */
  release(): void {
    const release = this.#release;
    this.#release = () => {};
    release();
  }

  #position(i: number): number {
    if (!Number.isInteger(i) || i < 0 || i >= this.count) {
      throw new RangeError(`Unit ${i} is outside this run of ${this.count} units`);
    }
    return i * CQ_UNIT_SIZE_BYTES;
  }
}

/**
 * The consume queue of one topic and queue id.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { ConsumeQueue } from "./consume_queue.ts";
 *
 * const port = new MemoryPort("deno");
 * const cq = new ConsumeQueue({ port, rootDirectory: "/store", topic: "Orders", queueId: 0 });
 * await cq.load();
 * await cq.recover();
 * await cq.putUnit(0, 176, 0, 0);
 * console.log(await cq.getUnit(0)); // { commitLogOffset: 0, size: 176, tagsCode: 0 }
 * await cq.close();
 * ```
 */
export class ConsumeQueue {
  /** The topic. */
  readonly topic: string;
  /** The queue id. */
  readonly queueId: number;
  /** The queue's directory. */
  readonly directory: string;
  /** Size of each file (a whole number of units). */
  readonly fileSizeBytes: number;

  /** The files. */
  #queue: MappedFileQueue;
  #readOnly: boolean;
  /**
   * End (offset + size) of the message of the last unit written or
   * recovered; -1 before any. A unit ending at or below it is a repeat
   * (RocketMQ's `maxPhysicOffset`).
   */
  #maxPhysicOffset = -1;
  /** Logical byte offset of the first unit readers may see (RocketMQ's `minLogicOffset`). */
  #minLogicOffset = 0;
  /** End of the valid units found by a read-only recovery (files are left as they are). */
  #readOnlyEnd: number | undefined;
  /** A put is in progress (puts are sequential: the dispatcher awaits each). */
  #putting = false;
  /**
   * Whether the last run went in by a positional write: the allocator
   * then pre-faults this queue's files without the read that a writer
   * through the mapping gains from (see
   * {@link ConsumeQueueAllocator.populateWithoutRead}).
   */
  #runsPositionally = false;
  /** Scratch for one unit, reused by every put. */
  #unit = new Uint8Array(CQ_UNIT_SIZE_BYTES);
  #unitView = new DataView(this.#unit.buffer);
  /**
   * The unit putUnitNow writes in place, and the append outcome it
   * reports (the file's store timestamp unchanged, as appendBytes).
   */
  readonly #written = {
    wroteBytes: CQ_UNIT_SIZE_BYTES,
    storeTimestampMs: 0,
    offset: 0,
    size: 0,
    tagsCode: 0,
  };
  #allocator: ConsumeQueueAllocator | undefined;
  readonly #port: RuntimePort;
  /** Write position of a file at which the next file is prepared (⅛ full). */
  readonly #prepareMarkPosition: number;
  /**
   * Write position of a file at which {@link #prepareAfter} runs next: the
   * mark, or below it the next head piece of a file nothing pre-faulted
   * (see {@link HEAD_POPULATE_FROM_BYTES}).
   */
  #prepareAtPosition: number;
  /** fileFromOffset of the last file whose successor was prepared; -1 for none. */
  #preparedAfter = -1;
  /**
   * Units held while the file they go to is created: the first file (see
   * {@link startInMemory}) or the next one at a roll; undefined once they
   * are in the file. Only appended to, so a view handed to a reader stays
   * valid.
   */
  #inMemory: Uint8Array | undefined;
  /** Logical byte offset of the first unit of {@link #inMemory} (the file's start). */
  #inMemoryFrom = 0;
  /** Bytes of {@link #inMemory} in use. */
  #inMemoryBytes = 0;
  /** Most bytes {@link #inMemory} may hold; past it, puts wait for the file. */
  #inMemoryCapBytes = 0;
  /** That file's creation and the write of the buffered units; undefined when done. */
  #pendingFile: Promise<void> | undefined;
  /** Why that file could not be created (the buffered units stay in memory). */
  #pendingFileError: unknown;
  /** Told of a failed creation at a roll (a put or flush meeting it throws it too). */
  #onFileError: ((error: unknown) => void) | undefined;
  /**
   * Creations of files this queue will need that are in progress (the
   * next file prepared ahead, or the one the buffered units wait for).
   */
  #creations = 0;
  /**
   * Files prepared ahead: 1, or {@link FILES_AHEAD_FAST} once the queue
   * outran a creation (see {@link #startRollInMemory}).
   */
  #filesAhead = 1;
  /**
   * Write position of a file from which a creation in progress gets
   * turns (see {@link TURN_EVERY_UNITS}): half the file.
   */
  #turnAtPosition: number;
  /** Synchronous puts left before one declines to let the event loop turn (see {@link TURN_EVERY_UNITS}). */
  #unitsToTurn = TURN_EVERY_UNITS;

  /** @param options Port, store root, topic, queue id and file size. */
  constructor(options: ConsumeQueueOptions) {
    const fileSizeBytes = options.mappedFileSizeConsumeQueue ??
      MAPPED_FILE_SIZE_CONSUME_QUEUE_DEFAULT;
    if (
      !Number.isSafeInteger(fileSizeBytes) || fileSizeBytes <= 0 ||
      fileSizeBytes % CQ_UNIT_SIZE_BYTES !== 0
    ) {
      throw new RangeError(
        `mappedFileSizeConsumeQueue ${fileSizeBytes} must be a positive multiple of the ${CQ_UNIT_SIZE_BYTES}-byte unit`,
      );
    }
    if (!Number.isSafeInteger(options.queueId) || options.queueId < 0) {
      throw new RangeError(`Queue id ${options.queueId} must be a non-negative integer`);
    }
    if (options.topic.length === 0 || options.topic.includes("/")) {
      throw new RangeError(`Topic "${options.topic}" cannot name a consume-queue directory`);
    }
    this.topic = options.topic;
    this.queueId = options.queueId;
    this.fileSizeBytes = fileSizeBytes;
    this.directory = consumeQueueDirectory(options.rootDirectory, options.topic, options.queueId);
    this.#readOnly = options.readOnly === true;
    this.#port = options.port;
    this.#allocator = this.#readOnly ? undefined : options.allocator;
    this.#onFileError = options.onFileError;
    const prepareAt = Math.floor(
      fileSizeBytes * PREPARE_AHEAD_NUMERATOR / PREPARE_AHEAD_DENOMINATOR,
    );
    this.#prepareMarkPosition = prepareAt - prepareAt % CQ_UNIT_SIZE_BYTES;
    this.#prepareAtPosition = this.#headPopulateFrom();
    const turnAt = Math.floor(fileSizeBytes / 2);
    this.#turnAtPosition = turnAt - turnAt % CQ_UNIT_SIZE_BYTES;
    this.#queue = new MappedFileQueue({
      port: options.port,
      directory: this.directory,
      fileSizeBytes,
      readOnly: this.#readOnly,
      sparse: options.sparse,
      clock: options.clock,
      allocator: this.#allocator,
    });
  }

  /**
   * Opens the files on disk (all counted as full until {@link recover}),
   * after removing what a crash can leave of files created and not made
   * durable yet (see {@link #removeUnfinishedFiles}). Read-only, those
   * are left out instead (on disk as they are): a tool opening a crashed
   * store beside no writer sees the queue a writable open would recover,
   * not an `INVALID_FILE` for a lost name before a kept one.
   *
   * @throws {MqStoreError} `INVALID_FILE` for a file of another size.
   */
  async load(): Promise<void> {
    assert(this.#pendingFile === undefined, `${this.directory} is loaded or started, not both`);
    const beforeOffset = await this.#removeUnfinishedFiles();
    await this.#queue.load({ beforeOffset });
  }

  /**
   * Removes the leftovers of file creations a crash interrupted. The
   * allocator creates a file without making its size or name durable;
   * the queue's flush does (datasync, directory sync) before the
   * checkpoint counts any unit in it. So a crash can leave, past the
   * units the checkpoint counts: no name (a gap before later files), a
   * zero-length file under the name (the allocation lost), or the last
   * file short of the file size. Such a file and every file after it go
   * (the `.tmp` names go in `MappedFileQueue.load`); re-dispatch rebuilds
   * their units from the commit log. A short file that is not last, or
   * the only one, is left for load to refuse: that is a different file
   * size, not an unfinished creation. Read-only, nothing is removed.
   *
   * @returns Where the first file removed (or left out) starts; undefined
   *   when there is none.
   */
  async #removeUnfinishedFiles(): Promise<number | undefined> {
    const port = this.#port;
    let names: string[];
    try {
      names = await port.list(this.directory);
    } catch (error) {
      if (error instanceof MqStoreError && error.code === "NOT_FOUND") return undefined;
      throw error;
    }
    const offsets: number[] = [];
    for (const name of names) {
      const offset = parseSegmentFileName(name);
      if (offset !== undefined) offsets.push(offset);
    }
    offsets.sort((a, b) => a - b);
    let cut = offsets.length;
    // Every file is looked at: a flush interval can see many files made
    // (a queue at 2 M units/s fills seven 6 MB files a second), any of
    // them left zero-length. A stat each, next to load's open and map.
    // Bounded by the files; stops at the first that is not full-size.
    for (let i = 0; i < offsets.length; i++) {
      const offset = offsets[i]!;
      // Every file before is full-size here: a gap is a lost name.
      if (i > 0 && offset !== offsets[i - 1]! + this.fileSizeBytes) {
        cut = i;
        break;
      }
      const path = joinPath(this.directory, segmentFileName(offset));
      const sizeBytes = (await port.stat(path))?.sizeBytes;
      if (sizeBytes === this.fileSizeBytes) continue;
      // A short file is unfinished only last and after a full one; else
      // it is of another file size, for load to refuse.
      if (sizeBytes === 0 || (i > 0 && i === offsets.length - 1)) cut = i;
      break;
    }
    if (cut === offsets.length) return undefined;
    if (this.#readOnly) return offsets[cut];
    // Newest first: a crash in between leaves the files still contiguous.
    for (let i = offsets.length - 1; i >= cut; i--) {
      await port.remove(joinPath(this.directory, segmentFileName(offsets[i]!)));
    }
    return offsets[cut];
  }

  /**
   * Starts a queue that has no directory yet (instead of {@link load}):
   * units from queue offset 0 are taken at once, held in memory, while
   * the directory and the first file are created in the background; they
   * are written to the file, in order, once it exists. Flushes wait for
   * that. A failed creation goes to `onError` (the buffered units are
   * not on disk) and every later put and flush throws it.
   */
  startInMemory(onError: (error: unknown) => void): void {
    assert(
      !this.#readOnly && this.#pendingFile === undefined && this.#queue.files.length === 0,
      `${this.directory} is a new writable queue`,
    );
    this.#inMemory = new Uint8Array(IN_MEMORY_UNITS_INITIAL * CQ_UNIT_SIZE_BYTES);
    this.#inMemoryFrom = 0;
    // A file's worth, as at a roll: a creation is about five awaited steps,
    // each waiting for a turn that a producer that never yields gives only
    // when dispatch declines a put (one in TURN_EVERY_UNITS, then a wait
    // at the put lag bound): 40–150 ms, or 100–375 k units at 2.5 M/s.
    // The 4096 units held before were 2 ms of such a queue. Memory: the
    // buffer grows by doubling with the units it holds, and all queues
    // together hold at most what dispatch puts in during their creations
    // (2.5 M units/s × 0.15 s × 20 B = 7.5 MB at full speed, however many
    // queues), each at most one file (6 MB by default).
    this.#inMemoryCapBytes = this.fileSizeBytes;
    // Its directory is made and listed on the JavaScript thread where the
    // port can (see MappedFileQueue.load): with a synchronous allocator
    // the creation then ends within microtasks and needs no turn.
    const port = this.#port;
    const synchronous = this.#allocator?.createsSynchronously === true &&
      port.makeDirectorySync !== undefined && port.listSync !== undefined;
    this.#startPendingFile(
      async () => {
        await this.#queue.load();
        return await this.#queue.getOrCreateLastMappedFile(0);
      },
      onError,
      !synchronous,
    );
  }

  /**
   * Starts a roll without waiting for the next file: the units from the
   * end of the full last file `last` go into memory (up to a file's worth)
   * while the next file is taken from the allocator (prepared ahead, or
   * still in creation); they are written to it once it is there.
   */
  #startRollInMemory(last: MappedFile): void {
    this.#inMemory = new Uint8Array(IN_MEMORY_UNITS_INITIAL * CQ_UNIT_SIZE_BYTES);
    this.#inMemoryFrom = last.fileFromOffset + this.fileSizeBytes;
    const path = joinPath(this.directory, segmentFileName(this.#inMemoryFrom));
    // The queue filled a file before its successor was created: a fast one.
    if (this.#allocator?.isReady(path) === false) this.#filesAhead = FILES_AHEAD_FAST;
    this.#inMemoryCapBytes = this.fileSizeBytes;
    this.#startPendingFile(
      () => this.#queue.getOrCreateLastMappedFile(this.#inMemoryFrom),
      (error) => this.#onFileError?.(error),
      this.#allocator?.createsSynchronously !== true,
    );
    // The file after it is prepared now (it starts once this one is
    // done), not once this one has units.
    this.#prepareAfterOffset(this.#inMemoryFrom);
  }

  /**
   * Starts the creation of the file the in-memory units wait for; one
   * that `needsTurns` (awaited I/O) is counted in {@link #creations}.
   */
  #startPendingFile(
    create: () => Promise<MappedFile>,
    onError: (error: unknown) => void,
    needsTurns: boolean,
  ): void {
    if (needsTurns) this.#creations++;
    const created = this.#writePendingFile(create);
    // The error is also kept for the next put and flush.
    created.catch(onError).finally(() => {
      if (needsTurns) this.#creations--;
    });
    this.#pendingFile = created;
  }

  /** Units held in memory while a file is created (tests, stats). */
  get inMemoryUnitCount(): number {
    return this.#inMemoryBytes / CQ_UNIT_SIZE_BYTES;
  }

  /** Resolves once the file the in-memory units wait for (first file or roll) holds them. */
  async whenFileReady(): Promise<void> {
    await this.#pendingFile;
  }

  async #writePendingFile(create: () => Promise<MappedFile>): Promise<void> {
    try {
      const file = await create();
      assert(
        file.fileFromOffset === this.#inMemoryFrom && file.wrotePosition === 0,
        `${file.path} is new`,
      );
      // Bounded by the units buffered: each round writes those buffered so
      // far, and only a port that cannot map awaits in between.
      for (let written = 0; written < this.#inMemoryBytes;) {
        const end = this.#inMemoryBytes;
        const units = this.#inMemory!.subarray(written, end);
        if (file.writeMode === "window") {
          for (let at = 0; at < units.length; at += CQ_UNIT_SIZE_BYTES) {
            await this.#append(file, units.subarray(at, at + CQ_UNIT_SIZE_BYTES));
          }
        } else {
          this.#appendNow(file, units);
        }
        written = end;
      }
      assert(file.wrotePosition === this.#inMemoryBytes, `${file.path} holds every buffered unit`);
      this.#inMemory = undefined;
      this.#inMemoryBytes = 0;
      this.#inMemoryFrom = 0;
      this.#pendingFile = undefined;
      if (
        file.wrotePosition >= this.#prepareAtPosition && this.#preparedAfter !== file.fileFromOffset
      ) {
        this.#prepareAfter(file);
      }
    } catch (error) {
      this.#pendingFileError = error;
      throw error;
    }
  }

  /**
   * Puts a unit into the in-memory buffer: true (written), false (a
   * repeat), or undefined when it must wait for the file (a gap, or the
   * buffer is full).
   */
  #putInMemory(
    commitLogOffset: number,
    size: number,
    tagsCode: number,
    queueOffset: number,
  ): boolean | undefined {
    if (this.#pendingFileError !== undefined) throw this.#pendingFileError;
    // Relative to the buffer: a unit before it (in the full file) is a repeat.
    const at = queueOffset * CQ_UNIT_SIZE_BYTES - this.#inMemoryFrom;
    if (at < this.#inMemoryBytes) return false;
    if (at > this.#inMemoryBytes) return undefined;
    // No more than the file holds: the buffer is written into it.
    if (at + CQ_UNIT_SIZE_BYTES > this.#inMemoryCapBytes) return undefined;
    const buffer = this.#inMemoryWithRoom(at + CQ_UNIT_SIZE_BYTES);
    writeUnitBytes(buffer, at, commitLogOffset, size, tagsCode);
    this.#inMemoryBytes = at + CQ_UNIT_SIZE_BYTES;
    this.#maxPhysicOffset = commitLogOffset + size;
    return true;
  }

  /**
   * Finds the end of the valid units; a unit with a negative offset or a
   * size ≤ 0 ends the queue. Files past the end are deleted (unless
   * read-only).
   *
   * After a clean close (`afterCrash: false`) the walk starts at the
   * third-last file, as RocketMQ's: every unit was flushed, so none is
   * missing before it.
   *
   * After a crash (`afterCrash`, the default) that is not enough: a torn
   * crash (or a power loss) can lose a page of an earlier file and keep
   * later files' pages, and a hole below the queue's end would make
   * re-dispatch skip the lost units as repeats. With
   * `fromCommitLogOffset` (where re-dispatch will start; the checkpoint's
   * consume-queue offset, below which every unit was flushed) the walk
   * starts at the file holding the first unit at or past it, and that
   * unit (or a hole before it) ends the queue: every unit from there on is
   * rebuilt from the commit log by re-dispatch, so a unit half kept by a
   * torn page (one straddling a page boundary) cannot survive either.
   * With a negative one (a checkpoint without mqstore's block: no such
   * point) the walk starts at the first file and the first hole ends the
   * queue. Without it, RocketMQ's walk from the third-last file.
   *
   * After a crash the rest of the file holding the end is also zeroed up
   * to its last non-zero byte, and later files are deleted, so stale units
   * cannot come back once the queue grows over the gap. That takes a scan
   * of the file's tail. After a clean close it is skipped: the store
   * zeroed every cut when it made it, and only appends followed, so
   * nothing but zeros lies past the end.
   *
   * @returns The end (offset + size) of the last valid unit's message, or
   *   -1 when the queue holds none.
   */
  async recover(
    options: { afterCrash?: boolean; fromCommitLogOffset?: number } = {},
  ): Promise<number> {
    const files = this.#queue.files;
    if (files.length === 0) return this.#maxPhysicOffset;
    const afterCrash = options.afterCrash !== false;
    const from = afterCrash ? options.fromCommitLogOffset : undefined;
    if (from !== undefined && !Number.isSafeInteger(from)) {
      throw new RangeError(`fromCommitLogOffset ${from} must be a safe integer`);
    }
    // Read-only opens re-dispatch nothing: they cut at holes only.
    const below = from !== undefined && !this.#readOnly ? from : -1;
    let index = from === undefined
      ? Math.max(0, files.length - 3)
      : below >= 0
      ? await this.#fileHolding(below)
      : 0;
    let processOffset = (files[index] as MappedFile).fileFromOffset;
    for (; index < files.length; index++) {
      const file = files[index] as MappedFile;
      const validBytes = await this.#scanValid(file, file.readPosition, below);
      processOffset = file.fileFromOffset + validBytes;
      if (validBytes < this.fileSizeBytes) break;
    }
    if (this.#readOnly) {
      // Read-only: keep the files as they are, only limit what readers see.
      this.#readOnlyEnd = processOffset;
      for (const file of files) {
        if (file.fileFromOffset + file.readPosition > processOffset) {
          file.resetPositions(Math.max(0, processOffset - file.fileFromOffset));
        }
      }
      return this.#maxPhysicOffset;
    }
    this.#queue.flushedWhere = processOffset;
    this.#queue.committedWhere = processOffset;
    await this.#cutAt(processOffset, afterCrash ? "scan" : "none");
    return this.#maxPhysicOffset;
  }

  /**
   * Index of the last file whose first unit is valid and points below
   * `commitLogOffset` (0 when none does): the file holding the first unit
   * at or past it. Files are page-aligned, so a file's first unit is
   * written whole or lost whole: a lost one (zeros) reads as invalid, and
   * the search goes on back. Every file before the answer was flushed
   * (it holds only units below the checkpoint), so a read of one unit per
   * later file is all it costs.
   */
  async #fileHolding(commitLogOffset: number): Promise<number> {
    const files = this.#queue.files;
    for (let index = files.length - 1; index > 0; index--) {
      const file = files[index] as MappedFile;
      if (file.readPosition < CQ_UNIT_SIZE_BYTES) continue;
      const range = await file.selectRange(0, CQ_UNIT_SIZE_BYTES);
      if (range === undefined) continue;
      let offset: number;
      let size: number;
      try {
        const view = new DataView(range.bytes.buffer, range.bytes.byteOffset, CQ_UNIT_SIZE_BYTES);
        offset = readInt64(view, 0);
        size = view.getInt32(CQ_UNIT_SIZE_POSITION);
      } finally {
        range.release();
      }
      if (offset >= 0 && size > 0 && offset < commitLogOffset) return index;
    }
    return 0;
  }

  /**
   * Writes the unit of queue offset `queueOffset` (RocketMQ's
   * `putMessagePositionInfo`). A repeat is skipped: a unit whose message
   * ends at or below the last one's, or a queue offset already written.
   * The first file of an empty queue created for a queue offset past 0 is
   * padded up to it with `(0, 0x7FFFFFFF, 0)` units. One put at a time:
   * await each before the next.
   *
   * @returns Whether the unit was written (false: a skipped repeat).
   * @throws {RangeError} For bad arguments, or a queue offset past the end
   *   of the queue (units must be consecutive).
   */
  async putUnit(
    commitLogOffset: number,
    size: number,
    tagsCode: number,
    queueOffset: number,
  ): Promise<boolean> {
    checkUnit(commitLogOffset, size, tagsCode, queueOffset);
    if (commitLogOffset + size <= this.#maxPhysicOffset) return false;
    assert(!this.#putting, `puts to ${this.directory} do not overlap: await each one`);
    this.#putting = true;
    try {
      if (this.#creations > 0 && this.#unitsToTurn < 0) {
        // putUnitNow declined for this (see TURN_EVERY_UNITS): the awaited
        // turn lets the creations' I/O completions in.
        this.#unitsToTurn = TURN_EVERY_UNITS;
        await nextTurn();
      }
      if (this.#inMemory !== undefined) {
        const put = this.#putInMemory(commitLogOffset, size, tagsCode, queueOffset);
        if (put !== undefined) return put;
        await this.#pendingFile;
      }
      return await this.#put(commitLogOffset, size, tagsCode, queueOffset);
    } finally {
      this.#putting = false;
    }
  }

  /**
   * The synchronous form of {@link putUnit} for the usual case: the next
   * unit of a queue whose last file has room and is written through a
   * mapping. Answers as putUnit does (true: written; false: a skipped
   * repeat), or undefined, writing nothing, when the put needs I/O or a
   * check of putUnit (a new file, padding, a gap): call putUnit then.
   * At a roll it does not wait for the next file: the units go into
   * memory until the file is there. While a file is being created, one
   * put in {@link TURN_EVERY_UNITS} from half the file on answers
   * undefined, so that putUnit lets the event loop turn.
   */
  putUnitNow(
    commitLogOffset: number,
    size: number,
    tagsCode: number,
    queueOffset: number,
  ): boolean | undefined {
    checkUnit(commitLogOffset, size, tagsCode, queueOffset);
    if (commitLogOffset + size <= this.#maxPhysicOffset) return false;
    if (this.#putting) return undefined;
    if (this.#inMemory !== undefined || this.#tryRollInMemory(queueOffset)) {
      if (this.#creations > 0 && --this.#unitsToTurn < 0) return undefined;
      return this.#putInMemory(commitLogOffset, size, tagsCode, queueOffset);
    }
    const file = this.#queue.lastFile;
    if (file === undefined || file.isFull || file.writeMode !== "mapping") return undefined;
    const expectLogicOffset = queueOffset * CQ_UNIT_SIZE_BYTES;
    const currentLogicOffset = file.fileFromOffset + file.wrotePosition;
    if (expectLogicOffset < currentLogicOffset) return false;
    if (expectLogicOffset > currentLogicOffset) return undefined;
    if (
      this.#creations > 0 && file.wrotePosition >= this.#turnAtPosition &&
      --this.#unitsToTurn < 0
    ) {
      return undefined;
    }
    // Straight into the mapping (one unit per dispatched message): no
    // scratch unit copied with a native set().
    const written = this.#written;
    written.offset = commitLogOffset;
    written.size = size;
    written.tagsCode = tagsCode;
    written.storeTimestampMs = file.storeTimestampMs;
    file.append(this.#writeUnit);
    this.#maxPhysicOffset = commitLogOffset + size;
    if (
      file.wrotePosition >= this.#prepareAtPosition && this.#preparedAfter !== file.fileFromOffset
    ) {
      this.#prepareAfter(file);
    }
    return true;
  }

  /**
   * Writes the unit {@link ConsumeQueue.#written} holds at the append
   * target (a mapping: see putUnitNow).
   */
  readonly #writeUnit = (target: AppendTarget): AppendOutcome => {
    const bytes = target.bytes;
    const at = target.index;
    const unit = this.#written;
    writeUnitBytes(bytes, at, unit.offset, unit.size, unit.tagsCode);
    return unit;
  };

  /**
   * {@link putUnitNow} for `count` units of consecutive queue offsets
   * from `queueOffset` (the records of a batch): one append for as many as
   * the last file takes.
   *
   * @param count Units in the arrays (from index 0).
   * @param queueOffset The first unit's queue offset.
   * @param offsets The records' commit-log offsets, increasing.
   * @param sizes Their sizes.
   * @param tagsCodes Their tagsCodes.
   * @returns Units written, from the first; 0, writing nothing, when the
   *   first is not putUnitNow's usual case (a repeat, a gap, a new file,
   *   no mapping, units in memory): the caller puts them one by one.
   * @throws {RangeError} For a unit putUnit refuses (nothing written).
   */
  putUnitsNow(
    count: number,
    queueOffset: number,
    offsets: Float64Array,
    sizes: Int32Array,
    tagsCodes: Float64Array,
  ): number {
    if (count <= 0) return 0;
    const run = this.#run;
    run.uniform = false;
    run.offsets = offsets;
    run.sizes = sizes;
    run.tagsCodes = tagsCodes;
    return this.#putRunNow(count, queueOffset, offsets[0]! + sizes[0]!);
  }

  /**
   * {@link putUnitsNow} for a uniform run: `count` records of one `size`
   * from commit-log offset `firstOffset` on, one `tagsCode`, consecutive
   * queue offsets from `queueOffset` (a batch of members without
   * properties). Nothing per record to read: the units are computed.
   *
   * @param count Units (records of the run).
   * @param queueOffset The first unit's queue offset.
   * @param firstOffset The first record's commit-log offset.
   * @param size Every record's size.
   * @param tagsCode Every unit's tagsCode.
   * @returns Units written, from the first; 0, writing nothing, when the
   *   first is not putUnitNow's usual case (a repeat, a gap, a new file,
   *   no mapping, units in memory): the caller puts them another way.
   * @throws {RangeError} For a unit putUnit refuses (nothing written).
   */
  putUniformRunNow(
    count: number,
    queueOffset: number,
    firstOffset: number,
    size: number,
    tagsCode: number,
  ): number {
    if (count <= 0) return 0;
    const run = this.#run;
    run.uniform = true;
    run.firstOffset = firstOffset;
    run.size = size;
    run.tagsCode = tagsCode;
    return this.#putRunNow(count, queueOffset, firstOffset + size);
  }

  /**
   * The run {@link ConsumeQueue.#run} describes (either shape), its first
   * message ending at `firstEnd`: into the last file through its mapping,
   * or into the in-memory buffer.
   */
  #putRunNow(count: number, queueOffset: number, firstEnd: number): number {
    if (this.#putting || firstEnd <= this.#maxPhysicOffset) return 0;
    if (this.#inMemory !== undefined || this.#tryRollInMemory(queueOffset)) {
      return this.#putRunInMemory(count, queueOffset);
    }
    const file = this.#queue.lastFile;
    if (file === undefined || file.isFull || file.writeMode !== "mapping") return 0;
    if (queueOffset * CQ_UNIT_SIZE_BYTES !== file.fileFromOffset + file.wrotePosition) return 0;
    const room = Math.floor((this.fileSizeBytes - file.wrotePosition) / CQ_UNIT_SIZE_BYTES);
    const n = Math.min(count, room);
    if (n <= 0) return 0;
    const end = this.#checkRunOf(n, queueOffset);
    if (this.#creations > 0 && file.wrotePosition >= this.#turnAtPosition) {
      // Declined: putUnitNow takes them one by one and declines in turn.
      if (this.#unitsToTurn <= 0) return 0;
      this.#unitsToTurn -= n;
    }
    const run = this.#run;
    run.wroteBytes = n * CQ_UNIT_SIZE_BYTES;
    run.storeTimestampMs = file.storeTimestampMs;
    const positional = n >= POSITIONAL_RUN_UNITS_MIN && this.#port.positionalRunWrites === true;
    if (positional !== this.#runsPositionally) {
      this.#runsPositionally = positional;
      if (positional) this.#allocator?.populateWithoutRead(this.directory);
      else this.#allocator?.readAfterPopulate(this.directory);
    }
    if (positional) {
      this.#writeRunPositionally(file, n);
    } else {
      file.append(this.#writeRun);
    }
    this.#maxPhysicOffset = end;
    if (
      file.wrotePosition >= this.#prepareAtPosition && this.#preparedAfter !== file.fileFromOffset
    ) {
      this.#prepareAfter(file);
    }
    return n;
  }

  /** {@link #putRunNow} into the in-memory buffer (a file in creation). */
  #putRunInMemory(count: number, queueOffset: number): number {
    if (this.#pendingFileError !== undefined) throw this.#pendingFileError;
    const at = queueOffset * CQ_UNIT_SIZE_BYTES - this.#inMemoryFrom;
    if (at !== this.#inMemoryBytes) return 0;
    const n = Math.min(count, Math.floor((this.#inMemoryCapBytes - at) / CQ_UNIT_SIZE_BYTES));
    if (n <= 0 || (this.#creations > 0 && this.#unitsToTurn <= 0)) return 0;
    const end = this.#checkRunOf(n, queueOffset);
    if (this.#creations > 0) this.#unitsToTurn -= n;
    const need = at + n * CQ_UNIT_SIZE_BYTES;
    this.#writeRunAt(this.#inMemoryWithRoom(need), at, n);
    this.#inMemoryBytes = need;
    this.#maxPhysicOffset = end;
    return n;
  }

  /**
   * The in-memory buffer with room for `needBytes` (within its cap): a
   * grown copy when it has less. The old one is left as it is, so views
   * of it that readers hold stay valid.
   */
  #inMemoryWithRoom(needBytes: number): Uint8Array {
    const buffer = this.#inMemory!;
    if (needBytes <= buffer.length) return buffer;
    let length = buffer.length;
    // Bounded: doubles up to the cap, which needBytes is within.
    while (length < needBytes) length = Math.min(length * 2, this.#inMemoryCapBytes);
    const grown = new Uint8Array(length);
    grown.set(buffer.subarray(0, this.#inMemoryBytes));
    this.#inMemory = grown;
    return grown;
  }

  /**
   * Checks the first `n` units of a run (see {@link putUnitsNow}).
   *
   * @returns The end of the last one's message.
   */
  #checkRun(
    n: number,
    queueOffset: number,
    offsets: Float64Array,
    sizes: Int32Array,
    tagsCodes: Float64Array,
  ): number {
    let end = this.#maxPhysicOffset;
    // The queue offsets are consecutive: the first and the last stand for all.
    const queueOffsetsValid = Number.isSafeInteger(queueOffset) && queueOffset >= 0 &&
      Number.isSafeInteger(queueOffset + n);
    for (let i = 0; i < n; i++) {
      const offset = offsets[i]!;
      const size = sizes[i]!;
      const tagsCode = tagsCodes[i]!;
      // What checkUnit and the order check below accept, in one test (an
      // Int32Array's size is an integer): the messages only when it fails.
      if (
        !(queueOffsetsValid && offset >= end && Number.isSafeInteger(offset) && size > 0 &&
          Number.isSafeInteger(tagsCode))
      ) {
        checkUnit(offset, size, tagsCode, queueOffset + i);
        // Units follow the commit log: each record after the one before.
        if (offset < end) {
          throw new RangeError(
            `Commit-log offset ${offset} of queue offset ${
              queueOffset + i
            } is before ${end}, the end of the unit before it`,
          );
        }
      }
      end = offset + size;
    }
    return end;
  }

  /**
   * The units putUnitsNow (arrays) or putUniformRunNow (one size and
   * tagsCode, offsets computed) writes, and the append outcome it reports.
   */
  readonly #run: {
    wroteBytes: number;
    storeTimestampMs: number;
    uniform: boolean;
    offsets: Float64Array;
    sizes: Int32Array;
    tagsCodes: Float64Array;
    firstOffset: number;
    size: number;
    tagsCode: number;
  } = {
    wroteBytes: 0,
    storeTimestampMs: 0,
    uniform: false,
    offsets: new Float64Array(0),
    sizes: new Int32Array(0),
    tagsCodes: new Float64Array(0),
    firstOffset: 0,
    size: 0,
    tagsCode: 0,
  };

  /** {@link #checkRun} or {@link #checkUniformRun} of the first `n` units of {@link ConsumeQueue.#run}. */
  #checkRunOf(n: number, queueOffset: number): number {
    const run = this.#run;
    return run.uniform
      ? this.#checkUniformRun(n, queueOffset, run.firstOffset, run.size, run.tagsCode)
      : this.#checkRun(n, queueOffset, run.offsets, run.sizes, run.tagsCodes);
  }

  /**
   * Writes `n` units of {@link ConsumeQueue.#run}, from its unit `from`
   * (0 unless given), at `bytes[at]` on.
   */
  #writeRunAt(bytes: Uint8Array, at: number, n: number, from = 0): void {
    const run = this.#run;
    if (run.uniform) {
      writeUniformUnits(bytes, at, n, run.firstOffset + from * run.size, run.size, run.tagsCode);
    } else {
      writeUnits(bytes, at, n, run.offsets, run.sizes, run.tagsCodes, from);
    }
  }

  /**
   * Appends the first `n` units of {@link ConsumeQueue.#run} to `file`
   * (written through a mapping, with room for them) staged in
   * {@link RUN_STAGE} and written with positional writes: the kernel's copy
   * into the page cache, not the writer's first touch of each page (see
   * `RuntimePort.positionalRunWrites`). Readers see the units once
   * wrotePosition passes them, as with stores through the mapping.
   */
  #writeRunPositionally(file: MappedFile, n: number): void {
    // Bounded: each round appends at least one unit.
    for (let done = 0; done < n;) {
      const units = Math.min(n - done, POSITIONAL_RUN_UNITS_MAX);
      this.#writeRunAt(RUN_STAGE, 0, units, done);
      const appended = file.appendPositional(
        units === POSITIONAL_RUN_UNITS_MAX
          ? RUN_STAGE
          : RUN_STAGE.subarray(0, units * CQ_UNIT_SIZE_BYTES),
      );
      if (!appended) assert(false, `${file.path} takes a run of ${n} units`);
      done += units;
    }
  }

  /** Writes the units {@link ConsumeQueue.#run} holds at the append target (a mapping). */
  readonly #writeRun = (target: AppendTarget): AppendOutcome => {
    const run = this.#run;
    this.#writeRunAt(target.bytes, target.index, run.wroteBytes / CQ_UNIT_SIZE_BYTES);
    return run;
  };

  /**
   * Checks the `n` units of a uniform run as putUnit would check each
   * (see {@link putUniformRunNow}).
   *
   * @returns The end of the last one's message.
   * @throws {RangeError} For a unit putUnit refuses.
   */
  #checkUniformRun(
    n: number,
    queueOffset: number,
    firstOffset: number,
    size: number,
    tagsCode: number,
  ): number {
    // The first and the last unit stand for all: their offsets grow by `size`.
    const end = firstOffset + n * size;
    checkUnit(firstOffset, size, tagsCode, queueOffset);
    checkUnit(end - size, size, tagsCode, queueOffset + n - 1);
    if (firstOffset < this.#maxPhysicOffset) {
      throw new RangeError(
        `Commit-log offset ${firstOffset} of queue offset ${queueOffset} is before ${this.#maxPhysicOffset}, the end of the unit before it`,
      );
    }
    return end;
  }

  /**
   * Asks the allocator to create the file after `file` in the background,
   * and to pre-fault the rest of `file` if nothing did.
   */
  #prepareAfter(file: MappedFile): void {
    const position = file.wrotePosition;
    const mark = this.#prepareMarkPosition;
    if (position < mark) {
      // A head piece: the allocator answers false for a file pre-faulted
      // whole already (rolled into), which then waits for the mark.
      const more = this.#allocator?.populateHead(file, HEAD_POPULATE_LEAD * position) === true;
      const next = 2 * position - (2 * position) % CQ_UNIT_SIZE_BYTES;
      this.#prepareAtPosition = more && next < mark ? next : mark;
      return;
    }
    this.#prepareAtPosition = mark;
    this.#prepareAfterOffset(file.fileFromOffset);
    // After the creation just started, which the pre-fault waits for.
    this.#allocator?.populateRest(file);
  }

  /** Where {@link #prepareAtPosition} starts in a file that may be pre-faulted by pieces. */
  #headPopulateFrom(): number {
    return Math.min(HEAD_POPULATE_FROM_BYTES, this.#prepareMarkPosition);
  }

  /** {@link #prepareAfter} for the file from logical byte offset `fileFromOffset`. */
  #prepareAfterOffset(fileFromOffset: number): void {
    this.#preparedAfter = fileFromOffset;
    const allocator = this.#allocator;
    if (allocator === undefined) return;
    // A synchronous creation ends within microtasks: no turns to give.
    const needsTurns = !allocator.createsSynchronously;
    for (let ahead = 1; ahead <= this.#filesAhead; ahead++) {
      const next = fileFromOffset + ahead * this.fileSizeBytes;
      const path = joinPath(this.directory, segmentFileName(next));
      if (!needsTurns) {
        allocator.prepare(path, this.fileSizeBytes);
        continue;
      }
      this.#creations++;
      allocator.prepare(path, this.fileSizeBytes).finally(() => this.#creations--);
    }
  }

  /**
   * Starts the roll in memory ({@link #startRollInMemory}) when the unit
   * of `queueOffset` is the first of the file after a full last file
   * written through a mapping, with an allocator to take it from.
   */
  #tryRollInMemory(queueOffset: number): boolean {
    const last = this.#queue.lastFile;
    if (
      this.#allocator === undefined || last === undefined || !last.isFull ||
      last.writeMode !== "mapping" ||
      queueOffset * CQ_UNIT_SIZE_BYTES !== last.fileFromOffset + this.fileSizeBytes
    ) {
      return false;
    }
    this.#startRollInMemory(last);
    return true;
  }

  async #put(
    commitLogOffset: number,
    size: number,
    tagsCode: number,
    queueOffset: number,
  ): Promise<boolean> {
    const expectLogicOffset = queueOffset * CQ_UNIT_SIZE_BYTES;
    const firstInQueue = this.#queue.files.length === 0;
    // The usual case, a last file with room, takes no await.
    let file = this.#queue.lastFile;
    if (file === undefined || file.isFull) {
      file = await this.#queue.getOrCreateLastMappedFile(expectLogicOffset);
    }
    if (firstInQueue && queueOffset !== 0 && file.wrotePosition === 0) {
      this.#minLogicOffset = expectLogicOffset;
      this.#queue.flushedWhere = expectLogicOffset;
      this.#queue.committedWhere = expectLogicOffset;
      await this.#fillPreBlank(file, expectLogicOffset);
    }
    const currentLogicOffset = file.fileFromOffset + file.wrotePosition;
    if (queueOffset !== 0 || currentLogicOffset !== 0) {
      if (expectLogicOffset < currentLogicOffset) return false;
      if (expectLogicOffset > currentLogicOffset) {
        throw new RangeError(
          `Cannot put the unit of queue offset ${queueOffset} in ${this.topic}/${this.queueId}: the queue ends at queue offset ${
            currentLogicOffset / CQ_UNIT_SIZE_BYTES
          } (units are consecutive)`,
        );
      }
    }
    const view = this.#unitView;
    writeInt64(view, 0, commitLogOffset);
    view.setInt32(CQ_UNIT_SIZE_POSITION, size);
    writeInt64(view, CQ_UNIT_TAGS_CODE_POSITION, tagsCode);
    if (file.writeMode === "window") await this.#append(file, this.#unit);
    else this.#appendNow(file, this.#unit);
    this.#maxPhysicOffset = commitLogOffset + size;
    if (
      file.wrotePosition >= this.#prepareAtPosition && this.#preparedAfter !== file.fileFromOffset
    ) {
      this.#prepareAfter(file);
    }
    return true;
  }

  /**
   * The unit of queue offset `queueOffset`, or undefined outside
   * `[minOffsetInQueue, maxOffsetInQueue)`.
   */
  async getUnit(queueOffset: number): Promise<ConsumeQueueUnit | undefined> {
    const units = await this.readUnits(queueOffset, 1);
    if (units === undefined) return undefined;
    try {
      return units.unitAt(0);
    } finally {
      units.release();
    }
  }

  /**
   * Up to `maxCount` consecutive units from `queueOffset`, all from one
   * file (fewer at a file end: ask again from `queueOffset + count`), or
   * undefined outside `[minOffsetInQueue, maxOffsetInQueue)`. On mapping
   * ports the run is a view of the file; release it when done.
   */
  async readUnits(queueOffset: number, maxCount: number): Promise<ConsumeQueueUnits | undefined> {
    if (!Number.isSafeInteger(queueOffset) || queueOffset < 0) {
      throw new RangeError(`Queue offset ${queueOffset} must be a non-negative integer`);
    }
    if (!Number.isSafeInteger(maxCount) || maxCount <= 0) {
      throw new RangeError(`maxCount ${maxCount} must be a positive integer`);
    }
    const logicOffset = queueOffset * CQ_UNIT_SIZE_BYTES;
    if (logicOffset < this.#minLogicOffset) return undefined;
    const inMemory = this.#inMemory;
    if (inMemory !== undefined && logicOffset >= this.#inMemoryFrom) {
      // A view: the buffer is only appended to, and replaced when it grows.
      const at = logicOffset - this.#inMemoryFrom;
      const available = Math.floor((this.#inMemoryBytes - at) / CQ_UNIT_SIZE_BYTES);
      if (available <= 0) return undefined;
      const end = at + Math.min(available, maxCount) * CQ_UNIT_SIZE_BYTES;
      return new ConsumeQueueUnits(queueOffset, inMemory.subarray(at, end), () => {});
    }
    const file = this.#queue.findMappedFileByOffset(logicOffset);
    if (file === undefined) return undefined;
    const position = logicOffset - file.fileFromOffset;
    const available = Math.floor((file.readPosition - position) / CQ_UNIT_SIZE_BYTES);
    if (available <= 0) return undefined;
    const count = Math.min(available, maxCount);
    const range = await file.selectRange(position, count * CQ_UNIT_SIZE_BYTES);
    if (range === undefined) return undefined;
    return new ConsumeQueueUnits(queueOffset, range.bytes, range.release);
  }

  /** The first queue offset readers may ask for (RocketMQ's `getMinOffsetInQueue`). */
  get minOffsetInQueue(): number {
    return this.#minLogicOffset / CQ_UNIT_SIZE_BYTES;
  }

  /** The queue offset the next unit gets (RocketMQ's `getMaxOffsetInQueue`). */
  get maxOffsetInQueue(): number {
    const end = this.#readOnlyEnd ??
      (this.#inMemory !== undefined
        ? this.#inMemoryFrom + this.#inMemoryBytes
        : this.#queue.maxOffset);
    return end / CQ_UNIT_SIZE_BYTES;
  }

  /** End (offset + size) of the last unit's message; -1 when none. */
  get maxPhysicOffset(): number {
    return this.#maxPhysicOffset;
  }

  /** Logical byte offset up to which the units are durable. */
  get flushedWhere(): number {
    return this.#queue.flushedWhere;
  }

  /** The files, oldest first (read-only view for tools and tests). */
  get files(): readonly MappedFile[] {
    return this.#queue.files;
  }

  /**
   * Sets the first readable unit to the first one of the first file whose
   * message is at or past `minCommitLogOffset` (RocketMQ's
   * `correctMinOffset`). Padding units are skipped too: they point at no
   * message. Unchanged when the first file has no such unit.
   */
  async correctMinOffset(minCommitLogOffset: number): Promise<void> {
    await this.#pendingFile;
    const file = this.#queue.firstFile;
    if (file === undefined) return;
    const range = await file.selectRange(0, file.readPosition);
    if (range === undefined) return;
    try {
      const view = new DataView(range.bytes.buffer, range.bytes.byteOffset, range.bytes.length);
      for (let at = 0; at + CQ_UNIT_SIZE_BYTES <= view.byteLength; at += CQ_UNIT_SIZE_BYTES) {
        const offset = readInt64(view, at);
        const size = view.getInt32(at + CQ_UNIT_SIZE_POSITION);
        if (offset >= minCommitLogOffset && !(offset === 0 && size === CQ_PAD_UNIT_SIZE)) {
          this.#minLogicOffset = file.fileFromOffset + at;
          return;
        }
      }
    } finally {
      range.release();
    }
  }

  /**
   * Drops the units whose message starts at or past `physicalOffset`
   * (RocketMQ's `truncateDirtyLogicFiles`): the last file is cut after
   * the last unit below it, emptied files are deleted, and the cut units
   * are zeroed on disk.
   */
  async truncateDirtyLogicFiles(physicalOffset: number): Promise<void> {
    if (!Number.isSafeInteger(physicalOffset) || physicalOffset < 0) {
      throw new RangeError(`Offset ${physicalOffset} must be a non-negative integer`);
    }
    if (this.#readOnly) {
      throw new MqStoreError("UNSUPPORTED", `Cannot truncate ${this.directory}: opened read-only`);
    }
    await this.#pendingFile;
    this.#maxPhysicOffset = physicalOffset;
    // A file prepared after one that goes now would leave a gap on disk.
    await this.#allocator?.discard(this.directory);
    // The discard also forgot that this queue's files skip the read.
    this.#runsPositionally = false;
    this.#preparedAfter = -1;
    this.#prepareAtPosition = this.#headPopulateFrom();
    // Bounded: each round deletes a file or ends.
    for (let round = this.#queue.files.length; round > 0; round--) {
      const file = this.#queue.lastFile;
      if (file === undefined) break;
      const validBytes = await this.#scanValid(file, file.readPosition, physicalOffset);
      if (validBytes > 0) {
        // Past the write position there are only zeros (recover() made
        // sure): zero the cut units only.
        await this.#cutAt(file.fileFromOffset + validBytes, "wrote");
        break;
      }
      // RocketMQ drops a last file whose first unit is already too far.
      await this.#queue.deleteLastFile();
    }
    const end = this.#queue.maxOffset;
    if (this.#minLogicOffset > end) this.#minLogicOffset = end;
  }

  /**
   * Flushes under the least-pages rule.
   *
   * @returns Whether the flushed offset moved.
   */
  async flush(leastPages: number): Promise<boolean> {
    // Units held in memory are flushed once they are in the file (a
    // failed creation rejects: the checkpoint must not count them).
    await this.#pendingFile;
    const moved = await this.#queue.flush(leastPages);
    // A file the allocator made has its name made durable in the
    // background: the checkpoint counts the units flushed here only once
    // it is (a crash before would undo the name, and the units with it).
    await this.#allocator?.whenNamesDurable(this.directory);
    return moved;
  }

  /**
   * Deletes the files whose units all point below `minCommitLogOffset`
   * (never the last file), then corrects the min offset (RocketMQ's
   * `deleteExpiredFile`).
   *
   * @returns How many files were deleted.
   */
  async deleteExpiredFile(minCommitLogOffset: number): Promise<number> {
    await this.#pendingFile;
    const deleted = await this.#queue.deleteExpiredByOffset(
      minCommitLogOffset,
      CQ_UNIT_SIZE_BYTES,
    );
    await this.correctMinOffset(minCommitLogOffset);
    return deleted;
  }

  /** Closes the files (flush first). Idempotent. */
  async close(): Promise<void> {
    // A failed creation was reported by the puts and flushes that met it.
    await this.#pendingFile?.catch(() => {});
    await this.#queue.close({ waitMs: 0 });
  }

  /** Deletes every file of the queue and closes it. */
  async destroy(): Promise<void> {
    await this.#pendingFile?.catch(() => {});
    await this.#allocator?.discard(this.directory);
    this.#runsPositionally = false;
    this.#preparedAfter = -1;
    this.#prepareAtPosition = this.#headPopulateFrom();
    await this.#queue.destroy();
    this.#maxPhysicOffset = -1;
    this.#minLogicOffset = 0;
    this.#inMemory = undefined;
    this.#inMemoryBytes = 0;
    this.#inMemoryFrom = 0;
  }

  /**
   * Bytes of valid units at the start of `file` (up to `limit`): units
   * with offset ≥ 0 and size > 0 and, when `belowOffset` ≥ 0, an offset
   * below it. Updates {@link maxPhysicOffset} from the last valid unit.
   */
  async #scanValid(file: MappedFile, limit: number, belowOffset: number): Promise<number> {
    const readable = limit - limit % CQ_UNIT_SIZE_BYTES;
    if (readable === 0) return 0;
    const range = await file.selectRange(0, readable);
    assert(range !== undefined, `${file.path} is readable up to ${readable}`);
    try {
      const view = new DataView(range.bytes.buffer, range.bytes.byteOffset, readable);
      let valid = 0;
      for (let at = 0; at < readable; at += CQ_UNIT_SIZE_BYTES) {
        const offset = readInt64(view, at);
        const size = view.getInt32(at + CQ_UNIT_SIZE_POSITION);
        if (offset < 0 || size <= 0) break;
        if (belowOffset >= 0 && offset >= belowOffset) break;
        valid = at + CQ_UNIT_SIZE_BYTES;
        // A padding unit points at no message: its "end" (2 GiB) would
        // make every later unit below it look like a repeat.
        if (!(offset === 0 && size === CQ_PAD_UNIT_SIZE)) this.#maxPhysicOffset = offset + size;
      }
      return valid;
    } finally {
      range.release();
    }
  }

  /**
   * Ends the queue at logical byte offset `cut`: later files deleted, the
   * file holding it trimmed, and its stale bytes past the cut zeroed: up
   * to its last non-zero byte (`scan`), up to its write position
   * (`wrote`), or none (`none`: known to be zeros).
   */
  async #cutAt(cut: number, stale: "scan" | "wrote" | "none"): Promise<void> {
    const holder = this.#queue.findMappedFileByOffset(cut) ??
      (cut === this.#queue.maxOffset ? this.#queue.lastFile : undefined);
    let staleEnd = 0;
    if (holder !== undefined) {
      const position = cut - holder.fileFromOffset;
      staleEnd = stale === "none"
        ? position
        : stale === "wrote"
        ? Math.max(position, holder.wrotePosition)
        : position + await nonZeroLength(holder, position, holder.readPosition);
    }
    await this.#queue.truncateDirtyFiles(cut);
    if (holder === undefined || staleEnd <= cut - holder.fileFromOffset) return;
    await holder.zeroRange(cut - holder.fileFromOffset, staleEnd);
  }

  async #fillPreBlank(file: MappedFile, untilWhere: number): Promise<void> {
    const pad = new Uint8Array(CQ_UNIT_SIZE_BYTES);
    new DataView(pad.buffer).setInt32(CQ_UNIT_SIZE_POSITION, CQ_PAD_UNIT_SIZE);
    const until = untilWhere % this.fileSizeBytes;
    for (let at = 0; at < until; at += CQ_UNIT_SIZE_BYTES) await this.#append(file, pad);
  }

  async #append(file: MappedFile, unit: Uint8Array): Promise<void> {
    if (file.writeMode !== "window") {
      this.#appendNow(file, unit);
      return;
    }
    await file.ensureWritable(unit.length);
    this.#appendNow(file, unit);
    // Ports that cannot map show readers committed bytes only: commit at
    // once so a unit is readable as soon as it is written, as through a mapping.
    await file.commit(0);
  }

  #appendNow(file: MappedFile, unit: Uint8Array): void {
    const appended = file.appendBytes(unit);
    // Checked with an if: the message would be built on every unit.
    if (!appended) {
      assert(false, `a ${unit.length}-byte unit fits in ${file.path} at ${file.wrotePosition}`);
    }
  }
}

/**
 * Writes one unit (commit-log offset, size, tags code) at `bytes[at]` as
 * byte stores: no view of a mapping to keep, no native call.
 */
function writeUnitBytes(
  bytes: Uint8Array,
  at: number,
  offset: number,
  size: number,
  tagsCode: number,
): void {
  putInt64(bytes, at, offset);
  putInt32(bytes, at + CQ_UNIT_SIZE_POSITION, size);
  putInt64(bytes, at + CQ_UNIT_TAGS_CODE_POSITION, tagsCode);
}

/**
 * Writes the `count` units of a uniform run at `bytes[at]` on (see
 * ConsumeQueue.putUniformRunNow): unit `i` is `firstOffset + i * size`,
 * `size`, `tagsCode`, as {@link writeUnitBytes} writes each.
 */
function writeUniformUnits(
  bytes: Uint8Array,
  at: number,
  count: number,
  firstOffset: number,
  size: number,
  tagsCode: number,
): void {
  // One view a run: big-endian words, no byte shifts per field.
  const view = new DataView(bytes.buffer, bytes.byteOffset + at, count * CQ_UNIT_SIZE_BYTES);
  let offset = firstOffset;
  for (let i = 0, p = 0; i < count; i++, p += CQ_UNIT_SIZE_BYTES) {
    writeInt64(view, p, offset);
    view.setInt32(p + CQ_UNIT_SIZE_POSITION, size);
    writeInt64(view, p + CQ_UNIT_TAGS_CODE_POSITION, tagsCode);
    offset += size;
  }
}

/**
 * Writes `count` units, those at index `from` on of the arrays, at
 * `bytes[at]` on, each as {@link writeUnitBytes} writes it.
 */
function writeUnits(
  bytes: Uint8Array,
  at: number,
  count: number,
  offsets: Float64Array,
  sizes: Int32Array,
  tagsCodes: Float64Array,
  from: number,
): void {
  for (let i = 0; i < count; i++) {
    const k = from + i;
    writeUnitBytes(bytes, at + i * CQ_UNIT_SIZE_BYTES, offsets[k]!, sizes[k]!, tagsCodes[k]!);
  }
}

/**
 * The directory of one consume queue under a store root.
 *
 * @example
 * ```ts
 * import { consumeQueueDirectory } from "./consume_queue.ts";
 *
 * consumeQueueDirectory("/store", "%RETRY%group", 3); // "/store/consumequeue/%RETRY%group/3"
 * ```
 */
export function consumeQueueDirectory(
  rootDirectory: string,
  topic: string,
  queueId: number,
): string {
  return `${rootDirectory}/${CONSUME_QUEUE_DIRECTORY_NAME}/${topic}/${queueId}`;
}

function checkUnit(
  commitLogOffset: number,
  size: number,
  tagsCode: number,
  queueOffset: number,
): void {
  if (!Number.isSafeInteger(commitLogOffset) || commitLogOffset < 0) {
    throw new RangeError(`Commit-log offset ${commitLogOffset} must be a non-negative integer`);
  }
  if (!Number.isSafeInteger(size) || size <= 0 || size > CQ_PAD_UNIT_SIZE) {
    throw new RangeError(`Size ${size} must be an integer in [1, ${CQ_PAD_UNIT_SIZE}]`);
  }
  if (!Number.isSafeInteger(tagsCode)) {
    throw new RangeError(`tagsCode ${tagsCode} must be a safe integer`);
  }
  if (!Number.isSafeInteger(queueOffset) || queueOffset < 0) {
    throw new RangeError(`Queue offset ${queueOffset} must be a non-negative integer`);
  }
}

/**
 * Length of `[position, end)` in `file` up to its last non-zero byte; 0
 * when the range is all zeros (the usual tail of a file).
 */
async function nonZeroLength(file: MappedFile, position: number, end: number): Promise<number> {
  if (end <= position) return 0;
  const range = await file.selectRange(position, end - position);
  if (range === undefined) return 0;
  try {
    const bytes = range.bytes;
    // Word by word over the 4-byte-aligned middle (the scan may cover a
    // whole 6 MB file after a crash), bytes at the edges.
    const head = Math.min(bytes.length, (4 - (bytes.byteOffset & 3)) & 3);
    const words = (bytes.length - head) >>> 2;
    const tail = head + words * 4;
    for (let i = bytes.length - 1; i >= tail; i--) if (bytes[i] !== 0) return i + 1;
    if (words > 0) {
      const view = new Int32Array(bytes.buffer, bytes.byteOffset + head, words);
      for (let w = words - 1; w >= 0; w--) {
        if (view[w] !== 0) {
          const at = head + w * 4;
          for (let i = at + 3; i >= at; i--) if (bytes[i] !== 0) return i + 1;
        }
      }
    }
    for (let i = head - 1; i >= 0; i--) if (bytes[i] !== 0) return i + 1;
    return 0;
  } finally {
    range.release();
  }
}
