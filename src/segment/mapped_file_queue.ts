/**
 * A directory of equal-size segments forming one contiguous log
 * (RocketMQ's `MappedFileQueue`).
 *
 * ```
 * <directory>/00000000000000000000   [0, S)
 *             00000000000000065536   [S, 2S)      S = fileSizeBytes
 *             00000000000000131072   [2S, 3S)     ← last: the one written
 * ```
 *
 * Each file is named by its start offset, a multiple of the segment size.
 * Files are contiguous, so the file holding an offset is found by index
 * arithmetic from the first file's offset. `flushedWhere` and
 * `committedWhere` are global offsets; a flush or commit continues into the
 * next file when the current one is done, because a put may end there.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import type { RuntimePort } from "../runtime/port.ts";
import type { AllocateMappedFileService } from "./allocate_mapped_file_service.ts";
import { type Clock, systemClock } from "./clock.ts";
import { DELETE_FILES_BATCH_MAX, DESTROY_FORCE_AFTER_MS_DEFAULT } from "./constants.ts";
import { MappedFile } from "./mapped_file.ts";
import {
  isTemporarySegmentName,
  joinPath,
  parseSegmentFileName,
  segmentFileName,
} from "./_file_name.ts";
import type { TransientStorePool } from "./transient_store_pool.ts";

/** Options of {@link MappedFileQueue}. */
export interface MappedFileQueueOptions {
  /** The runtime port. */
  port: RuntimePort;
  /** The directory of the segments. */
  directory: string;
  /** Size of every segment. */
  fileSizeBytes: number;
  /**
   * Creates new segments ahead of need. Without it, segments are created
   * when asked for.
   *
   * @default {undefined}
   */
  allocator?: AllocateMappedFileService;
  /**
   * Write buffers for segments this queue creates itself (no allocator).
   *
   * @default {undefined}
   */
  pool?: TransientStorePool;
  /**
   * Write-buffer size of `window` mode (ports that cannot map).
   *
   * @default {4 MiB}
   */
  writeBufferSizeBytes?: number;
  /**
   * Segments this queue creates or loads append into a write buffer and
   * commit it with synchronous positional writes (see
   * `MappedFileOptions.positionalWrites`). Segments from the allocator
   * follow the allocator's setting.
   *
   * @default {false}
   */
  positionalWrites?: boolean;
  /**
   * Create sparse segments (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
  /**
   * Open segments read-only; nothing is created, written or deleted.
   *
   * @default {false}
   */
  readOnly?: boolean;
  /**
   * Time source (file ages, destroy timeouts).
   *
   * @default {systemClock}
   */
  clock?: Clock;
}

/** Options of {@link MappedFileQueue.deleteExpiredByTime}. */
export interface DeleteByTimeOptions {
  /** Age (since last modification) after which a segment expires. */
  expiredTimeMs: number;
  /**
   * Delete expired-or-not segments (the disk is nearly full).
   *
   * @default {false}
   */
  cleanImmediately?: boolean;
  /**
   * How long a segment held by a reader is spared before its mapping is
   * retired under the reader.
   *
   * @default {120 000}
   */
  forceAfterMs?: number;
  /**
   * At most this many segments per call.
   *
   * @default {10}
   */
  maxCount?: number;
}

/**
 * The segments of one log.
 *
 * @example
 * ```ts
 * import { createPort } from "../runtime/mod.ts";
 * import { MappedFileQueue } from "./mapped_file_queue.ts";
 *
 * const port = await createPort({ adapter: "memory" });
 * const queue = new MappedFileQueue({ port, directory: "/store/commitlog", fileSizeBytes: 0x1_0000 });
 * await queue.load();
 * const file = await queue.getOrCreateLastMappedFile(0);
 * file.appendBytes(new Uint8Array(100));
 * await queue.flush(0);
 * console.log(queue.flushedWhere); // 100
 * await queue.close();
 * ```
 */
export class MappedFileQueue {
  /** The directory of the segments. */
  readonly directory: string;
  /** Size of every segment. */
  readonly fileSizeBytes: number;

  #port: RuntimePort;
  #allocator: AllocateMappedFileService | undefined;
  #pool: TransientStorePool | undefined;
  #writeBufferSizeBytes: number | undefined;
  #positionalWrites: boolean;
  #sparse: boolean;
  #readOnly: boolean;
  #clock: Clock;
  /** The segments, by start offset, contiguous. */
  #files: MappedFile[] = [];
  /** Global offset up to which every byte is durable. */
  #flushedWhere = 0;
  /**
   * End of what the flushes begun by {@link startFlush} cover (at most the
   * appended end); the next one begins there.
   */
  #flushStartedWhere = 0;
  /** The last flush begun by {@link startFlush}; settles after every earlier one. */
  #startedFlush: Promise<void> = Promise.resolve();
  /** Global offset up to which every byte is in the files. */
  #committedWhere = 0;
  /** Store timestamp of the last append covered by a full flush. */
  #storeTimestampMs = 0;
  #closed = false;
  /** The segment creation in progress, if any. */
  #creating: Promise<MappedFile> | undefined;

  /** @param options Port, directory, segment size and optional helpers. */
  constructor(options: MappedFileQueueOptions) {
    if (!Number.isSafeInteger(options.fileSizeBytes) || options.fileSizeBytes <= 0) {
      throw new RangeError(`Segment size ${options.fileSizeBytes} must be a positive integer`);
    }
    this.directory = options.directory;
    this.fileSizeBytes = options.fileSizeBytes;
    this.#port = options.port;
    this.#allocator = options.allocator;
    this.#pool = options.pool;
    this.#writeBufferSizeBytes = options.writeBufferSizeBytes;
    this.#positionalWrites = options.positionalWrites === true;
    this.#sparse = options.sparse === true;
    this.#readOnly = options.readOnly === true;
    this.#clock = options.clock ?? systemClock;
  }

  /**
   * Opens the segments already in the directory (creating the directory if
   * missing). Every loaded segment counts as full; recovery then trims the
   * last with {@link truncateDirtyFiles}. Half-made segments (`.tmp`) from
   * an interrupted creation are removed.
   *
   * @param options `beforeOffset`: segments starting at or past it are
   *   left out (not opened, not removed): a read-only consume queue
   *   leaves out what a crash left of unfinished creations, which a
   *   writable load removes.
   * @throws {MqStoreError} `INVALID_FILE` for a segment of another size, a
   *   name that is not a multiple of the segment size, or a gap.
   */
  async load(options: { beforeOffset?: number } = {}): Promise<void> {
    this.#checkOpen("load");
    assert(this.#files.length === 0, "load() runs once, on an empty queue");
    // On the JavaScript thread where the port can: a new consume queue's
    // first file is created under a producer that may never yield, and
    // each awaited step would wait for a turn of the event loop.
    const port = this.#port;
    if (!this.#readOnly) {
      if (port.makeDirectorySync !== undefined) port.makeDirectorySync(this.directory);
      else await port.makeDirectory(this.directory);
    }
    const names = port.listSync?.(this.directory) ?? await port.list(this.directory);
    const offsets: number[] = [];
    for (const name of names) {
      if (isTemporarySegmentName(name)) {
        if (this.#readOnly) continue;
        const path = joinPath(this.directory, name);
        if (port.removeSync !== undefined) port.removeSync(path);
        else await port.remove(path);
        continue;
      }
      const offset = parseSegmentFileName(name);
      if (offset !== undefined && offset < (options.beforeOffset ?? Number.POSITIVE_INFINITY)) {
        offsets.push(offset);
      }
    }
    offsets.sort((a, b) => a - b);
    this.#checkContiguous(offsets);
    try {
      for (const offset of offsets) {
        const path = joinPath(this.directory, segmentFileName(offset));
        const stat = await this.#port.stat(path);
        if (stat === undefined || !stat.isFile || stat.sizeBytes !== this.fileSizeBytes) {
          throw new MqStoreError(
            "INVALID_FILE",
            `Segment ${path} is ${
              stat?.sizeBytes ?? "not a file of"
            } bytes; segments of ${this.directory} are ${this.fileSizeBytes}`,
          );
        }
        const file = await MappedFile.open({
          port: this.#port,
          path,
          fileSizeBytes: this.fileSizeBytes,
          readOnly: this.#readOnly,
          writeBufferSizeBytes: this.#writeBufferSizeBytes,
          positionalWrites: this.#positionalWrites,
          clock: this.#clock,
        });
        file.resetPositions(this.fileSizeBytes);
        this.#files.push(file);
      }
    } catch (error) {
      await this.#closeFiles(0);
      throw error;
    }
  }

  /** The segments, oldest first. */
  get files(): readonly MappedFile[] {
    return this.#files;
  }

  /** The oldest segment. */
  get firstFile(): MappedFile | undefined {
    return this.#files[0];
  }

  /** The newest segment (RocketMQ's `getLastMappedFile()`). */
  get lastFile(): MappedFile | undefined {
    return this.#files[this.#files.length - 1];
  }

  /**
   * The segment to append to: the last one, or a new one when there is
   * none (starting at the segment holding `startOffset`) or the last is
   * full. RocketMQ's `getLastMappedFile(startOffset, true)`.
   */
  async getOrCreateLastMappedFile(startOffset = 0): Promise<MappedFile> {
    this.#checkOpen("create a segment in");
    if (this.#readOnly) {
      throw new MqStoreError(
        "UNSUPPORTED",
        `Cannot create a segment in ${this.directory}: read-only`,
      );
    }
    for (;;) {
      const last = this.lastFile;
      if (last !== undefined && !last.isFull) return last;
      // One creation at a time: a second caller waits for it and re-checks.
      const creating = this.#creating;
      if (creating === undefined) break;
      await creating.catch(() => {});
    }
    const creating = this.#createNext(startOffset);
    this.#creating = creating;
    try {
      return await creating;
    } finally {
      this.#creating = undefined;
    }
  }

  async #createNext(startOffset: number): Promise<MappedFile> {
    const last = this.lastFile;
    const createOffset = last === undefined
      ? startOffset - startOffset % this.fileSizeBytes
      : last.fileFromOffset + this.fileSizeBytes;
    const path = joinPath(this.directory, segmentFileName(createOffset));
    const nextPath = joinPath(this.directory, segmentFileName(createOffset + this.fileSizeBytes));
    const file = this.#allocator !== undefined
      ? await this.#allocator.request(path, nextPath, this.fileSizeBytes)
      : await MappedFile.create({
        port: this.#port,
        path,
        fileSizeBytes: this.fileSizeBytes,
        pool: this.#pool,
        sparse: this.#sparse,
        writeBufferSizeBytes: this.#writeBufferSizeBytes,
        positionalWrites: this.#positionalWrites,
        clock: this.#clock,
      });
    assert(file.fileFromOffset === createOffset, `created ${file.path} for ${createOffset}`);
    assert(this.lastFile === last, "segments are created one at a time");
    this.#files.push(file);
    return file;
  }

  /**
   * The segment holding `offset`, by index arithmetic; undefined when the
   * offset is outside `[first start, last end)`.
   */
  findMappedFileByOffset(offset: number): MappedFile | undefined {
    const first = this.#files[0];
    if (first === undefined || offset < first.fileFromOffset) return undefined;
    const index = Math.floor(offset / this.fileSizeBytes) -
      Math.floor(first.fileFromOffset / this.fileSizeBytes);
    const file = this.#files[index];
    if (file === undefined) return undefined;
    // Checked before building the message: this runs once per read.
    if (offset < file.fileFromOffset || offset >= file.fileFromOffset + this.fileSizeBytes) {
      assert(false, `segment ${file.fileName} at index ${index} holds offset ${offset}`);
    }
    return file;
  }

  /**
   * The first segment modified at or after `timestampMs`, else the last
   * one; undefined when the queue is empty (RocketMQ's
   * `getMappedFileByTime`, used to look messages up by time).
   */
  async findMappedFileByTime(timestampMs: number): Promise<MappedFile | undefined> {
    for (const file of this.#files) {
      if (await file.lastModifiedMs() >= timestampMs) return file;
    }
    return this.lastFile;
  }

  /** Bytes appended but not yet committed into the files (write-buffer modes). */
  get uncommittedBytes(): number {
    const last = this.lastFile;
    return last === undefined ? 0 : Math.max(0, this.maxWrotePosition - this.#committedWhere);
  }

  /** Bytes readers may see that are not yet durable. */
  get unflushedBytes(): number {
    const last = this.lastFile;
    return last === undefined ? 0 : Math.max(0, this.maxOffset - this.#flushedWhere);
  }

  /** Start of the first segment, or -1 when there is none (RocketMQ's `getMinOffset`). */
  get minOffset(): number {
    return this.#files[0]?.fileFromOffset ?? -1;
  }

  /** End of what readers may see in the last segment; 0 when empty. */
  get maxOffset(): number {
    const last = this.lastFile;
    return last === undefined ? 0 : last.fileFromOffset + last.readPosition;
  }

  /** End of what was appended to the last segment; 0 when empty. */
  get maxWrotePosition(): number {
    const last = this.lastFile;
    return last === undefined ? 0 : last.fileFromOffset + last.wrotePosition;
  }

  /** Global offset up to which every byte is durable. */
  get flushedWhere(): number {
    return this.#flushedWhere;
  }

  /** Sets the flushed offset (recovery). */
  set flushedWhere(offset: number) {
    checkOffset(offset);
    this.#flushedWhere = offset;
    this.#flushStartedWhere = offset;
  }

  /** Global offset up to which every byte is in the files. */
  get committedWhere(): number {
    return this.#committedWhere;
  }

  /** Sets the committed offset (recovery). */
  set committedWhere(offset: number) {
    checkOffset(offset);
    this.#committedWhere = offset;
  }

  /** Store timestamp of the last append covered by a `flush(0)` (for the checkpoint). */
  get storeTimestampMs(): number {
    return this.#storeTimestampMs;
  }

  /**
   * Flushes from {@link flushedWhere} under the least-pages rule, going on
   * into the next segment when one is flushed to its end.
   *
   * @param leastPages Whole 4 KiB pages that must have changed (0: any).
   * @param maxBytes Stop after about this many bytes (whole pages, at least
   *   one; see {@link MappedFile.flush}), so one call ends in bounded time
   *   on a large backlog. Default: no bound.
   * @returns Whether {@link flushedWhere} moved.
   */
  async flush(leastPages: number, maxBytes: number = Number.MAX_SAFE_INTEGER): Promise<boolean> {
    this.#checkOpen("flush");
    const before = this.#flushedWhere;
    for (let step = 0; step < this.#files.length; step++) {
      const where = this.#flushedWhere;
      const file = this.findMappedFileByOffset(where) ?? (where === 0 ? this.firstFile : undefined);
      if (file === undefined) break;
      const timestamp = file.storeTimestampMs;
      const readyPosition = file.committedPosition;
      const budget = Math.max(1, maxBytes - (where - before));
      const position = await file.flush(leastPages, budget);
      const reached = file.fileFromOffset + position;
      assert(reached >= where, `flush went back from ${where} to ${reached}`);
      this.#flushedWhere = reached;
      // A bounded flush that stopped short did not cover the last append.
      if (leastPages === 0 && position >= readyPosition) this.#storeTimestampMs = timestamp;
      if (reached - before >= maxBytes) break;
      if (position < this.fileSizeBytes) break;
    }
    return this.#flushedWhere !== before;
  }

  /**
   * Begins a flush of everything appended so far without waiting for the
   * flushes in flight (see {@link MappedFile.startFlush}): the segments
   * with bytes appended since the last one began write them now and start
   * their `fdatasync`. Flushes begun this way settle in the order they
   * began, each moving {@link flushedWhere} to the end it covers; one fails
   * when an earlier one failed.
   *
   * @returns The flush, or undefined when nothing was appended since the
   *   last one began.
   */
  startFlush(): Promise<void> | undefined {
    this.#checkOpen("flush");
    const from = Math.max(this.#flushStartedWhere, this.#flushedWhere);
    let where = from;
    let timestamp = this.#storeTimestampMs;
    const flushes: Promise<number>[] = [];
    for (let step = 0; step < this.#files.length; step++) {
      const file = this.findMappedFileByOffset(where) ?? (where === 0 ? this.firstFile : undefined);
      if (file === undefined) break;
      const end = file.fileFromOffset + file.wrotePosition;
      if (end > where) {
        timestamp = file.storeTimestampMs;
        flushes.push(file.startFlush());
        where = end;
      }
      if (file.wrotePosition < this.fileSizeBytes) break;
      where = file.fileFromOffset + this.fileSizeBytes;
    }
    if (flushes.length === 0) return undefined;
    this.#flushStartedWhere = where;
    const flushed = this.#settleStarted(this.#startedFlush, flushes, where, timestamp);
    this.#startedFlush = flushed;
    return flushed;
  }

  /**
   * Flushes everything appended with the `fdatasync` on the JavaScript
   * thread (see {@link MappedFile.flushSync}), when no flush begun by
   * {@link startFlush} is in flight and only the last segment holds bytes
   * to flush; otherwise does nothing.
   *
   * @returns Whether it flushed (false: nothing was done).
   * @throws {MqStoreError} The write or `fdatasync` error.
   */
  flushSync(): boolean {
    this.#checkOpen("flush");
    const where = this.#flushedWhere;
    const last = this.lastFile;
    if (
      this.#flushStartedWhere > where || last === undefined || where < last.fileFromOffset
    ) {
      return false;
    }
    const position = last.flushSync();
    if (position === undefined) return false;
    this.#flushedWhere = last.fileFromOffset + position;
    this.#flushStartedWhere = this.#flushedWhere;
    this.#storeTimestampMs = last.storeTimestampMs;
    return true;
  }

  async #settleStarted(
    earlier: Promise<void>,
    flushes: Promise<number>[],
    end: number,
    timestampMs: number,
  ): Promise<void> {
    const settled = await Promise.allSettled([earlier, ...flushes]);
    for (const outcome of settled) {
      if (outcome.status === "rejected") throw outcome.reason;
    }
    if (end > this.#flushedWhere) {
      this.#flushedWhere = end;
      this.#storeTimestampMs = timestampMs;
    }
  }

  /**
   * Commits write buffers from {@link committedWhere} under the
   * least-pages rule, going on into the next segment when one is committed
   * to its end.
   *
   * @returns Whether {@link committedWhere} moved.
   */
  async commit(leastPages: number): Promise<boolean> {
    this.#checkOpen("commit");
    const before = this.#committedWhere;
    for (let step = 0; step < this.#files.length; step++) {
      const where = this.#committedWhere;
      const file = this.findMappedFileByOffset(where) ??
        (where === 0 ? this.firstFile : undefined);
      if (file === undefined) break;
      const position = await file.commit(leastPages);
      const reached = file.fileFromOffset + position;
      assert(reached >= where, `commit went back from ${where} to ${reached}`);
      this.#committedWhere = reached;
      if (position < this.fileSizeBytes) break;
    }
    return this.#committedWhere !== before;
  }

  /**
   * Cuts the log at `offset`: the segment holding it gets all three
   * positions set to it, later segments are deleted (a read-only queue
   * closes them and leaves them on disk). Bytes past the cut in the kept
   * segment stay on disk (a writer's recovery zeroes them).
   */
  async truncateDirtyFiles(offset: number): Promise<void> {
    this.#checkOpen("truncate");
    checkOffset(offset);
    const keep: MappedFile[] = [];
    const remove: MappedFile[] = [];
    for (const file of this.#files) {
      const tail = file.fileFromOffset + this.fileSizeBytes;
      if (tail <= offset) {
        keep.push(file);
      } else if (offset >= file.fileFromOffset) {
        file.resetPositions(offset - file.fileFromOffset);
        keep.push(file);
      } else {
        remove.push(file);
      }
    }
    this.#files = keep;
    if (this.#flushedWhere > offset) this.#flushedWhere = offset;
    if (this.#flushStartedWhere > offset) this.#flushStartedWhere = offset;
    if (this.#committedWhere > offset) this.#committedWhere = offset;
    for (const file of remove) {
      if (this.#readOnly) await file.close({ waitMs: 0 });
      else await file.destroy({ waitMs: 0 });
    }
  }

  /**
   * Deletes the newest segment (RocketMQ's `deleteLastMappedFile`): a
   * consume queue cut back past the first unit of its last file drops the
   * file. Readers still holding ranges of it see them detached.
   */
  async deleteLastFile(): Promise<void> {
    this.#checkWritable("delete segments of");
    const last = this.#files.pop();
    if (last === undefined) return;
    if (this.#flushedWhere > last.fileFromOffset) this.#flushedWhere = last.fileFromOffset;
    if (this.#flushStartedWhere > last.fileFromOffset) {
      this.#flushStartedWhere = last.fileFromOffset;
    }
    if (this.#committedWhere > last.fileFromOffset) this.#committedWhere = last.fileFromOffset;
    await last.destroy({ waitMs: 0 });
  }

  /**
   * Deletes segments older than `expiredTimeMs` (by last modification),
   * oldest first, never the last one, at most `maxCount` per call. The walk
   * stops at the first segment that is too young or still held by a reader
   * (retried by the next call; forced after `forceAfterMs`).
   *
   * @returns How many segments were deleted.
   */
  async deleteExpiredByTime(options: DeleteByTimeOptions): Promise<number> {
    this.#checkWritable("delete segments of");
    const maxCount = options.maxCount ?? DELETE_FILES_BATCH_MAX;
    const forceAfterMs = options.forceAfterMs ?? DESTROY_FORCE_AFTER_MS_DEFAULT;
    let deleted = 0;
    while (deleted < maxCount && this.#files.length > 1) {
      const file = this.#files[0] as MappedFile;
      if (options.cleanImmediately !== true) {
        const ageMs = this.#clock.nowMs() - await file.lastModifiedMs();
        if (ageMs < options.expiredTimeMs) break;
      }
      if (!await file.tryDestroy(forceAfterMs)) break;
      this.#files.shift();
      deleted++;
    }
    return deleted;
  }

  /**
   * Deletes segments of fixed-size units (a consume queue) whose last unit
   * points below `offset`: the unit's first 8 bytes are a big-endian
   * commit-log offset. Never the last segment.
   *
   * @returns How many segments were deleted.
   */
  async deleteExpiredByOffset(offset: number, unitSizeBytes: number): Promise<number> {
    this.#checkWritable("delete segments of");
    if (
      !Number.isSafeInteger(unitSizeBytes) || unitSizeBytes < 8 ||
      this.fileSizeBytes % unitSizeBytes !== 0
    ) {
      throw new RangeError(
        `Unit size ${unitSizeBytes} must hold an 8-byte offset and divide the segment size ${this.fileSizeBytes}`,
      );
    }
    let deleted = 0;
    while (deleted < DELETE_FILES_BATCH_MAX && this.#files.length > 1) {
      const file = this.#files[0] as MappedFile;
      let expired: boolean;
      if (file.isAvailable) {
        const range = await file.selectRange(this.fileSizeBytes - unitSizeBytes, 8);
        if (range === undefined) break;
        const view = new DataView(range.bytes.buffer, range.bytes.byteOffset, 8);
        // A 64-bit offset read as two 32-bit halves.
        const lastOffset = view.getUint32(0) * 0x1_0000_0000 + view.getUint32(4);
        range.release();
        expired = lastOffset < offset;
      } else {
        expired = true;
      }
      if (!expired || !await file.tryDestroy(DESTROY_FORCE_AFTER_MS_DEFAULT)) break;
      this.#files.shift();
      deleted++;
    }
    return deleted;
  }

  /**
   * Retries deleting a first segment whose deletion a reader delayed,
   * forcing it after `forceAfterMs` (RocketMQ's `retryDeleteFirstFile`).
   *
   * @returns Whether a segment was deleted.
   */
  async retryDeleteFirstFile(forceAfterMs: number): Promise<boolean> {
    this.#checkWritable("delete segments of");
    const first = this.#files[0];
    if (first === undefined || first.isAvailable) return false;
    if (!await first.tryDestroy(forceAfterMs)) return false;
    this.#files.shift();
    return true;
  }

  /**
   * Checks that the segments are contiguous and of the right size.
   *
   * @throws {MqStoreError} `INVALID_FILE` naming the first problem.
   */
  checkSelf(): void {
    this.#checkContiguous(this.#files.map((file) => file.fileFromOffset));
    for (const file of this.#files) {
      assert(file.fileSizeBytes === this.fileSizeBytes, `segment ${file.fileName} size`);
    }
  }

  /**
   * Closes every segment (unmaps, closes descriptors) after waiting for
   * readers up to `waitMs`. Does not flush: flush first. Idempotent.
   */
  async close(options: { waitMs?: number } = {}): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#creating?.catch(() => {});
    await this.#closeFiles(options.waitMs ?? DESTROY_FORCE_AFTER_MS_DEFAULT);
  }

  /** Deletes every segment and closes the queue. */
  async destroy(): Promise<void> {
    this.#checkWritable("destroy");
    this.#closed = true;
    const files = this.#files;
    this.#files = [];
    for (const file of files) await file.destroy({ waitMs: 0 });
    this.#flushedWhere = 0;
    this.#flushStartedWhere = 0;
    this.#committedWhere = 0;
  }

  async #closeFiles(waitMs: number): Promise<void> {
    const files = this.#files;
    this.#files = [];
    const results = await Promise.allSettled(files.map((file) => file.close({ waitMs })));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  #checkContiguous(offsets: readonly number[]): void {
    let expected: number | undefined;
    for (const offset of offsets) {
      const name = segmentFileName(offset);
      if (offset % this.fileSizeBytes !== 0) {
        throw new MqStoreError(
          "INVALID_FILE",
          `Segment ${name} in ${this.directory} does not start at a multiple of the segment size ${this.fileSizeBytes}`,
        );
      }
      if (expected !== undefined && offset !== expected) {
        throw new MqStoreError(
          "INVALID_FILE",
          `Segments in ${this.directory} are not contiguous: ${name} follows a segment ending at ${expected}`,
        );
      }
      expected = offset + this.fileSizeBytes;
    }
  }

  #checkOpen(operation: string): void {
    if (this.#closed) {
      throw new MqStoreError(
        "CLOSED",
        `Cannot ${operation} ${this.directory}: the queue is closed`,
      );
    }
  }

  #checkWritable(operation: string): void {
    this.#checkOpen(operation);
    if (this.#readOnly) {
      throw new MqStoreError("UNSUPPORTED", `Cannot ${operation} ${this.directory}: read-only`);
    }
  }
}

function checkOffset(offset: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new RangeError(`Offset ${offset} must be a non-negative safe integer`);
  }
}
