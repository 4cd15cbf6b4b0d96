/**
 * The store facade (SPEC §10): opens a store directory, puts messages
 * through the commit log, and closes it cleanly.
 *
 * ```
 * open:  lock ─► abort marker (absent = last close was clean) ─► checkpoint
 *        ─► load + recover the commit log ─► start services, disk monitor
 * close: refuse puts ─► wait for queued ones ─► final commit/flush
 *        ─► checkpoint ─► remove abort ─► release the lock
 * ```
 *
 * @module
 */

import { CommitLog } from "../commit_log/commit_log.ts";
import type { PutMessageResult } from "../commit_log/put_message_result.ts";
import { StoreCheckpoint } from "../commit_log/store_checkpoint.ts";
import { StoreStats, type StoreStatsSnapshot } from "../commit_log/store_stats.ts";
import { MqStoreError } from "../errors.ts";
import type { MessageInput } from "../record/mod.ts";
import { createPort } from "../runtime/mod.ts";
import type { DirectoryLock, RuntimePort } from "../runtime/port.ts";
import { type MessageStoreOptions, type ResolvedStoreOptions, resolveOptions } from "./options.ts";

/** What the commit-log recovery of the last open found. */
export interface RecoveryReport {
  /** Whether the previous close was clean (no `abort` marker). */
  clean: boolean;
  /** Where the log ends. */
  maxOffset: number;
  /** Records walked. */
  messageCount: number;
  /** `end`: zeros after the last record; `full`: the log ends a segment; `invalid`: cut at a bad record. */
  endKind: "end" | "invalid" | "full";
  /** Why the log was cut, when `endKind` is `invalid`. */
  detail: string;
}

function join(directory: string, name: string): string {
  return directory.endsWith("/") ? directory + name : `${directory}/${name}`;
}

/**
 * An open store.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", {
 *   port: new MemoryPort("deno"),
 *   flushDiskType: "SYNC_FLUSH",
 *   mappedFileSizeCommitLog: 1024 * 1024,
 * });
 * const r = await store.putMessage({
 *   topic: "Orders",
 *   queueId: 0,
 *   body: new TextEncoder().encode("hi"),
 *   properties: { TAGS: "created", KEYS: "order-1" },
 * });
 * console.log(r.status, r.appendResult?.wroteOffset); // PUT_OK 0
 * await store.close();
 * ```
 */
export class MessageStore {
  /** The store directory. */
  readonly directory: string;
  /** Whether the store was opened read-only. */
  readonly readOnly: boolean;
  /** The runtime port in use. */
  readonly port: RuntimePort;
  /** What recovery found at open. */
  readonly recovery: RecoveryReport;

  #options: ResolvedStoreOptions;
  #commitLog: CommitLog;
  #checkpoint: StoreCheckpoint;
  #stats: StoreStats;
  #lock: DirectoryLock | undefined;
  #closing: Promise<void> | undefined;
  #cancelDiskTimer: (() => void) | undefined;
  /** The disk check in flight. */
  #diskCheck: Promise<boolean> | undefined;
  #closed = false;

  private constructor(
    directory: string,
    options: ResolvedStoreOptions,
    port: RuntimePort,
    commitLog: CommitLog,
    checkpoint: StoreCheckpoint,
    stats: StoreStats,
    lock: DirectoryLock | undefined,
    recovery: RecoveryReport,
  ) {
    this.directory = directory;
    this.readOnly = options.readOnly;
    this.port = port;
    this.#options = options;
    this.#commitLog = commitLog;
    this.#checkpoint = checkpoint;
    this.#stats = stats;
    this.#lock = lock;
    this.recovery = recovery;
  }

  /**
   * Opens (creating if needed) the store in `directory`: takes the lock,
   * marks the store open (`abort`), recovers the commit log, and starts
   * the flush services.
   *
   * @throws {MqStoreError} `LOCKED` when another process or open holds the
   *   directory; `INVALID_FILE` for a segment or checkpoint of the wrong
   *   size; `UNSUPPORTED` for SYNC_FLUSH with the transient store pool.
   * @throws {TypeError|RangeError} For bad options.
   */
  static async open(directory: string, options: MessageStoreOptions = {}): Promise<MessageStore> {
    if (typeof directory !== "string" || directory.length === 0) {
      throw new TypeError(
        `The store directory must be a non-empty string, not ${typeof directory}`,
      );
    }
    const resolved = resolveOptions(options);
    const port = resolved.port ??
      await createPort({ adapter: resolved.adapter, onNotice: resolved.onWarning });
    const readOnly = resolved.readOnly;
    let lock: DirectoryLock | undefined;
    let commitLog: CommitLog | undefined;
    try {
      if (!readOnly) {
        await port.makeDirectory(directory);
        lock = await port.lockDirectory(directory);
      } else if ((await port.stat(directory))?.isDirectory !== true) {
        throw new MqStoreError("NOT_FOUND", `Cannot open ${directory} read-only: no such store`);
      }
      const abortPath = join(directory, "abort");
      const clean = (await port.stat(abortPath)) === undefined;
      if (!readOnly && clean) {
        // Before any other write: a crash from here on must read as unclean.
        await port.writeFileAtomic(abortPath, new Uint8Array(0));
      }
      const checkpoint = await StoreCheckpoint.load(port, join(directory, "checkpoint"));
      const stats = new StoreStats();
      commitLog = new CommitLog({
        ...resolved,
        port,
        directory: join(directory, "commitlog"),
        delayLevelCount: resolved.delayLevelsMs.length,
        checkpoint,
        stats,
      });
      const scan = await commitLog.loadAndRecover(clean);
      const store = new MessageStore(
        directory,
        resolved,
        port,
        commitLog,
        checkpoint,
        stats,
        lock,
        {
          clean,
          maxOffset: scan.cutOffset,
          messageCount: scan.messageCount,
          endKind: scan.endKind,
          detail: scan.detail,
        },
      );
      if (!readOnly) {
        await store.checkDiskSpace();
        commitLog.start();
        store.#scheduleDiskCheck();
      }
      return store;
    } catch (error) {
      await commitLog?.close().catch(() => {});
      await lock?.release();
      throw error;
    }
  }

  /**
   * Appends a message (SPEC §4). Never rejects for what the message
   * contains: the answer's `status` and `error` say what went wrong. Rejects
   * with a TypeError for a wrong argument type only.
   */
  putMessage(message: MessageInput): Promise<PutMessageResult> {
    return this.#commitLog.putMessage(message);
  }

  /**
   * Appends a batch (one topic and queue; see SPEC §3) as consecutive
   * records with consecutive queue offsets, all in one segment.
   */
  putMessages(messages: readonly MessageInput[]): Promise<PutMessageResult> {
    return this.#commitLog.putMessages(messages);
  }

  /** Offset up to which the commit log is durable. */
  get flushedOffset(): number {
    return this.#commitLog.flushedOffset;
  }

  /** Offset after the last appended record. */
  get maxOffset(): number {
    return this.#commitLog.maxOffset;
  }

  /** Offset of the oldest commit-log byte kept. */
  get minOffset(): number {
    return this.#commitLog.minOffset;
  }

  /**
   * Resolves once the commit log is durable up to `offset` (for example an
   * async put's `wroteOffset + wroteBytes`); rejects if a flush failed.
   */
  whenFlushed(offset: number): Promise<void> {
    return this.#commitLog.whenFlushed(offset);
  }

  /** The next queue offset of a queue (0 for a queue never written). */
  nextQueueOffset(topic: string, queueId: number): number {
    return this.#commitLog.topicQueueTable.get(topic, queueId) ?? 0;
  }

  /** Next queue offsets of every queue, keyed `topic-queueId` as RocketMQ's table. */
  topicQueueTable(): Map<string, number> {
    return new Map(this.#commitLog.topicQueueTable.entries());
  }

  /** A snapshot of the put and flush counters. */
  stats(): StoreStatsSnapshot {
    return this.#stats.snapshot();
  }

  /** The values the checkpoint holds now (written on close and at thorough flushes). */
  get checkpoint(): Readonly<StoreCheckpoint> {
    return this.#checkpoint;
  }

  /**
   * Compares disk use with `diskMaxUsedSpaceRatio` now (it also runs every
   * `diskSpaceCheckIntervalMs`): over it, puts are refused; under it again,
   * accepted.
   *
   * @returns Whether the disk is over the ratio.
   */
  checkDiskSpace(): Promise<boolean> {
    this.#diskCheck ??= this.#checkDiskSpace().finally(() => this.#diskCheck = undefined);
    return this.#diskCheck;
  }

  async #checkDiskSpace(): Promise<boolean> {
    const space = await this.port.diskSpace(this.directory);
    const usedPercent = space.totalBytes === 0
      ? 0
      : (space.totalBytes - space.availableBytes) * 100 / space.totalBytes;
    const ratio = this.#options.diskMaxUsedSpaceRatio;
    const full = usedPercent > ratio;
    this.#commitLog.setDiskFull(
      full
        ? `Cannot put: disk use ${
          usedPercent.toFixed(1)
        }% of ${this.directory} is over diskMaxUsedSpaceRatio ${ratio}%`
        : undefined,
    );
    return full;
  }

  #scheduleDiskCheck(): void {
    if (this.#closed) return;
    this.#cancelDiskTimer = this.#options.clock.setTimer(
      this.#options.diskSpaceCheckIntervalMs,
      () => {
        this.checkDiskSpace().then(
          () => this.#scheduleDiskCheck(),
          (error) => {
            this.#options.onWarning(
              `mqstore: cannot read the disk space of ${this.directory}: ${
                error instanceof Error ? error.message : String(error)
              }`,
            );
            this.#scheduleDiskCheck();
          },
        );
      },
    );
  }

  /**
   * Closes the store: refuses new puts, waits for queued ones and for
   * flushes in flight, flushes everything, writes the checkpoint, removes
   * `abort` and releases the lock. Idempotent.
   *
   * @throws {MqStoreError} The final flush error; the store is closed anyway
   *   but `abort` stays, so the next open recovers as after a crash.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    this.#cancelDiskTimer?.();
    await this.#diskCheck?.catch(() => {});
    let error: unknown;
    try {
      await this.#commitLog.close();
      if (!this.readOnly && this.#commitLog.failure === undefined) {
        await this.#checkpoint.flush();
        await this.port.remove(join(this.directory, "abort"));
        await this.port.syncDirectory(this.directory);
      }
    } catch (caught) {
      error = caught;
    }
    try {
      await this.#lock?.release();
    } catch (caught) {
      error ??= caught;
    }
    if (error !== undefined) throw error;
  }
}
