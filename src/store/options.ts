/**
 * Options of `MessageStore.open` (SPEC §9): RocketMQ's setting names, its
 * spellings included, so a `broker.conf` ports over; times in ms, sizes in
 * bytes. mqstore's own settings follow them.
 *
 * @module
 */

import type { FlushDiskType } from "../commit_log/commit_log.ts";
import {
  DISK_SPACE_CHECK_INTERVAL_MS_DEFAULT,
  unflushedBytesMaxDefault,
} from "../commit_log/constants.ts";
import { MqStoreError } from "../errors.ts";
import { DELAY_LEVELS_DEFAULT_MS, MAX_MESSAGE_SIZE_DEFAULT_BYTES } from "../record/mod.ts";
import type { AdapterName, RuntimePort } from "../runtime/port.ts";
import { totalMemoryBytes } from "../runtime/info.ts";
import { type Clock, systemClock } from "../segment/clock.ts";

export type { FlushDiskType };

/**
 * Options of `MessageStore.open`.
 *
 * @example
 * ```ts
 * import fs from "node:fs";
 * import os from "node:os";
 * import { MessageStore } from "./message_store.ts";
 * import type { MessageStoreOptions } from "./options.ts";
 *
 * const options: MessageStoreOptions = {
 *   flushDiskType: "SYNC_FLUSH", // answer puts once durable
 *   mappedFileSizeCommitLog: 64 * 1024 * 1024,
 *   fileReservedTime: 48, // hours
 * };
 * const directory = fs.mkdtempSync(`${os.tmpdir()}/mqstore-`);
 * const store = await MessageStore.open(directory, options);
 * await store.close();
 * fs.rmSync(directory, { recursive: true });
 * ```
 */
export interface MessageStoreOptions {
  /**
   * Size of each commit-log segment, bytes; below 2 GiB.
   *
   * @default {1073741824}
   */
  mappedFileSizeCommitLog?: number;
  /**
   * `ASYNC_FLUSH`: a put is answered once appended; a background service
   * makes it durable. `SYNC_FLUSH`: a put is answered once durable.
   *
   * @default {"ASYNC_FLUSH"}
   */
  flushDiskType?: FlushDiskType;
  /**
   * Interval of the async flusher, ms.
   *
   * @default {500}
   */
  flushIntervalCommitLog?: number;
  /**
   * Whole 4 KiB pages the async flusher waits for.
   *
   * @default {4}
   */
  flushCommitLogLeastPages?: number;
  /**
   * The async flusher flushes everything at least this often, ms.
   *
   * @default {10000}
   */
  flushCommitLogThoroughInterval?: number;
  /**
   * The async flusher sleeps the full interval (true) or is woken by every
   * put (false).
   *
   * @default {true}
   */
  flushCommitLogTimed?: boolean;
  /**
   * Interval of the committer (transient store pool), ms.
   *
   * @default {200}
   */
  commitIntervalCommitLog?: number;
  /**
   * Whole 4 KiB pages the committer waits for.
   *
   * @default {4}
   */
  commitCommitLogLeastPages?: number;
  /**
   * The committer commits everything at least this often, ms.
   *
   * @default {200}
   */
  commitCommitLogThoroughInterval?: number;
  /**
   * How long a SYNC_FLUSH put waits for its flush before it is answered
   * FLUSH_DISK_TIMEOUT (the message stays stored), ms.
   *
   * @default {5000}
   */
  syncFlushTimeout?: number;
  /**
   * Largest body, record and batch, bytes.
   *
   * @default {4194304}
   */
  maxMessageSize?: number;
  /**
   * Append into segment-sized heap buffers, committed into the files by a
   * background service. ASYNC_FLUSH only: SYNC_FLUSH with the pool is
   * refused at open.
   *
   * @default {false}
   */
  transientStorePoolEnable?: boolean;
  /**
   * Buffers in the pool.
   *
   * @default {5}
   */
  transientStorePoolSize?: number;
  /**
   * Pre-fault each new segment (under `MADV_RANDOM`) off the JavaScript
   * thread before it is written.
   *
   * @default {false}
   */
  warmMapedFileEnable?: boolean;
  /**
   * Longest time a put waits for the flusher to catch up (see
   * `unflushedBytesMax`) before it is answered OS_PAGECACHE_BUSY, ms.
   *
   * @default {1000}
   */
  osPageCacheBusyTimeOutMills?: number;
  /**
   * Disk use (percent of the file system holding the store, counted as
   * `df`'s Use%: used over used + available, blocks reserved for the
   * superuser left out) above which puts are refused with
   * SERVICE_NOT_AVAILABLE; accepted again once use falls back under it.
   *
   * @default {75}
   */
  diskMaxUsedSpaceRatio?: number;
  /**
   * Verify body CRCs when recovering.
   *
   * @default {true}
   */
  checkCRCOnRecover?: boolean;
  /**
   * Delay levels (RocketMQ's `messageDelayLevel`, e.g. `"1s 5s 10s"`); the
   * number of levels is the highest level a DELAY is clamped to.
   *
   * @default {"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"}
   */
  messageDelayLevel?: string;
  /**
   * Size of each consume-queue file, bytes; a whole number of 20-byte units.
   *
   * @default {6000000}
   */
  mappedFileSizeConsumeQueue?: number;
  /**
   * Interval of the consume-queue (and index) flusher, ms.
   *
   * @default {1000}
   */
  flushIntervalConsumeQueue?: number;
  /**
   * Whole 4 KiB pages the consume-queue flusher waits for.
   *
   * @default {2}
   */
  flushConsumeQueueLeastPages?: number;
  /**
   * The consume-queue flusher flushes everything (and writes the
   * checkpoint) at least this often, ms.
   *
   * @default {60000}
   */
  flushConsumeQueueThoroughInterval?: number;
  /**
   * Build the key index (`index/`).
   *
   * @default {true}
   */
  messageIndexEnable?: boolean;
  /**
   * Hash slots per index file.
   *
   * @default {5000000}
   */
  maxHashSlotNum?: number;
  /**
   * Entries per index file.
   *
   * @default {20000000}
   */
  maxIndexNum?: number;
  /**
   * Hours a commit-log segment is kept after its last write.
   *
   * @default {72}
   */
  fileReservedTime?: number;
  /**
   * Hours of the day (local time) at which expired segments are deleted,
   * `;`-separated (`"04;10"`).
   *
   * @default {"04"}
   */
  deleteWhen?: string;
  /**
   * Disk use (percent) past which expired segments are deleted at once and
   * whatever their age (if `cleanFileForciblyEnable`).
   *
   * @default {85}
   */
  diskSpaceCleanForciblyRatio?: number;
  /**
   * Delete segments that have not expired yet when the disk is past
   * `diskSpaceCleanForciblyRatio`.
   *
   * @default {true}
   */
  cleanFileForciblyEnable?: boolean;
  /**
   * How often the retention service runs, ms.
   *
   * @default {10000}
   */
  cleanResourceInterval?: number;
  /**
   * How long a segment held by a reader is spared before it is deleted
   * anyway, ms.
   *
   * @default {120000}
   */
  destroyMapedFileIntervalForcibly?: number;
  /**
   * Record bytes one `getMessages` call returns at most when the messages
   * are "in memory" (see `accessMessageInMemoryMaxRatio`). One message is
   * always returned, however large.
   *
   * @default {262144}
   */
  maxTransferBytesOnMessageInMemory?: number;
  /**
   * Messages one `getMessages` call returns at most when they are "in
   * memory".
   *
   * @default {32}
   */
  maxTransferCountOnMessageInMemory?: number;
  /**
   * Record bytes one `getMessages` call returns at most when the messages
   * are "on disk". One message is always returned, however large.
   *
   * @default {65536}
   */
  maxTransferBytesOnMessageInDisk?: number;
  /**
   * Messages one `getMessages` call returns at most when they are "on disk".
   *
   * @default {8}
   */
  maxTransferCountOnMessageInDisk?: number;
  /**
   * Percent of the machine's RAM taken as the page cache's reach: a message
   * more than this many bytes behind the end of the commit log counts as
   * "on disk" and takes the smaller transfer limits (RocketMQ's rule).
   *
   * @default {40}
   */
  accessMessageInMemoryMaxRatio?: number;

  // mqstore's own settings.

  /**
   * Open without the lock, without the `abort` marker, and without any
   * write: every put is refused. Usable beside a live writer.
   *
   * @default {false}
   */
  readOnly?: boolean;
  /**
   * The runtime adapter (see `createPort`); ignored when `port` is given.
   *
   * @default {"auto"}
   */
  adapter?: AdapterName | "auto";
  /**
   * A runtime port to use instead of creating one (tests: a `MemoryPort`).
   *
   * @default {undefined}
   */
  port?: RuntimePort;
  /**
   * Time, timers and store timestamps (tests: a `ManualClock`).
   *
   * @default {systemClock}
   */
  clock?: Clock;
  /**
   * Bound on bytes appended but not yet durable; past it puts wait for the
   * flusher (and answer OS_PAGECACHE_BUSY after `osPageCacheBusyTimeOutMills`).
   * The default is a tenth of the machine's memory, within 64 MiB–2 GiB
   * (512 MiB where the memory size cannot be read).
   *
   * @default {"a tenth of memory, 64 MiB–2 GiB"}
   */
  unflushedBytesMax?: number;
  /**
   * Re-dispatch on open (consume queues and index behind the commit log)
   * makes its progress durable in the checkpoint at least every this many
   * commit-log bytes, so a restart during a long recovery continues from
   * there instead of starting over.
   *
   * @default {67108864}
   */
  recoveryCheckpointIntervalBytes?: number;
  /**
   * How often disk use is compared with `diskMaxUsedSpaceRatio`, ms.
   *
   * @default {1000}
   */
  diskSpaceCheckIntervalMs?: number;
  /**
   * Create segments sparse (no `posix_fallocate`): tests only, a full disk
   * then becomes SIGBUS.
   *
   * @default {false}
   */
  sparseFiles?: boolean;
  /**
   * Receives warnings (recovery skipped a bad segment, mlock refused).
   *
   * @default {console.warn}
   */
  onWarning?: (message: string) => void;
}

/** Every option with its default applied. */
export interface ResolvedStoreOptions extends Required<Omit<MessageStoreOptions, "port">> {
  /** The port, when given. */
  port: RuntimePort | undefined;
  /** The parsed delay levels, ms. */
  delayLevelsMs: number[];
  /** The hours of `deleteWhen`. */
  deleteWhenHours: number[];
}

/** Size of a consume-queue unit (SPEC §7). */
const CQ_UNIT_BYTES = 20;
/** Re-dispatch on open checkpoints at least every 64 MiB. */
const RECOVERY_CHECKPOINT_INTERVAL_BYTES_DEFAULT = 0x400_0000;

/** RocketMQ's pull limits (MessageStoreConfig): 256 KiB / 32 messages in memory, 64 KiB / 8 on disk. */
const TRANSFER_BYTES_IN_MEMORY_DEFAULT = 0x4_0000;
const TRANSFER_COUNT_IN_MEMORY_DEFAULT = 32;
const TRANSFER_BYTES_IN_DISK_DEFAULT = 0x1_0000;
const TRANSFER_COUNT_IN_DISK_DEFAULT = 8;
/** Percent of RAM within which a message counts as in memory. */
const ACCESS_IN_MEMORY_RATIO_DEFAULT = 40;

function consumeQueueFileSize(value: unknown): number {
  const size = integer(
    "mappedFileSizeConsumeQueue",
    value ?? 6_000_000,
    CQ_UNIT_BYTES,
    0x7FFF_FFEC,
  );
  if (size % CQ_UNIT_BYTES !== 0) {
    throw new RangeError(
      `mappedFileSizeConsumeQueue is ${size}; it must be a whole number of ${CQ_UNIT_BYTES}-byte units`,
    );
  }
  return size;
}

/**
 * Parses RocketMQ's `deleteWhen` (`"04"`, `"04;10"`) into hours of the day.
 *
 * @example
 * ```ts
 * import { parseDeleteWhen } from "./options.ts";
 *
 * console.log(parseDeleteWhen("04;10")); // [4, 10]
 * ```
 */
export function parseDeleteWhen(text: string): number[] {
  if (typeof text !== "string") {
    throw new TypeError(`deleteWhen must be a string, not ${typeof text}`);
  }
  const hours = text.split(";").map((part) => part.trim()).filter((part) => part.length > 0).map(
    (part) => {
      if (!/^[0-9]{1,2}$/.test(part) || Number(part) > 23) {
        throw new RangeError(`deleteWhen part "${part}" is not an hour from 00 to 23`);
      }
      return Number(part);
    },
  );
  if (hours.length === 0) throw new RangeError(`deleteWhen "${text}" lists no hour`);
  return hours;
}

const TIME_UNITS_MS: Readonly<Record<string, number>> = {
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * Parses RocketMQ's `messageDelayLevel` text into ms per level.
 *
 * @example
 * ```ts
 * import { parseDelayLevels } from "./options.ts";
 *
 * console.log(parseDelayLevels("1s 5s 1m 2h")); // [1000, 5000, 60000, 7200000]
 * ```
 */
export function parseDelayLevels(text: string): number[] {
  const levels = text.trim().split(/\s+/).map((part) => {
    const match = /^([0-9]+)([smhd])$/.exec(part);
    if (match === null) {
      throw new RangeError(`messageDelayLevel part "${part}" is not a number and s, m, h or d`);
    }
    return Number(match[1]) * TIME_UNITS_MS[match[2]!]!;
  });
  if (levels.length === 0) throw new RangeError("messageDelayLevel lists no level");
  return levels;
}

function integer(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== "number") {
    throw new TypeError(`${name} must be a number, not ${typeof value}`);
  }
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} is ${value}; it must be an integer from ${min} to ${max}`);
  }
  return value;
}

function boolean(name: string, value: unknown): boolean {
  if (typeof value !== "boolean") {
    throw new TypeError(`${name} must be a boolean, not ${typeof value}`);
  }
  return value;
}

/** Largest segment: positions are int32 in the record format and the port. */
const SEGMENT_SIZE_MAX_BYTES = 0x7FFF_F000;

/**
 * Applies defaults and checks every option.
 *
 * @example
 * ```ts
 * import { resolveOptions } from "./options.ts";
 *
 * const resolved = resolveOptions({ flushDiskType: "SYNC_FLUSH" });
 * console.log(resolved.syncFlushTimeout, resolved.delayLevelsMs.length); // 5000 18
 * ```
 *
 * @throws {TypeError} For an option of the wrong type.
 * @throws {RangeError} For a value out of range.
 * @throws {MqStoreError} `UNSUPPORTED` for SYNC_FLUSH with the transient store pool.
 */
export function resolveOptions(options: MessageStoreOptions = {}): ResolvedStoreOptions {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`Options must be an object, not ${typeof options}`);
  }
  const flushDiskType = options.flushDiskType ?? "ASYNC_FLUSH";
  if (flushDiskType !== "ASYNC_FLUSH" && flushDiskType !== "SYNC_FLUSH") {
    throw new RangeError(`flushDiskType is "${flushDiskType}"; use "ASYNC_FLUSH" or "SYNC_FLUSH"`);
  }
  const transientStorePoolEnable = boolean(
    "transientStorePoolEnable",
    options.transientStorePoolEnable ?? false,
  );
  if (transientStorePoolEnable && flushDiskType === "SYNC_FLUSH") {
    throw new MqStoreError(
      "UNSUPPORTED",
      "transientStorePoolEnable needs flushDiskType ASYNC_FLUSH: under SYNC_FLUSH the pool would be ignored (RocketMQ ignores it silently)",
    );
  }
  const day = 86_400_000;
  const mappedFileSizeCommitLog = integer(
    "mappedFileSizeCommitLog",
    options.mappedFileSizeCommitLog ?? 0x4000_0000,
    0x1000,
    SEGMENT_SIZE_MAX_BYTES,
  );
  const messageDelayLevel = options.messageDelayLevel ??
    DELAY_LEVELS_DEFAULT_MS.map((ms) =>
      ms % 3_600_000 === 0
        ? `${ms / 3_600_000}h`
        : ms % 60_000 === 0
        ? `${ms / 60_000}m`
        : `${ms / 1000}s`
    ).join(" ");
  const onWarning = options.onWarning ?? ((message: string) => console.warn(message));
  if (typeof onWarning !== "function") throw new TypeError("onWarning must be a function");
  const adapter = options.adapter ?? "auto";
  return {
    mappedFileSizeCommitLog,
    flushDiskType,
    flushIntervalCommitLog: integer(
      "flushIntervalCommitLog",
      options.flushIntervalCommitLog ?? 500,
      0,
      day,
    ),
    flushCommitLogLeastPages: integer(
      "flushCommitLogLeastPages",
      options.flushCommitLogLeastPages ?? 4,
      0,
      0x10_0000,
    ),
    flushCommitLogThoroughInterval: integer(
      "flushCommitLogThoroughInterval",
      options.flushCommitLogThoroughInterval ?? 10_000,
      0,
      day,
    ),
    flushCommitLogTimed: boolean("flushCommitLogTimed", options.flushCommitLogTimed ?? true),
    commitIntervalCommitLog: integer(
      "commitIntervalCommitLog",
      options.commitIntervalCommitLog ?? 200,
      0,
      day,
    ),
    commitCommitLogLeastPages: integer(
      "commitCommitLogLeastPages",
      options.commitCommitLogLeastPages ?? 4,
      0,
      0x10_0000,
    ),
    commitCommitLogThoroughInterval: integer(
      "commitCommitLogThoroughInterval",
      options.commitCommitLogThoroughInterval ?? 200,
      0,
      day,
    ),
    syncFlushTimeout: integer("syncFlushTimeout", options.syncFlushTimeout ?? 5_000, 1, day),
    maxMessageSize: integer(
      "maxMessageSize",
      options.maxMessageSize ?? MAX_MESSAGE_SIZE_DEFAULT_BYTES,
      0x100,
      0x4000_0000,
    ),
    transientStorePoolEnable,
    transientStorePoolSize: integer(
      "transientStorePoolSize",
      options.transientStorePoolSize ?? 5,
      2,
      0x400,
    ),
    warmMapedFileEnable: boolean("warmMapedFileEnable", options.warmMapedFileEnable ?? false),
    osPageCacheBusyTimeOutMills: integer(
      "osPageCacheBusyTimeOutMills",
      options.osPageCacheBusyTimeOutMills ?? 1_000,
      0,
      day,
    ),
    diskMaxUsedSpaceRatio: integer(
      "diskMaxUsedSpaceRatio",
      options.diskMaxUsedSpaceRatio ?? 75,
      10,
      95,
    ),
    checkCRCOnRecover: boolean("checkCRCOnRecover", options.checkCRCOnRecover ?? true),
    messageDelayLevel,
    delayLevelsMs: parseDelayLevels(messageDelayLevel),
    mappedFileSizeConsumeQueue: consumeQueueFileSize(options.mappedFileSizeConsumeQueue),
    flushIntervalConsumeQueue: integer(
      "flushIntervalConsumeQueue",
      options.flushIntervalConsumeQueue ?? 1_000,
      1,
      day,
    ),
    flushConsumeQueueLeastPages: integer(
      "flushConsumeQueueLeastPages",
      options.flushConsumeQueueLeastPages ?? 2,
      0,
      0x10_0000,
    ),
    flushConsumeQueueThoroughInterval: integer(
      "flushConsumeQueueThoroughInterval",
      options.flushConsumeQueueThoroughInterval ?? 60_000,
      0,
      day,
    ),
    messageIndexEnable: boolean("messageIndexEnable", options.messageIndexEnable ?? true),
    maxHashSlotNum: integer("maxHashSlotNum", options.maxHashSlotNum ?? 5_000_000, 1, 0x1000_0000),
    maxIndexNum: integer("maxIndexNum", options.maxIndexNum ?? 20_000_000, 2, 0x1000_0000),
    fileReservedTime: integer("fileReservedTime", options.fileReservedTime ?? 72, 0, 0x10_0000),
    deleteWhen: options.deleteWhen ?? "04",
    deleteWhenHours: parseDeleteWhen(options.deleteWhen ?? "04"),
    diskSpaceCleanForciblyRatio: integer(
      "diskSpaceCleanForciblyRatio",
      options.diskSpaceCleanForciblyRatio ?? 85,
      10,
      100,
    ),
    cleanFileForciblyEnable: boolean(
      "cleanFileForciblyEnable",
      options.cleanFileForciblyEnable ?? true,
    ),
    cleanResourceInterval: integer(
      "cleanResourceInterval",
      options.cleanResourceInterval ?? 10_000,
      1,
      day,
    ),
    destroyMapedFileIntervalForcibly: integer(
      "destroyMapedFileIntervalForcibly",
      options.destroyMapedFileIntervalForcibly ?? 120_000,
      0,
      day,
    ),
    maxTransferBytesOnMessageInMemory: integer(
      "maxTransferBytesOnMessageInMemory",
      options.maxTransferBytesOnMessageInMemory ?? TRANSFER_BYTES_IN_MEMORY_DEFAULT,
      1,
      0x7FFF_FFFF,
    ),
    maxTransferCountOnMessageInMemory: integer(
      "maxTransferCountOnMessageInMemory",
      options.maxTransferCountOnMessageInMemory ?? TRANSFER_COUNT_IN_MEMORY_DEFAULT,
      1,
      0x7FFF_FFFF,
    ),
    maxTransferBytesOnMessageInDisk: integer(
      "maxTransferBytesOnMessageInDisk",
      options.maxTransferBytesOnMessageInDisk ?? TRANSFER_BYTES_IN_DISK_DEFAULT,
      1,
      0x7FFF_FFFF,
    ),
    maxTransferCountOnMessageInDisk: integer(
      "maxTransferCountOnMessageInDisk",
      options.maxTransferCountOnMessageInDisk ?? TRANSFER_COUNT_IN_DISK_DEFAULT,
      1,
      0x7FFF_FFFF,
    ),
    accessMessageInMemoryMaxRatio: integer(
      "accessMessageInMemoryMaxRatio",
      options.accessMessageInMemoryMaxRatio ?? ACCESS_IN_MEMORY_RATIO_DEFAULT,
      0,
      100,
    ),
    readOnly: boolean("readOnly", options.readOnly ?? false),
    adapter,
    port: options.port,
    clock: options.clock ?? systemClock,
    unflushedBytesMax: integer(
      "unflushedBytesMax",
      options.unflushedBytesMax ?? unflushedBytesMaxDefault(totalMemoryBytes()),
      0x1000,
      Number.MAX_SAFE_INTEGER,
    ),
    recoveryCheckpointIntervalBytes: integer(
      "recoveryCheckpointIntervalBytes",
      options.recoveryCheckpointIntervalBytes ?? RECOVERY_CHECKPOINT_INTERVAL_BYTES_DEFAULT,
      0x1000,
      Number.MAX_SAFE_INTEGER,
    ),
    diskSpaceCheckIntervalMs: integer(
      "diskSpaceCheckIntervalMs",
      options.diskSpaceCheckIntervalMs ?? DISK_SPACE_CHECK_INTERVAL_MS_DEFAULT,
      1,
      day,
    ),
    sparseFiles: boolean("sparseFiles", options.sparseFiles ?? false),
    onWarning,
  };
}
