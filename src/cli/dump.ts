/**
 * `mqstore dump`: every record of commit-log files, in physical order, as
 * JSON lines (the field names and encodings of the golden corpus's
 * `manifest.jsonl`) or as a table.
 *
 * A file is read through a window (8 MiB by default, grown for a larger
 * record), so a 1 GiB segment is never held in memory whole. The physical
 * offset of a file is its 20-digit name. The scan of a file stops at a BLANK
 * (the rest of the segment is unused); the whole dump stops at the end of the
 * data (8 zero bytes where the next record would start) or at the first
 * invalid record, which is reported with its reason.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import fs from "node:fs";
import path from "node:path";
import { inflateSync } from "node:zlib";
import {
  BLANK_MAGIC_CODE,
  BLANK_RECORD_SIZE_BYTES,
  COMPRESSION_TYPE_LZ4,
  COMPRESSION_TYPE_ZLIB,
  COMPRESSION_TYPE_ZSTD,
  DELAY_LEVELS_DEFAULT_MS,
  MESSAGE_MAGIC_CODE,
  SYS_FLAG_COMPRESSED,
  SYS_FLAG_COMPRESSION_TYPE_MASK,
} from "../record/constants.ts";
import { decodeMessageView, RecordChecker, type RecordView } from "../record/decoder.ts";
import {
  dispatchTagsCode,
  hasConsumeQueueEntry,
  indexKeysOf,
  transactionTypeOf,
} from "../record/dispatch.ts";
import { hexOf } from "../record/msg_id.ts";

/** A MESSAGE record, in the corpus manifest's shape. */
export interface DumpMessage {
  kind: "message";
  physicalOffset: number;
  file: string;
  filePosition: number;
  storeSize: number;
  magic: string;
  bodyCRC: number;
  queueId: number;
  flag: number;
  queueOffset: number;
  sysFlag: number;
  bornTimestamp: number;
  bornHost: string;
  bornHostHex: string;
  storeTimestamp: number;
  storeHost: string;
  storeHostHex: string;
  reconsumeTimes: number;
  preparedTransactionOffset: number;
  bodyLength: number;
  topic: string;
  topicLength: number;
  /** Base64 of the stored body (compressed bodies stay compressed). */
  body: string;
  propertiesLength: number;
  /** Base64 of the stored properties bytes. */
  propertiesRaw: string;
  /** Decoded properties, keys sorted. */
  properties: Record<string, string>;
  offsetMsgId: string;
  /** The tagsCode dispatch computes, as a decimal string. */
  tagsCode: string;
  tranType: string;
  hasConsumeQueueEntry: boolean;
  /** Index keys in IndexService order (UNIQ_KEY, then KEYS tokens). */
  indexKeys: string[];
  /** Compressed bodies only: LZ4, ZSTD or ZLIB. */
  compressionType?: string;
  /** ZLIB-compressed bodies only: base64 of the inflated body. */
  bodyDecompressed?: string;
}

/** A BLANK record. */
export interface DumpBlank {
  kind: "blank";
  physicalOffset: number;
  size: number;
  file: string;
  filePosition: number;
  magic: string;
  /** Whether every byte after the BLANK header to the end of the file is zero. */
  restOfFileZero: boolean;
}

/** The first invalid record; the dump ends with it. */
export interface DumpInvalid {
  kind: "invalid";
  physicalOffset: number;
  file: string;
  filePosition: number;
  reason: string;
  detail: string;
}

/** One line of the dump. */
export type DumpEntry = DumpMessage | DumpBlank | DumpInvalid;

/** How a file's scan ended. */
export type DumpFileEnd = "blank" | "end" | "invalid" | "eof";

/** Options of {@link dumpFile}. */
export interface DumpOptions {
  /**
   * Verify body CRCs.
   *
   * @default {true}
   */
  checkCrc?: boolean;
  /**
   * Physical offset of the file's first byte; required when the file name
   * is not a 20-digit offset.
   */
  baseOffset?: number;
  /**
   * Read window in bytes (grown for larger records).
   *
   * @default {8388608}
   */
  windowBytes?: number;
  /**
   * Delay of each level in ms, for the schedule topic's tagsCode.
   *
   * @default {RocketMQ's 18 levels, 1s … 2h}
   */
  delayLevelsMs?: readonly number[];
}

const WINDOW_DEFAULT_BYTES = 0x800000;
const ZERO_CHECK_CHUNK_BYTES = 0x10000;
const SEGMENT_NAME = /^[0-9]{20}$/;

function hex32(value: number): string {
  return (value >>> 0).toString(16).padStart(8, "0");
}

function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("base64");
}

function compressionTypeOf(sysFlag: number): string | undefined {
  if ((sysFlag & SYS_FLAG_COMPRESSED) === 0) return undefined;
  switch (sysFlag & SYS_FLAG_COMPRESSION_TYPE_MASK) {
    case COMPRESSION_TYPE_LZ4:
      return "LZ4";
    case COMPRESSION_TYPE_ZSTD:
      return "ZSTD";
    case COMPRESSION_TYPE_ZLIB:
    case 0:
      // RocketMQ 4.9.8 reads the legacy flag without type bits as ZLIB.
      return "ZLIB";
    default:
      return `UNKNOWN_0x${(sysFlag & SYS_FLAG_COMPRESSION_TYPE_MASK).toString(16)}`;
  }
}

function messageEntry(
  bytes: Uint8Array,
  view: RecordView,
  file: string,
  filePosition: number,
  physicalOffset: number,
  delayLevelsMs: readonly number[],
): DumpMessage {
  const message = decodeMessageView(bytes, view);
  const properties: Record<string, string> = {};
  for (const name of [...message.properties.keys()].sort()) {
    Object.defineProperty(properties, name, {
      value: message.properties.get(name),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  const entry: DumpMessage = {
    kind: "message",
    physicalOffset,
    file,
    filePosition,
    storeSize: message.storeSize,
    magic: hex32(MESSAGE_MAGIC_CODE),
    bodyCRC: message.bodyCRC,
    queueId: message.queueId,
    flag: message.flag,
    queueOffset: message.queueOffset,
    sysFlag: message.sysFlag,
    bornTimestamp: message.bornTimestamp,
    bornHost: message.bornHost,
    bornHostHex: hexOf(bytes, view.bornHostPosition, view.bornHostPosition + view.bornHostLength),
    storeTimestamp: message.storeTimestamp,
    storeHost: message.storeHost,
    storeHostHex: hexOf(
      bytes,
      view.storeHostPosition,
      view.storeHostPosition + view.storeHostLength,
    ),
    reconsumeTimes: message.reconsumeTimes,
    preparedTransactionOffset: message.preparedTransactionOffset,
    bodyLength: message.body.length,
    topic: message.topic,
    topicLength: view.topicLength,
    body: base64(message.body),
    propertiesLength: view.propertiesLength,
    propertiesRaw: base64(message.propertiesRaw),
    properties,
    offsetMsgId: message.msgId,
    tagsCode: String(
      dispatchTagsCode(message.topic, message.properties, message.storeTimestamp, delayLevelsMs),
    ),
    tranType: transactionTypeOf(message.sysFlag),
    hasConsumeQueueEntry: hasConsumeQueueEntry(message.sysFlag),
    indexKeys: indexKeysOf(message.sysFlag, message.properties),
  };
  const compressionType = compressionTypeOf(message.sysFlag);
  if (compressionType !== undefined) {
    entry.compressionType = compressionType;
    if (compressionType === "ZLIB") {
      try {
        entry.bodyDecompressed = base64(inflateSync(message.body));
      } catch {
        // A body that does not inflate is shown as stored; the record itself is valid.
      }
    }
  }
  return entry;
}

/**
 * The physical offset of a commit-log file: its 20-digit name, or
 * `baseOffset`.
 *
 * @param filePath The file.
 * @param baseOffset Offset to use when the name is not 20 digits.
 * @returns The offset.
 * @throws {RangeError} When neither gives one.
 */
export function fileStartOffset(filePath: string, baseOffset?: number): number {
  if (baseOffset !== undefined) return baseOffset;
  const name = path.basename(filePath);
  if (!SEGMENT_NAME.test(name)) {
    throw new RangeError(
      `${name} is not a commit-log file name (20 digits); give its offset with --base-offset`,
    );
  }
  const offset = Number(name);
  if (!Number.isSafeInteger(offset)) throw new RangeError(`Offset ${name} is beyond 2^53`);
  return offset;
}

/**
 * Reads a file through a window so that one record at a time is in memory.
 */
class FileWindow {
  /** Open file descriptor. */
  readonly #fd: number;
  /** File size in bytes. */
  readonly size: number;
  /** The window's bytes; `bytes` is the loaded part. */
  #buffer: Uint8Array;
  /** The loaded part of the window (a view of `#buffer`). */
  bytes: Uint8Array = new Uint8Array(0);
  /** File position of `bytes[0]`. */
  start = 0;

  constructor(fd: number, size: number, windowBytes: number) {
    this.#fd = fd;
    this.size = size;
    this.#buffer = new Uint8Array(windowBytes);
  }

  /** Whether the loaded part reaches the end of the file. */
  get atEnd(): boolean {
    return this.start + this.bytes.length >= this.size;
  }

  /** Loads the window from file position `start`, at least `minBytes` long if the file has them. */
  load(start: number, minBytes: number): void {
    if (minBytes > this.#buffer.length) this.#buffer = new Uint8Array(minBytes);
    const length = Math.min(this.#buffer.length, this.size - start);
    let done = 0;
    while (done < length) {
      const read = fs.readSync(this.#fd, this.#buffer, done, length - done, start + done);
      if (read === 0) break;
      done += read;
    }
    this.start = start;
    this.bytes = this.#buffer.subarray(0, done);
  }
}

/** Whether file bytes [from, to) are all zero. */
function zeroRange(fd: number, from: number, to: number): boolean {
  const chunk = new Uint8Array(Math.min(ZERO_CHECK_CHUNK_BYTES, Math.max(0, to - from)));
  for (let position = from; position < to;) {
    const read = fs.readSync(fd, chunk, 0, Math.min(chunk.length, to - position), position);
    if (read === 0) return true;
    for (let i = 0; i < read; i++) if (chunk[i] !== 0) return false;
    position += read;
  }
  return true;
}

/**
 * Dumps one commit-log file: yields its records in physical order and
 * returns how the scan ended (`"blank"`: the segment ends with a BLANK;
 * `"end"`: zero bytes where the next record would start, the end of the
 * log; `"invalid"`: the last yielded entry is invalid; `"eof"`: the file
 * ended exactly after a record).
 *
 * @param filePath The file.
 * @param options CRC checking, base offset, window size, delay levels.
 * @returns A generator of entries.
 * @throws {RangeError} When the file has no offset (see {@link fileStartOffset}).
 * @throws {Error} File-system errors (`ENOENT`, ...) from `node:fs`.
 */
export function* dumpFile(
  filePath: string,
  options: DumpOptions = {},
): Generator<DumpEntry, DumpFileEnd> {
  const base = fileStartOffset(filePath, options.baseOffset);
  const file = path.basename(filePath);
  const delayLevelsMs = options.delayLevelsMs ?? DELAY_LEVELS_DEFAULT_MS;
  const checker = new RecordChecker({ checkCrc: options.checkCrc ?? true });
  const fd = fs.openSync(filePath, "r");
  try {
    const window = new FileWindow(
      fd,
      fs.fstatSync(fd).size,
      options.windowBytes ?? WINDOW_DEFAULT_BYTES,
    );
    let position = 0;
    while (position < window.size) {
      if (position < window.start || position + 8 > window.start + window.bytes.length) {
        window.load(position, BLANK_RECORD_SIZE_BYTES);
      }
      let view = checker.check(window.bytes, position - window.start, base + position);
      if (view.kind === "invalid" && view.reason === "TRUNCATED" && !window.atEnd) {
        // Grow the window to the claimed size, but never past the file's end.
        const claimed = Math.min(view.size, window.size - position);
        window.load(position, Math.max(claimed, BLANK_RECORD_SIZE_BYTES));
        view = checker.check(window.bytes, 0, base + position);
      }
      const physicalOffset = base + position;
      const local = position - window.start;
      const magic = local + 8 <= window.bytes.length
        ? new DataView(window.bytes.buffer, window.bytes.byteOffset + local, 8).getInt32(4)
        : 0;
      if (magic === BLANK_MAGIC_CODE) {
        // The window may not reach the end of the file: check the BLANK here.
        const size = new DataView(window.bytes.buffer, window.bytes.byteOffset + local, 4)
          .getInt32(0);
        const remaining = window.size - position;
        if (size !== remaining) {
          yield {
            kind: "invalid",
            physicalOffset,
            file,
            filePosition: position,
            reason: "SIZE_OUT_OF_RANGE",
            detail: `BLANK size ${size} at position ${position}, but ${remaining} bytes are left`,
          };
          return "invalid";
        }
        yield {
          kind: "blank",
          physicalOffset,
          size,
          file,
          filePosition: position,
          magic: hex32(BLANK_MAGIC_CODE),
          restOfFileZero: zeroRange(fd, position + BLANK_RECORD_SIZE_BYTES, window.size),
        };
        return "blank";
      }
      if (view.kind === "end") return "end";
      if (view.kind === "invalid") {
        yield {
          kind: "invalid",
          physicalOffset,
          file,
          filePosition: position,
          reason: view.reason!,
          detail: view.detail,
        };
        return "invalid";
      }
      yield messageEntry(window.bytes, view, file, position, physicalOffset, delayLevelsMs);
      position += view.size;
    }
    return "eof";
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * One dump entry as a JSON line (without the newline).
 *
 * @param entry The entry.
 * @returns JSON.
 */
export function dumpEntryJson(entry: DumpEntry): string {
  return JSON.stringify(entry);
}

/** Header of {@link dumpEntryRow}'s table. */
export const DUMP_TABLE_HEADER: string = [
  "physicalOffset".padStart(14),
  "size".padStart(8),
  "type".padEnd(8),
  "topic".padEnd(24),
  "queue".padStart(5),
  "queueOffset".padStart(11),
  "storeTime".padEnd(24),
  "bodyLen".padStart(7),
  "tags / keys",
].join(" ");

/**
 * One dump entry as a table row under {@link DUMP_TABLE_HEADER}.
 *
 * @param entry The entry.
 * @returns The row.
 */
export function dumpEntryRow(entry: DumpEntry): string {
  const offset = String(entry.physicalOffset).padStart(14);
  switch (entry.kind) {
    case "blank":
      return `${offset} ${String(entry.size).padStart(8)} BLANK    (end of file ${entry.file})`;
    case "invalid":
      return `${offset} ${"".padStart(8)} INVALID  ${entry.reason}: ${entry.detail}`;
    case "message": {
      const tags = entry.properties.TAGS;
      const keys = entry.properties.KEYS;
      const topic = entry.topic.length > 24 ? `${entry.topic.slice(0, 23)}…` : entry.topic;
      return [
        offset,
        String(entry.storeSize).padStart(8),
        (entry.tranType === "NOT_TYPE" ? "MESSAGE" : entry.tranType).padEnd(8),
        topic.padEnd(24),
        String(entry.queueId).padStart(5),
        String(entry.queueOffset).padStart(11),
        new Date(entry.storeTimestamp).toISOString().padEnd(24),
        String(entry.bodyLength).padStart(7),
        [tags === undefined ? "" : `tags=${tags}`, keys === undefined ? "" : `keys=${keys}`]
          .filter((part) => part !== "").join(" "),
      ].join(" ");
    }
  }
}
