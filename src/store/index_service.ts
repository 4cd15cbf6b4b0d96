/**
 * The key index of a store: a list of {@link IndexFile}s under
 * `<root>/index/`, oldest first, the last one written (RocketMQ's
 * `IndexService`).
 *
 * ```
 * index/20261129121453504   full (indexNum − 1 entries)
 *       20261129121453635   full
 *       20261129121453728   ← written
 *       20261129121455012.tmp  prepared ahead (see below)
 * ```
 *
 * Files are made ahead of need: on load when there is none, and when the
 * written file is ¾ full, the next one is created (allocated with `posix_fallocate`, 420 MB with the
 * defaults) in the background under `<name>.tmp`, its header marked as
 * prepared. When the written file fills up, the prepared one is renamed to
 * its name and its header gets the full file's end (as RocketMQ writes it
 * into a new file); the full file is flushed in the background. So a roll
 * costs the dispatcher a rename, not a creation and a flush. A crash
 * leaves the prepared file under `.tmp` (removed on open; RocketMQ skips
 * the name) or, between the rename and a flush, under its name with the
 * prepared mark in its header, which both mqstore and RocketMQ's unclean
 * load delete.
 *
 * {@link IndexService.buildIndex} adds a message's keys (UNIQ_KEY and each
 * KEYS token, as `indexKeysOf` in `src/record` lists them) under
 * `topic#key`; {@link IndexService.queryOffset} walks the files newest
 * first. Queries match key hashes, not key text (as RocketMQ): callers
 * decode the messages and keep those whose key really matches.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import { javaHashCode } from "../record/mod.ts";
import type { RuntimePort } from "../runtime/port.ts";
import { type Clock, systemClock } from "../segment/clock.ts";
import {
  INDEX_DIRECTORY_NAME,
  INDEX_ENTRY_SIZE_BYTES,
  INDEX_FILE_NAME_PATTERN,
  MAX_HASH_SLOT_NUM_DEFAULT,
  MAX_INDEX_NUM_DEFAULT,
  MAX_MSGS_NUM_BATCH_DEFAULT,
  PREPARED_INDEX_FILE_NAME_PATTERN,
} from "./_index_file_constants.ts";
import { nextIndexFileName } from "./_index_file_name.ts";
import { IndexFile } from "./index_file.ts";

/** Options of {@link IndexService}. */
export interface IndexServiceOptions {
  /** The runtime port. */
  port: RuntimePort;
  /** The store root (files go to `<root>/index/`). */
  rootDirectory: string;
  /**
   * Hash slots per file.
   *
   * @default {5 000 000}
   */
  maxHashSlotNum?: number;
  /**
   * Entries per file, entry 0 included.
   *
   * @default {20 000 000}
   */
  maxIndexNum?: number;
  /**
   * Most offsets one query returns (`maxMsgsNumBatch`).
   *
   * @default {64}
   */
  maxMsgsNumBatch?: number;
  /**
   * Time source of new file names.
   *
   * @default {systemClock}
   */
  clock?: Pick<Clock, "nowMs">;
  /**
   * Open the files read-only; nothing is created, written or deleted.
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
}

/**
 * The next file is prepared when the written one holds this share of its
 * entries (numerator over {@link PREPARE_AHEAD_DENOMINATOR}): early enough
 * for a 420 MB allocation to finish before the file fills up at full
 * speed, late enough that a store with few keys does not hold two files.
 */
const PREPARE_AHEAD_NUMERATOR = 3;
const PREPARE_AHEAD_DENOMINATOR = 4;

/** What {@link IndexService.buildIndex} indexes for one message. */
export interface IndexRequest {
  /** The topic the keys are indexed under. */
  topic: string;
  /** The message's commit-log offset. */
  commitLogOffset: number;
  /** The message's storeTimestamp. */
  storeTimestamp: number;
  /** Its keys, without the `topic#` prefix (`indexKeysOf`; none for ROLLBACK). */
  keys: readonly string[];
}

/** Options of {@link IndexService.load}. */
export interface IndexLoadOptions {
  /** Whether the last close was clean. */
  lastExitOK: boolean;
  /** The checkpoint's indexMsgTimestamp. */
  indexMsgTimestamp: number;
  /**
   * The checkpoint's index offset: every key of a record before it is
   * durable (-1: unknown, a RocketMQ checkpoint).
   *
   * @default {-1}
   */
  indexOffset?: number;
  /**
   * Where the recovered commit log ends (-1: unknown, no cut to it).
   *
   * @default {-1}
   */
  logEndOffset?: number;
  /**
   * Called, writable loads only, before any file is deleted when some of
   * the files dropped hold entries recovery must rebuild, with the offset
   * they are rebuilt from ({@link IndexLoadReport.droppedFromOffset}): the
   * store makes its checkpoint's index point at most that durable first. Deleted, the
   * files no longer tell the next open where to start, and a crash (or a
   * failed open) before re-dispatch rebuilt their keys would leave them
   * out for good.
   *
   * @default {undefined}
   */
  beforeDrop?: (droppedFromOffset: number) => Promise<void>;
}

/** What {@link IndexService.load} dropped. */
export interface IndexLoadReport {
  /**
   * Files that may have held entries and were deleted (left out when
   * read-only): newer than the checkpoint after an unclean exit (and,
   * writable, every file after the first of those), caught prepared by a
   * crash, failing the checks of a cut, or after one that failed them.
   * Re-dispatch rebuilds their entries.
   */
  droppedFiles: number;
  /**
   * No entry of a dropped file is for a record before this commit-log
   * offset or the cut's point: the least beginPhyOffset of the headers
   * of files dropped for their time (or end of the file before one), and
   * for a file a cut refused the end of the file before it, or 0 (its
   * header may be what is damaged); -1 when only files caught prepared
   * (which hold keys of records after the checkpoint's index point only),
   * files left empty by a cut, or none, were dropped.
   * Recovery re-dispatches from here at the latest, whatever the exit.
   */
  droppedFromOffset: number;
  /**
   * Files cut back to the checkpoint's index point after an unclean exit,
   * or to the recovered log's end (see {@link IndexService.load}), and
   * kept.
   */
  cutFiles: number;
  /** Entries those cuts removed (re-dispatch puts them back). */
  cutEntries: number;
}

/** What {@link IndexService.queryOffset} returns (RocketMQ's `QueryOffsetResult`). */
export interface QueryOffsetResult {
  /** Offsets of messages whose key hash matches, newest first. */
  phyOffsets: number[];
  /** endTimestamp of the last file (0 without files). */
  indexLastUpdateTimestamp: number;
  /** endPhyOffset of the last file (0 without files). */
  indexLastUpdatePhyoffset: number;
}

/**
 * The index files of a store.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { IndexService } from "./index_service.ts";
 *
 * const port = new MemoryPort("deno");
 * const index = new IndexService({ port, rootDirectory: "/store", maxHashSlotNum: 64, maxIndexNum: 256 });
 * await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
 * await index.buildIndex({ topic: "Orders", commitLogOffset: 0, storeTimestamp: Date.now(), keys: ["order-1"] });
 * console.log(index.queryOffset("Orders", "order-1", 64, 0, Number.MAX_SAFE_INTEGER).phyOffsets); // [0]
 * await index.close();
 * ```
 */
export class IndexService {
  /** `<root>/index`. */
  readonly directory: string;
  /** Hash slots per file. */
  readonly hashSlotNum: number;
  /** Entries per file, entry 0 included. */
  readonly indexNum: number;

  #port: RuntimePort;
  #maxMsgsNumBatch: number;
  #clock: Pick<Clock, "nowMs">;
  #readOnly: boolean;
  #sparse: boolean;
  /** The files, oldest first; the last one is written. */
  #files: IndexFile[] = [];
  /**
   * endTimestamp of the newest full file made durable: every key of a
   * message stored at or before it is in a durable file (what RocketMQ
   * writes to the checkpoint's indexMsgTimestamp on a roll).
   */
  #indexMsgTimestamp = 0;
  /** What {@link load} dropped. */
  #loadReport: IndexLoadReport = emptyLoadReport();
  /** A build is in progress (builds are sequential, in dispatch order). */
  #building = false;
  /** A file creation in progress. */
  #creating: Promise<IndexFile> | undefined;
  /** indexCount of the written file at which the next one is prepared. */
  #prepareAtCount: number;
  /** The next file, prepared (or being prepared) ahead; not in {@link #files}. */
  #prepared: Promise<IndexFile> | undefined;
  /** Background flushes of full files, chained (never rejects). */
  #rollFlushes: Promise<void> = Promise.resolve();
  /**
   * The last file and its indexCount when the last completed {@link flush}
   * began (see {@link isFlushed}); `#flushedOnce` false until one did.
   */
  #flushedFile: IndexFile | undefined;
  #flushedIndexCount = 0;
  #flushedOnce = false;
  /** An activated file's new name is not yet durable (directory not synced). */
  #directoryUnsynced = false;
  #closed = false;

  /** @param options Port, store root and table sizes. */
  constructor(options: IndexServiceOptions) {
    this.directory = `${options.rootDirectory}/${INDEX_DIRECTORY_NAME}`;
    this.hashSlotNum = options.maxHashSlotNum ?? MAX_HASH_SLOT_NUM_DEFAULT;
    this.indexNum = options.maxIndexNum ?? MAX_INDEX_NUM_DEFAULT;
    this.#maxMsgsNumBatch = options.maxMsgsNumBatch ?? MAX_MSGS_NUM_BATCH_DEFAULT;
    if (!Number.isSafeInteger(this.#maxMsgsNumBatch) || this.#maxMsgsNumBatch <= 0) {
      throw new RangeError(`maxMsgsNumBatch ${this.#maxMsgsNumBatch} must be a positive integer`);
    }
    this.#port = options.port;
    this.#clock = options.clock ?? systemClock;
    this.#readOnly = options.readOnly === true;
    this.#sparse = options.sparse === true;
    this.#prepareAtCount = Math.max(
      1,
      Math.floor(this.indexNum * PREPARE_AHEAD_NUMERATOR / PREPARE_AHEAD_DENOMINATOR),
    );
  }

  /**
   * Opens the index files in name order (RocketMQ's `load`). After an
   * unclean exit (`lastExitOK` false), files whose endTimestamp is newer
   * than the checkpoint's `indexMsgTimestamp` are deleted (left out when
   * read-only), as RocketMQ does: recovery re-dispatches their messages.
   * So are files a crash caught prepared (see the module doc). Unlike
   * RocketMQ, a writable load also deletes every file after the first one
   * deleted by its time, whatever their time: with a clock stepped back,
   * a later file kept would end the index past the deleted one's keys,
   * and they would not be rebuilt. The rule goes by the files' names,
   * which mqstore keeps in creation order; RocketMQ names a file after the
   * clock, so a clock stepped back there may also misorder the names.
   *
   * Given the checkpoint's index offset (mqstore's checkpoint block), a
   * writable load instead cuts the checkpoint's last file and those after
   * it back to their entries for records before that offset
   * (`IndexFile.cutBefore`, which also checks their chains): a SIGKILL
   * leaves the last file's header newer than the checkpoint, and dropping
   * a file of up to 20 M entries made every restart after a kill replay
   * up to 20 M messages. A file left empty is deleted; one whose entries
   * or chains are not what in-order appends leave (pages a power loss did
   * not write) is dropped as above, and so is every file after it: a key
   * is only indexed past the last file's end, so a file kept after the
   * hole would keep its keys out for good. The cut files are flushed
   * before the load returns.
   *
   * Given where the recovered commit log ends, a writable load without
   * the checkpoint's cut (a clean exit, or a crash with a RocketMQ
   * checkpoint) cuts back to that end, the same way, the first file whose
   * entries reach it and those after it: a clean open that cut a damaged
   * log, or a power loss that took more of the log than of the index,
   * leaves entries for records that are gone, and a last file ending at
   * or past the log's end would keep the keys of the records written
   * there next out of the index. The files before that one are not
   * touched: they name records still in the log and were durable (a
   * clean close or a roll flushed them), and a check they failed would
   * drop keys that nothing rebuilds. A read-only load keeps every file as
   * it is (readers check each offset's record and key).
   *
   * A file is kept only if, cut, it ends before the point: one whose
   * header still says otherwise (a damaged header the cut found nothing
   * to remove after) is refused like one whose chains fail. The files
   * are deleted once all are decided, after `beforeDrop` when recovery
   * must rebuild some of their entries, and the directory is synced.
   *
   * @param options What the checkpoint and the log's recovery say.
   * @returns What was dropped and cut (also {@link loadReport}): recovery
   *   re-dispatches from the checkpoint's index point, or from where the
   *   dropped files began when that is earlier.
   * @throws {MqStoreError} `INVALID_FILE` for a file of another size.
   */
  async load(options: IndexLoadOptions): Promise<IndexLoadReport> {
    const { lastExitOK, indexMsgTimestamp } = options;
    const indexOffset = options.indexOffset ?? -1;
    const logEndOffset = options.logEndOffset ?? -1;
    this.#checkOpen();
    if (this.#files.length > 0) {
      throw new MqStoreError("UNSUPPORTED", "The index is loaded already");
    }
    if (!this.#readOnly) await this.#port.makeDirectory(this.directory);
    this.#loadReport = emptyLoadReport();
    if (await this.#port.stat(this.directory) === undefined) return this.#loadReport;
    const listed = await this.#port.list(this.directory);
    if (!this.#readOnly) {
      // Prepared ahead and never put in use: it holds no entry.
      for (const name of listed.filter((name) => PREPARED_INDEX_FILE_NAME_PATTERN.test(name))) {
        await this.#port.remove(`${this.directory}/${name}`);
      }
    }
    const names = listed.filter((name) => INDEX_FILE_NAME_PATTERN.test(name)).sort();
    // Files that may have held entries and are gone (not the empty ones,
    // which never held any).
    let dropped = 0;
    let droppedFrom = Number.POSITIVE_INFINITY;
    // endPhyOffset of the file before, in name (creation) order: a file
    // put in use after it holds entries from there on.
    let previousEnd: number | undefined;
    // Whether a file was dropped by its time (a writable load then drops
    // every later one too).
    let staleBefore = false;
    // The checkpoint's point, which files are cut back to after an
    // unclean exit (-1: none; they are dropped by their time instead).
    const checkpointCut = !lastExitOK && !this.#readOnly && indexOffset >= 0 ? indexOffset : -1;
    let cutFiles = 0;
    let cutEntries = 0;
    // Deleted once every file is decided (see beforeDrop); closed at
    // once, so that a portable port's file-sized views do not pile up.
    const dropping: IndexFile[] = [];
    const dropLater = async (file: IndexFile) => {
      dropping.push(file);
      await file.close();
    };
    // Every file opened: closed, whatever their state, if the load fails.
    const opened: IndexFile[] = [];
    // droppedFrom as reported (-1: none), once every file is decided.
    let droppedFromOffset = -1;
    try {
      for (const name of names) {
        const path = `${this.directory}/${name}`;
        // A crash between creating an index file and allocating it leaves
        // it empty: it never held an entry, so it is dropped (the entries
        // of its time are re-dispatched like those of any newer file).
        if ((await this.#port.stat(path))?.sizeBytes === 0) {
          if (!this.#readOnly) await this.#port.remove(path);
          continue;
        }
        const file = await IndexFile.open({
          port: this.#port,
          path,
          hashSlotNum: this.hashSlotNum,
          indexNum: this.indexNum,
          readOnly: this.#readOnly,
        });
        opened.push(file);
        // A prepared file a crash caught between its rename and the flush
        // of its first header: no entry of it is durable. With a point to
        // cut back to, the others are decided below, once all are open.
        // After a file dropped by its time, a writable load drops every
        // later one too, whatever its time (a clock stepped back): one kept
        // would end the index past the dropped one's keys, which
        // re-dispatch would then skip as indexed already. A read-only load
        // writes no key, and keeps what it can read.
        const stale = !lastExitOK && checkpointCut < 0 &&
          ((staleBefore && !this.#readOnly) || file.endTimestamp > indexMsgTimestamp);
        if (stale) staleBefore = true;
        if (file.isPreparedMark || stale) {
          // A header that made it to disk has the begin of its time (the
          // previous file's end, then the first entry's offset). One still
          // marked prepared was never flushed in use: put in use after the
          // last flush began, it holds only keys of records dispatched
          // after the checkpoint's index point, and bounds nothing.
          if (!file.isPreparedMark) {
            droppedFrom = Math.min(
              droppedFrom,
              file.beginPhyOffset,
              previousEnd ?? Number.POSITIVE_INFINITY,
            );
            previousEnd = file.endPhyOffset;
          }
          await dropLater(file);
          continue;
        }
        previousEnd = file.endPhyOffset;
        this.#files.push(file);
      }
      // The first file cut, the offset its entries and those of the files
      // after it are cut back to, and the time of the last record kept
      // (0: unknown).
      let cutFrom = this.#files.length;
      let cutTo = -1;
      let cutTimestampMs = 0;
      if (checkpointCut >= 0) {
        cutTo = logEndOffset >= 0 ? Math.min(checkpointCut, logEndOffset) : checkpointCut;
        cutTimestampMs = indexMsgTimestamp;
        // Files before the last one whose end is before the point were
        // full and durable when the checkpoint was written (a roll's
        // flush, then every file's, precede it): untouched since. That one
        // (the checkpoint's last file, whatever a power loss left of its
        // header) and those after it may hold entries past the point, or
        // slots a torn write left ahead of the header: each is cut and its
        // chains checked.
        cutFrom = this.#files.length - 1;
        while (cutFrom > 0 && this.#files[cutFrom]!.endPhyOffset >= cutTo) cutFrom--;
        cutFrom = Math.max(cutFrom, 0);
      } else if (!this.#readOnly && logEndOffset >= 0) {
        // No checkpoint point (see the doc above): from the first file
        // that reaches the log's end.
        cutTo = logEndOffset;
        const first = this.#files.findIndex((file) => reachesPast(file, logEndOffset));
        if (first >= 0) cutFrom = first;
      }
      const files = this.#files;
      this.#files = files.slice(0, cutFrom);
      previousEnd = this.#files[this.#files.length - 1]?.endPhyOffset;
      // A file failed the checks: it and every later one are dropped.
      let broken = false;
      for (const file of files.slice(cutFrom)) {
        let removed = broken ? -1 : file.cutBefore(cutTo, cutTimestampMs);
        // Cut, a file kept ends before the point, or new keys written
        // there would be skipped as indexed already.
        if (removed >= 0 && file.indexCount > 1 && file.endPhyOffset >= cutTo) removed = -1;
        if (removed >= 0 && file.indexCount > 1) {
          if (removed > 0) {
            // Durable before re-dispatch writes past the cut again.
            await file.flush();
            cutFiles++;
            cutEntries += removed;
          }
          previousEnd = file.endPhyOffset;
          this.#files.push(file);
          continue;
        }
        if (removed < 0) {
          if (!broken) {
            // Not as in-order appends leave it (a power loss kept some of
            // its pages only): dropped, its entries rebuilt from the end
            // of the file before (where it was put in use), or from the
            // start: its own header may be what is damaged. The files
            // after it begin later.
            droppedFrom = Math.min(droppedFrom, previousEnd ?? 0);
          }
          broken = true;
        } else {
          // No entry before the point: nothing of it to rebuild before.
          cutEntries += removed;
        }
        previousEnd = file.endPhyOffset;
        await dropLater(file);
      }
      droppedFromOffset = Number.isFinite(droppedFrom) ? Math.max(droppedFrom, 0) : -1;
      if (!this.#readOnly && droppedFromOffset >= 0) await options.beforeDrop?.(droppedFromOffset);
      // Newest first: a kill in between leaves the oldest dropped file,
      // which the next load decides again. Oldest first, a RocketMQ
      // checkpoint's next load (which starts from the last file kept)
      // would keep a later, healthy file and start past the keys of the
      // one deleted before it.
      dropping.sort((a, b) => a.path < b.path ? -1 : a.path > b.path ? 1 : 0);
      while (dropping.length > 0) {
        await this.#dropFile(dropping.pop()!);
        dropped++;
      }
      // Durably gone before anything moves the checkpoint past them.
      await this.#syncDirectory();
    } catch (error) {
      // Closing is idempotent: the files kept, dropped and not yet decided.
      this.#files = [];
      await Promise.allSettled(opened.map((file) => file.close()));
      throw error;
    }
    this.#indexMsgTimestamp = indexMsgTimestamp;
    this.#loadReport = {
      droppedFiles: dropped,
      droppedFromOffset,
      cutFiles,
      cutEntries,
    };
    const last = this.#files[this.#files.length - 1];
    // A clean close flushed every file: what was loaded is durable.
    this.#flushedOnce = lastExitOK && !this.#readOnly;
    this.#flushedFile = last;
    this.#flushedIndexCount = last?.indexCount ?? 0;
    // The first file (or the next, when the last is ¾ full) is prepared
    // now, in the background: the first keys need not wait for it.
    if (last === undefined || last.indexCount >= this.#prepareAtCount) this.#prepareAfter(last);
    return this.#loadReport;
  }

  /** What {@link load} dropped (none before a load). */
  get loadReport(): IndexLoadReport {
    return this.#loadReport;
  }

  /** The files, oldest first. */
  get files(): readonly IndexFile[] {
    return this.#files;
  }

  /** See the field: the checkpoint's indexMsgTimestamp to write. */
  get indexMsgTimestamp(): number {
    return this.#indexMsgTimestamp;
  }

  /**
   * Indexes one message's keys (RocketMQ's `buildIndex`): skipped when its
   * offset is below the last file's endPhyOffset (already indexed); each
   * key goes to the last file, a new file being created when it is full.
   * The message at exactly endPhyOffset is indexed again, as RocketMQ does
   * on re-dispatch. One build at a time: await each before the next, so
   * keys go in dispatch order.
   */
  buildIndex(request: IndexRequest): Promise<void> {
    const { hashes, count } = hashesOf(request);
    return this.buildIndexHashes(hashes, count, request.commitLogOffset, request.storeTimestamp);
  }

  /**
   * The synchronous form of {@link buildIndex} for the usual case: the
   * last file has room for every key of the message. Writes nothing and
   * returns false otherwise (a file must be created: call buildIndex).
   */
  buildIndexNow(request: IndexRequest): boolean {
    const { hashes, count } = hashesOf(request);
    return this.buildIndexHashesNow(
      hashes,
      count,
      request.commitLogOffset,
      request.storeTimestamp,
    );
  }

  /**
   * {@link buildIndex} for keys given by the Java hash of each full key
   * (`topic#key`), as the dispatcher's `DispatchView` computes them: no
   * key string is built.
   *
   * @param javaHashes `String.hashCode()` of each `topic#key`, in index order.
   * @param count How many of `javaHashes` are the message's.
   * @param commitLogOffset The message's commit-log offset.
   * @param storeTimestamp The message's storeTimestamp.
   */
  async buildIndexHashes(
    javaHashes: Int32Array,
    count: number,
    commitLogOffset: number,
    storeTimestamp: number,
  ): Promise<void> {
    if (count === 0) return;
    assert(!this.#building, `index builds in ${this.directory} do not overlap: await each one`);
    this.#building = true;
    try {
      await this.#build(javaHashes, count, commitLogOffset, storeTimestamp);
    } finally {
      this.#building = false;
    }
  }

  /**
   * The synchronous form of {@link buildIndexHashes}: false, writing
   * nothing, when the last file lacks room for every key (a file must be
   * created: call buildIndexHashes).
   *
   * @param javaHashes `String.hashCode()` of each `topic#key`, in index order.
   * @param count How many of `javaHashes` are the message's.
   * @param commitLogOffset The message's commit-log offset.
   * @param storeTimestamp The message's storeTimestamp.
   * @returns Whether the message's keys are in the index now.
   */
  buildIndexHashesNow(
    javaHashes: Int32Array,
    count: number,
    commitLogOffset: number,
    storeTimestamp: number,
  ): boolean {
    if (count === 0) return true;
    if (this.#building || this.#readOnly || this.#closed) return false;
    const file = this.#files[this.#files.length - 1];
    if (file === undefined || file.indexNum - file.indexCount < count) return false;
    if (commitLogOffset < file.endPhyOffset) return true;
    const put = file.putKeyHashes(javaHashes, count, commitLogOffset, storeTimestamp);
    // Checked with an if: the message would be built on every record.
    if (!put) assert(false, `${file.path} has room for ${count} keys`);
    if (file.indexCount >= this.#prepareAtCount && this.#prepared === undefined) {
      this.#prepareAfter(file);
    }
    return true;
  }

  /**
   * {@link buildIndexHashesNow} for each member of a run in turn (see
   * `IndexFile.putKeyHashesRun` for the layout): the members' keys with
   * one header write.
   *
   * @param count Members of the run.
   * @param slots Member `i`'s slot in `keyCounts`, `storeTimestamps` and (times `stride`) `keyHashes`.
   * @param keyCounts Hashes of each slot (none when ≤ 0).
   * @param keyHashes `String.hashCode()` of each `topic#key`, in index order.
   * @param stride Hashes a slot has room for.
   * @param phyOffsets Member `i`'s commit-log offset, increasing.
   * @param storeTimestamps Each slot's storeTimestamp.
   * @returns Members whose keys are in the index now, from the first:
   *   below `count` when the next one's need a new file (call
   *   buildIndexHashes for it).
   */
  buildIndexRunNow(
    count: number,
    slots: Int32Array,
    keyCounts: Int32Array,
    keyHashes: Int32Array,
    stride: number,
    phyOffsets: Float64Array,
    storeTimestamps: Float64Array,
  ): number {
    const file = this.#files[this.#files.length - 1];
    if (this.#building || this.#readOnly || this.#closed || file === undefined) {
      // Members without keys need nothing.
      let done = 0;
      while (done < count && keyCounts[slots[done]!]! <= 0) done++;
      return done;
    }
    const done = file.putKeyHashesRun(
      count,
      slots,
      keyCounts,
      keyHashes,
      stride,
      phyOffsets,
      storeTimestamps,
    );
    if (file.indexCount >= this.#prepareAtCount && this.#prepared === undefined) {
      this.#prepareAfter(file);
    }
    return done;
  }

  async #build(
    javaHashes: Int32Array,
    count: number,
    commitLogOffset: number,
    storeTimestamp: number,
  ): Promise<void> {
    const last = this.#files[this.#files.length - 1];
    // The usual case, a last file with room, takes no await.
    let file = last !== undefined && !last.isWriteFull && !this.#readOnly && !this.#closed
      ? last
      : await this.#lastWritableFile();
    if (commitLogOffset < file.endPhyOffset) return;
    for (let i = 0; i < count; i++) {
      const one = javaHashes.subarray(i, i + 1);
      // Bounded: a new file always has room.
      for (
        let attempt = 0;
        !file.putKeyHashes(one, 1, commitLogOffset, storeTimestamp);
      ) {
        if (++attempt > 1) {
          throw new MqStoreError(
            "IO_ERROR",
            `Index file ${file.path} refused a key right after its creation`,
          );
        }
        file = await this.#lastWritableFile();
      }
    }
    if (file.indexCount >= this.#prepareAtCount && this.#prepared === undefined) {
      this.#prepareAfter(file);
    }
  }

  /**
   * Offsets of messages indexed under `topic#key` whose storeTimestamp (to
   * the second) lies in `[begin, end]`, newest first, files newest first,
   * at most `min(maxNum, maxMsgsNumBatch)` (RocketMQ's `queryOffset`).
   * Matches are by key hash: a colliding key's offsets come too.
   */
  queryOffset(
    topic: string,
    key: string,
    maxNum: number,
    begin: number,
    end: number,
  ): QueryOffsetResult {
    this.#checkOpen();
    const limit = Math.min(maxNum, this.#maxMsgsNumBatch);
    const phyOffsets: number[] = [];
    let indexLastUpdateTimestamp = 0;
    let indexLastUpdatePhyoffset = 0;
    const fullKey = `${topic}#${key}`;
    for (let i = this.#files.length - 1; i >= 0; i--) {
      const file = this.#files[i] as IndexFile;
      if (i === this.#files.length - 1) {
        indexLastUpdateTimestamp = file.endTimestamp;
        indexLastUpdatePhyoffset = file.endPhyOffset;
      }
      if (file.isTimeMatched(begin, end)) {
        file.selectPhyOffset(phyOffsets, fullKey, limit, begin, end);
      }
      if (file.beginTimestamp < begin || phyOffsets.length >= limit) break;
    }
    return { phyOffsets, indexLastUpdateTimestamp, indexLastUpdatePhyoffset };
  }

  /**
   * Makes every file durable.
   *
   * @returns endTimestamp of the last file (0 without files): every key
   *   of a message stored up to then is durable.
   */
  async flush(): Promise<number> {
    this.#checkOpen();
    // What this flush makes durable at least: every entry in by now.
    const last = this.#files[this.#files.length - 1];
    const indexCount = last?.indexCount ?? 0;
    // A file's flush must not overlap another of the same file (the
    // second would return before the first made the bytes durable).
    await this.#rollFlushes;
    for (const file of this.#files) await file.flush();
    await this.#syncDirectory();
    this.#flushedFile = last;
    this.#flushedIndexCount = indexCount;
    this.#flushedOnce = true;
    return this.#files[this.#files.length - 1]?.endTimestamp ?? 0;
  }

  /**
   * Whether every entry is durable: no entry went in (and no file rolled)
   * since a completed {@link flush} began. False until this service's
   * first flush (what a crash left in the page cache is not known to be
   * durable). The consume-queue flusher reads it to move the checkpoint's
   * index point without flushing the index.
   */
  get isFlushed(): boolean {
    const last = this.#files[this.#files.length - 1];
    return this.#flushedOnce && last === this.#flushedFile &&
      (last === undefined || last.indexCount === this.#flushedIndexCount);
  }

  /**
   * Bytes of entries put since the last completed {@link flush} began (since
   * the load before any), or `Infinity` once a file rolled since: the
   * consume-queue flusher flushes the index between thorough flushes only
   * when this reaches its threshold.
   */
  get unflushedEntryBytes(): number {
    const last = this.#files[this.#files.length - 1];
    if (last === undefined) return 0;
    const flushed = this.#flushedFile;
    if (last === flushed) {
      return (last.indexCount - this.#flushedIndexCount) * INDEX_ENTRY_SIZE_BYTES;
    }
    // The first file, made since (there was none): all its entries.
    if (flushed === undefined && this.#files.length === 1) {
      return (last.indexCount - 1) * INDEX_ENTRY_SIZE_BYTES;
    }
    return Number.POSITIVE_INFINITY;
  }

  /**
   * Deletes the files (never the last) whose endPhyOffset is below
   * `minCommitLogOffset`, oldest first (RocketMQ's `deleteExpiredFile`).
   *
   * @returns How many files were deleted.
   */
  async deleteExpiredFile(minCommitLogOffset: number): Promise<number> {
    this.#checkOpen();
    await this.#rollFlushes;
    let deleted = 0;
    while (
      this.#files.length > 1 && (this.#files[0] as IndexFile).endPhyOffset < minCommitLogOffset
    ) {
      const file = this.#files.shift() as IndexFile;
      await file.destroy();
      deleted++;
    }
    return deleted;
  }

  /** Flushes and closes every file. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#creating?.catch(() => {});
    await this.#rollFlushes;
    try {
      await this.#discardPrepared();
      if (!this.#readOnly) {
        for (const file of this.#files) await file.flush();
        await this.#syncDirectory();
      }
    } finally {
      await this.#closeFiles();
    }
  }

  /** The prepared file, if any (tests): not in use yet. */
  get preparedFile(): Promise<IndexFile> | undefined {
    return this.#prepared;
  }

  /** Removes the file prepared ahead, if any. */
  async #discardPrepared(): Promise<void> {
    const prepared = this.#prepared;
    this.#prepared = undefined;
    const file = await prepared?.catch(() => undefined);
    await file?.destroy();
  }

  /**
   * Starts preparing the file after `last` (the first file without one) in
   * the background. Its failure is kept for the roll that needs the file.
   */
  #prepareAfter(last: IndexFile | undefined): void {
    if (this.#readOnly || this.#closed) return;
    const name = nextIndexFileName(this.#clock.nowMs(), last?.fileName);
    const prepared = IndexFile.prepare({
      port: this.#port,
      path: `${this.directory}/${name}`,
      hashSlotNum: this.hashSlotNum,
      indexNum: this.indexNum,
      sparse: this.#sparse,
    });
    prepared.catch(() => {});
    this.#prepared = prepared;
  }

  /** Deletes a file the load does not keep (closes it when read-only). */
  async #dropFile(file: IndexFile): Promise<void> {
    if (this.#readOnly) {
      await file.close();
      return;
    }
    await file.destroy();
    // The deletion must be durable before the checkpoint moves past the
    // file's end (the next flush syncs the directory): back, it would be
    // kept, its entries twice in the index.
    this.#directoryUnsynced = true;
  }

  async #syncDirectory(): Promise<void> {
    if (!this.#directoryUnsynced) return;
    this.#directoryUnsynced = false;
    try {
      await this.#port.syncDirectory(this.directory);
    } catch (error) {
      this.#directoryUnsynced = true;
      throw error;
    }
  }

  async #closeFiles(): Promise<void> {
    const files = this.#files;
    this.#files = [];
    const results = await Promise.allSettled(files.map((file) => file.close()));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  /** The last file when it has room, else a new one (RocketMQ's `getAndCreateLastIndexFile`). */
  async #lastWritableFile(): Promise<IndexFile> {
    this.#checkOpen();
    if (this.#readOnly) {
      throw new MqStoreError("UNSUPPORTED", `Cannot index into ${this.directory}: read-only`);
    }
    for (;;) {
      const last = this.#files[this.#files.length - 1];
      if (last !== undefined && !last.isWriteFull) return last;
      const creating = this.#creating;
      if (creating === undefined) break;
      await creating.catch(() => {});
    }
    const creating = this.#createNext();
    this.#creating = creating;
    try {
      return await creating;
    } finally {
      this.#creating = undefined;
    }
  }

  async #createNext(): Promise<IndexFile> {
    const previous = this.#files[this.#files.length - 1];
    const file = await this.#activatePrepared(previous) ?? await IndexFile.create({
      port: this.#port,
      path: `${this.directory}/${nextIndexFileName(this.#clock.nowMs(), previous?.fileName)}`,
      hashSlotNum: this.hashSlotNum,
      indexNum: this.indexNum,
      endPhyOffset: previous?.endPhyOffset ?? 0,
      endTimestamp: previous?.endTimestamp ?? 0,
      sparse: this.#sparse,
    });
    assert(this.#files[this.#files.length - 1] === previous, "index files roll one at a time");
    this.#files.push(file);
    if (previous !== undefined) {
      // The full file will not change again: make it durable (and the new
      // file's name) off the dispatch path, then its end time may go to the
      // checkpoint. A failure leaves it dirty: the next flush() retries
      // and reports it.
      this.#rollFlushes = this.#rollFlushes.then(async () => {
        await previous.flush();
        await this.#syncDirectory();
        this.#indexMsgTimestamp = Math.max(this.#indexMsgTimestamp, previous.endTimestamp);
      }).catch(() => {});
    }
    return file;
  }

  /**
   * The prepared file put in use after `previous`, or undefined when there
   * is none (the caller creates one).
   *
   * @throws {MqStoreError} The preparation's error (a full disk, say):
   *   not swallowed, as the commit log's allocator does not; the next roll
   *   tries a creation of its own.
   */
  async #activatePrepared(previous: IndexFile | undefined): Promise<IndexFile | undefined> {
    const prepared = this.#prepared;
    this.#prepared = undefined;
    if (prepared === undefined) return undefined;
    const file = await prepared;
    if (previous !== undefined && file.fileName <= previous.fileName) {
      // Not after the last file (that one was deleted since): unusable.
      await file.destroy();
      return undefined;
    }
    try {
      await file.activate(previous?.endPhyOffset ?? 0, previous?.endTimestamp ?? 0);
    } catch (error) {
      await file.destroy().catch(() => {});
      throw error;
    }
    this.#directoryUnsynced = true;
    return file;
  }

  #checkOpen(): void {
    if (this.#closed) throw new MqStoreError("CLOSED", `The index ${this.directory} is closed`);
  }
}

/**
 * Whether `file` names a record at or past `logEndOffset` (its end is its
 * last entry's record), or, empty, has an end past it (inherited from the
 * file before): the keys of a record written below a last file's end are
 * not indexed.
 */
function reachesPast(file: IndexFile, logEndOffset: number): boolean {
  return file.indexCount > 1 ? file.endPhyOffset >= logEndOffset : file.endPhyOffset > logEndOffset;
}

/** A load report of nothing dropped or cut. */
function emptyLoadReport(): IndexLoadReport {
  return { droppedFiles: 0, droppedFromOffset: -1, cutFiles: 0, cutEntries: 0 };
}

/** The Java hashes of a request's non-empty keys under `topic#`. */
function hashesOf(request: IndexRequest): { hashes: Int32Array; count: number } {
  const hashes = new Int32Array(request.keys.length);
  let count = 0;
  for (const key of request.keys) {
    if (key.length > 0) hashes[count++] = javaHashCode(`${request.topic}#${key}`);
  }
  return { hashes, count };
}
