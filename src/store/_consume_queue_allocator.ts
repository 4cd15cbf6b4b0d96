/**
 * Consume-queue files made ahead of need, for every queue of a store.
 *
 * ```
 * putUnit ─► file ⅛ full ─► prepare(next path)   background, two at a time:
 *                                                 tmp → fallocate → sync → rename → map
 *                                                 (a directory's renames in order)
 * putUnit ─► file full ─► MappedFileQueue asks request(next path)
 *                             └─► the prepared file (awaited if still in creation:
 *                                 the queue holds its units in memory meanwhile),
 *                                 or a creation now when none was prepared
 * ```
 *
 * It stands in for the commit log's `AllocateMappedFileService` in a
 * queue's `MappedFileQueue` (which takes that type), but prepares a file
 * only when {@link ConsumeQueueAllocator.prepare} asks, not the next one
 * on every request: a store has thousands of queues, most of them never
 * fill a file, and each file is allocated on disk.
 *
 * A prepared file is a whole zeroed segment under its name, so a crash
 * leaves an extra empty file after the written one: recovery (mqstore's
 * and RocketMQ's alike) ends the queue at the first zero unit and deletes
 * the files after it, or keeps it as the next file when the one before is
 * exactly full. A queue cut back (truncated, destroyed) discards its
 * prepared file first, so the files on disk stay contiguous.
 *
 * Where the port has the synchronous calls (`createFileSync`, `renameSync`,
 * `openFileSync`...: the FFI, portable and memory adapters), a creation
 * takes no awaited I/O (`createSegmentNow`): stat, remove the `.tmp`,
 * create + `posix_fallocate`, rename, open and map run on the JavaScript
 * thread (0.5–1.5 ms for a 6 MB file, measured; a few ms under heavy
 * writeback), and it ends within microtasks. An awaited step would
 * complete only on a turn of the event loop, which a producer that never
 * yields (`await store.putMessages()` in a loop) gives only when
 * dispatch declines a put: that is what stalled such producers. Nothing
 * is made durable then: consume-queue files are derived data (RocketMQ
 * never syncs their creation). The queue's flush makes the file's size
 * (its creation handle's `datasync`) and name (directory sync) durable
 * ({@link ConsumeQueueAllocator.whenNamesDurable}) before the checkpoint
 * may count a unit in it. Until then a crash can leave no name, the
 * `.tmp`, a zero-length file or one of zeros (see `ConsumeQueue.load`):
 * the queue then ends before it, and re-dispatch rebuilds the units past
 * the checkpoint, as it does for any unit not flushed.
 *
 * Elsewhere (a port without them, or a wrapper hiding them) a creation
 * is the five awaited steps of `createSegmentName`, the file made durable
 * there and its directory synced in the background, which
 * `whenNamesDurable` also waits for.
 *
 * Two awaited creations run at once ({@link CREATIONS_IN_FLIGHT_MAX}): their syncs
 * overlap, and a queue written at 1.5–2 M units/s, which fills a 6 MB file
 * every 150–200 ms, needs that under the commit log's writeback, where a
 * creation's two syncs took up to 150 and 135 ms here. A file is renamed
 * into place only after the one prepared before it in its directory, so
 * a crash never leaves a gap between them.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import type { FileHandle, RuntimePort } from "../runtime/port.ts";
import { AllocateMappedFileService } from "../segment/allocate_mapped_file_service.ts";
import type { Clock } from "../segment/clock.ts";
import { MappedFile } from "../segment/mapped_file.ts";
import { createSegmentName, createSegmentNow } from "../segment/_create_segment.ts";
import { directoryOf } from "../segment/_file_name.ts";

/** Creations that run at once; later ones wait for a slot, in order. */
const CREATIONS_IN_FLIGHT_MAX = 2;

/** Options of {@link ConsumeQueueAllocator}. */
export interface ConsumeQueueAllocatorOptions {
  /** The runtime port. */
  port: RuntimePort;
  /**
   * Create sparse files (tests only).
   *
   * @default {false}
   */
  sparse?: boolean;
  /**
   * Time source of the files.
   *
   * @default {systemClock}
   */
  clock?: Clock;
}

/**
 * Creates consume-queue files when asked to prepare them, and hands them
 * over when their queue rolls.
 *
 * @example
 * ```ts ignore
 * const allocator = new ConsumeQueueAllocator({ port });
 * const queue = new MappedFileQueue({ port, directory, fileSizeBytes, allocator });
 * allocator.prepare(`${directory}/00000000000006000000`, fileSizeBytes); // ⅛ full
 * await queue.getOrCreateLastMappedFile(); // at the roll: the prepared file
 * await allocator.close(); // removes files prepared and not taken
 * ```
 */
export class ConsumeQueueAllocator extends AllocateMappedFileService {
  #port: RuntimePort;
  #sparse: boolean;
  #clock: Clock | undefined;
  /** Files prepared or being prepared, by path, not yet handed over. */
  #prepared = new Map<string, Promise<MappedFile>>();
  /** Paths of {@link #prepared} whose creation succeeded. */
  #ready = new Set<string>();
  /** Creations holding a slot (at most {@link CREATIONS_IN_FLIGHT_MAX}). */
  #running = 0;
  /** Creations waiting for a slot, in the order they were prepared. */
  #waiting: Array<() => void> = [];
  /** Every preparation not ended yet (each never rejects). */
  #unsettled = new Set<Promise<void>>();
  /** The last preparation started in each directory: the next one's rename follows it. */
  #lastInDirectory = new Map<string, Promise<void>>();
  /** Directories whose files are pre-faulted without the read (see {@link readAfterPopulate}). */
  #unread = new Set<string>();
  /** Files whose pre-fault was started (see {@link populateRest}): each is pre-faulted once. */
  #populated = new WeakSet<MappedFile>();
  /**
   * How far the pre-fault of each file not in {@link #populated} was asked
   * for by {@link populateHead} (a position, page-aligned): the next piece,
   * or the rest, starts there.
   */
  #headEnds = new WeakMap<MappedFile, number>();
  #closing = false;
  /**
   * Directory syncs started after a creation's rename and not ended, by
   * directory (see {@link whenNamesDurable}).
   */
  #directorySyncs = new Map<string, Set<Promise<void>>>();
  /** Directories whose background sync failed: the next {@link whenNamesDurable} syncs again. */
  #unsyncedDirectories = new Set<string>();
  /**
   * Whether the port has the synchronous calls a creation with no awaited
   * I/O needs; without them creations take the awaited path.
   */
  #synchronous: boolean;
  /**
   * Files created synchronously whose size and name are not durable yet,
   * by directory, then path: their creation handle, kept open for the
   * `datasync` of {@link whenNamesDurable}.
   */
  #notDurable = new Map<string, Map<string, FileHandle>>();

  /** @param options Port and file settings. */
  constructor(options: ConsumeQueueAllocatorOptions) {
    super({ port: options.port, populate: false, sparse: options.sparse, clock: options.clock });
    this.#port = options.port;
    this.#sparse = options.sparse === true;
    this.#clock = options.clock;
    const port = options.port;
    this.#synchronous = port.openFileSync !== undefined && port.createFileSync !== undefined &&
      port.statSync !== undefined && port.renameSync !== undefined &&
      port.removeSync !== undefined;
  }

  /**
   * Whether a creation takes no awaited I/O (the port has the synchronous
   * calls): it then ends within microtasks, with no turn of the event
   * loop, and a queue need not give turns for it.
   */
  get createsSynchronously(): boolean {
    return this.#synchronous;
  }

  /** Whether the file `path` is prepared, created and not handed over yet. */
  isReady(path: string): boolean {
    return this.#ready.has(path);
  }

  /** Files prepared (or in creation) and not handed over. */
  get preparedCount(): number {
    return this.#prepared.size;
  }

  /**
   * Starts creating the file `path` in the background once a slot is free
   * (slots go in the order files were prepared); nothing when it is
   * prepared already or the allocator is closing. It is renamed into place
   * after the file prepared before it in its directory.
   *
   * @returns Resolves (never rejects) once that creation has ended,
   *   either way (at once when nothing was started).
   */
  prepare(path: string, fileSizeBytes: number): Promise<void> {
    if (this.#closing) return Promise.resolve();
    const preparing = this.#prepared.get(path);
    if (preparing !== undefined) return preparing.then(ignore, ignore);
    const directory = directoryOf(path);
    const before = this.#lastInDirectory.get(directory);
    const created = this.#slot().then(() => {
      if (this.#closing) {
        throw new MqStoreError("CLOSED", `Cannot prepare ${path}: the allocator closed`);
      }
      return this.#create(path, fileSizeBytes, before);
    });
    const ended: Promise<void> = created.then(() => {
      if (this.#prepared.get(path) === created) this.#ready.add(path);
    }, ignore).finally(() => {
      this.#release();
      this.#unsettled.delete(ended);
      if (this.#lastInDirectory.get(directory) === ended) this.#lastInDirectory.delete(directory);
    });
    this.#unsettled.add(ended);
    this.#lastInDirectory.set(directory, ended);
    // A failure is kept for the roll that asks for the file.
    this.#prepared.set(path, created);
    return ended;
  }

  /**
   * The file `path`: the prepared one, or created now. `nextPath` is not
   * prepared here (see {@link prepare}).
   *
   * @throws {MqStoreError} The preparation's or the creation's error.
   */
  override async request(
    path: string,
    _nextPath: string,
    fileSizeBytes: number,
  ): Promise<MappedFile> {
    if (this.#closing) {
      throw new MqStoreError("CLOSED", `Cannot allocate ${path}: the allocator closed`);
    }
    const prepared = this.#prepared.get(path);
    if (prepared === undefined) return await this.#create(path, fileSizeBytes);
    this.#prepared.delete(path);
    this.#ready.delete(path);
    const file = await prepared;
    if (!this.#sparse) this.#populateAfterCreations(file);
    return file;
  }

  /**
   * Pre-faults the file a queue rolls into (`MADV_POPULATE_WRITE`, off the
   * JavaScript thread), ahead of the writer, which otherwise takes a page
   * fault every 204 units (40–70 ns a unit); not at preparation, so a
   * file prepared and never rolled into stays clean. An optimisation only:
   * a failure leaves the faults to the writer.
   *
   * It starts once the creations in flight in the file's directory have
   * ended. The queue prepares the next file right at the roll, and a
   * synchronous creation `mmap`s it on the JavaScript thread: an `mmap`
   * waits for the process's mmap lock, which the pre-fault holds for its
   * whole call (7–8 ms for the first 4 MiB of 4 KiB pages under random
   * advice, measured). Started first, the pre-fault made that batch of
   * 1000 puts take ~10 ms at every roll (300,000 units), in every run.
   */
  #populateAfterCreations(file: MappedFile, endPosition?: number): void {
    const startPosition = this.#headEnds.get(file) ?? 0;
    if (endPosition === undefined) {
      this.#populated.add(file);
      this.#headEnds.delete(file);
    } else {
      this.#headEnds.set(file, endPosition);
    }
    const populate = () => {
      const read = !this.#unread.has(directoryOf(file.path));
      file.prepare({ populate: true, read, startPosition, endPosition }).catch(ignore);
    };
    // Never rejects; started (synchronously) by the roll's prepare, which
    // runs before this continuation.
    const creating = this.#lastInDirectory.get(directoryOf(file.path));
    if (creating === undefined) populate();
    else creating.then(populate);
  }

  /**
   * The pre-faults of the files of the queue in `directory` (from the next
   * one started) also read each file from another thread
   * (`PrepareOptions.read`), as they do unless {@link populateWithoutRead}
   * said otherwise. The read spares a writer storing through the mapping
   * its first store to each 4 KiB page (7–13 µs a page at some hours on
   * this VM, none at others). The queue calls it when its runs go back to
   * stores through the mapping.
   */
  readAfterPopulate(directory: string): void {
    this.#unread.delete(directory);
  }

  /**
   * The pre-faults of the files of the queue in `directory` (from the next
   * one started) skip the read of {@link readAfterPopulate}: the queue's
   * runs go in by positional writes and never store through the mapping,
   * and the read only costs the other core (the 128 B `batch1000 bare` row
   * was 8–19 % slower with it).
   */
  populateWithoutRead(directory: string): void {
    this.#unread.add(directory);
  }

  /**
   * Pre-faults what the writer has not reached yet of `file`, a queue's
   * last file, unless it was pre-faulted already (a file rolled into is, at
   * {@link request}), with the same wait for the creations in flight in its
   * directory. The queue calls it as it prepares the next file (the file
   * is ⅛ full): a queue's first file is created on demand and not
   * pre-faulted, so that a queue that stays small never has its 6 MB file
   * dirtied, but a busy one then took a page fault every 204 units for the
   * whole file (the 128 B `putMessages` comparison case, a fresh store each
   * run: 9 % of Node's CPU profile in the unit writer).
   */
  populateRest(file: MappedFile): void {
    if (this.#sparse || this.#closing || this.#populated.has(file)) return;
    this.#populateAfterCreations(file);
  }

  /**
   * Pre-faults `file`, a queue's last file, up to `endPosition` (rounded
   * up to a page), from where the pieces asked for before ended, as
   * {@link populateRest} does for the rest: a queue calls it at doubling
   * positions of a file nothing pre-faulted (its first, created on
   * demand) until it is ⅛ full, so that a busy queue's writer finds its
   * pages pre-faulted and read from the first tens of KiB on, while what is
   * pre-faulted stays within a few times what the queue wrote.
   *
   * @returns False when the file is pre-faulted whole already (rolled
   *   into, or {@link populateRest} was called) or never will be (sparse
   *   files, a closing allocator): the queue need not call again.
   */
  populateHead(file: MappedFile, endPosition: number): boolean {
    if (this.#sparse || this.#closing || this.#populated.has(file)) return false;
    const page = this.#port.pageSizeBytes;
    const end = Math.ceil(endPosition / page) * page;
    if (end >= file.fileSizeBytes) {
      this.#populateAfterCreations(file);
      return false;
    }
    if (end > (this.#headEnds.get(file) ?? 0)) this.#populateAfterCreations(file, end);
    return true;
  }

  /** Resolves once no file is being created and no directory sync runs. */
  override async whenIdle(): Promise<void> {
    // Bounded: each round waits for the preparations started before it.
    while (this.#unsettled.size > 0) await Promise.all(this.#unsettled);
    for (const syncs of [...this.#directorySyncs.values()]) {
      await Promise.allSettled([...syncs]);
    }
  }

  /**
   * Resolves once the names of the files created in `directory` so far
   * are durable: the background directory syncs started after their
   * renames have ended (one that failed is done again here). A queue's
   * flush waits for it before the checkpoint may count its units.
   *
   * @throws The directory sync's error.
   */
  async whenNamesDurable(directory: string): Promise<void> {
    const created = this.#notDurable.get(directory);
    if (created !== undefined && created.size > 0) {
      // Synchronous creations made nothing durable: the files' sizes
      // (datasync) first, then their names (directory sync). Files
      // created meanwhile wait for the next call.
      const handles = [...created];
      created.clear();
      try {
        await Promise.all(handles.map(([, handle]) => handle.datasync()));
        await this.#port.syncDirectory(directory);
      } catch (error) {
        for (const [path, handle] of handles) created.set(path, handle);
        throw error;
      }
      for (const [, handle] of handles) await handle.close();
    }
    const syncs = this.#directorySyncs.get(directory);
    if (syncs !== undefined) await Promise.allSettled([...syncs]);
    if (this.#unsyncedDirectories.has(directory)) {
      await this.#port.syncDirectory(directory);
      this.#unsyncedDirectories.delete(directory);
    }
  }

  /** Removes the prepared files under `directory` (a queue cut back or destroyed). */
  async discard(directory: string): Promise<void> {
    this.#unread.delete(directory);
    const prefix = `${directory}/`;
    for (const [path, prepared] of [...this.#prepared]) {
      if (!path.startsWith(prefix)) continue;
      this.#prepared.delete(path);
      this.#ready.delete(path);
      const file = await prepared.catch(() => undefined);
      await file?.destroy({ waitMs: 0 });
      await this.#forgetNotDurable(path);
    }
  }

  /** Waits for the creations in progress and removes the files not taken. Idempotent. */
  override async close(): Promise<void> {
    this.#closing = true;
    await this.whenIdle();
    const prepared = [...this.#prepared.values()];
    this.#prepared.clear();
    this.#ready.clear();
    for (const file of prepared) {
      await (await file.catch(() => undefined))?.destroy({ waitMs: 0 });
    }
    // Files handed over and never flushed: derived data, rebuilt by
    // re-dispatch should a crash lose them.
    for (const created of [...this.#notDurable.values()]) {
      for (const handle of created.values()) await handle.close();
    }
    this.#notDurable.clear();
    await super.close();
  }

  /** Resolves once a creation may run (a slot is free, or handed over). */
  #slot(): Promise<void> {
    if (this.#running < CREATIONS_IN_FLIGHT_MAX) {
      this.#running++;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  /** Hands the slot of an ended creation to the next waiting one, or frees it. */
  #release(): void {
    const next = this.#waiting.shift();
    if (next !== undefined) next();
    else this.#running--;
  }

  /**
   * Creates `path` (under its name, the directory sync started in the
   * background) and opens it.
   */
  async #create(
    path: string,
    fileSizeBytes: number,
    renameAfter?: Promise<unknown>,
  ): Promise<MappedFile> {
    const port = this.#port;
    if (this.#synchronous) return await this.#createNow(path, fileSizeBytes);
    await createSegmentName(port, path, fileSizeBytes, {
      sparse: this.#sparse,
      renameAfter,
      syncDirectory: false,
    });
    this.#syncDirectoryLater(directoryOf(path));
    let file: MappedFile;
    try {
      file = await MappedFile.open({ port, path, fileSizeBytes, clock: this.#clock });
    } catch (error) {
      await port.remove(path);
      throw error;
    }
    // Advised random before any page is touched, as MappedFile.create does
    // (SPEC §2); nothing else (populate: false). It runs on the next
    // microtask, before the file is handed to anyone.
    file.prepare({ populate: false }).catch(ignore);
    return file;
  }

  /**
   * {@link #create} with no awaited I/O: created, renamed and opened on
   * the JavaScript thread (the awaits below resolve within microtasks),
   * nothing made durable (see {@link whenNamesDurable}). In the order
   * creations start, so a directory's files appear in order.
   */
  async #createNow(path: string, fileSizeBytes: number): Promise<MappedFile> {
    const port = this.#port;
    const handle = createSegmentNow(port, path, fileSizeBytes, { sparse: this.#sparse })!;
    const directory = directoryOf(path);
    let created = this.#notDurable.get(directory);
    if (created === undefined) this.#notDurable.set(directory, created = new Map());
    created.set(path, handle);
    let file: MappedFile;
    try {
      // Opened on this thread: the open then maps it within microtasks.
      const opened = port.openFileSync!(path);
      file = await MappedFile.open({
        port,
        path,
        fileSizeBytes,
        clock: this.#clock,
        handle: opened,
      });
    } catch (error) {
      await this.#forgetNotDurable(path);
      port.removeSync!(path);
      throw error;
    }
    file.prepare({ populate: false }).catch(ignore);
    return file;
  }

  /** Closes the creation handle of `path` kept for {@link whenNamesDurable} (its file went). */
  async #forgetNotDurable(path: string): Promise<void> {
    const created = this.#notDurable.get(directoryOf(path));
    const handle = created?.get(path);
    if (handle === undefined) return;
    created!.delete(path);
    await handle.close();
  }

  /** Starts a sync of `directory` that {@link whenNamesDurable} waits for. */
  #syncDirectoryLater(directory: string): void {
    let syncs = this.#directorySyncs.get(directory);
    if (syncs === undefined) this.#directorySyncs.set(directory, syncs = new Set());
    const sync: Promise<void> = this.#port.syncDirectory(directory).catch(() => {
      this.#unsyncedDirectories.add(directory);
    }).finally(() => {
      syncs.delete(sync);
      if (syncs.size === 0 && this.#directorySyncs.get(directory) === syncs) {
        this.#directorySyncs.delete(directory);
      }
    });
    syncs.add(sync);
  }
}

function ignore(): void {}
