/**
 * The store facade (SPEC §10): opens a store directory, puts messages
 * through the commit log, serves them back through the consume queues and
 * the index, and closes it cleanly.
 *
 * ```
 * open:  lock ─► abort marker (absent = last close was clean; holds the boot
 *           that wrote it) ─► checkpoint
 *        ─► load consume queues ─► load + recover the commit log ─► load
 *           the index (unclean: files cut back to the checkpoint's point)
 *        ─► cut consume-queue units past the log end ─► re-dispatch from
 *           the checkpoint's offsets (progress checkpointed as it goes)
 *        ─► queue offsets from the consume queues ─► start services
 * put:   commit log ─► (flushed under SYNC_FLUSH) ─► dispatcher ─► units,
 *        index keys ─► subscribers woken
 * close: refuse puts ─► wait for queued ones ─► dispatch the rest
 *        ─► final commit/flush ─► flush queues and index ─► checkpoint
 *        ─► remove abort ─► release the lock
 * ```
 *
 * @module
 */

import { CommitLog, type PutAnswer } from "../commit_log/commit_log.ts";
import type { PutMessageResult } from "../commit_log/put_message_result.ts";
import { StoreCheckpoint } from "../commit_log/store_checkpoint.ts";
import { DispatchHints } from "../commit_log/dispatch_hints.ts";
import { StoreStats, type StoreStatsSnapshot } from "../commit_log/store_stats.ts";
import { totalmem } from "node:os";
import { performance } from "node:perf_hooks";
import { MqStoreError } from "../errors.ts";
import { indexKeysOf, type MessageInput, parseOffsetMsgId, tagsCodeOf } from "../record/mod.ts";
import { createPort } from "../runtime/mod.ts";
import type { DirectoryLock, RuntimePort } from "../runtime/port.ts";
import { nextTurn, onNextTurn } from "../segment/clock.ts";
import { ConsumeQueueFlushService } from "./consume_queue_flush_service.ts";
import { ConsumeQueueTable } from "./consume_queue_table.ts";
import { Dispatcher } from "./dispatcher.ts";
import type {
  GetMessageResult,
  GetMessagesOptions,
  GetMessageStatus,
  QueryMessageResult,
  QueryMessagesOptions,
  StoredMessage,
} from "./get_message_result.ts";
import { IndexService } from "./index_service.ts";
import { type MessageStoreOptions, type ResolvedStoreOptions, resolveOptions } from "./options.ts";
import { type RetentionReport, RetentionService } from "./retention_service.ts";
import { recoveryStart } from "./_recovery_start.ts";
import { ReadAhead } from "./_read_ahead.ts";
import { PageReader } from "./_page_reader.ts";

/**
 * What the commit-log recovery of the last open found.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * const { clean, maxOffset, endKind } = store.recovery;
 * console.log(clean, maxOffset, endKind);
 * await store.close();
 * ```
 */
export interface RecoveryReport {
  /** Whether the previous close was clean (no `abort` marker). */
  clean: boolean;
  /** Where the log ends. */
  maxOffset: number;
  /**
   * Records walked: every record, except in a store whose consume queues
   * give the queue offsets, where only the verified segments are read:
   * the last three after a clean close, from the segment holding the
   * checkpoint's flushed offset after a crash.
   */
  messageCount: number;
  /** `end`: zeros after the last record; `full`: the log ends a segment; `invalid`: cut at a bad record. */
  endKind: "end" | "invalid" | "full";
  /** Why the log was cut, when `endKind` is `invalid`. */
  detail: string;
  /** Where re-dispatch into the consume queues and the index started. */
  dispatchedFrom: number;
  /**
   * After a crash: whether the store was left open by a process of the
   * machine's current boot (its `abort` marker names the boot), so the page
   * cache held every byte that process wrote. The search for stale bytes
   * past the log's end, which a power loss can leave as far as the
   * writer's unflushed bound (a later page kept, an earlier one lost),
   * then read only as far as the one put that process was writing. False
   * after a clean close, a reboot, or a marker without a boot (RocketMQ's,
   * an older mqstore's).
   */
  sameBoot: boolean;
}

/**
 * One consume queue, as {@link MessageStore.queues} lists it.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * for (const queue of store.queues()) {
 *   console.log(queue.topic, queue.queueId, queue.maxQueueOffset - queue.minQueueOffset);
 * }
 * await store.close();
 * ```
 */
export interface QueueInfo {
  /** The topic. */
  topic: string;
  /** The queue id. */
  queueId: number;
  /** The first readable queue offset. */
  minQueueOffset: number;
  /** The queue offset the next message gets. */
  maxQueueOffset: number;
}

/**
 * Options of {@link MessageStore.subscribe}.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * const body = new TextEncoder().encode("hi");
 * await store.putMessage({ topic: "Orders", queueId: 0, body, properties: { TAGS: "created" } });
 * const controller = new AbortController();
 * const options = { signal: controller.signal, tags: ["created"] };
 * for await (const message of store.subscribe("Orders", 0, 0, options)) {
 *   console.log(message.queueOffset); // 0
 *   controller.abort();
 * }
 * await store.close();
 * ```
 */
export interface SubscribeOptions {
  /**
   * Ends the iteration (cleanly, without an error) when aborted.
   *
   * @default {undefined}
   */
  signal?: AbortSignal;
  /**
   * Keep only messages with one of these TAGS.
   *
   * @default {undefined}
   */
  tags?: readonly string[];
}

function join(directory: string, name: string): string {
  return directory.endsWith("/") ? directory + name : `${directory}/${name}`;
}

/**
 * What mqstore writes into the `abort` marker: `boot <id>` and a newline,
 * or nothing where the system has no boot id. RocketMQ only looks at
 * whether the marker exists (and writes it empty).
 */
const ABORT_BOOT_PREFIX = "boot ";

function abortMarker(bootId: string | undefined): Uint8Array {
  return new TextEncoder().encode(bootId === undefined ? "" : `${ABORT_BOOT_PREFIX}${bootId}\n`);
}

/** The boot an `abort` marker names, or undefined (empty: RocketMQ's or an older mqstore's). */
function bootOfAbort(bytes: Uint8Array): string | undefined {
  const text = new TextDecoder().decode(bytes);
  if (!text.startsWith(ABORT_BOOT_PREFIX) || !text.endsWith("\n")) return undefined;
  return text.slice(ABORT_BOOT_PREFIX.length, -1);
}

/**
 * Bytes a record holds beyond its body, at most: the fixed part with two
 * IPv6 hosts, the topic and the properties (below 32 KiB), rounded up.
 */
const RECORD_OVERHEAD_BYTES_MAX = 0x1_0000;
/** The dispatcher's read window where the port cannot map, at least. */
const DISPATCH_WINDOW_BYTES_MIN = 0x80_0000;
/**
 * Units one getMessages call looks at, at least (RocketMQ's
 * maxFilterMessageCount: 16,000 bytes of 20-byte units, or maxCount units).
 */
const MAX_FILTER_UNIT_COUNT = 16_000 / 20;
/** Messages one subscription read asks for. */
const SUBSCRIBE_BATCH_COUNT = 32;
/** Size of a consume-queue unit. */
const CQ_UNIT_BYTES = 20;
const HOURS_MS = 3_600_000;
/**
 * Most bytes appended but not dispatched before an ASYNC_FLUSH put's answer
 * waits for the dispatcher (to half of it). Dispatch runs in step with puts
 * until a record needs file I/O (a consume-queue or index file to create
 * or roll); a producer that never yields to the event loop would never let
 * that I/O complete, and the lag — what consumers cannot see yet — would
 * grow for as long as it runs. 4 MiB is about 10 ms of puts.
 */
const DISPATCH_LAG_MAX_BYTES = 0x40_0000;
/**
 * Longest stretch, in ms, of ASYNC_FLUSH puts answered in the caller's turn
 * before one is answered after a turn of the event loop. A producer that
 * awaits puts in a loop gives the loop no turn of its own: without this the
 * store's own timers (the flush interval), the completions of its
 * off-thread work (flushes, pre-faults) and everything else in the process
 * (a server's sockets) would wait until the loop ends. Measured (a 4 s
 * loop of awaited 1000 × 128 B batches, Deno and Bun): without the turn a
 * 100 ms interval timer fired 0–2 times of 40 and the commit log was
 * flushed 0–2 times; with it, 35 of 40 and 11–31 flushes, at the same
 * msgs/s (the flushes' CPU, which the loop used to leave to close, now
 * runs alongside it).
 */
const TURN_INTERVAL_MS = 10;
/** Puts answered between two looks at the clock for {@link TURN_INTERVAL_MS}. */
const TURN_CHECK_EVERY_PUTS = 32;
/**
 * Single ASYNC_FLUSH puts whose dispatch may wait for the next one, at
 * most: the dispatcher's fixed cost per call (its checks, the limit, the
 * waiter wakeup) is paid once for them all. Measured on awaited single
 * puts (128 B and 1 KiB, TAGS + KEYS, 4 queues, paired in one process):
 * 4–16 % less CPU a put on every runtime. Nobody in the store's own
 * process sees the delay: every read, wait and counter first dispatches what is owed (see
 * {@link MessageStore.#dispatchOwed}), a put with a subscriber waiting
 * dispatches at once, and what the last puts owe is dispatched at the
 * next turn of the event loop. Below the slice's record budget.
 */
const DISPATCH_DEFER_PUTS_MAX = 0x10;
/** Bytes appended and not dispatched below which a put may owe its dispatch. */
const DISPATCH_DEFER_BYTES_MAX = 0x1_0000;

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
 * await store.whenDispatched(store.maxOffset); // reads see dispatched messages
 * const page = await store.getMessages("Orders", 0, 0, 32);
 * console.log(page.status, page.messages.length); // FOUND 1
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
  #consumeQueues: ConsumeQueueTable;
  #index: IndexService | undefined;
  #dispatcher: Dispatcher;
  #flushService: ConsumeQueueFlushService;
  #retention: RetentionService;
  #sync: boolean;
  #closing: Promise<void> | undefined;
  #cancelDiskTimer: (() => void) | undefined;
  /** The disk check in flight. */
  #diskCheck: Promise<boolean> | undefined;
  /** Puts accepted by the store and not answered yet (close waits for them). */
  #putsInFlight = 0;
  /** Puts left before the next look at the clock (see {@link TURN_INTERVAL_MS}). */
  #putsToClockCheck = 0;
  /** When the next put answered in the caller's turn yields one first. */
  #turnDueMs = 0;
  #putsDrained: (() => void) | undefined;
  /** Subscribers waiting for the next dispatch (or close). */
  #dispatchWaiters = new Set<() => void>();
  /** Single puts whose dispatch is owed (see {@link DISPATCH_DEFER_PUTS_MAX}). */
  #owedPuts = 0;
  /** Cancels the turn that dispatches what the last puts owe, while set. */
  #owedTurn: (() => void) | undefined;
  #dispatchOwedBound = () => {
    this.#owedTurn = undefined;
    this.#dispatchOwed();
  };
  /** Close started: puts are refused, reads still served. */
  #refusingPuts = false;
  #closed = false;
  /** Prefetches ahead of getMessages readers. */
  #readAhead: ReadAhead;
  /**
   * How far behind the log end a message still counts as in memory:
   * accessMessageInMemoryMaxRatio percent of RAM (RocketMQ's rule).
   */
  #inMemoryReachBytes: number;
  #onPutBound = (result: PutMessageResult): PutMessageResult => this.#onPut(result);
  #onPutErrorBound = (error: unknown): never => {
    this.#putDone();
    throw error;
  };

  private constructor(
    directory: string,
    options: ResolvedStoreOptions,
    port: RuntimePort,
    parts: {
      commitLog: CommitLog;
      checkpoint: StoreCheckpoint;
      stats: StoreStats;
      lock: DirectoryLock | undefined;
      consumeQueues: ConsumeQueueTable;
      index: IndexService | undefined;
      dispatcher: Dispatcher;
    },
    recovery: RecoveryReport,
  ) {
    this.directory = directory;
    this.readOnly = options.readOnly;
    this.port = port;
    this.#options = options;
    this.#commitLog = parts.commitLog;
    this.#checkpoint = parts.checkpoint;
    this.#stats = parts.stats;
    this.#lock = parts.lock;
    this.#consumeQueues = parts.consumeQueues;
    this.#index = parts.index;
    this.#dispatcher = parts.dispatcher;
    this.#sync = options.flushDiskType === "SYNC_FLUSH";
    this.recovery = recovery;
    this.#inMemoryReachBytes = Math.floor(totalmem() * options.accessMessageInMemoryMaxRatio / 100);
    const commitLogQueue = parts.commitLog.queue;
    this.#readAhead = new ReadAhead({
      findFile: (offset) => commitLogQueue.findMappedFileByOffset(offset),
      windowBytes: readAheadWindowBytes(options.mappedFileSizeCommitLog),
    });
    const dispatcher = parts.dispatcher;
    this.#flushService = new ConsumeQueueFlushService({
      consumeQueues: parts.consumeQueues,
      index: parts.index,
      checkpoint: parts.checkpoint,
      clock: options.clock,
      intervalMs: options.flushIntervalConsumeQueue,
      leastPages: options.flushConsumeQueueLeastPages,
      thoroughIntervalMs: options.flushConsumeQueueThoroughInterval,
      progress: () => ({
        offset: dispatcher.dispatchedOffset,
        timestampMs: dispatcher.lastTimestampMs,
      }),
      onError: (error) =>
        options.onWarning(
          `mqstore: flushing the consume queues of ${directory} failed: ${
            error instanceof Error ? error.message : String(error)
          }`,
        ),
    });
    this.#retention = new RetentionService({
      commitLog: parts.commitLog.queue,
      consumeQueues: parts.consumeQueues,
      index: parts.index,
      clock: options.clock,
      intervalMs: options.cleanResourceInterval,
      fileReservedTimeMs: options.fileReservedTime * HOURS_MS,
      deleteWhenHours: options.deleteWhenHours,
      diskMaxUsedSpaceRatio: options.diskMaxUsedSpaceRatio,
      diskSpaceCleanForciblyRatio: options.diskSpaceCleanForciblyRatio,
      cleanFileForciblyEnable: options.cleanFileForciblyEnable,
      forceAfterMs: options.destroyMapedFileIntervalForcibly,
      diskUsedPercent: () => this.#diskUsedPercent(),
      onWarning: options.onWarning,
    });
  }

  /**
   * Opens (creating if needed) the store in `directory`: takes the lock,
   * marks the store open (`abort`), recovers the commit log, the consume
   * queues and the index, and starts the services. A writable store
   * returns once the commit-log segment the first put goes to exists, is
   * mapped and has its first pages pre-faulted (a fresh store creates it
   * here: about 20 ms on Deno here, 45 ms on Bun, whose pre-fault thread
   * starts then), so that the first puts run at full speed.
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
    let consumeQueues: ConsumeQueueTable | undefined;
    let index: IndexService | undefined;
    try {
      if (!readOnly) {
        await port.makeDirectory(directory);
        lock = await port.lockDirectory(directory);
      } else if ((await port.stat(directory))?.isDirectory !== true) {
        throw new MqStoreError("NOT_FOUND", `Cannot open ${directory} read-only: no such store`);
      }
      const abortPath = join(directory, "abort");
      const bootId = await port.bootId();
      const left = await port.readFile(abortPath);
      const clean = left === undefined;
      const sameBoot = !clean && bootId !== undefined && bootOfAbort(left) === bootId;
      if (!readOnly && clean) {
        // Before any other write: a crash from here on must read as unclean.
        await port.writeFileAtomic(abortPath, abortMarker(bootId));
      }
      const checkpoint = await StoreCheckpoint.load(port, join(directory, "checkpoint"));
      const stats = new StoreStats();
      // Set once built: a new queue whose file cannot be made stops dispatch.
      let dispatching: Dispatcher | undefined;
      consumeQueues = new ConsumeQueueTable({
        port,
        rootDirectory: directory,
        mappedFileSizeConsumeQueue: resolved.mappedFileSizeConsumeQueue,
        readOnly,
        sparse: resolved.sparseFiles,
        clock: resolved.clock,
        onError: (error) => dispatching?.fail(error),
      });
      await consumeQueues.load();
      // After a crash every unit from the checkpoint's point on is rebuilt
      // by re-dispatch (which starts there or before): a torn crash can
      // leave holes in any file past it, not only in the last three.
      const consumeQueueEnd = await consumeQueues.recover({
        afterCrash: !clean,
        fromCommitLogOffset: checkpoint.consumeQueueOffset,
      });
      if (!readOnly) await removeEmptySegments(port, join(directory, "commitlog"));
      // Set once built: a commit that makes write-buffer bytes readable
      // wakes the dispatcher (transient store pool, no mmap).
      let follower: Dispatcher | undefined;
      // Under SYNC_FLUSH a flush makes records dispatchable: the synchronous
      // slice takes them from their hints at once (the loop gets what it
      // leaves). Waking the loop instead cost every lone SYNC put a promise
      // chain and a read range with its closure: about 3 of its 40 µs of
      // user CPU on Node 20.
      const onReadable = resolved.flushDiskType === "SYNC_FLUSH"
        ? () => follower?.dispatchNow()
        : () => follower?.wakeup();
      // The put path describes each record it appends, so that the
      // dispatcher need not decode it (re-dispatch at open decodes).
      const hints = readOnly ? undefined : new DispatchHints({
        withKeys: resolved.messageIndexEnable,
        delayLevelsMs: resolved.delayLevelsMs,
      });
      commitLog = new CommitLog({
        ...resolved,
        port,
        directory: join(directory, "commitlog"),
        delayLevelCount: resolved.delayLevelsMs.length,
        checkpoint,
        stats,
        onReadable,
        dispatchHints: hints,
      });
      // For an mqstore store whose consume queues are there, the queue
      // offsets come from them (below, as RocketMQ; after a crash once
      // re-dispatch has brought them to the log end): the segments before
      // the verified ones need not be read. A RocketMQ checkpoint (no
      // mqstore block) or missing queues: walk them all. Read-only opens
      // walk them too (tools report the records scanned).
      const tableFromConsumeQueues = !readOnly && checkpoint.consumeQueueOffset >= 0 &&
        consumeQueueEnd >= 0;
      // As loaded: the scan sets it to where the log now ends.
      const checkpointLogOffset = checkpoint.commitLogOffset;
      const scan = await commitLog.loadAndRecover(clean, { tableFromConsumeQueues, sameBoot });
      const endOffset = commitLog.maxOffset;
      const minOffset = commitLog.minOffset;
      if (resolved.messageIndexEnable) {
        index = new IndexService({
          port,
          rootDirectory: directory,
          maxHashSlotNum: resolved.maxHashSlotNum,
          maxIndexNum: resolved.maxIndexNum,
          clock: resolved.clock,
          readOnly,
          sparse: resolved.sparseFiles,
        });
        // After the log's recovery: under ASYNC_FLUSH the checkpoint's
        // index point (what was dispatched) can be past the log a power
        // loss left, and a clean open cuts a damaged log's tail. Entries
        // past the log's end would name records that are gone, and their
        // file's end would make the dispatcher skip the new records
        // written there: the load cuts them, whatever the exit.
        await index.load({
          lastExitOK: clean,
          indexMsgTimestamp: checkpoint.indexMsgTimestamp,
          indexOffset: checkpoint.indexOffset,
          logEndOffset: endOffset,
          // A RocketMQ checkpoint (-1) needs nothing: its start is read
          // from the files kept.
          beforeDrop: async (droppedFromOffset) => {
            if (checkpoint.indexOffset <= droppedFromOffset) return;
            checkpoint.indexOffset = droppedFromOffset;
            await checkpoint.flush();
          },
        });
      }
      const start = await recoveryStart({
        clean,
        checkpoint,
        files: commitLog.queue.files,
        minOffset,
        endOffset,
        consumeQueueEnd,
        index,
      });
      if (!readOnly) await lowerCheckpoint(checkpoint, checkpointLogOffset, endOffset);
      const log = commitLog;
      const sync = resolved.flushDiskType === "SYNC_FLUSH";
      // Set once built: the dispatcher wakes its subscribers.
      let store: MessageStore | undefined = undefined;
      const recordBytesMax = resolved.maxMessageSize + RECORD_OVERHEAD_BYTES_MAX;
      const makeDispatcher = (fromOffset: number) =>
        new Dispatcher({
          commitLog: log.queue,
          // Never past what readers may see: with a write buffer (the
          // pool, no mmap) appended bytes become readable at the commit.
          limit: () => sync ? log.flushedOffset : log.readableOffset,
          consumeQueues: consumeQueues!,
          index,
          delayLevelsMs: resolved.delayLevelsMs,
          fromOffset,
          indexSkipThrough: start.indexSkipThrough,
          windowBytes: Math.max(DISPATCH_WINDOW_BYTES_MIN, recordBytesMax),
          hints,
          onDispatched: () => {
            if (store !== undefined) store.#wakeDispatchWaiters();
          },
          onError: (error) => {
            resolved.onWarning(
              `mqstore: dispatch into the consume queues of ${directory} stopped (puts are refused until reopened): ${error.message}`,
            );
            // whenDispatched() callers learn of the failure.
            if (store !== undefined) store.#wakeDispatchWaiters();
          },
        });
      let dispatcher = makeDispatcher(start.fromOffset);
      dispatching = dispatcher;
      // Each step holds at least one whole record, so every step progresses.
      const stepBytes = Math.max(resolved.recoveryCheckpointIntervalBytes, recordBytesMax);
      if (!readOnly) {
        try {
          await redispatch(dispatcher, endOffset, stepBytes, consumeQueues, index, checkpoint);
        } catch (error) {
          if (!(error instanceof RangeError)) throw error;
          // A consume queue lacks units before the start (a checkpoint that
          // claimed more than was durable): replay the whole log.
          resolved.onWarning(
            `mqstore: re-dispatch from ${start.fromOffset} found a gap (${error.message}); replaying from ${minOffset}`,
          );
          dispatcher = makeDispatcher(minOffset);
          dispatching = dispatcher;
          await redispatch(dispatcher, endOffset, stepBytes, consumeQueues, index, checkpoint);
        }
        // After re-dispatch, as RocketMQ: a queue whose units were all lost
        // must not take the log end as its last unit's end, or re-dispatch
        // would skip every unit as a repeat.
        await consumeQueues.truncateDirtyLogicFiles(endOffset);
        // Queue offsets from the consume queues: a queue whose records were
        // all deleted by retention keeps counting from where it was.
        for (const queue of consumeQueues.queues()) {
          const counter = commitLog.topicQueueTable.counter(queue.topic, queue.queueId);
          counter.next = Math.max(counter.next, queue.maxOffsetInQueue);
        }
      }
      await consumeQueues.correctMinOffset(minOffset);
      if (!readOnly && !clean && !sameBoot) {
        // Recovered (whatever a power loss left past the log's end is
        // zeroed): from here on the page cache of this boot holds the
        // store, and after a crash of this process the search for stale
        // bytes reads one put past the end. A crash before this line
        // leaves the old marker, and the next open searches as far again.
        await port.writeFileAtomic(abortPath, abortMarker(bootId));
      }
      store = new MessageStore(
        directory,
        resolved,
        port,
        { commitLog, checkpoint, stats, lock, consumeQueues, index, dispatcher },
        {
          clean,
          maxOffset: scan.cutOffset,
          messageCount: scan.messageCount,
          endKind: scan.endKind,
          detail: scan.detail,
          dispatchedFrom: start.fromOffset,
          sameBoot,
        },
      );
      if (!readOnly) {
        await store.checkDiskSpace();
        follower = dispatcher;
        commitLog.start();
        dispatcher.start();
        store.#flushService.start();
        store.#retention.start();
        store.#scheduleDiskCheck();
        // The first puts find their segment created, mapped and its first
        // pages pre-faulted: on a fresh store they waited 15–45 ms for the
        // creation of a 1 GiB segment. Costs open that long (never rejects).
        await commitLog.whenActiveSegmentReady();
      }
      return store;
    } catch (error) {
      await commitLog?.close().catch(() => {});
      await consumeQueues?.close().catch(() => {});
      await index?.close().catch(() => {});
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
    if (this.#refusingPuts || this.#dispatcher.failure !== undefined) {
      return Promise.resolve(this.#refusal());
    }
    let answer: PutAnswer;
    try {
      answer = this.#commitLog.putMessageNow(message);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#settle(answer, true);
  }

  /**
   * Appends a batch (one topic and queue; see SPEC §3) as consecutive
   * records with consecutive queue offsets, all in one segment.
   */
  putMessages(messages: readonly MessageInput[]): Promise<PutMessageResult> {
    if (this.#refusingPuts || this.#dispatcher.failure !== undefined) {
      return Promise.resolve(this.#refusal());
    }
    let answer: PutAnswer;
    try {
      answer = this.#commitLog.putMessagesNow(messages);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#settle(answer, false);
  }

  /**
   * The promise a put returns. Most ASYNC_FLUSH puts are answered in the
   * caller's turn: their result is wrapped as it is, with no reaction
   * chained (each costs about as much as the append itself); a put that
   * waits (queued, or a sync flush) is tracked until it settles.
   *
   * @param deferrable Whether its dispatch may wait for the next puts (a
   *   single put; see {@link DISPATCH_DEFER_PUTS_MAX}).
   */
  #settle(answer: PutAnswer, deferrable: boolean): Promise<PutMessageResult> {
    if (answer instanceof Promise) {
      // A put waiting for the group commit's flush is returned as it is:
      // the group commit answers it (close waits for that) and its flush
      // dispatches the record. One promise and reaction less per put: at
      // 256 producers, 7 alternated pairs on a loaded machine, median CPU
      // per SYNC put (Bun 7.7 → 6.1 µs, Deno 6.4 → 6.0 µs).
      if (answer === this.#commitLog.lastFlushWait) return answer;
      this.#putsInFlight++;
      return answer.then(this.#onPutBound, this.#onPutErrorBound);
    }
    if (this.#sync) return Promise.resolve(this.#afterPut(answer));
    // ASYNC_FLUSH, answered in the caller's turn: #afterPut's dispatch in
    // step (a single put may owe it: see DISPATCH_DEFER_PUTS_MAX), and the
    // appended offset read once.
    const append = answer.appendResult;
    if (append === undefined) return Promise.resolve(answer);
    if (
      deferrable && ++this.#owedPuts < DISPATCH_DEFER_PUTS_MAX &&
      append.wroteOffset - this.#dispatcher.dispatchedOffset < DISPATCH_DEFER_BYTES_MAX &&
      this.#dispatchWaiters.size === 0
    ) {
      this.#owedTurn ??= onNextTurn(this.#dispatchOwedBound);
    } else {
      this.#owedPuts = 0;
      this.#dispatcher.dispatchNow();
    }
    if (append.wroteOffset - this.#dispatcher.dispatchedOffset <= DISPATCH_LAG_MAX_BYTES) {
      if (--this.#putsToClockCheck > 0) return Promise.resolve(answer);
      this.#putsToClockCheck = TURN_CHECK_EVERY_PUTS;
      const now = performance.now();
      if (now < this.#turnDueMs) return Promise.resolve(answer);
      this.#turnDueMs = now + TURN_INTERVAL_MS;
      return nextTurn().then(() => answer);
    }
    // The message is stored whatever dispatch does next: the answer only
    // waits, and a closed store or failed dispatch ends the wait.
    const settled = () => answer;
    return this.whenDispatched(append.wroteOffset - DISPATCH_LAG_MAX_BYTES / 2)
      .then(settled, settled);
  }

  /**
   * The answer to a put the store refuses: it is closing, or dispatch into
   * the consume queues and the index failed. After a dispatch failure the
   * log must not grow past what consumers can find: puts stop until a
   * reopen re-dispatches the rest (reads keep being served).
   */
  #refusal(): PutMessageResult {
    const failure = this.#dispatcher.failure;
    this.#stats.recordFailure("SERVICE_NOT_AVAILABLE");
    return {
      status: "SERVICE_NOT_AVAILABLE",
      error: this.#refusingPuts || failure === undefined
        ? new MqStoreError(
          "SERVICE_NOT_AVAILABLE",
          `Cannot put into ${this.directory}: the store is closed`,
        )
        : new MqStoreError(
          "SERVICE_NOT_AVAILABLE",
          `Cannot put into ${this.directory}: dispatch into the consume queues and the index failed at commit-log offset ${this.#dispatcher.dispatchedOffset} (${failure.message}); reopen the store`,
          { cause: failure },
        ),
    };
  }

  /** A tracked put settled (see {@link MessageStore.#settle}). */
  #onPut(result: PutMessageResult): PutMessageResult {
    this.#putDone();
    return this.#afterPut(result);
  }

  /**
   * After a put: dispatch once the record may be dispatched, in step with
   * the put (a bounded synchronous slice; the loop does what needs I/O).
   */
  #afterPut(result: PutMessageResult): PutMessageResult {
    const append = result.appendResult;
    if (append !== undefined) {
      const end = append.wroteOffset + append.wroteBytes;
      // A flushed SYNC put is dispatched when the group commit reports its
      // flush (once the next flush has begun: see its module doc).
      if (!this.#sync) {
        this.#dispatcher.dispatchNow();
      } else if (this.#commitLog.flushedOffset < end) {
        // WAIT=false or a flush timeout: dispatch once it is durable.
        this.#commitLog.whenFlushed(end).then(() => this.#dispatcher.dispatchNow(), () => {});
      }
    }
    return result;
  }

  /**
   * Under SYNC_FLUSH a flushed group is dispatched once the next flush has
   * begun (see GroupCommitService), so that its dispatch overlaps the
   * device: a read by queue or key first dispatches what is flushed, and a
   * put answered PUT_OK is readable there at once, as before.
   *
   * @returns A wait for the rest when the synchronous slice did not reach
   *   the flushed offset (it never rejects), else undefined.
   */
  #catchUpDispatch(): Promise<void> | undefined {
    this.#dispatchOwed();
    if (!this.#sync || this.readOnly) return undefined;
    const flushed = this.#commitLog.flushedOffset;
    if (this.#dispatcher.dispatchedOffset >= flushed) return undefined;
    this.#dispatcher.dispatchNow();
    if (this.#dispatcher.dispatchedOffset >= flushed) return undefined;
    return this.whenDispatched(flushed).catch(() => {});
  }

  /**
   * Dispatches what the last single puts owe (see
   * {@link DISPATCH_DEFER_PUTS_MAX}): called before anything in the
   * process looks at the consume queues, the index or the dispatched
   * offset, so that a put answered is found as if dispatched with it.
   */
  #dispatchOwed(): void {
    if (this.#owedPuts === 0) return;
    this.#owedPuts = 0;
    this.#dispatcher.dispatchNow();
  }

  #putDone(): void {
    if (--this.#putsInFlight === 0) this.#putsDrained?.();
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

  /** Offset up to which records are in the consume queues and the index. */
  get dispatchedOffset(): number {
    this.#dispatchOwed();
    return this.#dispatcher.dispatchedOffset;
  }

  /**
   * Resolves once the commit log is durable up to `offset` (for example an
   * async put's `wroteOffset + wroteBytes`); rejects if a flush failed.
   */
  whenFlushed(offset: number): Promise<void> {
    return this.#commitLog.whenFlushed(offset);
  }

  /**
   * Resolves once every record below `offset` is dispatched (readable by
   * getMessages and queryMessages); rejects when the store closes or
   * dispatch failed first.
   */
  async whenDispatched(offset: number): Promise<void> {
    this.#dispatchOwed();
    // Bounded by the records to dispatch: each wakeup means progress.
    while (this.#dispatcher.dispatchedOffset < offset) {
      const failure = this.#dispatcher.failure;
      if (failure !== undefined) throw failure;
      if (this.#closed) {
        throw new MqStoreError("CLOSED", `The store closed before offset ${offset} was dispatched`);
      }
      await this.#waitForDispatch(this.#dispatcher.sequence, undefined);
    }
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
    this.#dispatchOwed();
    const snapshot = this.#stats.snapshot();
    snapshot.dispatchHintedCount = this.#dispatcher.hintedRecordCount;
    snapshot.dispatchDecodedCount = this.#dispatcher.decodedRecordCount;
    return snapshot;
  }

  /** The values the checkpoint holds now (written on close and at thorough flushes). */
  get checkpoint(): Readonly<StoreCheckpoint> {
    return this.#checkpoint;
  }

  // -------------------------------------------------------------------
  // Reads

  /**
   * The message stored at commit-log offset `offset`, or undefined when no
   * record starts there (or it is not readable yet: under SYNC_FLUSH only
   * flushed records are served). A copy, decoded on access (see
   * {@link StoredMessage}).
   *
   * @throws {RangeError} For an offset that is not a non-negative integer.
   */
  getMessage(offset: number): Promise<StoredMessage | undefined> {
    checkOffset("offset", offset);
    return this.#readMessage(offset);
  }

  /**
   * The message of an offsetMsgId (store host + offset; see SPEC §3), or
   * undefined when none is stored there.
   *
   * @throws {RangeError} When `msgId` is not an offsetMsgId.
   */
  async getMessageByMsgId(msgId: string): Promise<StoredMessage | undefined> {
    const parsed = parseOffsetMsgId(msgId);
    const message = await this.#readMessage(parsed.physicalOffset);
    return message !== undefined && message.msgId === msgId.toUpperCase() ? message : undefined;
  }

  /** The first readable queue offset of a queue (0 for a queue never written). */
  getMinQueueOffset(topic: string, queueId: number): number {
    this.#dispatchOwed();
    return this.#consumeQueues.find(topic, queueId)?.minOffsetInQueue ?? 0;
  }

  /** Every consume queue with its readable range, topic by topic. */
  queues(): QueueInfo[] {
    this.#dispatchOwed();
    const queues: QueueInfo[] = [];
    for (const queue of this.#consumeQueues.queues()) {
      queues.push({
        topic: queue.topic,
        queueId: queue.queueId,
        minQueueOffset: queue.minOffsetInQueue,
        maxQueueOffset: queue.maxOffsetInQueue,
      });
    }
    return queues;
  }

  /** Number of index files (0 without the index). */
  get indexFileCount(): number {
    this.#dispatchOwed();
    return this.#index?.files.length ?? 0;
  }

  /** The queue offset the next dispatched message of a queue gets (0 for a queue never written). */
  getMaxQueueOffset(topic: string, queueId: number): number {
    this.#dispatchOwed();
    return this.#consumeQueues.find(topic, queueId)?.maxOffsetInQueue ?? 0;
  }

  /**
   * Up to `maxCount` messages of a queue from `queueOffset` (RocketMQ's
   * `getMessage`): the status says why none came, and `nextQueueOffset`
   * where to read next (RocketMQ's nextBeginOffset rules on a master).
   * A pull is also bounded as RocketMQ bounds it: by
   * `maxTransferBytesOnMessageInMemory`/`maxTransferCountOnMessageInMemory`,
   * or the `…InDisk` pair for messages further behind the log end than
   * `accessMessageInMemoryMaxRatio` percent of RAM; `options.maxBytes`
   * replaces both. One message always goes, however large. Sequential
   * readers get the commit log read ahead of them (`WILLNEED`). The
   * messages share one copy of their records and decode on access (see
   * {@link StoredMessage}); CRCs are not checked on reads, as in RocketMQ.
   *
   * @throws {RangeError} For a negative or fractional offset or count.
   */
  async getMessages(
    topic: string,
    queueId: number,
    queueOffset: number,
    maxCount: number,
    options: GetMessagesOptions = {},
  ): Promise<GetMessageResult> {
    checkOffset("queueOffset", queueOffset);
    if (!Number.isSafeInteger(maxCount) || maxCount <= 0) {
      throw new RangeError(`maxCount is ${maxCount}; it must be a positive integer`);
    }
    const catchUp = this.#catchUpDispatch();
    if (catchUp !== undefined) await catchUp;
    const result: GetMessageResult = {
      status: "NO_MATCHED_LOGIC_QUEUE",
      messages: [],
      nextQueueOffset: 0,
      minQueueOffset: 0,
      maxQueueOffset: 0,
    };
    const cq = this.#closed ? undefined : this.#consumeQueues.find(topic, queueId);
    if (cq === undefined) return result;
    const minOffset = cq.minOffsetInQueue;
    const maxOffset = cq.maxOffsetInQueue;
    result.minQueueOffset = minOffset;
    result.maxQueueOffset = maxOffset;
    if (maxOffset === 0) {
      result.status = "NO_MESSAGE_IN_QUEUE";
      return result;
    }
    if (queueOffset < minOffset) {
      result.status = "OFFSET_TOO_SMALL";
      result.nextQueueOffset = minOffset;
      return result;
    }
    if (queueOffset === maxOffset) {
      result.status = "OFFSET_OVERFLOW_ONE";
      result.nextQueueOffset = queueOffset;
      return result;
    }
    if (queueOffset > maxOffset) {
      result.status = "OFFSET_OVERFLOW_BADLY";
      result.nextQueueOffset = minOffset === 0 ? minOffset : maxOffset;
      return result;
    }
    const tagsCodes = options.tags === undefined
      ? undefined
      : new Set(options.tags.map((tag) => tagsCodeOf(tag)));
    const tags = options.tags === undefined ? undefined : new Set(options.tags);
    const maxBytes = options.maxBytes;
    if (maxBytes !== undefined && (!Number.isSafeInteger(maxBytes) || maxBytes <= 0)) {
      throw new RangeError(`maxBytes is ${maxBytes}; it must be a positive integer`);
    }
    const readableEnd = this.#readableEnd();
    // RocketMQ's "in memory or on disk" reference: the log end as the call starts.
    const logEnd = this.#commitLog.maxOffset;
    const filterMax = Math.max(MAX_FILTER_UNIT_COUNT, maxCount);
    const units = await cq.readUnits(queueOffset, Math.min(filterMax, maxOffset - queueOffset));
    if (units === undefined) {
      const perFile = this.#options.mappedFileSizeConsumeQueue / CQ_UNIT_BYTES;
      result.status = "OFFSET_FOUND_NULL";
      result.nextQueueOffset = queueOffset + perFile - queueOffset % perFile;
      return result;
    }
    result.status = "NO_MATCHED_MESSAGE";
    let i = 0;
    let skipBelow = -1;
    let bytesTotal = 0;
    let readEnd = -1;
    // Each segment is held once for the whole page, each record checked in
    // place and copied out with the others (see _page_reader.ts).
    const reader = new PageReader(this.#commitLog.queue, readableEnd);
    try {
      for (; i < units.count; i++) {
        const count = reader.count;
        if (count >= maxCount) break;
        const offset = units.commitLogOffsetAt(i);
        const size = units.sizeAt(i);
        // A unit past what may be served (read-only beside a crash, or not
        // flushed yet): the queue ends here for now.
        if (offset + size > readableEnd) break;
        if (offset < skipBelow) continue;
        // Checked before the tags filter, as RocketMQ's isTheBatchFull: the
        // first message always goes, however large.
        if (count > 0 && this.#batchFull(bytesTotal + size, count, logEnd - offset, maxBytes)) {
          break;
        }
        if (tagsCodes !== undefined && !tagsCodes.has(units.tagsCodeAt(i))) continue;
        // A promise only on ports that cannot map.
        const added = reader.add(offset, size);
        if (!(added === true || (added !== false && await added))) {
          if (reader.count === 0) result.status = "MESSAGE_WAS_REMOVING";
          // The segment is gone: skip to the next one.
          const fileSize = this.#commitLog.fileSizeBytes;
          skipBelow = offset + fileSize - offset % fileSize;
          continue;
        }
        readEnd = offset + size;
        if (tags !== undefined && !tags.has(reader.lastTags() ?? "")) {
          reader.dropLast();
          continue;
        }
        bytesTotal += size;
        result.status = "FOUND";
        skipBelow = -1;
      }
      result.messages = reader.messages();
    } finally {
      reader.release();
      units.release();
    }
    result.nextQueueOffset = queueOffset + i;
    if (readEnd >= 0) this.#readAhead.afterRead(cq, readEnd);
    return result;
  }

  /**
   * RocketMQ's `isTheBatchFull` for a call that holds `count` messages
   * already: would `bytesTotal` (with the next one) or one more message pass
   * the limit of its tier? The next message is "on disk" when it lies more
   * than `accessMessageInMemoryMaxRatio` percent of RAM behind the log end.
   * A per-call `maxBytes` replaces both tiers.
   */
  #batchFull(
    bytesTotal: number,
    count: number,
    behindEndBytes: number,
    maxBytes: number | undefined,
  ): boolean {
    if (maxBytes !== undefined) return bytesTotal > maxBytes;
    const options = this.#options;
    return behindEndBytes > this.#inMemoryReachBytes
      ? bytesTotal > options.maxTransferBytesOnMessageInDisk ||
        count >= options.maxTransferCountOnMessageInDisk
      : bytesTotal > options.maxTransferBytesOnMessageInMemory ||
        count >= options.maxTransferCountOnMessageInMemory;
  }

  /**
   * Messages of `topic` carrying `key` (UNIQ_KEY or a KEYS token), newest
   * first: the index matches key hashes, so each candidate is read and its
   * keys compared.
   */
  async queryMessages(
    topic: string,
    key: string,
    options: QueryMessagesOptions = {},
  ): Promise<QueryMessageResult> {
    if (typeof topic !== "string" || typeof key !== "string") {
      throw new TypeError("queryMessages() takes a topic and a key, both strings");
    }
    const catchUp = this.#catchUpDispatch();
    if (catchUp !== undefined) await catchUp;
    const result: QueryMessageResult = {
      messages: [],
      indexLastUpdateTimestamp: 0,
      indexLastUpdatePhyoffset: 0,
    };
    const index = this.#index;
    if (index === undefined || this.#closed) return result;
    const found = index.queryOffset(
      topic,
      key,
      options.maxCount ?? 64,
      options.beginTimestamp ?? 0,
      options.endTimestamp ?? Number.MAX_SAFE_INTEGER,
    );
    result.indexLastUpdateTimestamp = found.indexLastUpdateTimestamp;
    result.indexLastUpdatePhyoffset = found.indexLastUpdatePhyoffset;
    const seen = new Set<number>();
    for (const offset of found.phyOffsets) {
      if (seen.has(offset)) continue;
      seen.add(offset);
      const message = await this.#readMessage(offset);
      if (
        message !== undefined && message.topic === topic &&
        indexKeysOf(message.sysFlag, message.properties).includes(key)
      ) {
        result.messages.push(message);
      }
    }
    return result;
  }

  /**
   * Yields the messages of a queue from `fromQueueOffset` on, as they are
   * dispatched: woken by the dispatcher, never by polling. Ends (without
   * an error) when the store closes or `options.signal` aborts. A start
   * below the queue's min offset moves up to it.
   *
   * @example
   * ```ts ignore
   * const controller = new AbortController();
   * for await (const message of store.subscribe("Orders", 0, 0, { signal: controller.signal })) {
   *   handle(message);
   * }
   * ```
   */
  async *subscribe(
    topic: string,
    queueId: number,
    fromQueueOffset: number,
    options: SubscribeOptions = {},
  ): AsyncGenerator<StoredMessage, void, undefined> {
    checkOffset("fromQueueOffset", fromQueueOffset);
    const signal = options.signal;
    const readOptions: GetMessagesOptions = options.tags === undefined
      ? {}
      : { tags: options.tags };
    let next = fromQueueOffset;
    // Bounded by the store's life: each round yields, moves on, or waits.
    while (!this.#closed && signal?.aborted !== true) {
      const sequence = this.#dispatcher.sequence;
      const page = await this.getMessages(topic, queueId, next, SUBSCRIBE_BATCH_COUNT, readOptions);
      if (page.status === "FOUND") {
        for (const message of page.messages) {
          if (this.#closed || isAborted(signal)) return;
          yield message;
        }
        next = page.nextQueueOffset;
        continue;
      }
      if (page.nextQueueOffset > next && moves(page.status)) {
        next = page.nextQueueOffset;
        continue;
      }
      await this.#waitForDispatch(sequence, signal);
    }
  }

  /** Resolves at the next dispatch after `sequence`, at close, or on abort. */
  #waitForDispatch(sequence: number, signal: AbortSignal | undefined): Promise<void> {
    this.#dispatchOwed();
    if (this.#dispatcher.sequence !== sequence || this.#closed || signal?.aborted === true) {
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const wake = () => {
        this.#dispatchWaiters.delete(wake);
        signal?.removeEventListener("abort", wake);
        resolve();
      };
      this.#dispatchWaiters.add(wake);
      signal?.addEventListener("abort", wake, { once: true });
    });
  }

  #wakeDispatchWaiters(): void {
    // Called after every put's dispatch: no copy when nobody waits.
    if (this.#dispatchWaiters.size === 0) return;
    for (const wake of [...this.#dispatchWaiters]) wake();
  }

  /** Where served records must end: flushed under SYNC_FLUSH, appended otherwise. */
  #readableEnd(): number {
    return this.#sync && !this.readOnly ? this.#commitLog.flushedOffset : this.#commitLog.maxOffset;
  }

  /**
   * Reads the record at `offset`: checked in place (no CRC, as RocketMQ
   * reads), copied once, decoded on access (a LazyMessage).
   */
  async #readMessage(offset: number): Promise<StoredMessage | undefined> {
    if (this.#closed) return undefined;
    const reader = new PageReader(this.#commitLog.queue, this.#readableEnd());
    try {
      // A promise only on ports that cannot map.
      const added = reader.add(offset, -1);
      if (!(added === true || (added !== false && await added))) return undefined;
      return reader.messages()[0];
    } finally {
      reader.release();
    }
  }

  // -------------------------------------------------------------------
  // Retention and disk space

  /**
   * Runs retention now (it also runs every `cleanResourceInterval`):
   * deletes expired commit-log segments at the `deleteWhen` hours (any
   * hour with `now`, or when the disk is past its ratios), then the
   * consume-queue and index files wholly below the new min offset.
   *
   * @throws {MqStoreError} `SERVICE_NOT_AVAILABLE` on a read-only store.
   */
  deleteExpiredFiles(options: { now?: boolean } = {}): Promise<RetentionReport> {
    if (this.readOnly) {
      return Promise.reject(
        new MqStoreError(
          "SERVICE_NOT_AVAILABLE",
          `Cannot delete files of ${this.directory}: read-only`,
        ),
      );
    }
    return this.#retention.run(options);
  }

  async #diskUsedPercent(): Promise<number> {
    const space = await this.port.diskSpace(this.directory);
    return space.totalBytes === 0
      ? 0
      : (space.totalBytes - space.availableBytes) * 100 / space.totalBytes;
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
    const usedPercent = await this.#diskUsedPercent();
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
   * Closes the store: refuses new puts, waits for queued ones, dispatches
   * the rest, flushes the commit log, the consume queues and the index,
   * writes the checkpoint, removes `abort` and releases the lock. Ends
   * every subscription. Idempotent.
   *
   * @throws {MqStoreError} The final flush error; the store is closed anyway
   *   but `abort` stays, so the next open recovers as after a crash.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    let error: unknown;
    const attempt = async (step: () => Promise<unknown> | undefined) => {
      try {
        await step();
      } catch (caught) {
        error ??= caught;
      }
    };
    this.#refusingPuts = true;
    if (this.#putsInFlight > 0) {
      await new Promise<void>((resolve) => this.#putsDrained = resolve);
    }
    await this.#commitLog.whenFlushWaitsAnswered();
    this.#closed = true;
    this.#wakeDispatchWaiters();
    // What the last puts owe is dispatched below (dispatchUpTo).
    this.#owedTurn?.();
    this.#owedTurn = undefined;
    this.#cancelDiskTimer?.();
    await this.#diskCheck?.catch(() => {});
    await attempt(() => this.#retention.close());
    await attempt(() => this.#flushService.close());
    await attempt(() => this.#dispatcher.close());
    if (!this.readOnly && this.#commitLog.failure === undefined) {
      if (this.#sync) await this.#commitLog.whenFlushed(this.#commitLog.maxOffset).catch(() => {});
      await attempt(() =>
        this.#dispatcher.dispatchUpTo(
          this.#sync ? this.#commitLog.flushedOffset : this.#commitLog.maxOffset,
        )
      );
    }
    await attempt(() => this.#commitLog.close());
    if (!this.readOnly && error === undefined && this.#commitLog.failure === undefined) {
      await attempt(() => this.#flushService.flushAll(false));
    }
    await attempt(() => this.#consumeQueues.close());
    await attempt(() => this.#index?.close());
    if (!this.readOnly && error === undefined && this.#commitLog.failure === undefined) {
      await attempt(async () => {
        await this.#checkpoint.flush();
        await this.port.remove(join(this.directory, "abort"));
        await this.port.syncDirectory(this.directory);
      });
    }
    try {
      await this.#lock?.release();
    } catch (caught) {
      error ??= caught;
    }
    if (error !== undefined) throw error;
  }
}

/** Largest read-ahead window: 2 to 4 MiB are advised ahead of a reader. */
const READ_AHEAD_WINDOW_BYTES_MAX = 0x20_0000;

/** The read-ahead window for a segment size: at most a quarter segment, whole pages. */
function readAheadWindowBytes(segmentBytes: number): number {
  const quarter = Math.floor(segmentBytes / 4 / 0x1000) * 0x1000;
  return Math.max(0x1000, Math.min(READ_AHEAD_WINDOW_BYTES_MAX, quarter));
}

/** Whether a status's nextQueueOffset skips ahead (a subscription follows it). */
function moves(status: GetMessageStatus): boolean {
  return status === "OFFSET_TOO_SMALL" || status === "NO_MATCHED_MESSAGE" ||
    status === "MESSAGE_WAS_REMOVING" || status === "OFFSET_FOUND_NULL";
}

function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}

function checkOffset(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} is ${value}; it must be a non-negative integer`);
  }
}

/**
 * Re-dispatches up to `endOffset`, writing the checkpoint at least every
 * `stepBytes` (more than the largest record) as it goes, so a restart
 * during a long recovery continues from where it was. A step's end may
 * cut a record: the step stops before it, and the next one takes it.
 */
async function redispatch(
  dispatcher: Dispatcher,
  endOffset: number,
  stepBytes: number,
  consumeQueues: ConsumeQueueTable,
  index: IndexService | undefined,
  checkpoint: StoreCheckpoint,
): Promise<void> {
  const save = async () => {
    await consumeQueues.flush(0);
    await index?.flush();
    const offset = dispatcher.dispatchedOffset;
    const timestamp = dispatcher.lastTimestampMs;
    checkpoint.consumeQueueOffset = offset;
    if (timestamp > 0) checkpoint.logicsMsgTimestamp = timestamp;
    if (index !== undefined) {
      checkpoint.indexOffset = offset;
      if (timestamp > 0) checkpoint.indexMsgTimestamp = timestamp;
    }
    await checkpoint.flush();
  };
  const from = dispatcher.dispatchedOffset;
  // Bounded: each round dispatches up to the next step or the end.
  while (dispatcher.dispatchedOffset < endOffset) {
    const before = dispatcher.dispatchedOffset;
    await dispatcher.dispatchUpTo(
      Math.min(endOffset, before + stepBytes),
    );
    if (dispatcher.dispatchedOffset === before) {
      throw new MqStoreError(
        "CORRUPT_RECORD",
        `Re-dispatch stalled at commit-log offset ${before} (log ends at ${endOffset})`,
      );
    }
    if (dispatcher.dispatchedOffset < endOffset) await save();
  }
  if (dispatcher.dispatchedOffset !== from) await save();
}

/**
 * After the scan: when the log ends below the checkpoint's points (a power
 * loss took records they had counted), lowers them to its end and writes
 * the checkpoint, before the first put. New records go where the lost ones
 * were; left as they were, the points would claim them before they are
 * durable: a second crash would then trust the commit-log records below
 * the old point without their CRC, and start re-dispatch at the old
 * consume-queue or index point, past the units and keys of the records
 * below it that the crash took.
 *
 * @param checkpoint The checkpoint, its commit-log point already at `endOffset`.
 * @param loadedLogOffset Its commit-log point as loaded (-1: none).
 * @param endOffset Where the recovered log ends.
 */
async function lowerCheckpoint(
  checkpoint: StoreCheckpoint,
  loadedLogOffset: number,
  endOffset: number,
): Promise<void> {
  let lowered = loadedLogOffset > endOffset;
  if (checkpoint.consumeQueueOffset > endOffset) {
    checkpoint.consumeQueueOffset = endOffset;
    lowered = true;
  }
  if (checkpoint.indexOffset > endOffset) {
    checkpoint.indexOffset = endOffset;
    lowered = true;
  }
  if (lowered) await checkpoint.flush();
}

/**
 * Removes zero-length segment files a crash during creation (by an older
 * writer) can leave; mqstore's own creation is atomic.
 */
async function removeEmptySegments(port: RuntimePort, directory: string): Promise<void> {
  if ((await port.stat(directory))?.isDirectory !== true) return;
  for (const name of await port.list(directory)) {
    if (!/^[0-9]{20}$/.test(name)) continue;
    const stat = await port.stat(join(directory, name));
    if (stat?.isFile === true && stat.sizeBytes === 0) await port.remove(join(directory, name));
  }
}
