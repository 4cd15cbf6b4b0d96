/**
 * The `memory` adapter: a {@link RuntimePort} over an in-memory file system
 * that remembers what was made durable, so tests can simulate a power loss
 * with {@link MemoryPort.crash} and inject I/O errors with
 * {@link MemoryPort.failNext}.
 *
 * ## Durability model
 *
 * Every file has two contents: the *page cache* (what `read()`, `readFile()`
 * and mappings see) and the *durable* content (what survives a crash).
 *
 * | operation                         | makes                                         |
 * | --------------------------------- | --------------------------------------------- |
 * | `write()`, `writeSync()`, `bytes` | a change to the cache only                    |
 * | `datasync()`, `datasyncSync()`    | the whole file (content and size) durable     |
 * | `Mapping.sync(p, n)`              | the 4 KiB pages touching `[p, p + n)` and the |
 * |                                   | file's size durable (`msync` is a range       |
 * |                                   | `fdatasync`)                                  |
 * | `createFile`, `rename`, `remove`  | a change to the live directory entries only   |
 * | (and their `…Sync` forms)         |                                               |
 * | `syncDirectory(dir)`              | all of `dir`'s entries durable                |
 * | `writeFileAtomic`                 | content, entry and its directory durable      |
 * | `makeDirectory` (and `…Sync`)     | a durable directory at once (simplified)      |
 *
 * A created file's name is durable once its directory is synced; before
 * that a crash removes it. Its size (the `posix_fallocate`) is durable
 * with the name by default, as on ext4, whose directory `fsync` commits
 * the journal transaction holding the allocation. With
 * {@link MemoryPortOptions.strictSizes} it is durable only once the file
 * is synced (`datasync()` or a `Mapping.sync`), as POSIX allows: a crash
 * before leaves the name on a zero-length file (a seeded crash keeps the
 * full size, zeros, with `keepProbability`). A rename or removal not
 * followed by `syncDirectory` is undone by a crash. A file extended by `write()` keeps its old durable size until
 * `datasync()`.
 *
 * {@link MemoryPort.crash} replaces every cache by its durable content,
 * detaches every mapping view, closes every handle and releases every lock.
 * With a `seed` it is a torn crash instead: each dirty page (cache differs
 * from durable) and each unsynced directory operation is independently kept
 * or lost, so a consume-queue page can survive while the commit-log page it
 * points to does not.
 *
 * ## Storage
 *
 * A file's cache is one `ArrayBuffer` per 2 GiB chunk, allocated on first
 * write or map (a fresh 1 GiB segment costs no memory until touched), so a
 * mapping is a real `Uint8Array` over the cache: writes through it are seen
 * by `read()` and the other way round. A mapping must lie inside one chunk,
 * which every commit-log segment (below 2^31 bytes) does. Durable content
 * is kept per 4 KiB page only where it may differ from the cache (pages
 * written since the last flush, or exposed to a mapping, since JavaScript
 * cannot observe writes through a view), so a clean, unmapped file costs
 * about its size once.
 *
 * `unmap()` detaches the view when it was the last live mapping of its
 * chunk; while another mapping of the same chunk is live the old view stays
 * attached (one view of a shared buffer cannot be detached on its own), but
 * every operation on the unmapped {@link Mapping} rejects. Read-only handles
 * and mappings are not write-protected (JavaScript views cannot be).
 *
 * Cost: a plain crash reads no page; a seeded crash and `pageCacheState`
 * compare every page a mapping exposed (0.3–3.6 s for a freshly mapped
 * GiB on the machines measured, mostly first-touch faults), so seeded
 * crash tests want small segments and probes want narrow ranges.
 *
 * Faults ({@link MemoryPort.failNext}) hit `FileHandle.write` and
 * `FileHandle.writeSync` (`write`), `FileHandle.datasync`,
 * `FileHandle.datasyncSync` and `Mapping.sync` (`flush`) and `createFile`
 * (`create`); a failed operation changes nothing. Space: files count with
 * their full size (sparse or not) against `capacityBytes`. Locks are
 * in-process only: a second `lockDirectory` on the same port fails with
 * `LOCKED`. Flushes resolve on a later microtask, like the off-thread
 * flushes of the FFI adapters.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { posix } from "node:path";
import process from "node:process";
import { MqStoreError, type MqStoreErrorCode } from "../errors.ts";
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

const PAGE_SIZE_BYTES = 0x1000;
/** Cache chunk: a power of two above every segment size (< 2^31). */
const CHUNK_SIZE_BYTES = 0x8000_0000;
/** 1 TiB: room for any test, and small enough to notice a runaway. */
const CAPACITY_DEFAULT_BYTES = 0x100_0000_0000;
const KEEP_PROBABILITY_DEFAULT = 0.5;
const LOCK_FILE = "lock";
/** Keeps page indexes and chunk arithmetic exact. */
const FILE_SIZE_MAX_BYTES = Number.MAX_SAFE_INTEGER;
const UINT32_LIMIT = 0x1_0000_0000;

if (CHUNK_SIZE_BYTES % PAGE_SIZE_BYTES !== 0) {
  throw new Error("memory adapter: a chunk must be a whole number of pages");
}

/**
 * Page states. The durable content of a page is the cache content when the
 * state is UNTOUCHED or CLEAN, zeros when DURABLE_ZERO, and the saved copy
 * when DURABLE_SAVED. Pages written by `write()` or exposed to a mapping are
 * always DURABLE_ZERO or DURABLE_SAVED, because their cache may change.
 */
const PAGE_UNTOUCHED = 0; // zero in the cache and durably
const PAGE_CLEAN = 1; // cache equals durable, not exposed to a mapping
const PAGE_DURABLE_ZERO = 2; // durable content is all zeros
const PAGE_DURABLE_SAVED = 3; // durable content is in FileNode.saved

const CHUNK_PAGES = CHUNK_SIZE_BYTES / PAGE_SIZE_BYTES;
/** Pages compared at once when looking for written pages among zero ones. */
const ZERO_BLOCK_PAGES = 0x100;
/** 1 MiB of zeros to compare against, made on first use (never written). */
let zeros: Buffer | undefined;

/** Options of {@link MemoryPort.crash}. */
export interface CrashOptions {
  /**
   * Seed of a torn crash: each dirty page and each unsynced directory
   * operation is kept or lost at random, deterministically for a seed. An
   * integer in [0, 2^32). Without it every unflushed byte is lost.
   *
   * @default {undefined}
   */
  seed?: number;
  /**
   * Probability that a dirty page or an unsynced directory operation
   * survives a seeded crash, in [0, 1].
   *
   * @default {0.5}
   */
  keepProbability?: number;
}

/** What {@link MemoryPort.crash} did. */
export interface CrashReport {
  /**
   * Dirty pages whose unflushed content survived. Counted by a seeded
   * crash only (a plain one does not look at pages): undefined otherwise.
   */
  keptPages: number | undefined;
  /** Dirty pages that went back to their durable content; as `keptPages`. */
  lostPages: number | undefined;
  /** Unsynced directory operations that survived (seeded mode only). */
  keptDirectoryOperations: number;
  /** Unsynced directory operations that were undone. */
  lostDirectoryOperations: number;
}

/** Options of {@link MemoryPort.failNext}. */
export interface FaultOptions {
  /**
   * Which operation fails: `write` is `FileHandle.write` and
   * `FileHandle.writeSync`, `flush` is `FileHandle.datasync`,
   * `FileHandle.datasyncSync` and `Mapping.sync`, `create` is `createFile`.
   */
  operation: "write" | "flush" | "create";
  /**
   * Which matching operation fails, counted from the next one (1).
   *
   * @default {1}
   */
  nth?: number;
  /** The error: `EIO` (code `IO_ERROR`) or `ENOSPC` (code `NO_SPACE`). */
  error: "EIO" | "ENOSPC";
  /**
   * Only operations on paths containing this text count (e.g.
   * `"/commitlog/"`), so background flushes of other files do not take
   * the fault.
   *
   * @default {""}
   */
  pathIncludes?: string;
}

/** Options of the {@link MemoryPort} constructor. */
export interface MemoryPortOptions {
  /**
   * Size of the simulated file system; `createFile` or a `write` beyond it
   * fails with `NO_SPACE`.
   *
   * @default {2 ** 40}
   */
  capacityBytes?: number;
  /**
   * A created file's size is durable only once the file is synced
   * (`datasync()`, `datasyncSync()` or a `Mapping.sync`), not with its
   * directory: a crash before leaves a zero-length file under a durable
   * name (a seeded crash keeps the full size with `keepProbability`).
   * False: the size is durable with the name (see the module doc).
   *
   * @default {false}
   */
  strictSizes?: boolean;
}

type Node = FileNode | DirectoryNode;

/** A directory: live entries, and the entries as of its last sync. */
class DirectoryNode {
  readonly kind = "directory";
  /** What `list()` and lookups see. */
  entries = new Map<string, Node>();
  /** What survives a crash. */
  durable = new Map<string, Node>();
  modifiedMs = Date.now();
}

/** A regular file: cache chunks, page states and saved durable pages. */
class FileNode {
  readonly kind = "file";
  /** Size seen by reads (the cache). */
  sizeBytes: number;
  /** Size that survives a crash. */
  durableSizeBytes: number;
  /** Cache content per chunk; undefined reads as zeros. */
  chunks: (ArrayBuffer | undefined)[];
  /** One PAGE_* state per page of `sizeBytes`. */
  pages: Uint8Array;
  /** Durable content of DURABLE_SAVED pages. */
  saved = new Map<number, Uint8Array>();
  /** Live mappings (they expose their pages to unobservable writes). */
  mappings = new Set<MemoryMapping>();
  modifiedMs = Date.now();

  constructor(sizeBytes: number) {
    this.sizeBytes = sizeBytes;
    this.durableSizeBytes = sizeBytes;
    this.chunks = new Array(chunkCount(sizeBytes)).fill(undefined);
    this.pages = new Uint8Array(pageCount(sizeBytes));
  }

  chunkLength(chunk: number): number {
    return Math.min(CHUNK_SIZE_BYTES, this.sizeBytes - chunk * CHUNK_SIZE_BYTES);
  }

  /** The chunk's buffer, allocated (zeroed) if needed. */
  chunk(chunk: number): ArrayBuffer {
    let buffer = this.chunks[chunk];
    if (buffer === undefined) {
      buffer = new ArrayBuffer(this.chunkLength(chunk));
      this.chunks[chunk] = buffer;
    }
    return buffer;
  }

  /** A view of page `page`'s cache bytes, or undefined if never allocated. */
  cachePage(page: number): Uint8Array | undefined {
    const position = page * PAGE_SIZE_BYTES;
    const chunk = Math.floor(position / CHUNK_SIZE_BYTES);
    const buffer = this.chunks[chunk];
    if (buffer === undefined) return undefined;
    const start = position - chunk * CHUNK_SIZE_BYTES;
    return new Uint8Array(
      buffer,
      start,
      Math.min(PAGE_SIZE_BYTES, buffer.byteLength - start),
    );
  }

  /** Whether a live mapping covers the page. */
  exposed(page: number): boolean {
    for (const mapping of this.mappings) {
      if (page >= mapping.firstPage && page < mapping.endPage) return true;
    }
    return false;
  }

  /** Whether the page's cache content differs from its durable content. */
  dirty(page: number): boolean {
    const state = this.pages[page];
    if (state === PAGE_DURABLE_ZERO) return !isZero(this.cachePage(page));
    if (state === PAGE_DURABLE_SAVED) {
      return !sameBytes(this.cachePage(page), this.saved.get(page));
    }
    return false;
  }

  /**
   * The end of the run of DURABLE_ZERO pages from `page` (before `endPage`)
   * whose cache still reads zeros, checked a block at a time: a fresh
   * mapping exposes many such pages, and comparing them one by one would
   * make a probe of a mapped GiB several times slower. Returns `page` when
   * that page is dirty or not DURABLE_ZERO.
   */
  cleanZeroRunEnd(page: number, endPage: number): number {
    let start = page;
    while (start < endPage) {
      const chunk = Math.floor(start * PAGE_SIZE_BYTES / CHUNK_SIZE_BYTES);
      const chunkEndPage = (chunk + 1) * CHUNK_PAGES;
      const limit = Math.min(endPage, start + ZERO_BLOCK_PAGES, chunkEndPage);
      let stop = start;
      while (stop < limit && this.pages[stop] === PAGE_DURABLE_ZERO) stop++;
      if (stop === start) return start;
      const buffer = this.chunks[chunk];
      if (buffer !== undefined) {
        const from = start * PAGE_SIZE_BYTES - chunk * CHUNK_SIZE_BYTES;
        const to = Math.min(buffer.byteLength, stop * PAGE_SIZE_BYTES - chunk * CHUNK_SIZE_BYTES);
        if (!isZero(new Uint8Array(buffer, from, to - from))) {
          while (start < stop && isZero(this.cachePage(start))) start++;
          return start;
        }
      }
      start = stop;
    }
    return start;
  }

  /** Calls `visit` for each dirty page of `[firstPage, endPage)`, in order. */
  forEachDirty(firstPage: number, endPage: number, visit: (page: number) => void): void {
    for (let page = firstPage; page < endPage;) {
      const state = this.pages[page];
      if (state === PAGE_DURABLE_ZERO) {
        const next = this.cleanZeroRunEnd(page, endPage);
        if (next > page) {
          page = next;
          continue;
        }
        visit(page);
      } else if (state === PAGE_DURABLE_SAVED && this.dirty(page)) {
        visit(page);
      }
      page++;
    }
  }

  /**
   * Records the durable content of pages about to change in ways this
   * module cannot observe (a `write()` or a mapping).
   */
  protect(firstPage: number, endPage: number): void {
    for (let page = firstPage; page < endPage; page++) {
      const state = this.pages[page];
      if (state === PAGE_UNTOUCHED) {
        this.pages[page] = PAGE_DURABLE_ZERO;
      } else if (state === PAGE_CLEAN) {
        this.saved.set(page, copyPage(this.cachePage(page)));
        this.pages[page] = PAGE_DURABLE_SAVED;
      }
    }
  }

  /** Makes the cache content of the pages durable. */
  persist(firstPage: number, endPage: number): void {
    for (let page = firstPage; page < endPage;) {
      const state = this.pages[page];
      if (state === PAGE_DURABLE_ZERO) {
        const next = this.cleanZeroRunEnd(page, endPage);
        if (next > page) {
          // Still zero: durable as it is; unexposed pages need no tracking.
          for (; page < next; page++) {
            if (!this.exposed(page)) this.pages[page] = PAGE_UNTOUCHED;
          }
          continue;
        }
      }
      if (state === PAGE_DURABLE_ZERO || state === PAGE_DURABLE_SAVED) {
        const cache = this.cachePage(page);
        if (this.exposed(page)) {
          // The mapping may still change the page: keep a durable copy.
          if (isZero(cache)) {
            this.saved.delete(page);
            this.pages[page] = PAGE_DURABLE_ZERO;
          } else if (!sameBytes(cache, this.saved.get(page))) {
            this.saved.set(page, copyPage(cache));
            this.pages[page] = PAGE_DURABLE_SAVED;
          }
        } else {
          this.saved.delete(page);
          this.pages[page] = PAGE_CLEAN;
        }
      }
      page++;
    }
  }

  /** Grows the file to `sizeBytes` (a `write()` past the end). */
  grow(sizeBytes: number, path: string): void {
    const lastChunk = this.chunks.length - 1;
    const lastBuffer = lastChunk >= 0 ? this.chunks[lastChunk] : undefined;
    const oldSizeBytes = this.sizeBytes;
    this.sizeBytes = sizeBytes;
    if (lastBuffer !== undefined && this.chunkLength(lastChunk) !== lastBuffer.byteLength) {
      for (const mapping of this.mappings) {
        if (mapping.chunk === lastChunk) {
          this.sizeBytes = oldSizeBytes;
          throw new MqStoreError(
            "UNSUPPORTED",
            `Cannot extend ${path} to ${sizeBytes} bytes: the memory adapter cannot grow a mapped chunk`,
          );
        }
      }
      const grown = new ArrayBuffer(this.chunkLength(lastChunk));
      new Uint8Array(grown).set(new Uint8Array(lastBuffer));
      detach(lastBuffer);
      this.chunks[lastChunk] = grown;
    }
    while (this.chunks.length < chunkCount(sizeBytes)) this.chunks.push(undefined);
    const pages = new Uint8Array(pageCount(sizeBytes));
    pages.set(this.pages);
    this.pages = pages;
  }

  /**
   * Replaces the cache by the durable content after a crash. With `random`,
   * each dirty page (and a size extension) survives with `keepProbability`
   * and is counted in `report`. Without it, no page is read: unflushed
   * pages simply are not copied, which keeps a crash of a large, freshly
   * mapped file cheap.
   */
  recover(
    random: (() => number) | undefined,
    keepProbability: number,
    report: CrashReport,
  ): void {
    let sizeBytes = this.durableSizeBytes;
    if (random !== undefined && this.sizeBytes > sizeBytes && random() < keepProbability) {
      sizeBytes = this.sizeBytes;
    }
    const chunks: (ArrayBuffer | undefined)[] = new Array(chunkCount(sizeBytes)).fill(undefined);
    const pages = new Uint8Array(pageCount(sizeBytes));
    const kept = new Set<number>();
    if (random !== undefined) {
      this.forEachDirty(0, pages.length, (page) => {
        if (random() < keepProbability) {
          kept.add(page);
          report.keptPages = (report.keptPages ?? 0) + 1;
        } else {
          report.lostPages = (report.lostPages ?? 0) + 1;
        }
      });
    }
    const place = (page: number, bytes: Uint8Array | undefined) => {
      if (bytes === undefined || isZero(bytes)) return;
      const position = page * PAGE_SIZE_BYTES;
      const chunk = Math.floor(position / CHUNK_SIZE_BYTES);
      let buffer = chunks[chunk];
      if (buffer === undefined) {
        buffer = new ArrayBuffer(Math.min(CHUNK_SIZE_BYTES, sizeBytes - chunk * CHUNK_SIZE_BYTES));
        chunks[chunk] = buffer;
      }
      const start = position - chunk * CHUNK_SIZE_BYTES;
      const length = Math.min(bytes.length, buffer.byteLength - start);
      new Uint8Array(buffer, start, length).set(bytes.subarray(0, length));
      pages[page] = PAGE_CLEAN;
    };
    for (let page = 0; page < pages.length; page++) {
      const state = this.pages[page] ?? PAGE_UNTOUCHED;
      if (state === PAGE_CLEAN || kept.has(page)) {
        place(page, this.cachePage(page));
      } else if (state === PAGE_DURABLE_SAVED) {
        place(page, this.saved.get(page));
      }
    }
    for (const buffer of this.chunks) if (buffer !== undefined) detach(buffer);
    this.chunks = chunks;
    this.pages = pages;
    this.saved.clear();
    this.mappings.clear();
    this.sizeBytes = sizeBytes;
    this.durableSizeBytes = sizeBytes;
  }
}

function chunkCount(sizeBytes: number): number {
  return Math.ceil(sizeBytes / CHUNK_SIZE_BYTES);
}

function pageCount(sizeBytes: number): number {
  return Math.ceil(sizeBytes / PAGE_SIZE_BYTES);
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Whether a page is all zeros; an unallocated page (undefined) is. */
function isZero(bytes: Uint8Array | undefined): boolean {
  if (bytes === undefined) return true;
  // Buffer.equals is a native memcmp in all three runtimes, 3-8x faster
  // than a JavaScript loop (measured), which matters when a probe or a
  // seeded crash scans a mapped GiB.
  zeros ??= Buffer.alloc(ZERO_BLOCK_PAGES * PAGE_SIZE_BYTES);
  return asBuffer(bytes).equals(zeros.subarray(0, bytes.length));
}

function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === undefined) return isZero(b);
  if (b === undefined) return isZero(a);
  return asBuffer(a).equals(asBuffer(b));
}

function copyPage(bytes: Uint8Array | undefined): Uint8Array {
  const copy = new Uint8Array(PAGE_SIZE_BYTES);
  if (bytes !== undefined) copy.set(bytes);
  return copy;
}

/**
 * Detaches a buffer so every view of it reads as length 0, without copying:
 * `ArrayBuffer.prototype.transfer` where it exists (Deno, Bun, Node 22+),
 * else a transferring `structuredClone` (Node 20).
 */
function detach(buffer: ArrayBuffer): ArrayBuffer {
  const transfer = (buffer as { transfer?: () => ArrayBuffer }).transfer;
  if (typeof transfer === "function") return transfer.call(buffer);
  return structuredClone(buffer, { transfer: [buffer] });
}

/** A small deterministic PRNG (mulberry32) giving floats in [0, 1). */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / UINT32_LIMIT;
  };
}

/** FNV-1a of a string, to give each file its own random stream. */
function hashText(text: string, basis: number): number {
  let hash = (basis ^ 0x811c9dc5) >>> 0;
  for (let i = 0; i < text.length; i++) {
    hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193) >>> 0;
  }
  return hash;
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

function checkPath(path: unknown): asserts path is string {
  if (typeof path !== "string" || path.length === 0) {
    throw new TypeError(`A path must be a non-empty string, got ${String(path)}`);
  }
}

interface PendingFault {
  operation: FaultOptions["operation"];
  remaining: number;
  error: FaultOptions["error"];
  pathIncludes: string;
}

const FAULT_CODES: Readonly<Record<FaultOptions["error"], MqStoreErrorCode>> = {
  EIO: "IO_ERROR",
  ENOSPC: "NO_SPACE",
};

/** State shared by the port, its handles and its mappings. */
class MemoryDisk {
  /** `/`, which always exists. */
  root = new DirectoryNode();
  /** Size of the simulated file system. */
  capacityBytes: number;
  /** Armed faults, each counting down matching operations. */
  faults: PendingFault[] = [];
  /** Open handles (a crash closes them). */
  handles = new Set<MemoryFileHandle>();
  /** Live mappings (a crash unmaps them). */
  mappings = new Set<MemoryMapping>();
  /** Locked directories, each with the token of its current holder. */
  locks = new Map<DirectoryNode, object>();
  /** See {@link MemoryPortOptions.strictSizes}. */
  strictSizes = false;
  /** Boots of the simulated machine: each {@link crash} (a power loss) starts a new one. */
  boots = 1;

  constructor(capacityBytes: number) {
    this.capacityBytes = capacityBytes;
  }

  /** Counts an operation against the pending faults; returns the error to raise, if any. */
  fault(
    operation: FaultOptions["operation"],
    verb: string,
    path: string,
  ): MqStoreError | undefined {
    let fired: PendingFault | undefined;
    for (const fault of this.faults) {
      if (fault.operation !== operation || !path.includes(fault.pathIncludes)) continue;
      fault.remaining--;
      if (fault.remaining === 0 && fired === undefined) fired = fault;
    }
    this.faults = this.faults.filter((fault) => fault.remaining > 0);
    if (fired === undefined) return undefined;
    return new MqStoreError(
      FAULT_CODES[fired.error],
      `Cannot ${verb} ${path}: ${fired.error} (injected fault)`,
    );
  }

  usedBytes(): number {
    let used = 0;
    const visit = (directory: DirectoryNode) => {
      for (const node of directory.entries.values()) {
        if (node.kind === "file") used += node.sizeBytes;
        else visit(node);
      }
    };
    visit(this.root);
    return used;
  }

  checkSpace(extraBytes: number, verb: string, path: string): void {
    const used = this.usedBytes();
    if (used + extraBytes > this.capacityBytes) {
      throw new MqStoreError(
        "NO_SPACE",
        `Cannot ${verb} ${path}: ${extraBytes} more bytes exceed the capacity of ${this.capacityBytes} bytes (${used} used)`,
      );
    }
  }

  /** The node at an absolute, normalised path. */
  lookup(path: string): Node | undefined {
    let node: Node = this.root;
    for (const name of path.split("/")) {
      if (name === "") continue;
      if (node.kind !== "directory") return undefined;
      const next: Node | undefined = node.entries.get(name);
      if (next === undefined) return undefined;
      node = next;
    }
    return node;
  }

  /** The directory holding `path` and the last name, or NOT_FOUND. */
  parent(path: string, verb: string, shown: string): [DirectoryNode, string] {
    const slash = path.lastIndexOf("/");
    const directory = this.lookup(path.slice(0, slash) || "/");
    const name = path.slice(slash + 1);
    if (directory === undefined || directory.kind !== "directory" || name === "") {
      throw new MqStoreError(
        "NOT_FOUND",
        `Cannot ${verb} ${shown}: ENOENT (no such directory)`,
      );
    }
    return [directory, name];
  }

  /** Reverts directories to their durable entries, keeping some changes when seeded. */
  recoverDirectories(
    random: (() => number) | undefined,
    keepProbability: number,
    report: CrashReport,
  ): void {
    const visited = new Set<DirectoryNode>();
    // Changes concerning one node (both halves of a rename, say) are one
    // operation: kept or lost together.
    const groups = new Map<Node, { directory: DirectoryNode; name: string; live?: Node }[]>();
    const walk = (directory: DirectoryNode) => {
      if (visited.has(directory)) return;
      visited.add(directory);
      const names = [...new Set([...directory.entries.keys(), ...directory.durable.keys()])].sort();
      for (const name of names) {
        const live = directory.entries.get(name);
        const durable = directory.durable.get(name);
        if (live !== durable) {
          const key = (live ?? durable) as Node;
          const group = groups.get(key) ?? [];
          group.push({ directory, name, live });
          groups.set(key, group);
        }
        for (const child of [live, durable]) {
          if (child?.kind === "directory") walk(child);
        }
      }
    };
    walk(this.root);
    for (const changes of groups.values()) {
      const keep = random !== undefined && random() < keepProbability;
      if (keep) report.keptDirectoryOperations++;
      else report.lostDirectoryOperations++;
      if (!keep) continue;
      for (const { directory, name, live } of changes) {
        if (live === undefined) directory.durable.delete(name);
        else directory.durable.set(name, live);
      }
    }
    for (const directory of visited) directory.entries = new Map(directory.durable);
  }

  crash(options: CrashOptions): CrashReport {
    const seed = options.seed;
    const keepProbability = options.keepProbability ?? KEEP_PROBABILITY_DEFAULT;
    if (seed !== undefined && !(Number.isInteger(seed) && seed >= 0 && seed < UINT32_LIMIT)) {
      throw new RangeError(`Cannot crash: seed ${seed} must be an integer in [0, 2^32)`);
    }
    if (!(keepProbability >= 0 && keepProbability <= 1)) {
      throw new RangeError(
        `Cannot crash: keepProbability ${keepProbability} must be in [0, 1]`,
      );
    }
    if (seed === undefined && options.keepProbability !== undefined) {
      throw new RangeError("Cannot crash: keepProbability needs a seed");
    }
    const report: CrashReport = {
      keptPages: seed === undefined ? undefined : 0,
      lostPages: seed === undefined ? undefined : 0,
      keptDirectoryOperations: 0,
      lostDirectoryOperations: 0,
    };
    this.boots++;
    const mappedFiles = new Set<FileNode>();
    for (const mapping of this.mappings) {
      mappedFiles.add(mapping.file);
      mapping.retire(false);
    }
    this.mappings.clear();
    for (const handle of this.handles) handle.markClosed();
    this.handles.clear();
    this.locks.clear();

    this.recoverDirectories(
      seed === undefined ? undefined : seededRandom(hashText("directories", seed)),
      keepProbability,
      report,
    );
    const recovered = new Set<FileNode>();
    const walk = (directory: DirectoryNode, path: string) => {
      for (const name of [...directory.entries.keys()].sort()) {
        const node = directory.entries.get(name) as Node;
        const child = `${path}/${name}`;
        if (node.kind === "directory") {
          walk(node, child);
        } else if (!recovered.has(node)) {
          recovered.add(node);
          node.recover(
            seed === undefined ? undefined : seededRandom(hashText(child, seed)),
            keepProbability,
            report,
          );
        }
      }
    };
    walk(this.root, "");
    // Files gone from the tree lose their cache too; views of it detach.
    for (const file of mappedFiles) {
      if (!recovered.has(file)) file.recover(undefined, 0, { ...report });
    }
    return report;
  }
}

/** A {@link Mapping} over one chunk of a {@link FileNode}'s cache. */
class MemoryMapping implements Mapping {
  readonly fileOffset: number;
  readonly length: number;
  /** The file whose cache the view shows. */
  readonly file: FileNode;
  /** The chunk the view lies in. */
  readonly chunk: number;
  /** First page covered. */
  readonly firstPage: number;
  /** Page after the last one covered. */
  readonly endPage: number;
  #bytes: Uint8Array;
  #disk: MemoryDisk;
  #path: string;
  #retired = false;

  constructor(disk: MemoryDisk, file: FileNode, path: string, fileOffset: number, length: number) {
    this.#disk = disk;
    this.file = file;
    this.#path = path;
    this.fileOffset = fileOffset;
    this.length = length;
    this.chunk = Math.floor(fileOffset / CHUNK_SIZE_BYTES);
    this.firstPage = fileOffset / PAGE_SIZE_BYTES;
    this.endPage = Math.ceil((fileOffset + length) / PAGE_SIZE_BYTES);
    file.protect(this.firstPage, this.endPage);
    this.#bytes = new Uint8Array(
      file.chunk(this.chunk),
      fileOffset - this.chunk * CHUNK_SIZE_BYTES,
      length,
    );
    file.mappings.add(this);
    disk.mappings.add(this);
  }

  get bytes(): Uint8Array {
    return this.#bytes;
  }

  async sync(position: number, length: number): Promise<void> {
    checkRange("sync a mapping", position, length, this.length);
    if (length === 0) return;
    this.#checkLive("sync");
    const fault = this.#disk.fault("flush", "msync", this.#path);
    // Resolve on a later turn, like the off-thread msync of the FFI adapters.
    await Promise.resolve();
    if (fault !== undefined) throw fault;
    this.#checkLive("sync");
    const start = this.fileOffset + position;
    // msync is an fdatasync of the range: the file's size goes with it.
    this.file.durableSizeBytes = Math.max(this.file.durableSizeBytes, this.file.sizeBytes);
    this.file.persist(
      Math.floor(start / PAGE_SIZE_BYTES),
      Math.ceil((start + length) / PAGE_SIZE_BYTES),
    );
    this.file.modifiedMs = Date.now();
  }

  advise(position: number, length: number, _advice: Advice): void {
    checkRange("advise a mapping", position, length, this.length);
  }

  async populate(position: number, length: number, _options?: PopulateOptions): Promise<void> {
    checkRange("populate a mapping", position, length, this.length);
    if (length === 0) return;
    this.#checkLive("populate");
    await Promise.resolve();
  }

  lock(): boolean {
    return !this.#retired;
  }

  unlock(): void {}

  unmap(): void {
    if (this.#retired) return;
    this.retire(true);
  }

  /**
   * Marks the mapping unmapped. With `detachView`, detaches the chunk when
   * no other live mapping shares it (the file keeps the moved buffer).
   */
  retire(detachView: boolean): void {
    this.#retired = true;
    this.file.mappings.delete(this);
    this.#disk.mappings.delete(this);
    if (!detachView) return;
    for (const other of this.file.mappings) {
      if (other.chunk === this.chunk) return;
    }
    const buffer = this.file.chunks[this.chunk];
    if (buffer !== undefined) this.file.chunks[this.chunk] = detach(buffer);
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

/** A {@link FileHandle} on a {@link FileNode}. */
class MemoryFileHandle implements FileHandle {
  readonly path: string;
  readonly readOnly: boolean;
  #disk: MemoryDisk;
  #file: FileNode;
  #closed = false;

  constructor(disk: MemoryDisk, file: FileNode, path: string, readOnly: boolean) {
    this.#disk = disk;
    this.#file = file;
    this.path = path;
    this.readOnly = readOnly;
    disk.handles.add(this);
  }

  get sizeBytes(): number {
    return this.#file.sizeBytes;
  }

  async map(fileOffset = 0, length = this.sizeBytes - fileOffset): Promise<Mapping> {
    await Promise.resolve();
    checkRange(`map ${this.path}`, fileOffset, length, this.sizeBytes);
    if (fileOffset % PAGE_SIZE_BYTES !== 0 || length === 0) {
      throw new RangeError(
        `Cannot map ${this.path}: offset ${fileOffset} must be a multiple of ${PAGE_SIZE_BYTES} and length ${length} positive`,
      );
    }
    this.#checkOpen("map");
    const chunk = Math.floor(fileOffset / CHUNK_SIZE_BYTES);
    if (Math.floor((fileOffset + length - 1) / CHUNK_SIZE_BYTES) !== chunk) {
      throw new MqStoreError(
        "UNSUPPORTED",
        `Cannot map [${fileOffset}, ${
          fileOffset + length
        }) of ${this.path}: the memory adapter maps within one ${CHUNK_SIZE_BYTES}-byte chunk`,
      );
    }
    return new MemoryMapping(this.#disk, this.#file, this.path, fileOffset, length);
  }

  async read(target: Uint8Array, position: number): Promise<number> {
    checkRange(`read ${this.path}`, position, target.length, FILE_SIZE_MAX_BYTES);
    this.#checkOpen("read");
    await Promise.resolve();
    this.#checkOpen("read");
    const file = this.#file;
    const total = Math.max(0, Math.min(target.length, file.sizeBytes - position));
    let done = 0;
    while (done < total) {
      const at = position + done;
      const chunk = Math.floor(at / CHUNK_SIZE_BYTES);
      const start = at - chunk * CHUNK_SIZE_BYTES;
      const length = Math.min(total - done, file.chunkLength(chunk) - start);
      const buffer = file.chunks[chunk];
      if (buffer === undefined) target.fill(0, done, done + length);
      else target.set(new Uint8Array(buffer, start, length), done);
      done += length;
    }
    return total;
  }

  async write(source: Uint8Array, position: number): Promise<void> {
    this.#checkWrite(source, position);
    const fault = this.#disk.fault("write", "write", this.path);
    await Promise.resolve();
    if (fault !== undefined) throw fault;
    this.#writeNow(source, position);
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
    const fault = this.#disk.fault("write", "write", this.path);
    if (fault !== undefined) throw fault;
    this.#writeNow(source, position);
  }

  /** The checked write: grows the file, protects the pages, copies. */
  #writeNow(source: Uint8Array, position: number): void {
    this.#checkOpen("write");
    if (source.length === 0) return;
    const file = this.#file;
    const end = position + source.length;
    if (end > file.sizeBytes) {
      this.#disk.checkSpace(end - file.sizeBytes, "write", this.path);
      file.grow(end, this.path);
    }
    file.protect(Math.floor(position / PAGE_SIZE_BYTES), Math.ceil(end / PAGE_SIZE_BYTES));
    let done = 0;
    while (done < source.length) {
      const at = position + done;
      const chunk = Math.floor(at / CHUNK_SIZE_BYTES);
      const start = at - chunk * CHUNK_SIZE_BYTES;
      const length = Math.min(source.length - done, file.chunkLength(chunk) - start);
      new Uint8Array(file.chunk(chunk), start, length).set(
        source.subarray(done, done + length),
      );
      done += length;
    }
    file.modifiedMs = Date.now();
  }

  async datasync(): Promise<void> {
    this.#checkOpen("fdatasync");
    const fault = this.#disk.fault("flush", "fdatasync", this.path);
    await Promise.resolve();
    if (fault !== undefined) throw fault;
    this.#persist();
  }

  datasyncSync(): void {
    this.#checkOpen("fdatasync");
    const fault = this.#disk.fault("flush", "fdatasync", this.path);
    if (fault !== undefined) throw fault;
    this.#persist();
  }

  #persist(): void {
    this.#checkOpen("fdatasync");
    const file = this.#file;
    file.persist(0, file.pages.length);
    file.durableSizeBytes = file.sizeBytes;
  }

  pageCacheState(position: number, length: number): PageCacheState | undefined {
    if (this.#closed) return undefined;
    const file = this.#file;
    // cachestat semantics: length 0 means "to the end of the file".
    const end = Math.min(file.sizeBytes, length === 0 ? file.sizeBytes : position + length);
    if (!(position >= 0) || position >= end) {
      return { cachedPages: 0, dirtyPages: 0, writebackPages: 0 };
    }
    const firstPage = Math.floor(position / PAGE_SIZE_BYTES);
    const endPage = Math.ceil(end / PAGE_SIZE_BYTES);
    let dirtyPages = 0;
    file.forEachDirty(firstPage, endPage, () => dirtyPages++);
    return { cachedPages: endPage - firstPage, dirtyPages, writebackPages: 0 };
  }

  adviseCache(_position: number, _length: number, _advice: Advice): void {}

  /** The whole range: the memory file system does not track holes. */
  dataRanges(position: number, length: number): FileRange[] {
    if (
      !Number.isSafeInteger(position) || !Number.isSafeInteger(length) || position < 0 ||
      length < 0
    ) {
      const end = position + length;
      throw new RangeError(`Cannot list the data of ${this.path}: range [${position}, ${end})`);
    }
    return length === 0 ? [] : [{ position, length }];
  }

  close(): Promise<void> {
    this.markClosed();
    this.#disk.handles.delete(this);
    return Promise.resolve();
  }

  /** Closes without waiting (a crash closes every handle). */
  markClosed(): void {
    this.#closed = true;
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

/**
 * The in-memory port; see the module doc for its durability model.
 *
 * @example Losing what was not flushed
 * ```ts
 * import { MemoryPort } from "./memory.ts";
 *
 * const port = new MemoryPort("deno");
 * await port.makeDirectory("/store");
 * const file = await port.createFile("/store/a", 4096);
 * await port.syncDirectory("/store");
 * await file.write(new Uint8Array([1]), 0);
 * await file.datasync();
 * await file.write(new Uint8Array([2]), 1);
 * port.crash();
 * const bytes = await port.readFile("/store/a");
 * console.log(bytes?.[0], bytes?.[1]); // 1 0
 * ```
 */
export class MemoryPort implements RuntimePort {
  /** The runtime the process runs on. */
  readonly runtime: RuntimeName;
  /** Always `memory`. */
  readonly adapter: AdapterName = "memory";
  /** Mappings are views over the in-memory cache. */
  readonly canMap = true;
  /** The simulated page size. */
  readonly pageSizeBytes = PAGE_SIZE_BYTES;
  /** As the native adapters of Bun and Node: the group commit's default start. */
  readonly overlapFlushes = true;
  /** As the native adapters, so that tests take the path they take. */
  readonly positionalRunWrites = true;
  #disk: MemoryDisk;

  /**
   * Creates an empty file system holding only `/`.
   *
   * @param runtime The host runtime (reported as {@link MemoryPort.runtime}).
   * @param options The capacity.
   */
  constructor(runtime: RuntimeName, options: MemoryPortOptions = {}) {
    this.runtime = runtime;
    this.#disk = new MemoryDisk(CAPACITY_DEFAULT_BYTES);
    this.#disk.strictSizes = options.strictSizes === true;
    this.capacityBytes = options.capacityBytes ?? CAPACITY_DEFAULT_BYTES;
  }

  /** Size of the simulated file system; may be changed at any time. */
  get capacityBytes(): number {
    return this.#disk.capacityBytes;
  }

  set capacityBytes(bytes: number) {
    if (!Number.isSafeInteger(bytes) || bytes < 0) {
      throw new RangeError(`Capacity ${bytes} must be a non-negative integer of bytes`);
    }
    this.#disk.capacityBytes = bytes;
  }

  /**
   * Simulates a power loss: every cache becomes its durable content (or, with
   * a seed, each dirty page and unsynced directory operation survives with
   * `keepProbability`), every mapping is unmapped with its views detached,
   * every handle is closed and every lock released. The port stays usable,
   * like a machine after reboot (with a new {@link MemoryPort.bootId}).
   * Pending faults stay armed.
   *
   * @param options The seed of a torn crash.
   * @returns What was kept and lost.
   */
  crash(options: CrashOptions = {}): CrashReport {
    return this.#disk.crash(options);
  }

  /**
   * Makes the `nth` next matching operation fail with `EIO` (`IO_ERROR`) or
   * `ENOSPC` (`NO_SPACE`). A failed operation changes nothing. Several
   * faults may be armed at once.
   *
   * @param options Which operation, which occurrence, which error.
   */
  failNext(options: FaultOptions): void {
    const nth = options.nth ?? 1;
    if (!Number.isSafeInteger(nth) || nth < 1) {
      throw new RangeError(`Cannot arm a fault: nth ${nth} must be a positive integer`);
    }
    if (!["write", "flush", "create"].includes(options.operation)) {
      throw new TypeError(`Cannot arm a fault: unknown operation ${options.operation}`);
    }
    if (FAULT_CODES[options.error] === undefined) {
      throw new TypeError(`Cannot arm a fault: unknown error ${options.error}`);
    }
    this.#disk.faults.push({
      operation: options.operation,
      remaining: nth,
      error: options.error,
      pathIncludes: options.pathIncludes ?? "",
    });
  }

  async createFile(
    path: string,
    sizeBytes: number,
    options: CreateFileOptions = {},
  ): Promise<FileHandle> {
    checkPath(path);
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0) {
      throw new RangeError(
        `Cannot create ${path}: size ${sizeBytes} must be a positive integer`,
      );
    }
    await Promise.resolve();
    return this.createFileSync(path, sizeBytes, options);
  }

  /** {@link createFile} at once (see `RuntimePort.createFileSync`). */
  createFileSync(path: string, sizeBytes: number, _options: CreateFileOptions = {}): FileHandle {
    checkPath(path);
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0) {
      throw new RangeError(
        `Cannot create ${path}: size ${sizeBytes} must be a positive integer`,
      );
    }
    const disk = this.#disk;
    const [directory, name] = disk.parent(resolve(path), "create", path);
    if (directory.entries.has(name)) {
      throw new MqStoreError("ALREADY_EXISTS", `Cannot create ${path}: EEXIST`);
    }
    const fault = disk.fault("create", "create", path);
    if (fault !== undefined) throw fault;
    disk.checkSpace(sizeBytes, "create", path);
    const file = new FileNode(sizeBytes);
    // The allocation is not durable before the file is synced.
    if (disk.strictSizes) file.durableSizeBytes = 0;
    directory.entries.set(name, file);
    directory.modifiedMs = Date.now();
    return new MemoryFileHandle(disk, file, path, false);
  }

  async openFile(path: string, options: OpenFileOptions = {}): Promise<FileHandle> {
    checkPath(path);
    await Promise.resolve();
    return this.openFileSync(path, options);
  }

  /** {@link openFile} at once (see `RuntimePort.openFileSync`). */
  openFileSync(path: string, options: OpenFileOptions = {}): FileHandle {
    checkPath(path);
    const node = this.#disk.lookup(resolve(path));
    if (node === undefined) {
      throw new MqStoreError("NOT_FOUND", `Cannot open ${path}: ENOENT`);
    }
    if (node.kind !== "file") {
      throw new MqStoreError("INVALID_FILE", `Cannot open ${path}: not a regular file`);
    }
    return new MemoryFileHandle(this.#disk, node, path, options.readOnly === true);
  }

  async makeDirectory(path: string): Promise<void> {
    checkPath(path);
    await Promise.resolve();
    this.makeDirectorySync(path);
  }

  /** {@link makeDirectory} at once (see `RuntimePort.makeDirectorySync`). */
  makeDirectorySync(path: string): void {
    checkPath(path);
    let directory = this.#disk.root;
    for (const name of resolve(path).split("/")) {
      if (name === "") continue;
      const next = directory.entries.get(name);
      if (next === undefined) {
        // Directories are durable at once: a store makes them once, and
        // modelling their loss would only test the parent's fsync.
        const created = new DirectoryNode();
        directory.entries.set(name, created);
        directory.durable.set(name, created);
        directory = created;
      } else if (next.kind === "directory") {
        directory = next;
      } else {
        throw new MqStoreError(
          "ALREADY_EXISTS",
          `Cannot create directory ${path}: ${name} is a file (EEXIST)`,
        );
      }
    }
  }

  async list(path: string): Promise<string[]> {
    checkPath(path);
    await Promise.resolve();
    return this.listSync(path);
  }

  /** {@link list} at once (see `RuntimePort.listSync`). */
  listSync(path: string): string[] {
    checkPath(path);
    const node = this.#disk.lookup(resolve(path));
    if (node === undefined || node.kind !== "directory") {
      throw new MqStoreError("NOT_FOUND", `Cannot list ${path}: ENOENT`);
    }
    return [...node.entries.keys()].sort();
  }

  async stat(path: string): Promise<FileStat | undefined> {
    checkPath(path);
    await Promise.resolve();
    return this.statSync(path);
  }

  /** {@link stat} at once (see `RuntimePort.statSync`). */
  statSync(path: string): FileStat | undefined {
    checkPath(path);
    const node = this.#disk.lookup(resolve(path));
    if (node === undefined) return undefined;
    return {
      sizeBytes: node.kind === "file" ? node.sizeBytes : 0,
      modifiedMs: node.modifiedMs,
      isFile: node.kind === "file",
      isDirectory: node.kind === "directory",
    };
  }

  async rename(from: string, to: string): Promise<void> {
    checkPath(from);
    checkPath(to);
    await Promise.resolve();
    this.renameSync(from, to);
  }

  /** {@link rename} at once (see `RuntimePort.renameSync`). */
  renameSync(from: string, to: string): void {
    checkPath(from);
    checkPath(to);
    const disk = this.#disk;
    const [source, sourceName] = disk.parent(resolve(from), "rename", from);
    const [target, targetName] = disk.parent(resolve(to), "rename", to);
    const node = source.entries.get(sourceName);
    if (node === undefined) {
      throw new MqStoreError("NOT_FOUND", `Cannot rename ${from}: ENOENT`);
    }
    const replaced = target.entries.get(targetName);
    if (replaced === node) return;
    if (replaced?.kind === "directory") {
      throw new MqStoreError(
        "ALREADY_EXISTS",
        `Cannot rename ${from} to ${to}: the target is a directory`,
      );
    }
    source.entries.delete(sourceName);
    target.entries.set(targetName, node);
    source.modifiedMs = target.modifiedMs = Date.now();
  }

  async remove(path: string): Promise<void> {
    checkPath(path);
    await Promise.resolve();
    this.removeSync(path);
  }

  /** {@link remove} at once (see `RuntimePort.removeSync`). */
  removeSync(path: string): void {
    checkPath(path);
    const disk = this.#disk;
    const resolved = resolve(path);
    const node = disk.lookup(resolved);
    if (node === undefined) return;
    if (node.kind === "directory") {
      throw new MqStoreError("IO_ERROR", `Cannot remove ${path}: EISDIR (a directory)`);
    }
    const [directory, name] = disk.parent(resolved, "remove", path);
    directory.entries.delete(name);
    directory.modifiedMs = Date.now();
  }

  async syncDirectory(path: string): Promise<void> {
    checkPath(path);
    await Promise.resolve();
    const node = this.#disk.lookup(resolve(path));
    if (node === undefined || node.kind !== "directory") {
      throw new MqStoreError("NOT_FOUND", `Cannot sync directory ${path}: ENOENT`);
    }
    node.durable = new Map(node.entries);
  }

  /** `memory-boot-N`: N counts the simulated machine's boots, one more after each {@link crash}. */
  bootId(): Promise<string | undefined> {
    return Promise.resolve(`memory-boot-${this.#disk.boots}`);
  }

  async readFile(path: string): Promise<Uint8Array | undefined> {
    checkPath(path);
    const node = this.#disk.lookup(resolve(path));
    if (node === undefined) return undefined;
    if (node.kind !== "file") {
      throw new MqStoreError("IO_ERROR", `Cannot read ${path}: EISDIR (a directory)`);
    }
    const handle = new MemoryFileHandle(this.#disk, node, path, true);
    try {
      const bytes = new Uint8Array(node.sizeBytes);
      await handle.read(bytes, 0);
      return bytes;
    } finally {
      await handle.close();
    }
  }

  async writeFileAtomic(path: string, bytes: Uint8Array): Promise<void> {
    checkPath(path);
    await Promise.resolve();
    const disk = this.#disk;
    const [directory, name] = disk.parent(resolve(path), "create", `${path}.tmp`);
    const replaced = directory.entries.get(name);
    if (replaced?.kind === "directory") {
      throw new MqStoreError("ALREADY_EXISTS", `Cannot replace ${path}: it is a directory`);
    }
    disk.checkSpace(bytes.length, "create", `${path}.tmp`);
    // Temporary file, fdatasync, rename and directory sync in one step: the
    // result is durable content under the new name, and the directory sync
    // makes the directory's other pending entries durable too.
    const file = new FileNode(bytes.length);
    if (bytes.length > 0) {
      let done = 0;
      for (let chunk = 0; chunk < file.chunks.length; chunk++) {
        const length = file.chunkLength(chunk);
        new Uint8Array(file.chunk(chunk)).set(bytes.subarray(done, done + length));
        done += length;
      }
      file.pages.fill(PAGE_CLEAN);
    }
    directory.entries.set(name, file);
    directory.durable = new Map(directory.entries);
    directory.modifiedMs = Date.now();
  }

  async diskSpace(path: string): Promise<DiskSpace> {
    checkPath(path);
    await Promise.resolve();
    if (this.#disk.lookup(resolve(path)) === undefined) {
      throw new MqStoreError("NOT_FOUND", `Cannot measure disk space of ${path}: ENOENT`);
    }
    const totalBytes = this.#disk.capacityBytes;
    return {
      totalBytes,
      availableBytes: Math.max(0, totalBytes - this.#disk.usedBytes()),
    };
  }

  /** Heap memory, never locked (there is nothing to lock in a simulation). */
  allocateLockedBuffer(sizeBytes: number): Promise<LockedBuffer> {
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0) {
      return Promise.reject(
        new RangeError(`Cannot allocate a write buffer of ${sizeBytes} bytes`),
      );
    }
    return Promise.resolve({
      bytes: new Uint8Array(sizeBytes),
      locked: false,
      release: () => Promise.resolve(),
    });
  }

  async lockDirectory(path: string): Promise<DirectoryLock> {
    checkPath(path);
    await Promise.resolve();
    const disk = this.#disk;
    const resolved = resolve(path);
    const directory = disk.lookup(resolved);
    if (directory === undefined || directory.kind !== "directory") {
      throw new MqStoreError("NOT_FOUND", `Cannot lock store directory ${path}: ENOENT`);
    }
    if (disk.locks.has(directory)) {
      throw new MqStoreError(
        "LOCKED",
        `Cannot lock store directory ${path}: it is held by pid ${process.pid} (this process)`,
      );
    }
    const token = {};
    disk.locks.set(directory, token);
    // The lock file exists as with the other adapters (an unsynced entry).
    if (!directory.entries.has(LOCK_FILE)) {
      const record = new TextEncoder().encode(`lock\npid ${process.pid} memory\n`);
      const file = new FileNode(record.length);
      new Uint8Array(file.chunk(0)).set(record);
      file.pages.fill(PAGE_DURABLE_ZERO);
      file.durableSizeBytes = 0;
      directory.entries.set(LOCK_FILE, file);
    }
    let released = false;
    return {
      path: `${path}/${LOCK_FILE}`,
      release: () => {
        if (!released) {
          released = true;
          // A crash released it already; a newer holder keeps its lock.
          if (disk.locks.get(directory) === token) disk.locks.delete(directory);
        }
        return Promise.resolve();
      },
    };
  }
}

function resolve(path: string): string {
  return posix.resolve("/", path);
}
