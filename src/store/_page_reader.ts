/**
 * The commit-log side of one read (a getMessages page, or one getMessage):
 * records are checked where they lie and copied out once, together.
 *
 * ```
 * add(offset, size) ─► segment held once per read (a view of its mapping)
 *                      ─► record checked in place (isMessageRecordAt: no
 *                         CRC, as RocketMQ reads)
 *                      ─► remembered (bytes, position, size)
 * messages()        ─► one buffer for the page; runs of adjacent records
 *                      copied with one set() each; a LazyMessage per record
 * release()         ─► every segment given back
 * ```
 *
 * Why one copy per page: a view into a mapping is valid only while its
 * segment is held, and a message outlives the read (retention may delete
 * the segment under it), so what a caller gets must be a copy. One buffer
 * per page costs one allocation instead of two per message (body and
 * properties), and the bodies are views into it: a message kept alive
 * keeps its page's bytes alive (a page is bounded by the transfer limits,
 * 256 KiB by default, or by `maxBytes`).
 *
 * On ports that cannot map, each record is read with a positional read
 * (already a copy) and then copied into the page like the others.
 *
 * @module
 */

import { isMessageRecordAt } from "../record/decoder.ts";
import { LazyMessage } from "../record/lazy_message.ts";
import { PROPERTY_TAGS } from "../record/constants.ts";
import type { MappedFile, SelectedRange } from "../segment/mapped_file.ts";
import { assert } from "../assert.ts";

/** What a {@link PageReader} needs of the commit log's segments. */
export interface SegmentLookup {
  /** The segment holding `offset`, or undefined. */
  findMappedFileByOffset(offset: number): MappedFile | undefined;
}

/** Bytes of the totalSize field, read first when a record's size is unknown. */
const TOTAL_SIZE_BYTES = 0x04;

/** Collects the records of one read; see the module doc. */
export class PageReader {
  /** Where segments are found. */
  #segments: SegmentLookup;
  /** Records must end at or below this offset (what may be served). */
  #readableEnd: number;
  /** The segment of the last record asked for. */
  #file: MappedFile | undefined = undefined;
  /** `#file`'s readable bytes, held (mapping ports); undefined otherwise. */
  #fileBytes: Uint8Array | undefined = undefined;
  /** Every range this read holds, released by {@link release}. */
  #held: SelectedRange[] = [];
  /** Per taken record: the bytes holding it, its position there, its size. */
  #sources: Uint8Array[] = [];
  #positions: number[] = [];
  #sizes: number[] = [];
  /** Sum of `#sizes`. */
  #totalBytes = 0;

  /**
   * @param segments The commit log's segments.
   * @param readableEnd Records ending past this offset are not served.
   */
  constructor(segments: SegmentLookup, readableEnd: number) {
    this.#segments = segments;
    this.#readableEnd = readableEnd;
  }

  /** Records taken so far. */
  get count(): number {
    return this.#sizes.length;
  }

  /**
   * Takes the record at `offset` if a valid MESSAGE of `size` bytes (-1:
   * read its size) starts there. False when it does not, or when its
   * segment is gone or closing. A promise only on ports that cannot map.
   *
   * @param offset Commit-log offset of the record.
   * @param size Its size from the consume queue, or -1.
   */
  add(offset: number, size: number): boolean | Promise<boolean> {
    let file = this.#file;
    if (
      file === undefined || offset < file.fileFromOffset ||
      offset >= file.fileFromOffset + file.fileSizeBytes
    ) {
      this.#fileBytes = undefined;
      file = this.#segments.findMappedFileByOffset(offset);
      this.#file = file;
      if (file === undefined) return false;
      if (file.readsThroughMapping) {
        // The whole readable part, held once for every record of this read.
        const range = file.selectView(0);
        if (range === undefined) {
          this.#file = undefined;
          return false;
        }
        this.#held.push(range);
        this.#fileBytes = range.bytes;
      }
    }
    const position = offset - file.fileFromOffset;
    const bytes = this.#fileBytes;
    if (bytes === undefined) return this.#read(file, position, offset, size);
    let recordSize = size;
    if (recordSize < 0) {
      if (position + TOTAL_SIZE_BYTES > bytes.length) return false;
      recordSize = (bytes[position]! << 24) | (bytes[position + 1]! << 16) |
        (bytes[position + 2]! << 8) | bytes[position + 3]!;
    }
    return this.#take(file, bytes, position, offset, recordSize);
  }

  /** {@link add} on a port that cannot map: positional reads (copies). */
  async #read(file: MappedFile, position: number, offset: number, size: number): Promise<boolean> {
    let recordSize = size;
    if (recordSize < 0) {
      if (offset + TOTAL_SIZE_BYTES > this.#readableEnd) return false;
      const head = await file.selectRange(position, TOTAL_SIZE_BYTES);
      if (head === undefined) return false;
      const b = head.bytes;
      recordSize = (b[0]! << 24) | (b[1]! << 16) | (b[2]! << 8) | b[3]!;
      head.release();
    }
    if (!this.#servable(file, position, offset, recordSize)) return false;
    const range = await file.selectRange(position, recordSize);
    if (range === undefined) return false;
    this.#held.push(range);
    return this.#take(file, range.bytes, 0, offset, recordSize);
  }

  /** Whether a record of `size` at `offset` lies in its segment and may be served. */
  #servable(file: MappedFile, position: number, offset: number, size: number): boolean {
    return size > 0 && position + size <= file.fileSizeBytes && offset + size <= this.#readableEnd;
  }

  /** Checks the record at `bytes[position]` and remembers it when valid. */
  #take(
    file: MappedFile,
    bytes: Uint8Array,
    position: number,
    offset: number,
    size: number,
  ): boolean {
    if (!this.#servable(file, offset - file.fileFromOffset, offset, size)) return false;
    if (!isMessageRecordAt(bytes, position, offset, size)) return false;
    this.#sources.push(bytes);
    this.#positions.push(position);
    this.#sizes.push(size);
    this.#totalBytes += size;
    return true;
  }

  /**
   * The TAGS value of the record taken last (for the tags filter, which
   * compares the text after the tagsCode matched), or undefined.
   */
  lastTags(): string | undefined {
    const last = this.#sizes.length - 1;
    assert(last >= 0, "lastTags() follows a taken record");
    // A message over the source bytes (maybe a segment view), dropped
    // before this read releases anything.
    return new LazyMessage(this.#sources[last]!, this.#positions[last]!).properties
      .get(PROPERTY_TAGS);
  }

  /** Forgets the record taken last (the tags filter refused it). */
  dropLast(): void {
    this.#sources.pop();
    this.#positions.pop();
    this.#totalBytes -= this.#sizes.pop()!;
  }

  /**
   * The taken records as messages, in the order taken, over one copy of
   * their bytes. Call before {@link release}.
   */
  messages(): LazyMessage[] {
    const count = this.#sizes.length;
    const messages: LazyMessage[] = [];
    if (count === 0) return messages;
    const sources = this.#sources;
    const positions = this.#positions;
    const sizes = this.#sizes;
    const page = new Uint8Array(this.#totalBytes);
    let at = 0;
    // Adjacent records of one source (a queue written alone, a batch) go
    // in one copy.
    for (let i = 0; i < count;) {
      const source = sources[i]!;
      const start = positions[i]!;
      let end = start + sizes[i]!;
      let j = i + 1;
      while (j < count && sources[j] === source && positions[j] === end) end += sizes[j++]!;
      page.set(source.subarray(start, end), at);
      at += end - start;
      i = j;
    }
    assert(at === page.length, "the page holds every taken record");
    at = 0;
    for (let i = 0; i < count; i++) {
      messages.push(new LazyMessage(page, at));
      at += sizes[i]!;
    }
    return messages;
  }

  /** Gives back every segment this read held; idempotent. */
  release(): void {
    const held = this.#held;
    this.#held = [];
    for (const range of held) range.release();
    this.#file = undefined;
    this.#fileBytes = undefined;
  }
}
