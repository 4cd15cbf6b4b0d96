/**
 * The commit-log scan of open (SPEC §8): walks the records of the loaded
 * segments, rebuilds the topic-queue table, and finds where the log ends.
 *
 * ```
 * segment i: MESSAGE MESSAGE ... BLANK → segment i+1
 * segment k: MESSAGE ... | end (zeros) or first invalid record  ← the cut
 * ```
 *
 * Segments before `verifyFromIndex` (a clean open verifies only the last
 * three; an unclean one starts at the checkpoint's segment) are walked for
 * the table only, without CRCs, or not read at all (`walkUnverified`
 * false); a bad record there ends that segment's walk without cutting the
 * log. From `verifyFromIndex` on, the first record that is not a valid
 * MESSAGE or a BLANK filling the rest of its segment ends the log; records
 * ending at or before `trustedOffset` (durable before the checkpoint was
 * written) are checked without their body CRC.
 *
 * After a crash (`tornTails`), a verified record is also refused when its
 * properties read as zeros from a sector boundary to their end and on to
 * that sector's end (see {@link tornTailOf}): the properties are the last
 * field and the body CRC does not cover them, so a record whose last page
 * (or sector) a power loss took otherwise passes every check once the
 * first name-value separator is in.
 *
 * Past the cut, an unclean open looks for stale bytes (a later page kept,
 * an earlier one lost) up to `staleBytesMax` past the cut, or through the
 * whole tail of the segment when the bound is unknown or the bytes found
 * reach its last `staleGuardBytes`. Only the parts the file system says
 * may hold data are read (`dataRanges`: holes and fallocated extents never
 * written read as zeros), so the unwritten tail of a big segment costs a
 * few `lseek`s, not a read of every page. A read-only open does not look:
 * it zeroes nothing and serves nothing past the cut.
 *
 * @module
 */

import {
  BLANK_MAGIC_CODE,
  hasConsumeQueueEntry,
  RecordChecker,
  type RecordView,
} from "../record/mod.ts";
import type { MappedFile, SelectedRange } from "../segment/mapped_file.ts";
import { TORN_SECTOR_BYTES } from "./constants.ts";
import type { TopicQueueTable } from "./topic_queue_table.ts";

/** Where the scan found the log to end. */
export interface ScanResult {
  /** The global offset after the last valid record (or BLANK). */
  cutOffset: number;
  /** Index of the segment holding the cut (may be one past the last when it ends a segment). */
  cutFileIndex: number;
  /** Position after the last non-zero byte at or past the cut in that segment (0 if none). */
  dirtyEndPosition: number;
  /** What was found at the cut: `end`, `invalid` (with why), or `full` (the log ends a segment). */
  endKind: "end" | "invalid" | "full";
  /** The checker's explanation when `endKind` is `invalid`. */
  detail: string;
  /** Records walked. */
  messageCount: number;
  /** Segments whose table-only walk stopped on a bad record (older segments of a clean open). */
  skippedSegments: string[];
}

/** Options of {@link scanCommitLog}. */
export interface ScanOptions {
  /** First segment index whose records are verified (and may cut the log). */
  verifyFromIndex: number;
  /**
   * Walk the segments before `verifyFromIndex` for the table (without
   * CRCs); false: skip them unread (the caller has the table from
   * elsewhere, and `messageCount` counts the verified segments only).
   *
   * @default {true}
   */
  walkUnverified?: boolean;
  /**
   * Records of the verified segments that end at or before this offset
   * are durable (the checkpoint says so) and are checked without their
   * body CRC; the first record ending past it is verified whole.
   *
   * @default {-1}
   */
  trustedOffset?: number;
  /** Verify body CRCs (`checkCRCOnRecover`). */
  checkCrc: boolean;
  /**
   * Refuse verified records whose properties end in a lost sector (see
   * {@link tornTailOf}): after a crash only. A clean close flushed every
   * record before it removed the abort marker, so on a clean open the
   * rule could only cut a record whose value ends in NUL characters.
   *
   * @default {false}
   */
  tornTails?: boolean;
  /** Receives the queue offsets seen. */
  table: TopicQueueTable;
  /**
   * Where to look for stale bytes past the cut (for the caller to zero):
   * - `always`: past an invalid record and past a clean end (zeros at the
   *   cut) alike; on an unclean open a crash may have kept a later page
   *   and lost an earlier one;
   * - `after-invalid`: past an invalid record only; a clean open, so the
   *   unwritten tail of a big segment is not paged in;
   * - `never`: a read-only open, which zeroes nothing and serves nothing
   *   past the cut (`dirtyEndPosition` is then the cut's position).
   */
  staleSearch: "always" | "after-invalid" | "never";
  /**
   * With a search: stale bytes can only lie below the cut plus this
   * many bytes (see CommitLog.loadAndRecover); only those are read.
   * Undefined: unknown, the whole tail of the segment is read.
   */
  staleBytesMax?: number;
  /**
   * With `staleBytesMax`: non-zero bytes in the last this many bytes of the
   * bounded range mean the bound does not hold (data that no crash leaves,
   * such as a record damaged in the middle of the log): the whole tail is
   * read instead.
   *
   * @default {0}
   */
  staleGuardBytes?: number;
  /**
   * Window of positional reads where the port cannot map; at least the
   * largest record plus 8.
   *
   * @default {8 MiB}
   */
  windowBytes: number;
}

/** Default size of the sliding window of ports that cannot map (read copies). */
export const SCAN_WINDOW_BYTES_DEFAULT = 0x80_0000;

function readInt32(bytes: Uint8Array, position: number): number {
  return (bytes[position]! << 24) | (bytes[position + 1]! << 16) | (bytes[position + 2]! << 8) |
    bytes[position + 3]!;
}

/**
 * The bytes of a segment being scanned: the whole file through a mapping
 * (a view, no copy), or else a window of positional reads that slides, so
 * a 1 GiB segment never costs a 1 GiB buffer.
 */
class SegmentWindow {
  /** The bytes; index 0 is position {@link SegmentWindow.base}. */
  bytes: Uint8Array = new Uint8Array(0);
  /** Position of `bytes[0]`. */
  base = 0;
  #file: MappedFile;
  #windowBytes: number;
  #range: SelectedRange | undefined;

  private constructor(file: MappedFile, windowBytes: number) {
    this.#file = file;
    this.#windowBytes = windowBytes;
  }

  static async open(file: MappedFile, windowBytes: number): Promise<SegmentWindow> {
    const window = new SegmentWindow(
      file,
      file.readsThroughMapping ? file.fileSizeBytes : Math.min(windowBytes, file.fileSizeBytes),
    );
    await window.slideTo(0);
    return window;
  }

  /** Position after the last byte of the window. */
  get end(): number {
    return this.base + this.bytes.length;
  }

  /** Makes the window start at `position`. */
  async slideTo(position: number): Promise<void> {
    this.release();
    const length = Math.min(this.#windowBytes, this.#file.fileSizeBytes - position);
    const range = await this.#file.selectRange(position, length);
    if (range === undefined) throw new Error(`Segment ${this.#file.path} is not readable`);
    this.#range = range;
    this.bytes = range.bytes;
    this.base = position;
  }

  /** Position after the last non-zero byte of `[from, to)` (`from` when none). */
  async dirtyEnd(from: number, to: number = this.#file.fileSizeBytes): Promise<number> {
    if (to <= from) return from;
    // What is not listed reads as zeros: the ranges are read, last first.
    const ranges = this.#file.dataRanges(from, to - from);
    for (let r = ranges.length - 1; r >= 0; r--) {
      const range = ranges[r]!;
      const found = await this.#dirtyEndIn(range.position, range.position + range.length);
      if (found > range.position) return found;
    }
    return from;
  }

  async #dirtyEndIn(from: number, to: number): Promise<number> {
    // Backwards, one window at a time, so a clean tail stops nothing early.
    for (let end = to; end > from;) {
      const start = Math.max(from, end - this.#windowBytes);
      if (start < this.base || end > this.end) await this.slideTo(start);
      const found = dirtyEnd(this.bytes, start - this.base, end - this.base);
      if (found > start - this.base) return this.base + found;
      end = start;
    }
    return from;
  }

  release(): void {
    this.#range?.release();
    this.#range = undefined;
  }
}

let cachedTopic = "";

function topicOf(bytes: Uint8Array, position: number, length: number): string {
  const cached = cachedTopic;
  if (cached.length === length) {
    let same = true;
    for (let i = 0; i < length && same; i++) same = cached.charCodeAt(i) === bytes[position + i];
    if (same) return cached;
  }
  let topic = "";
  for (let i = 0; i < length; i++) topic += String.fromCharCode(bytes[position + i]!);
  cachedTopic = topic;
  return topic;
}

/** Position after the last non-zero byte of `bytes[from, to)`, or `from` when all are zero. */
export function dirtyEnd(bytes: Uint8Array, from: number, to: number): number {
  let end = to;
  while (end > from && end % 4 !== 0 && bytes[end - 1] === 0) end--;
  // Word-wise where aligned: a clean GiB tail is scanned at memory speed.
  if (bytes.byteOffset % 4 === 0 && end % 4 === 0) {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, Math.floor(bytes.length / 4));
    while (end - 4 >= from && words[end / 4 - 1] === 0) end -= 4;
  }
  while (end > from && bytes[end - 1] === 0) end--;
  return end;
}

/**
 * Position after the last stale byte past the cut at `position`: within
 * `staleBytesMax` when known and the bytes found stay clear of its last
 * `staleGuardBytes`, else within the whole tail.
 */
async function staleEnd(
  window: SegmentWindow,
  position: number,
  size: number,
  options: ScanOptions,
): Promise<number> {
  const bound = options.staleBytesMax;
  if (bound === undefined || position + bound >= size) return await window.dirtyEnd(position);
  const to = position + bound;
  const found = await window.dirtyEnd(position, to);
  if (found <= to - (options.staleGuardBytes ?? 0)) return found;
  return await window.dirtyEnd(position);
}

/**
 * Where a record's properties lost their tail: the position in `bytes` of
 * the first sector boundary of the file (every {@link TORN_SECTOR_BYTES})
 * inside the properties from which `bytes` read as zeros to the
 * properties' end and on to the end of that boundary's sector (or of
 * `bytes`), else -1. Only the sectors the tail covers are looked at: one
 * byte for most records.
 *
 * A write cut short by a power loss leaves the sectors it did not reach as
 * they were: zeros, past the end of an append-only log. The properties are
 * a record's last field, outside its body CRC, and they pass the syntax
 * check as soon as their first `0x01` is in, so a record whose last sector
 * (or page) was lost looked whole. The rule cannot tell such a record from
 * one written whole whose last value ends in NUL characters across a
 * sector boundary with nothing written after it: that record is cut too
 * (NULs are legal in a value). A sector lost in the middle of the
 * properties, a later one kept, is not looked for: a run of NULs in a
 * value would look the same, with records after it.
 *
 * @param bytes The scanned bytes.
 * @param view A MESSAGE record in `bytes`.
 * @param base The file position of `bytes[0]` (sectors are aligned in the file).
 * @returns The position of the first lost sector in `bytes`, or -1.
 */
export function tornTailOf(bytes: Uint8Array, view: RecordView, base: number): number {
  const start = view.propertiesPosition;
  const end = start + view.propertiesLength;
  if (end === start || bytes[end - 1] !== 0) return -1;
  // The last boundary inside the properties: its sector reaches past them.
  let at = end - 1 - (base + end - 1) % TORN_SECTOR_BYTES;
  if (at < start || !zeros(bytes, at, Math.min(at + TORN_SECTOR_BYTES, bytes.length))) return -1;
  // Earlier sectors of the properties lost with it, whole.
  while (at - TORN_SECTOR_BYTES >= start && zeros(bytes, at - TORN_SECTOR_BYTES, at)) {
    at -= TORN_SECTOR_BYTES;
  }
  return at;
}

/** Whether `bytes[from, to)` are all zero. */
function zeros(bytes: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i] !== 0) return false;
  return true;
}

/**
 * Walks the segments; see the module doc.
 *
 * @param files The loaded segments, oldest first, each readable whole.
 * @param options Where verification starts, CRC checking, the table.
 */
export async function scanCommitLog(
  files: readonly MappedFile[],
  options: ScanOptions,
): Promise<ScanResult> {
  const verifying = new RecordChecker({ checkCrc: options.checkCrc });
  const walking = new RecordChecker({ checkCrc: false });
  const result: ScanResult = {
    cutOffset: 0,
    cutFileIndex: 0,
    dirtyEndPosition: 0,
    endKind: "full",
    detail: "",
    messageCount: 0,
    skippedSegments: [],
  };
  const walkUnverified = options.walkUnverified ?? true;
  const trustedOffset = options.trustedOffset ?? -1;
  const tornTails = options.tornTails ?? false;
  for (let index = 0; index < files.length; index++) {
    const file = files[index]!;
    const size = file.fileSizeBytes;
    if (index < options.verifyFromIndex && !walkUnverified) {
      result.cutOffset = file.fileFromOffset + size;
      result.cutFileIndex = index + 1;
      continue;
    }
    const window = await SegmentWindow.open(file, options.windowBytes);
    try {
      const verify = index >= options.verifyFromIndex;
      // Durable records of a verified segment: no body CRC. The record that
      // straddles the trusted offset may be torn past it, so it is verified.
      let trustedEnd = verify ? trustedOffset - file.fileFromOffset : size;
      let position = 0;
      let stop: RecordView | undefined;
      while (position < size) {
        const bytes = window.bytes;
        const at = position - window.base;
        let view = (position < trustedEnd ? walking : verifying).check(
          bytes,
          at,
          file.fileFromOffset + position,
        );
        if (view.kind === "message" && position + view.size > trustedEnd && verify) {
          if (position < trustedEnd) {
            view = verifying.check(bytes, at, file.fileFromOffset + position);
          }
          trustedEnd = 0;
        }
        if (tornTails && view.kind === "message" && view === verifying.view) {
          const torn = tornTailOf(bytes, view, window.base);
          if (torn >= 0) {
            view.kind = "invalid";
            view.reason = "PROPERTIES_MALFORMED";
            view.detail = `its properties read as zeros from offset ${
              file.fileFromOffset + window.base + torn
            } to the end of that sector: a write the crash did not finish`;
          }
        }
        if (view.kind === "message") {
          if (hasConsumeQueueEntry(view.sysFlag)) {
            const topic = topicOf(bytes, view.topicPosition, view.topicLength);
            options.table.counter(topic, view.queueId).next = view.queueOffset + 1;
          }
          result.messageCount++;
          position += view.size;
          continue;
        }
        // A BLANK is its 8-byte header: its size may reach past a window.
        if (
          (view.kind === "blank" || view.kind === "invalid") && at + 8 <= bytes.length &&
          readInt32(bytes, at + 4) === BLANK_MAGIC_CODE && readInt32(bytes, at) === size - position
        ) {
          position = size;
          break;
        }
        if (view.kind === "invalid" && window.end < size && window.base < position) {
          // The record may only be cut by the window: read on from it.
          await window.slideTo(position);
          continue;
        }
        stop = view;
        break;
      }
      if (stop === undefined) {
        result.cutOffset = file.fileFromOffset + size;
        result.cutFileIndex = index + 1;
        continue;
      }
      if (!verify) {
        result.skippedSegments.push(file.fileName);
        result.cutOffset = file.fileFromOffset + size;
        result.cutFileIndex = index + 1;
        continue;
      }
      result.cutOffset = file.fileFromOffset + position;
      result.cutFileIndex = index;
      const search = options.staleSearch === "always" ||
        (options.staleSearch === "after-invalid" && stop.kind !== "end");
      result.dirtyEndPosition = search ? await staleEnd(window, position, size, options) : position;
      if (stop.kind === "end" && result.dirtyEndPosition === position) {
        result.endKind = "end";
      } else {
        result.endKind = "invalid";
        result.detail = stop.kind === "end"
          ? `zeros at position ${position} followed by data up to ${result.dirtyEndPosition}`
          : stop.kind === "blank"
          ? `a BLANK of ${stop.size} bytes at position ${position} does not fill the ${
            size - position
          } bytes left`
          // The checker's positions are relative to the bytes it was given.
          : `${stop.reason} at offset ${result.cutOffset} (${stop.detail})`;
      }
      return result;
    } finally {
      window.release();
    }
  }
  return result;
}
