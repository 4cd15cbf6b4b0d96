/**
 * Read-ahead for `getMessages` readers: the commit-log mappings are advised
 * `MADV_RANDOM` (SPEC §2, so 4 KiB flushes stay 4 KiB), which also turns off
 * the kernel's readahead, so a reader of evicted segments would fault one
 * 4 KiB page at a time on the JavaScript thread. Instead, when a read ends
 * in window `k` of a segment (windows of `windowBytes`), windows `k` (from
 * the read position) and `k + 1` are handed to the kernel with
 * `WILLNEED`, which starts the reads and returns at once; the reads
 * themselves run in the kernel, off the JavaScript thread.
 *
 * ```
 * segment  |  window k-1  |  window k   |  window k+1  |  ...  | end
 *                              ^ read ends here
 *                              [== advised once ========]   never past the
 *                                                            readable end
 * ```
 *
 * Each reader (one per queue: getMessages reads a queue in order) advises
 * each window once per pass, and not at all when `cachestat` says it is
 * cached already, so a warm reader costs a map lookup per call and one
 * `cachestat` per window; readers of different queues reading the same
 * region find it cached after the first one advised it.
 *
 * @module
 */

import { assert } from "../assert.ts";
import type { MappedFile } from "../segment/mapped_file.ts";

/** Options of {@link ReadAhead}. */
export interface ReadAheadOptions {
  /** The commit-log segment holding an offset. */
  findFile: (offset: number) => MappedFile | undefined;
  /** Size of a read-ahead window; a multiple of 4 KiB. */
  windowBytes: number;
}

/** Page size assumed for "fully cached" (cachestat counts pages). */
const PAGE_BYTES = 0x1000;
/** Readers whose position is remembered (all are forgotten past it). */
const TRACKED_READERS_MAX = 0x1000;

/** Where one reader is, and how far ahead it advised. */
interface ReaderState {
  /** Start offset of the segment it reads. */
  fileFromOffset: number;
  /** The window its last read ended in. */
  window: number;
  /** The last window advised for it in that segment. */
  advisedThrough: number;
}

/** Issues `WILLNEED` ahead of sequential commit-log readers. */
export class ReadAhead {
  #options: ReadAheadOptions;
  /** Reader (a consume queue) → where it is. */
  #readers = new Map<object, ReaderState>();
  /** Ranges handed to the kernel (tests, stats). */
  #advisedCount = 0;

  /** @param options How to find segments and the window size. */
  constructor(options: ReadAheadOptions) {
    assert(
      Number.isSafeInteger(options.windowBytes) && options.windowBytes > 0 &&
        options.windowBytes % PAGE_BYTES === 0,
      `window ${options.windowBytes} is whole pages`,
    );
    this.#options = options;
  }

  /** Ranges advised so far. */
  get advisedCount(): number {
    return this.#advisedCount;
  }

  /** `reader` read commit-log bytes up to `endOffset` (exclusive). */
  afterRead(reader: object, endOffset: number): void {
    const file = this.#options.findFile(endOffset - 1);
    if (file === undefined) return;
    const windowBytes = this.#options.windowBytes;
    const position = endOffset - file.fileFromOffset;
    const window = Math.floor(position / windowBytes);
    let state = this.#readers.get(reader);
    if (state !== undefined && state.fileFromOffset === file.fileFromOffset) {
      // The usual call: still in the window it was in.
      if (state.window === window) return;
      // Moved back (an offset reset): a new pass from there.
      state.advisedThrough = window < state.window
        ? window - 1
        : Math.max(state.advisedThrough, window - 1);
      state.window = window;
    } else {
      // Bounded: forget every reader rather than track an unbounded set.
      if (state === undefined && this.#readers.size >= TRACKED_READERS_MAX) this.#readers.clear();
      state = { fileFromOffset: file.fileFromOffset, window, advisedThrough: window - 1 };
      this.#readers.set(reader, state);
    }
    // Never past what is readable (nor the segment end): bytes not
    // written yet will be in memory when they are.
    const readable = Math.min(file.readPosition, file.fileSizeBytes);
    for (let k = state.advisedThrough + 1; k <= window + 1; k++) {
      const from = k === window ? position - position % PAGE_BYTES : k * windowBytes;
      const to = Math.min((k + 1) * windowBytes, readable);
      if (to <= from) continue;
      const cache = file.pageCacheState(from, to - from);
      if (cache !== undefined && cache.cachedPages * PAGE_BYTES >= to - from) continue;
      file.adviseWillNeed(from, to - from);
      this.#advisedCount++;
    }
    state.advisedThrough = window + 1;
  }
}
