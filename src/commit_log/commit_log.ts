/**
 * The commit log: RocketMQ's `CommitLog` put path over a
 * {@link MappedFileQueue}, plus its recovery on open.
 *
 * ```
 * putMessage ─► refuse? (closed, read-only, failed, disk full) ─► delay rewrite
 *     │
 *     ├─ fast path (nothing queued, room in the last segment, backlog ok):
 *     │     encode straight into the segment (or copy from the scratch
 *     │     encoding near its end), patch queueOffset / physicalOffset /
 *     │     storeTimestamp, bump the queue counter — all synchronous
 *     └─ slow path (no segment yet, segment full, backlog, write buffer):
 *           encoded copy queued in order; one drain loop awaits segment
 *           creation / flusher progress and appends the queue in order
 *     ▼
 * ASYNC_FLUSH: answer now (wake the committer or flusher)
 * SYNC_FLUSH:  answer when GroupCommitService made the end offset durable
 * ```
 *
 * "Answer now" means the result itself ({@link CommitLog.putMessageNow}):
 * no promise is made or chained inside the store for a put the fast path
 * answered; the facade wraps the result once. A promise per put costs
 * about as much as encoding a small record (measured: `bench/`
 * `commit_log_bench.ts`, rows "async …").
 *
 * One order: JavaScript runs one thing at a time and the append is
 * synchronous, so records are never interleaved; while anything waits in
 * the slow-path queue every new put queues behind it, so physical and
 * queue offsets stay gap-free and in call order.
 *
 * A record is storable only if `totalSize + 8 ≤ segment size` (room for the
 * BLANK that ends a segment); a larger one is MESSAGE_ILLEGAL, never
 * accepted and lost. A write or flush error makes the log refuse every
 * later put (SERVICE_NOT_AVAILABLE) until it is reopened.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { MqStoreError } from "../errors.ts";
import {
  MAGIC_POSITION,
  MessageEncoder,
  type MessageInput,
  patchRecord,
  PROPERTY_DELAY,
  PROPERTY_WAIT,
  readInt32,
  SYS_FLAG_POSITION,
  SYS_FLAG_TRANSACTION_MASK,
  TRANSACTION_COMMIT_TYPE,
  TRANSACTION_NOT_TYPE,
  writeBlankRecord,
  writeInt32,
} from "../record/mod.ts";
import type { RuntimePort } from "../runtime/port.ts";
import { AllocateMappedFileService } from "../segment/allocate_mapped_file_service.ts";
import type { Clock } from "../segment/clock.ts";
import { OS_PAGE_SIZE_BYTES, WRITE_BUFFER_SIZE_BYTES_DEFAULT } from "../segment/constants.ts";
import type {
  AppendOutcome,
  AppendTarget,
  MappedFile,
  PrefaultPlan,
} from "../segment/mapped_file.ts";
import { MappedFileQueue } from "../segment/mapped_file_queue.ts";
import { TransientStorePool } from "../segment/transient_store_pool.ts";
import { CommitRealTimeService } from "./commit_real_time_service.ts";
import {
  END_OF_FILE_RESERVE_BYTES,
  FLUSH_STEP_BYTES_MAX,
  PREFAULT_LEAD_BYTES_MIN,
  PREFAULT_LEAD_MS,
  PREFAULT_RATE_WINDOW_MS_MIN,
  PREFAULT_RECHECK_BYTES,
  PREFAULT_SMALL_BYTES_MIN,
  PREPARE_IDLE_MS,
} from "./constants.ts";
import type { DispatchHints } from "./dispatch_hints.ts";
import { FlushRealTimeService } from "./flush_real_time_service.ts";
import { GroupCommitService } from "./group_commit_service.ts";
import { AppendMessageResult, type PutMessageResult } from "./put_message_result.ts";
import type { StoreCheckpoint } from "./store_checkpoint.ts";
import type { StoreStats } from "./store_stats.ts";
import { type QueueCounter, TopicQueueTable } from "./topic_queue_table.ts";
import { delayLevelOf, propertyOf, rewriteDelay } from "./_delay.ts";
import { SCAN_WINDOW_BYTES_DEFAULT, scanCommitLog, type ScanResult } from "./_recovery.ts";
import { timestampStartIndex } from "./timestamp_start.ts";
import { BatchEncoder } from "./_batch_encoder.ts";
import { type FolioSize, folioSize, smallFolioChunkBytes } from "./_folio_rule.ts";

/**
 * How the commit log is made durable: `ASYNC_FLUSH` answers a put once it
 * is appended, `SYNC_FLUSH` once it is on disk.
 *
 * @example
 * ```ts
 * import type { FlushDiskType } from "./commit_log.ts";
 *
 * const flushDiskType: FlushDiskType = "SYNC_FLUSH";
 * console.log({ flushDiskType }); // an option of MessageStore.open
 * ```
 */
export type FlushDiskType = "ASYNC_FLUSH" | "SYNC_FLUSH";

/** Settings of a {@link CommitLog}; the store resolves them from its options. */
export interface CommitLogOptions {
  /** The runtime port. */
  port: RuntimePort;
  /** The segment directory (`<root>/commitlog`). */
  directory: string;
  /** Time, timers and store timestamps. */
  clock: Clock;
  /** Open without writing anything; every put is refused. */
  readOnly: boolean;
  /** Segment size (`mappedFileSizeCommitLog`). */
  mappedFileSizeCommitLog: number;
  /** `flushDiskType`. */
  flushDiskType: FlushDiskType;
  /** `flushIntervalCommitLog`, ms. */
  flushIntervalCommitLog: number;
  /** `flushCommitLogLeastPages`. */
  flushCommitLogLeastPages: number;
  /** `flushCommitLogThoroughInterval`, ms. */
  flushCommitLogThoroughInterval: number;
  /** `flushCommitLogTimed`. */
  flushCommitLogTimed: boolean;
  /** `commitIntervalCommitLog`, ms. */
  commitIntervalCommitLog: number;
  /** `commitCommitLogLeastPages`. */
  commitCommitLogLeastPages: number;
  /** `commitCommitLogThoroughInterval`, ms. */
  commitCommitLogThoroughInterval: number;
  /** `syncFlushTimeout`, ms. */
  syncFlushTimeout: number;
  /** `maxMessageSize`, bytes (a body, a record, a batch). */
  maxMessageSize: number;
  /** `transientStorePoolEnable`. */
  transientStorePoolEnable: boolean;
  /** `transientStorePoolSize`. */
  transientStorePoolSize: number;
  /** `warmMapedFileEnable`: pre-fault new segments off the JS thread. */
  warmMapedFileEnable: boolean;
  /**
   * The least lead past the write offset to which ASYNC_FLUSH pre-faults
   * segments (not a store option: tests make it small).
   *
   * @default {PREFAULT_LEAD_BYTES_MIN}
   */
  prefaultLeadBytesMin?: number;
  /** `osPageCacheBusyTimeOutMills`: longest wait for the flusher before OS_PAGECACHE_BUSY. */
  osPageCacheBusyTimeOutMills: number;
  /** Bound on appended, not yet durable bytes. */
  unflushedBytesMax: number;
  /** `checkCRCOnRecover`. */
  checkCRCOnRecover: boolean;
  /** Number of delay levels (the highest level). */
  delayLevelCount: number;
  /** Create sparse segments (tests). */
  sparseFiles: boolean;
  /** Receives physicMsgTimestamp and the flushed offset. */
  checkpoint: StoreCheckpoint;
  /** Counters. */
  stats: StoreStats;
  /** Receives warnings (segments skipped by recovery, mlock refusals). */
  onWarning: (message: string) => void;
  /**
   * Called when {@link CommitLog.readableOffset} may have moved without a
   * put (a commit or flush copied write-buffer bytes into the files), so a
   * reader that follows the log (the dispatcher) wakes.
   *
   * @default {undefined}
   */
  onReadable?: () => void;
  /**
   * Receives a dispatch hint for each record appended (see
   * {@link DispatchHints}); none when undefined.
   *
   * @default {undefined}
   */
  dispatchHints?: DispatchHints;
}

/** A put waiting in the slow path, its records already encoded. */
interface PendingPut {
  /** The encoded record(s), exactly `size` bytes. */
  readonly records: Uint8Array;
  readonly count: number;
  readonly topic: string;
  readonly queueId: number;
  /** Queue counter advanced (NOT_TYPE, COMMIT), or not (PREPARED, ROLLBACK). */
  readonly advances: boolean;
  readonly storeHost: string;
  /** Wait for the group commit (SYNC_FLUSH, WAIT not "false"). */
  readonly wait: boolean;
  readonly startMs: number;
  readonly resolve: (result: PutAnswer) => void;
}

/**
 * A put's answer: the result itself when the put is answered in the
 * caller's turn (the common case: no promise is made for it), or a promise.
 */
export type PutAnswer = PutMessageResult | Promise<PutMessageResult>;

/** A waiter of {@link CommitLog.whenFlushed}. */
interface FlushWaiter {
  offset: number;
  resolve(): void;
  reject(error: unknown): void;
}

const DEFAULT_STORE_HOST = "127.0.0.1:10911";

/** The pre-fault plan of large folios: the segment's own (hugepage) advice, chunks uncapped. */
const LARGE_FOLIO_PLAN: PrefaultPlan = Object.freeze({
  randomAccess: false,
  chunkBytesMax: Number.MAX_SAFE_INTEGER,
});

/**
 * Longest interval between two checks for an idle gap while the group
 * commit stays busy, 160 ms: the interval doubles from PREPARE_IDLE_MS at
 * each busy check. A timer that wakes an otherwise waiting event loop
 * costs 250–330 µs of CPU here (Deno and Node, measured: a 10 ms timer
 * re-armed for 3 s); checking every 10 ms under lone SYNC puts at
 * 500–3 000 acks/s cost 10–60 µs per ack.
 */
const PACE_CHECK_MS_MAX = PREPARE_IDLE_MS * 0x10;

function failed(status: PutMessageResult["status"], error: MqStoreError): PutMessageResult {
  return { status, error };
}

function statusOf(error: MqStoreError): PutMessageResult["status"] {
  return error.code === "PROPERTIES_SIZE_EXCEEDED" ? "PROPERTIES_SIZE_EXCEEDED" : "MESSAGE_ILLEGAL";
}

/** `fdatasync` of a file through a handle of its own (the page cache is per file, not per handle). */
async function syncFile(port: RuntimePort, path: string): Promise<void> {
  const handle = await port.openFile(path);
  try {
    await handle.datasync();
  } finally {
    await handle.close();
  }
}

/** The sysFlag of the record at `bytes[position]`. */
function sysFlagAt(bytes: Uint8Array, position: number): number {
  const at = position + SYS_FLAG_POSITION;
  return (bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!;
}

function typeName(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

/**
 * The commit log of one store. Created by the store, which loads and
 * recovers it, starts it, and closes it.
 *
 * @example
 * ```ts ignore
 * const commitLog = new CommitLog({ ...settings, port, directory: "/s/commitlog", checkpoint, stats });
 * await commitLog.loadAndRecover(true); // clean: verify the last three segments
 * commitLog.start();
 * const r = await commitLog.putMessage({ topic: "T", queueId: 0, body: new Uint8Array([1]) });
 * await commitLog.close();
 * ```
 */
export class CommitLog {
  /** Segment size. */
  readonly fileSizeBytes: number;
  /** The segments. */
  readonly queue: MappedFileQueue;
  /** Next queue offsets. */
  readonly topicQueueTable: TopicQueueTable = new TopicQueueTable();

  #options: CommitLogOptions;
  #clock: Clock;
  #pool: TransientStorePool | undefined;
  #allocator: AllocateMappedFileService | undefined;
  #encoder: MessageEncoder;
  /** Encodes putMessages batches (with {@link #encoder} for what it does not take). */
  #batchEncoder: BatchEncoder;
  /** Where appended records are described for the dispatcher. */
  #hints: DispatchHints | undefined;
  /**
   * Where records are encoded when they cannot go straight into a segment:
   * empty until {@link #scratchBytes} first needs it.
   */
  #scratch: Uint8Array;
  /** Largest record (and batch) in bytes. */
  #recordMax: number;
  /** Write-buffer (and recovery read) window where the port cannot map: any record + 8 fits. */
  #windowBytes: number;
  /** A segment with at least this many writable bytes takes any record directly. */
  #directMin: number;
  #sync: boolean;
  #stats: StoreStats;
  #flusher: FlushRealTimeService | undefined;
  #committer: CommitRealTimeService | undefined;
  #groupCommit: GroupCommitService | undefined;
  /** Puts waiting for the slow path, in call order. */
  #pending: PendingPut[] = [];
  #pendingHead = 0;
  /** The last drain loop started (close awaits it). */
  #draining: Promise<void> | undefined;
  /** Whether the drain loop runs; cleared by the loop itself when the queue is empty. */
  #drainRunning = false;
  /** Offset of the first segment to create when there is none. */
  #startOffset = 0;
  #started = false;
  #closed = false;
  #closing: Promise<void> | undefined;
  /** The write or flush error that made the log refuse writes (sticky). */
  #failure: MqStoreError | undefined;
  /** Disk use is over the ratio (set by the store's monitor). */
  #diskFullReason: string | undefined;
  /**
   * Whether {@link #refusal} may refuse: one field read on the put path
   * instead of four. Set wherever a field #refusal reads changes.
   */
  #refusing = true;
  #flushWaiters: FlushWaiter[] = [];
  /** Woken by flush and commit progress (backpressure). */
  #progressWaiters: Array<() => void> = [];

  // The record being appended: fields instead of a closure per put.
  #curInput: MessageInput | undefined;
  #curSource: Uint8Array = new Uint8Array(0);
  #curSize = 0;
  #curCount = 0;
  #curAdvances = true;
  #curNowMs = 0;
  /** Born timestamp of messages that have none: the current put's start. */
  #bornNowMs = 0;
  #curTopic = "";
  #curQueueId = 0;
  /**
   * Record sizes of the batch appended last, for its result: every one, or
   * the one they all have (undefined for one message).
   */
  #curBatchSizes: Int32Array | number | undefined;
  /** The batch being encoded straight into a segment (see {@link #putBatch}). */
  #curBatch: readonly MessageInput[] | undefined;
  /** Whether the batch last encoded waits for the flush (no member says WAIT=false). */
  #batchWait = false;
  #curError: MqStoreError | undefined;
  /**
   * Pre-fault chunks (ASYNC_FLUSH) go only up to a lead past the write
   * offset (see {@link #prefaultLead}); a chunk further ahead waits on
   * {@link #aheadGate}, which the put that reaches `#aheadOpenAt` opens
   * (one comparison per put): where the chunk comes within the lead, or
   * PREFAULT_RECHECK_BYTES on, when the chunk asks again with the rate
   * measured anew. Offsets below `#aheadFreeBelow` (the active segment at
   * start under warmMapedFileEnable, which puts wait for in full) are
   * never held.
   */
  #aheadBound = (offset: number): Promise<void> | undefined => {
    if (this.#closed || offset < this.#aheadFreeBelow) return undefined;
    const wrote = this.queue.maxWrotePosition;
    const openAt = offset - this.#prefaultLead(wrote);
    if (wrote >= openAt) return undefined;
    this.#aheadOpenAt = Math.min(this.#aheadOpenAt, openAt, wrote + PREFAULT_RECHECK_BYTES);
    return this.#aheadGate ??= new Promise<void>((resolve) => this.#aheadResolve = resolve);
  };
  /** The wait of pre-fault chunks too far ahead; undefined when none waits. */
  #aheadGate: Promise<void> | undefined;
  #aheadResolve: (() => void) | undefined;
  /** Write offset at which {@link #aheadGate} opens (Infinity: none waits). */
  #aheadOpenAt = Infinity;
  /** See {@link #aheadBound}. */
  #aheadFreeBelow = 0;
  /** The least lead, bytes (PREFAULT_LEAD_BYTES_MIN unless a test says). */
  #prefaultLeadBytesMin: number;
  /**
   * The folios of the next pre-fault chunks (ASYNC_FLUSH), from the
   * writer's rate (see {@link #prefaultLead}): small (4 KiB, chunks
   * advised MADV_RANDOM) for a slow writer. Large until the rate is first
   * measured, after the first put since the open, as before: starting
   * small, a burst of puts right after the open (`bench/compare`'s
   * `mqstore-batch/128`, 3 alternated pairs) lost 3 of 3 on two of the
   * three runtimes (2.67 M records/s against 4.31 M, and 3.17 against
   * 3.61, medians), where the lead's pre-fault of large folios from the
   * open on runs beside the first puts. So the chunks a slow writer's
   * store pre-faults before its first put and in the first window after
   * it are large folios: up to the first lead and a chunk (about 68 MiB
   * for a store idle after the open; 12–44 MiB measured when puts start
   * right after it). The plan {@link #planBound} answers, reused.
   */
  #folios: FolioSize = "large";
  #smallPlan: PrefaultPlan = { randomAccess: true, chunkBytesMax: PREFAULT_SMALL_BYTES_MIN };
  /** Asked before each pre-fault chunk (ASYNC_FLUSH): see {@link #folios}. */
  #planBound = (offset: number): PrefaultPlan =>
    this.#folios === "small" && offset >= this.#aheadFreeBelow ? this.#smallPlan : LARGE_FOLIO_PLAN;
  /** The writer's rate over the last window, bytes per ms, and where that window ended. */
  #rateBytesPerMs = 0;
  #rateFromMs = Number.NaN;
  #rateFromOffset = 0;
  /** See {@link CommitLog.lastFlushWait}. */
  #lastFlushWait: Promise<PutMessageResult> | undefined;
  /** Outputs of the last append. */
  #lastAppendOffset = 0;
  #lastQueueOffset = 0;
  #outcome = { wroteBytes: 0, storeTimestampMs: 0 };
  #appendBound = (target: AppendTarget): AppendOutcome => this.#appendInto(target);
  /**
   * Zero chunks of segment preparation go only once the group commit has
   * been idle PREPARE_IDLE_MS: the instant after a flush answered its
   * waiters is when the next batch arrives, and a chunk written then delays
   * that batch's flush by the chunk's write time.
   */
  #paceBound = (): Promise<void> | undefined => {
    if (this.#paceGap !== undefined) return this.#paceGap;
    const waitMs = this.#paceWaitMs();
    if (waitMs <= 0) return undefined;
    // One wait per gap, whoever asks: while puts flow, only its timer is
    // re-armed, less and less often (see #paceCheck), with no promise,
    // closure or race made per check.
    this.#paceCheckMs = PREPARE_IDLE_MS;
    return this.#paceGap = new Promise<void>((resolve) => {
      this.#paceResolve = resolve;
      this.#paceCancel = this.#clock.setTimer(waitMs, this.#paceCheckBound);
    });
  };
  /** The wait for an idle gap preparations share; undefined when none waits. */
  #paceGap: Promise<void> | undefined;
  /** Ends {@link #paceGap}. */
  #paceResolve: (() => void) | undefined;
  /** Cancels the timer that checks the gap again. */
  #paceCancel: (() => void) | undefined;
  #paceCheckBound = (): void => this.#paceCheck();
  /** Interval of the next check for a gap: doubles while the group commit stays busy. */
  #paceCheckMs = PREPARE_IDLE_MS;
  /**
   * Write new segments' zeros through before the writer reaches them
   * under SYNC_FLUSH: each small group-commit flush then overwrites
   * written blocks instead of converting unwritten extents (about half the
   * latency). Not under ASYNC_FLUSH, even with warmMapedFileEnable: there
   * flush latency matters little, while written-back pages are
   * write-protected again and slow appends to ~0.9 GB/s (5–6 GB/s into
   * pre-faulted pages).
   */
  get #writeZeros(): boolean {
    return this.#sync;
  }
  /**
   * Segments are advised MADV_RANDOM (SPEC §2) under SYNC_FLUSH only.
   * Under ASYNC_FLUSH they keep the default advice, a deviation from
   * SPEC §2: the kernel then backs them with folios of up to 2 MiB, and
   * pre-faulting and writing back cost far less CPU per byte. Measured
   * (Linux 6.18, ext4, 2 cores): a C writer draining 8 GiB through
   * msync in 32 MiB steps, 501 MB/s instead of 256; the store's
   * sustained row (bench/commit_log_bench.ts --filter sustained, 8 GiB of
   * 1 KiB puts), Deno 194–211 MB/s instead of 134–142 and 6.5–7.0 µs of
   * CPU per put instead of 10.8–11.4, Bun 181–274 instead of 137–178.
   * What SPEC §2 guards against, a small flush writing a whole large
   * folio, was not seen when the writer is idle during the flush (4 and
   * 16 KiB flushes wrote 4 and 16 KiB plus the journal block): it happens
   * when the writer dirties the folio being written back (1 KiB puts at
   * 5 MB/s flushed every 16 KiB: 17.5 device bytes per byte, 1.5 under
   * MADV_RANDOM). So FlushRealTimeService keeps flushes woken by puts off
   * the writer's folio (1.14), and interval flushes rewrite it at most
   * once per flushIntervalCommitLog (1.16–1.18 at 5–30 MB/s, 1.02 under
   * MADV_RANDOM; 2.1 against 1.2 at 0.1 MB/s). That once per interval is
   * still a whole folio: a slow writer's pre-fault chunks are advised
   * MADV_RANDOM all the same (see #folios).
   */
  get #randomAccess(): boolean {
    return this.#sync;
  }
  /**
   * Set while the active segment is warmed at start under
   * warmMapedFileEnable: puts queue (slow path) until it is done.
   */
  #warming: Promise<void> | undefined;
  /** See {@link CommitLog.whenActiveSegmentReady}. */
  #activeReady: Promise<void> = Promise.resolve();
  #blankBound = (target: AppendTarget): AppendOutcome => this.#blankInto(target);
  /**
   * Unflushed bytes past which a put wakes the flusher: a full flush step,
   * or half of unflushedBytesMax when that is less. A timed flusher would
   * otherwise start on a fast writer's backlog only at its next interval
   * (500 ms), while the writer fills pages the flush then has to catch up with.
   */
  #wakeFlusherBytes: number;
  /** `unflushedBytesMax`, read on every put. */
  #unflushedBytesMax: number;
  /** `flushCommitLogTimed`, read on every put. */
  #flushTimed: boolean;

  /** @param options Settings, port, clock, checkpoint and counters. */
  constructor(options: CommitLogOptions) {
    this.#options = options;
    this.#clock = options.clock;
    this.#stats = options.stats;
    this.fileSizeBytes = options.mappedFileSizeCommitLog;
    this.#sync = options.flushDiskType === "SYNC_FLUSH";
    this.#wakeFlusherBytes = Math.min(options.unflushedBytesMax / 2, FLUSH_STEP_BYTES_MAX);
    this.#unflushedBytesMax = options.unflushedBytesMax;
    this.#flushTimed = options.flushCommitLogTimed;
    this.#prefaultLeadBytesMin = options.prefaultLeadBytesMin ?? PREFAULT_LEAD_BYTES_MIN;
    assert(this.#prefaultLeadBytesMin > 0, "the pre-fault lead is positive");
    this.#recordMax = options.maxMessageSize;
    this.#directMin = this.#recordMax + END_OF_FILE_RESERVE_BYTES;
    this.#hints = options.dispatchHints;
    this.#encoder = new MessageEncoder({
      maxMessageSizeBytes: options.maxMessageSize,
      // The put's own start time: one clock read per put (Date.now costs
      // about 100 ns on Deno).
      now: () => this.#bornNowMs,
    });
    this.#batchEncoder = new BatchEncoder(this.#encoder, this.topicQueueTable);
    // Made at its first use (#scratchBytes): most puts never need it.
    this.#scratch = new Uint8Array(0);
    // The window of ports that cannot map must hold a BLANK's whole tail
    // (less than a record + 8) and any record.
    const window = Math.max(
      WRITE_BUFFER_SIZE_BYTES_DEFAULT,
      Math.ceil((this.#recordMax + END_OF_FILE_RESERVE_BYTES) / OS_PAGE_SIZE_BYTES) *
        OS_PAGE_SIZE_BYTES,
    );
    this.#windowBytes = window;
    // SYNC_FLUSH segments append into a write buffer committed at each
    // group-commit flush (positional writes: see MappedFile). Twice the
    // window, so that a group of puts buffered there (a few hundred KiB)
    // leaves room for any record and they are encoded in place.
    const writeBufferBytes = this.#sync ? 2 * window : window;
    if (options.transientStorePoolEnable && !options.readOnly) {
      this.#pool = new TransientStorePool({
        fileSizeBytes: this.fileSizeBytes,
        count: options.transientStorePoolSize,
        // Locked in memory where the runtime allows (allocated at load).
        port: options.port,
      });
    }
    if (!options.readOnly) {
      this.#allocator = new AllocateMappedFileService({
        port: options.port,
        pool: this.#pool,
        // Appends into pre-faulted pages cost a tenth of first-touch ones:
        // always, not only with warmMapedFileEnable.
        populate: true,
        writeZeros: this.#writeZeros,
        pace: this.#paceBound,
        ahead: this.#sync ? undefined : this.#aheadBound,
        plan: this.#sync ? undefined : this.#planBound,
        writerOffset: () => this.queue.maxWrotePosition,
        stopped: () => this.#closed,
        sparse: options.sparseFiles,
        writeBufferSizeBytes: writeBufferBytes,
        positionalWrites: this.#sync,
        randomAccess: this.#randomAccess,
        clock: options.clock,
        onWarning: options.onWarning,
      });
    }
    this.queue = new MappedFileQueue({
      port: options.port,
      directory: options.directory,
      fileSizeBytes: this.fileSizeBytes,
      allocator: this.#allocator,
      pool: this.#pool,
      writeBufferSizeBytes: writeBufferBytes,
      positionalWrites: this.#sync,
      sparse: options.sparseFiles,
      readOnly: options.readOnly,
      clock: options.clock,
    });
  }

  /**
   * Loads the segments and recovers the log: verifies records, rebuilds
   * the topic-queue table, cuts the log at the first invalid record (later
   * segments deleted, stale bytes after the cut zeroed and synced).
   * Verification starts at the third-last segment when `clean`; after a
   * crash, at the segment holding the checkpoint's flushed offset (records
   * ending before it are durable and skip their CRC), or by RocketMQ's
   * timestamp rule for a checkpoint without mqstore's offsets.
   * `tableFromConsumeQueues`: the caller rebuilds the table from consume
   * queues that will cover the log, so the segments before the verified
   * ones are not read at all (open time and memory then do not grow with
   * the message count). Before it returns, the log up to the cut is
   * durable and the checkpoint holds this writer's bounds, so that the
   * checkpoint never claims more than is durable and a later recovery
   * knows how far stale bytes can lie. `sameBoot`: the crash was of a
   * process of this boot, whose page cache holds every byte it wrote, so
   * past the cut lies at most the one put it was writing (see
   * {@link #staleBounds}).
   *
   * @returns What the scan found.
   */
  async loadAndRecover(
    clean: boolean,
    options: { tableFromConsumeQueues?: boolean; sameBoot?: boolean } = {},
  ): Promise<ScanResult> {
    await this.#pool?.init();
    await this.queue.load();
    const files = this.queue.files;
    const checkpoint = this.#options.checkpoint;
    const verifyFromIndex = clean
      ? Math.max(0, files.length - 3)
      : await this.#uncleanVerifyFromIndex(files);
    const scan = await scanCommitLog(files, {
      verifyFromIndex,
      walkUnverified: options.tableFromConsumeQueues !== true,
      trustedOffset: clean ? -1 : checkpoint.commitLogOffset,
      checkCrc: this.#options.checkCRCOnRecover,
      tornTails: !clean,
      table: this.topicQueueTable,
      // A read-only open zeroes nothing: the stale bytes past the cut are
      // the next writer's to find.
      staleSearch: this.#options.readOnly ? "never" : clean ? "after-invalid" : "always",
      ...this.#staleBounds(options.sameBoot === true),
      windowBytes: Math.max(SCAN_WINDOW_BYTES_DEFAULT, this.#windowBytes),
    });
    for (const name of scan.skippedSegments) {
      this.#options.onWarning(
        `mqstore: segment ${name} of ${this.queue.directory} has an invalid record; its queue offsets past it were not rebuilt`,
      );
    }
    const cut = scan.cutOffset;
    const holder = files[scan.cutFileIndex];
    const hadLater = files.length > scan.cutFileIndex + 1;
    // Read-only: the segments past the cut (those a writer made ahead
    // before it crashed) are closed and left on disk.
    await this.queue.truncateDirtyFiles(cut);
    if (!this.#options.readOnly) {
      if (hadLater) await this.#options.port.syncDirectory(this.queue.directory);
      if (holder !== undefined && scan.dirtyEndPosition > cut - holder.fileFromOffset) {
        // A stale record past the cut must never reappear after a later crash.
        await holder.zeroRange(cut - holder.fileFromOffset, scan.dirtyEndPosition);
      }
      if (!clean) {
        // The records up to the cut were read from the page cache: a crash
        // of the process leaves its dirty pages there, unwritten. They are
        // made durable before the checkpoint can claim them (it is written
        // below, by re-dispatch and by the flushers, all with the cut).
        const last = Math.min(scan.cutFileIndex, files.length - 1);
        for (let i = Math.max(0, verifyFromIndex); i <= last; i++) {
          await syncFile(this.#options.port, files[i]!.path);
        }
      }
    }
    this.queue.flushedWhere = cut;
    this.queue.committedWhere = cut;
    this.#startOffset = cut;
    checkpoint.commitLogOffset = cut;
    if (!this.#options.readOnly) {
      const putBytesMax = this.#recordMax;
      if (
        checkpoint.unflushedBytesMax !== this.#options.unflushedBytesMax ||
        checkpoint.putBytesMax !== putBytesMax
      ) {
        // Before the first put: a crash of this writer is then recovered
        // with its own bounds (the stale bytes of the previous writer, if
        // any, were zeroed above with the previous bounds).
        checkpoint.unflushedBytesMax = this.#options.unflushedBytesMax;
        checkpoint.putBytesMax = putBytesMax;
        await checkpoint.flush();
      }
    }
    return scan;
  }

  /**
   * Where an unclean open starts verifying: the segment holding the
   * checkpoint's flushed offset (mqstore's block), else RocketMQ's
   * timestamp rule (a checkpoint written by RocketMQ), else the first.
   */
  async #uncleanVerifyFromIndex(files: readonly MappedFile[]): Promise<number> {
    const trusted = this.#options.checkpoint.commitLogOffset;
    if (trusted < 0) {
      return Math.max(0, await timestampStartIndex(files, this.#options.checkpoint.minTimestamp));
    }
    // The flushers record only offsets they made durable (see their
    // #flush), and never past the records appended, so every record
    // ending at or before `trusted` is intact.
    let index = 0;
    while (index + 1 < files.length && files[index + 1]!.fileFromOffset <= trusted) index++;
    return index;
  }

  /**
   * How far past the cut stale bytes can lie after a crash of the writer
   * that wrote the checkpoint (undefined when the checkpoint does not know
   * its bounds: the whole tail is searched).
   *
   * Let F be the flushed offset at the crash, W the end of the appends.
   * - W ≤ F + unflushedBytesMax + P, P = maxMessageSize + 8: the writer
   *   checks the bound before each put, and one put appends at most one
   *   record or batch (≤ maxMessageSize) after at most a BLANK header.
   * - F ≤ cut + P: every byte below F is durable, so every record ending
   *   at or below F is intact and passes verification; the scan stops no
   *   earlier than the record that straddles F, less than P before it.
   * So no byte at or past cut + unflushedBytesMax + 2P was ever written:
   * those are zeros from fallocate. Non-zero bytes in a further guard of
   * P bytes contradict this (a record damaged in the middle of the log,
   * with intact records after it): the whole tail is searched then.
   */
  #staleBounds(sameBoot: boolean): { staleBytesMax?: number; staleGuardBytes?: number } {
    const { unflushedBytesMax, putBytesMax } = this.#options.checkpoint;
    if (unflushedBytesMax < 0 || putBytesMax < 0) return {};
    const put = putBytesMax + END_OF_FILE_RESERVE_BYTES;
    // A dead process of this boot left every byte it wrote in the page
    // cache, and it appended one put at a time: past the cut lies at most
    // the put it was writing. Only a power loss (a new boot) can keep
    // later pages and lose earlier ones, as far as the unflushed bound.
    // Measured (1 M records of 128 B, killed, in a 1 GiB segment whose
    // bound reached its end; Deno): reopen 2.0–2.2 s with the whole tail
    // read, 0.7–0.8 s with one put's bytes.
    if (sameBoot) return { staleBytesMax: 2 * put, staleGuardBytes: put };
    return { staleBytesMax: unflushedBytesMax + 3 * put, staleGuardBytes: put };
  }

  /** Starts the allocator and the flush services. */
  start(): void {
    if (this.#started || this.#options.readOnly) return;
    this.#started = true;
    this.#refusing = this.#refusal() !== undefined;
    this.#allocator?.start();
    const options = this.#options;
    const onError = (error: unknown) => this.#fail(error, "flush");
    const onFlushed = (flushedWhere: number) => this.#onFlushed(flushedWhere);
    if (this.#sync) {
      this.#groupCommit = new GroupCommitService({
        queue: this.queue,
        clock: this.#clock,
        syncFlushTimeoutMs: options.syncFlushTimeout,
        checkpoint: options.checkpoint,
        stats: this.#stats,
        onFlushed,
        onError,
        overlapFlushes: options.port.overlapFlushes,
      });
      this.#groupCommit.start();
      this.#prepareActiveSegment();
      return;
    }
    const flusher = new FlushRealTimeService({
      queue: this.queue,
      clock: this.#clock,
      intervalMs: options.flushIntervalCommitLog,
      leastPages: options.flushCommitLogLeastPages,
      thoroughIntervalMs: options.flushCommitLogThoroughInterval,
      timed: options.flushCommitLogTimed,
      // Range flushes of mapped segments under the default advice.
      largeFolios: !this.#randomAccess && this.#pool === undefined && options.port.canMap,
      checkpoint: options.checkpoint,
      stats: this.#stats,
      onFlushed,
      onError,
    });
    this.#flusher = flusher;
    if (this.#pool !== undefined) {
      this.#committer = new CommitRealTimeService({
        queue: this.queue,
        clock: this.#clock,
        intervalMs: options.commitIntervalCommitLog,
        leastPages: options.commitCommitLogLeastPages,
        thoroughIntervalMs: options.commitCommitLogThoroughInterval,
        stats: this.#stats,
        onCommitted: () => {
          // As RocketMQ's: a timed flusher (flushCommitLogTimed) sleeps its
          // interval whatever the committer does, unless someone waits for
          // a flush. Woken by every commit, it ran a fdatasync per
          // commitCommitLogLeastPages (16 KiB) of puts.
          if (
            !options.flushCommitLogTimed || this.#flushWaiters.length > 0 ||
            this.#progressWaiters.length > 0
          ) {
            flusher.wakeup();
          }
          this.#wakeProgress();
          this.#options.onReadable?.();
        },
        onError: (error) => this.#fail(error, "commit"),
      });
      this.#committer.start();
    }
    flusher.start();
    this.#prepareActiveSegment();
  }

  /**
   * Gets the segment the next put goes to ready now, not at the first put:
   * creates it when there is none (the allocator hands it over at once and
   * pre-faults it, and writes its zeros through, under the writer), or
   * prepares the rest of the recovered last segment. Under
   * warmMapedFileEnable puts wait until that is done (RocketMQ's first put
   * waits for the warm-up of its segment); otherwise they never do.
   */
  #prepareActiveSegment(): void {
    const last = this.queue.lastFile;
    let preparation: Promise<void>;
    let head: Promise<void>;
    this.#rateFromMs = Number.NaN;
    // The writer's offset now: it moves only with a put (see #prefaultLead).
    this.#rateFromOffset = this.queue.maxWrotePosition;
    if (this.#options.warmMapedFileEnable) {
      const activeFrom = last !== undefined && !last.isFull
        ? last.fileFromOffset
        : this.#startOffset - this.#startOffset % this.fileSizeBytes;
      this.#aheadFreeBelow = activeFrom + this.fileSizeBytes;
    }
    if (last !== undefined && !last.isFull) {
      preparation = last.prepare({
        populate: true,
        writeZeros: this.#writeZeros,
        randomAccess: this.#randomAccess,
        pace: this.#paceBound,
        ahead: this.#sync ? undefined : this.#aheadBound,
        plan: this.#sync ? undefined : this.#planBound,
        stopped: () => this.#closed,
      }).then(() => {});
      head = last.whenHeadPrepared();
    } else {
      const created = this.queue.getOrCreateLastMappedFile(this.#startOffset);
      preparation = created.then((file) => file.whenPrepared());
      head = created.then((file) => file.whenHeadPrepared());
    }
    // Its failure is reported below (and again by the put path).
    this.#activeReady = head.catch(() => {});
    const settled = preparation.catch((error) => {
      // The put path creates the segment again (and reports the error);
      // a failed pre-fault only costs speed.
      if (!this.#closed) {
        this.#options.onWarning(
          `mqstore: cannot prepare the active commit-log segment: ${
            error instanceof Error ? error.message : String(error)
          }`,
        );
      }
    });
    if (this.#options.warmMapedFileEnable) {
      this.#warming = settled;
      settled.then(() => this.#warming = undefined);
    }
  }

  /**
   * Resolves once the segment the next put goes to, as {@link start} left
   * it, exists, is mapped and has the first chunk of its preparation
   * pre-faulted (see `MappedFile.whenHeadPrepared`), or once that failed
   * (reported through `onWarning`; the put path creates the segment
   * itself). A fresh store's first puts otherwise wait for the creation
   * of a 1 GiB segment (tens of milliseconds) and take their page faults
   * while it is pre-faulted under them. Never rejects.
   */
  whenActiveSegmentReady(): Promise<void> {
    return this.#activeReady;
  }

  /** Offset up to which the log is durable. */
  get flushedOffset(): number {
    return this.queue.flushedWhere;
  }

  /**
   * The answer of the last put that waits for the group commit's flush
   * itself (SYNC_FLUSH, not queued): the group commit answers it, with
   * FLUSH_DISK_TIMEOUT too, and flushes a timed-out record later on its
   * own, so the store need not chain a reaction to it (see
   * `MessageStore`). Compared by identity.
   */
  get lastFlushWait(): Promise<PutMessageResult> | undefined {
    return this.#lastFlushWait;
  }

  /**
   * Resolves once no put waits for the group commit and no flush of it is
   * in flight (at once without one): close waits for the puts it answers.
   */
  whenFlushWaitsAnswered(): Promise<void> {
    return this.#groupCommit?.whenQuiet() ?? Promise.resolve();
  }

  /** Offset after the last appended record. */
  get maxOffset(): number {
    return this.queue.maxWrotePosition;
  }

  /**
   * Offset up to which readers may see records (SPEC §5 read position):
   * the appended end where appends go into the mapping, but only what a
   * commit (or a flush, without mmap) copied into the files where they go
   * into a write buffer. Walks from the flushed offset, which is always
   * readable, across segments read to their end (one or two).
   */
  get readableOffset(): number {
    const queue = this.queue;
    const last = queue.lastFile;
    // Asked at every dispatch. Without a pool, a last segment appended
    // through its mapping means all are (the mode is the port's and the
    // flush type's, the same for every segment): readable up to the end.
    if (last !== undefined && this.#pool === undefined && last.writeMode === "mapping") {
      return last.fileFromOffset + last.wrotePosition;
    }
    const first = queue.firstFile;
    if (first === undefined) return queue.flushedWhere;
    let where = Math.max(queue.flushedWhere, first.fileFromOffset);
    let file = queue.findMappedFileByOffset(where);
    while (file !== undefined) {
      const position = file.readPosition;
      where = Math.max(where, file.fileFromOffset + position);
      if (position < file.fileSizeBytes) break;
      file = queue.findMappedFileByOffset(file.fileFromOffset + file.fileSizeBytes);
    }
    return where;
  }

  /** Offset of the oldest byte kept. */
  get minOffset(): number {
    return Math.max(0, this.queue.minOffset);
  }

  /** The sticky write or flush error, if one happened. */
  get failure(): MqStoreError | undefined {
    return this.#failure;
  }

  /**
   * Refuses (or accepts again) writes because of disk use: a reason
   * string refuses, undefined accepts.
   */
  setDiskFull(reason: string | undefined): void {
    this.#diskFullReason = reason;
    this.#refusing = this.#refusal() !== undefined;
  }

  /** Resolves once the log is durable up to `offset`; rejects if flushing failed. */
  whenFlushed(offset: number): Promise<void> {
    if (this.queue.flushedWhere >= offset) return Promise.resolve();
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    return new Promise((resolve, reject) => {
      this.#flushWaiters.push({ offset, resolve, reject });
      this.#flusher?.wakeup();
      this.#groupCommit?.wakeup();
    });
  }

  /**
   * Appends one message (SPEC §4). Resolves with a status; rejects only
   * with a TypeError for a wrong argument type.
   */
  putMessage(message: MessageInput): Promise<PutMessageResult> {
    try {
      const answer = this.#put(message);
      return answer instanceof Promise ? answer : Promise.resolve(answer);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * {@link putMessage} for callers that take the answer synchronously when
   * there is one: an uncontended ASYNC_FLUSH put (and any refused put) is
   * answered in the caller's turn, without a promise.
   *
   * @throws {TypeError} For a wrong argument type.
   */
  putMessageNow(message: MessageInput): PutAnswer {
    return this.#put(message);
  }

  /** {@link putMessages}, answered synchronously when it can be (see {@link putMessageNow}). */
  putMessagesNow(messages: readonly MessageInput[]): PutAnswer {
    return this.#putBatch(messages);
  }

  /**
   * Appends a batch: one topic and queue, no transaction type and no DELAY
   * inside; queueId, sysFlag, bornTimestamp, hosts and reconsumeTimes of
   * the first message are shared; consecutive queue offsets; the whole
   * batch lands in one segment.
   */
  putMessages(messages: readonly MessageInput[]): Promise<PutMessageResult> {
    try {
      const answer = this.#putBatch(messages);
      return answer instanceof Promise ? answer : Promise.resolve(answer);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Refuses new puts, waits for queued ones, stops the services after a
   * final commit and flush, and closes the segments. Idempotent.
   *
   * @throws The final commit or flush error (everything is closed anyway).
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    this.#refusing = true;
    // Preparations waiting for a gap or for the writer stop instead (see
    // #paceBound, #aheadBound).
    this.#paceEnd();
    this.#aheadOpen();
    let error: unknown;
    const attempt = async (step: () => Promise<void> | undefined) => {
      try {
        await step();
      } catch (caught) {
        error ??= caught;
      }
    };
    await attempt(() => this.#draining);
    await attempt(() => this.#committer?.close());
    await attempt(() => this.#flusher?.close());
    await attempt(() => this.#groupCommit?.close());
    if (error === undefined && !this.#options.readOnly) {
      this.#options.checkpoint.commitLogOffset = this.queue.flushedWhere;
      if (this.queue.storeTimestampMs > 0) {
        this.#options.checkpoint.physicMsgTimestamp = this.queue.storeTimestampMs;
      }
    }
    const closedError = new MqStoreError("CLOSED", "The commit log closed");
    for (const waiter of this.#flushWaiters) {
      if (this.queue.flushedWhere >= waiter.offset) waiter.resolve();
      else waiter.reject(this.#failure ?? closedError);
    }
    this.#flushWaiters = [];
    this.#wakeProgress();
    await attempt(() => this.#allocator?.close());
    await attempt(() => this.queue.close({ waitMs: 0 }));
    await attempt(() => this.#pool?.close());
    if (error !== undefined) throw error;
  }

  // ---------------------------------------------------------------------
  // The segment pacer

  /** How long the group commit must still stay idle before zeros may go (≤ 0: now). */
  #paceWaitMs(): number {
    const groupCommit = this.#groupCommit;
    if (groupCommit === undefined || this.#closed) return 0;
    return PREPARE_IDLE_MS - groupCommit.idleMs(this.#clock.nowMs());
  }

  /**
   * The gap timer fired: end the wait if the gap is long enough, else
   * check again later. A gap is then noticed up to PACE_CHECK_MS_MAX
   * late (zeros that go a little later cost nothing), while a steady
   * put load wakes the loop about 6 times a second instead of 100.
   */
  #paceCheck(): void {
    this.#paceCancel = undefined;
    const waitMs = this.#paceWaitMs();
    if (waitMs > 0) {
      this.#paceCheckMs = Math.min(2 * this.#paceCheckMs, PACE_CHECK_MS_MAX);
      this.#paceCancel = this.#clock.setTimer(
        Math.max(waitMs, this.#paceCheckMs),
        this.#paceCheckBound,
      );
      return;
    }
    this.#paceEnd();
  }

  /**
   * The pre-fault lead: what the writer appended in PREFAULT_LEAD_MS at
   * the rate it went over the last window of at least
   * PREFAULT_RATE_WINDOW_MS_MIN (measured here, when a chunk asks: a clock
   * read per chunk, none per put), and at least the least lead; for small
   * folios, at least PREFAULT_SMALL_BYTES_MIN. The rate also picks the
   * folios of the chunks from here on ({@link #folios}).
   */
  #prefaultLead(wrote: number): number {
    const nowMs = this.#clock.nowMs();
    const elapsedMs = nowMs - this.#rateFromMs;
    // The first window starts at the first chunk asked after the first
    // put since the open (NaN until then): from the open on, creating a
    // fresh segment alone takes longer than a window, and a burst of puts
    // right after the open was measured slow and started with small
    // folios (see #folios).
    if (Number.isNaN(this.#rateFromMs)) {
      if (wrote !== this.#rateFromOffset) {
        this.#rateFromMs = nowMs;
        this.#rateFromOffset = wrote;
      }
    } else if (elapsedMs >= PREFAULT_RATE_WINDOW_MS_MIN) {
      const rate = Math.max(0, wrote - this.#rateFromOffset) / elapsedMs;
      this.#rateBytesPerMs = rate;
      this.#rateFromMs = nowMs;
      this.#rateFromOffset = wrote;
      this.#folios = folioSize(
        this.#folios,
        rate,
        this.#options.flushIntervalCommitLog,
      );
      this.#smallPlan.chunkBytesMax = smallFolioChunkBytes(rate);
    }
    const timed = this.#rateBytesPerMs * PREFAULT_LEAD_MS;
    return this.#folios === "small"
      ? Math.max(PREFAULT_SMALL_BYTES_MIN, timed)
      : Math.max(this.#prefaultLeadBytesMin, timed);
  }

  /** Lets the pre-fault chunks waiting for the writer go (they ask again). */
  #aheadOpen(): void {
    const resolve = this.#aheadResolve;
    this.#aheadOpenAt = Infinity;
    this.#aheadResolve = undefined;
    this.#aheadGate = undefined;
    resolve?.();
  }

  /** Ends the shared gap wait, if any (a gap came, or the log closes). */
  #paceEnd(): void {
    const resolve = this.#paceResolve;
    this.#paceCancel?.();
    this.#paceCancel = undefined;
    this.#paceResolve = undefined;
    this.#paceGap = undefined;
    resolve?.();
  }

  // ---------------------------------------------------------------------
  // The put path

  /** Why puts are refused now, or undefined. */
  #refusal(): MqStoreError | undefined {
    if (this.#closed || !this.#started) {
      return new MqStoreError(
        "SERVICE_NOT_AVAILABLE",
        this.#options.readOnly
          ? `Cannot put into ${this.queue.directory}: the store is open read-only`
          : `Cannot put into ${this.queue.directory}: the store is ${
            this.#closed ? "closed" : "not started"
          }`,
      );
    }
    if (this.#failure !== undefined) {
      return new MqStoreError(
        "SERVICE_NOT_AVAILABLE",
        `Cannot put: an earlier write or flush failed (${this.#failure.message}); reopen the store`,
        { cause: this.#failure },
      );
    }
    if (this.#diskFullReason !== undefined) {
      return new MqStoreError("SERVICE_NOT_AVAILABLE", this.#diskFullReason);
    }
    return undefined;
  }

  /** Whether appends must wait for the flusher (or committer). */
  #backlogged(): boolean {
    const queue = this.queue;
    const wrote = queue.maxWrotePosition;
    // A lagging committer needs no bound of its own: each segment with
    // uncommitted bytes holds a pool buffer, so the writer waits at the
    // roll that finds none (POOL_EXHAUSTED). A bound in bytes here made
    // every put wait for a commit under a pool of two buffers.
    return wrote - queue.flushedWhere > this.#unflushedBytesMax;
  }

  #put(message: MessageInput): PutAnswer {
    if (typeof message !== "object" || message === null) {
      throw new TypeError(`A message must be an object, not ${typeName(message)}`);
    }
    const startMs = this.#clock.nowMs();
    this.#bornNowMs = startMs;
    if (this.#refusing) {
      const refusal = this.#refusal();
      if (refusal !== undefined) return this.#answerFailure("SERVICE_NOT_AVAILABLE", refusal);
    }
    let input = message;
    const properties = message.properties;
    let wait = this.#sync;
    const sysFlag = message.sysFlag;
    const transaction = typeof sysFlag === "number" ? sysFlag & SYS_FLAG_TRANSACTION_MASK : 0;
    if (properties !== undefined && properties !== null) {
      const delay = propertyOf(properties, PROPERTY_DELAY);
      if (
        delay !== undefined &&
        (transaction === TRANSACTION_NOT_TYPE || transaction === TRANSACTION_COMMIT_TYPE)
      ) {
        const level = delayLevelOf(delay);
        if (typeof level !== "number") return this.#answerFailure("MESSAGE_ILLEGAL", level);
        if (level > 0) {
          // Validate what the caller gave (its topic goes into REAL_TOPIC).
          const invalid = this.#encoder.measure(message);
          if (typeof invalid !== "number") return this.#answerFailure(statusOf(invalid), invalid);
          input = rewriteDelay(message, level, this.#options.delayLevelCount);
        }
      }
      if (wait && propertyOf(properties, PROPERTY_WAIT) === "false") wait = false;
    }
    const advances = transaction === TRANSACTION_NOT_TYPE ||
      transaction === TRANSACTION_COMMIT_TYPE;

    const direct = this.#appendInPlace(input, undefined, advances, startMs);
    if (direct !== false) {
      if (direct !== undefined) return this.#answerFailure(statusOf(direct), direct);
      return this.#afterAppend(input.storeHost, wait, startMs);
    }
    // Near the segment end, or queued: encode into the scratch first.
    const scratch = this.#scratchBytes();
    const size = this.#encoder.encode(input, scratch, 0);
    if (typeof size !== "number") return this.#answerFailure(statusOf(size), size);
    const hints = this.#hints;
    if (hints !== undefined) {
      hints.beginStage();
      hints.stage(input.topic, input.queueId, this.#encoder.lastTail);
    }
    const tooBig = this.#checkFits(size);
    if (tooBig !== undefined) return this.#answerFailure("MESSAGE_ILLEGAL", tooBig);
    return this.#appendEncoded(
      scratch,
      size,
      1,
      input.topic,
      input.queueId,
      advances,
      input.storeHost,
      wait,
      startMs,
    );
  }

  #putBatch(messages: readonly MessageInput[]): PutAnswer {
    if (!Array.isArray(messages)) {
      throw new TypeError(`A batch must be an array of messages, not ${typeName(messages)}`);
    }
    // Indexed: cheaper per member than an iterator on JavaScriptCore.
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i];
      if (typeof message !== "object" || message === null) {
        throw new TypeError(`A message must be an object, not ${typeName(message)}`);
      }
    }
    const startMs = this.#clock.nowMs();
    this.#bornNowMs = startMs;
    if (this.#refusing) {
      const refusal = this.#refusal();
      if (refusal !== undefined) return this.#answerFailure("SERVICE_NOT_AVAILABLE", refusal);
    }
    const first = messages[0];
    if (first === undefined) {
      return this.#answerFailure(
        "MESSAGE_ILLEGAL",
        new MqStoreError("MESSAGE_ILLEGAL", "A batch must hold at least one message"),
      );
    }
    // In place, the batch saves a copy of every byte through the scratch.
    const direct = this.#appendInPlace(undefined, messages, true, startMs);
    if (direct !== false) {
      if (direct !== undefined) return this.#answerFailure(statusOf(direct), direct);
      return this.#afterAppend(first.storeHost, this.#batchWait, startMs);
    }
    // Near the segment end, or queued: encode into the scratch first.
    const scratch = this.#scratchBytes();
    const size = this.#encodeBatch(messages, scratch, 0, this.#recordMax);
    if (typeof size !== "number") return this.#answerFailure(statusOf(size), size);
    const tooBig = this.#checkFits(size);
    if (tooBig !== undefined) return this.#answerFailure("MESSAGE_ILLEGAL", tooBig);
    return this.#appendEncoded(
      scratch,
      size,
      messages.length,
      first.topic,
      first.queueId,
      true,
      first.storeHost,
      this.#batchWait,
      startMs,
    );
  }

  /**
   * Checks the members of a batch and encodes them one after the other
   * from `bytes[start]` (see BatchEncoder.encode), staging a dispatch hint
   * for each, and sets {@link #batchWait}. The batch may use
   * `bytes[start, end)`: a batch that would cross `end` is over
   * maxMessageSize; a refused batch leaves the bytes as they were. With
   * `offset` (encoded in place) the records are placed as they are written
   * (see BatchEncoder.encode).
   *
   * @returns The batch's size in bytes, or why it is refused.
   */
  #encodeBatch(
    messages: readonly MessageInput[],
    bytes: Uint8Array,
    start: number,
    end: number,
    offset = -1,
    storeTimestamp = 0,
  ): number | MqStoreError {
    const batch = this.#batchEncoder;
    const size = batch.encode(
      messages,
      bytes,
      start,
      end,
      this.#hints,
      this.#sync,
      offset,
      storeTimestamp,
    );
    this.#batchWait = batch.wait;
    return size;
  }

  /**
   * Encodes one message (`input`) or a batch (`batch`) straight into the
   * last segment, when nothing is queued or held back and the segment is
   * far enough from its end that any valid record or batch fits.
   *
   * @returns False when it did not try (the caller encodes into the
   *   scratch), the encoding error, or undefined once appended (its hints
   *   committed).
   */
  #appendInPlace(
    input: MessageInput | undefined,
    batch: readonly MessageInput[] | undefined,
    advances: boolean,
    startMs: number,
  ): MqStoreError | undefined | false {
    const queue = this.queue;
    const file = queue.lastFile;
    if (
      file === undefined || this.#pendingHead !== this.#pending.length ||
      this.#warming !== undefined ||
      // #backlogged(), from the segment in hand.
      file.fileFromOffset + file.wrotePosition - queue.flushedWhere > this.#unflushedBytesMax ||
      // A full segment has no writable bytes.
      file.writableBytes < this.#directMin
    ) {
      return false;
    }
    const count = batch === undefined ? 1 : batch.length;
    this.#curInput = input;
    this.#curBatch = batch;
    this.#curCount = count;
    this.#curAdvances = advances;
    this.#curNowMs = startMs;
    this.#curError = undefined;
    try {
      file.append(this.#appendBound);
    } finally {
      this.#curInput = undefined;
      this.#curBatch = undefined;
    }
    const error = this.#curError as MqStoreError | undefined;
    if (error !== undefined) return error;
    // Appended: its hints may be dispatched.
    this.#hints?.commit(count);
    return undefined;
  }

  /** MESSAGE_ILLEGAL when a record (or batch) of `size` can never fit a segment. */
  #checkFits(size: number): MqStoreError | undefined {
    if (size + END_OF_FILE_RESERVE_BYTES <= this.fileSizeBytes) return undefined;
    return new MqStoreError(
      "MESSAGE_ILLEGAL",
      `Record is ${size} bytes; a segment of ${this.fileSizeBytes} bytes stores at most ${
        this.fileSizeBytes - END_OF_FILE_RESERVE_BYTES
      } (8 are kept for the end-of-segment BLANK)`,
    );
  }

  /**
   * The scratch, made at its first use. A batch is encoded record after
   * record: each at most recordMax, the total too, so twice that always
   * holds the one that crosses the limit. Not made at open: 8 MiB by
   * default, which a store that never encodes near a segment's end or
   * queues a put never touches, and whose zeroing cost an open up to
   * 17 ms here where the allocator handed back heap memory to clear. The
   * trade: that cost, where the allocator has it, now falls on the first
   * put that needs the scratch (near the first segment's end, or the first
   * put queued behind a backlog or a warm-up), once per store.
   */
  #scratchBytes(): Uint8Array {
    if (this.#scratch.length === 0) this.#scratch = new Uint8Array(2 * this.#recordMax);
    return this.#scratch;
  }

  /** Appends `size` bytes encoded in `scratch` (the scratch) now, or queues a copy. */
  #appendEncoded(
    scratch: Uint8Array,
    size: number,
    count: number,
    topic: string,
    queueId: number,
    advances: boolean,
    storeHost: string | undefined,
    wait: boolean,
    startMs: number,
  ): PutAnswer {
    if (
      this.#pendingHead === this.#pending.length && this.#warming === undefined &&
      !this.#backlogged()
    ) {
      const file = this.queue.lastFile;
      if (
        file !== undefined && !file.isFull &&
        size + END_OF_FILE_RESERVE_BYTES <= this.fileSizeBytes - file.wrotePosition &&
        size <= file.writableBytes
      ) {
        this.#appendRecords(file, scratch, size, count, topic, queueId, advances, startMs);
        return this.#afterAppend(storeHost, wait, startMs);
      }
    }
    return new Promise<PutMessageResult>((resolve) => {
      this.#pending.push({
        records: scratch.slice(0, size),
        count,
        topic,
        queueId,
        advances,
        storeHost: storeHost ?? DEFAULT_STORE_HOST,
        wait,
        startMs,
        resolve,
      });
      if (!this.#drainRunning) {
        this.#drainRunning = true;
        this.#draining = this.#drain();
        // Awaited by close(); the error also reached every queued put.
        this.#draining.catch(() => {});
      }
    });
  }

  /** Copies encoded records into `file` and patches them. */
  #appendRecords(
    file: MappedFile,
    source: Uint8Array,
    size: number,
    count: number,
    topic: string,
    queueId: number,
    advances: boolean,
    nowMs: number,
  ): void {
    this.#curSource = source;
    this.#curSize = size;
    this.#curCount = count;
    this.#curTopic = topic;
    this.#curQueueId = queueId;
    this.#curAdvances = advances;
    this.#curNowMs = nowMs;
    file.append(this.#appendBound);
    // Only records encoded into the scratch were staged (a queued put's
    // copy is appended long after, and described by no hint).
    if (source === this.#scratch) this.#hints?.commit(count);
    this.#curSource = this.#scratch;
  }

  /** The append callback: encode or copy, then patch the placement fields. */
  #appendInto(target: AppendTarget): AppendOutcome {
    const bytes = target.bytes;
    const index = target.index;
    const outcome = this.#outcome;
    let size: number;
    let topic: string;
    let queueId: number;
    const input = this.#curInput;
    const hints = this.#hints;
    // Whether the records appended now were staged (see DispatchHints).
    let hinted = false;
    // Whether one message was encoded with its physicalOffset and
    // storeTimestamp in place (only its queueOffset left to write).
    let placed = false;
    // Whether the put was copied (its first record's magic code is written last).
    let copied = false;
    if (input !== undefined) {
      hints?.beginStage();
      const encoded = this.#encoder.encodePlaced(
        input,
        bytes,
        index,
        target.fileOffset,
        this.#curNowMs,
      );
      if (typeof encoded !== "number") return this.#appendRefused(encoded);
      placed = true;
      size = encoded;
      topic = input.topic;
      queueId = input.queueId;
      if (hints !== undefined) {
        hints.stage(topic, queueId, this.#encoder.lastTail);
        hinted = true;
      }
    } else if (this.#curBatch !== undefined) {
      // A batch encoded in place (#putBatch checked the room for any batch),
      // placed as it is written: no second pass over its records.
      const batch = this.#curBatch;
      const encoded = this.#encodeBatch(
        batch,
        bytes,
        index,
        index + this.#recordMax,
        target.fileOffset,
        this.#curNowMs,
      );
      if (typeof encoded !== "number") return this.#appendRefused(encoded);
      size = encoded;
      topic = batch[0]!.topic;
      queueId = batch[0]!.queueId;
      hinted = hints !== undefined;
    } else {
      size = this.#curSize;
      const source = this.#curSource;
      // Copied without the first record's magic code, which is written
      // once every record of the put is patched (below): a process killed
      // in between leaves no record there, not one without its placement.
      const magic = readInt32(source, MAGIC_POSITION);
      writeInt32(source, MAGIC_POSITION, 0);
      bytes.set(size === source.length ? source : source.subarray(0, size), index);
      writeInt32(source, MAGIC_POSITION, magic);
      copied = true;
      topic = this.#curTopic;
      queueId = this.#curQueueId;
      hinted = hints !== undefined && source === this.#scratch &&
        hints.stagedCount === this.#curCount;
    }
    // Checked with an if: assert()'s message would be built on every put.
    if (size + END_OF_FILE_RESERVE_BYTES > target.remainingBytes) {
      assert(
        false,
        `a ${size}-byte append leaves room for a BLANK in ${target.remainingBytes} bytes`,
      );
    }
    const nowMs = this.#curNowMs;
    const offset = target.fileOffset;
    const count = this.#curCount;
    let queueOffset = 0;
    let counter: QueueCounter | undefined;
    if (this.#curAdvances) {
      counter = this.topicQueueTable.counter(topic, queueId);
      queueOffset = counter.next;
      counter.next = queueOffset + count;
    }
    if (placed) {
      if (queueOffset !== 0) this.#encoder.writeQueueOffset(bytes, index, queueOffset);
      // Last: only now are the bytes a record (see encodePlaced).
      this.#encoder.writeMagic(bytes, index);
      this.#curBatchSizes = undefined;
      if (hinted) {
        hints!.publish(0, offset, size, queueOffset, nowMs, this.#encoder.lastSysFlag, counter);
      }
    } else if (count === 1) {
      patchRecord(bytes, index, queueOffset, offset, nowMs);
      this.#curBatchSizes = undefined;
      if (hinted) {
        hints!.publish(0, offset, size, queueOffset, nowMs, sysFlagAt(bytes, index), counter);
      }
    } else if (
      this.#batchEncoder.count === count &&
      (this.#curBatch !== undefined || this.#curSource === this.#scratch)
    ) {
      // The batch just encoded (in place, or into the scratch and copied
      // now): its encoder knows the record sizes.
      const batch = this.#batchEncoder;
      if (batch.placed) {
        // Encoded in place, placed as written, from the counter read then.
        if (batch.queueOffset !== queueOffset) {
          assert(false, `batch placed at queue offset ${batch.queueOffset}, not ${queueOffset}`);
        }
      } else {
        const patched = batch.patch(bytes, index, queueOffset, offset, nowMs);
        if (patched !== size) assert(false, `batch records add up to ${size} bytes`);
      }
      const sizes = batch.sizes;
      const uniformSize = batch.uniformSize;
      if (hinted) {
        hints!.publishRun(
          count,
          offset,
          sizes,
          queueOffset,
          nowMs,
          sysFlagAt(bytes, index),
          counter,
          uniformSize,
        );
      }
      // The result's own copy (the encoder's sizes are the next batch's),
      // none when every record has one size: the offsets and msgIds are
      // built from them only when read.
      this.#curBatchSizes = uniformSize >= 0 ? uniformSize : sizes.slice(0, count);
    } else {
      const recordSizes = new Int32Array(count);
      let position = index;
      for (let i = 0; i < count; i++) {
        const recordSize = (bytes[position]! << 24) | (bytes[position + 1]! << 16) |
          (bytes[position + 2]! << 8) | bytes[position + 3]!;
        recordSizes[i] = recordSize;
        patchRecord(bytes, position, queueOffset + i, offset + position - index, nowMs);
        if (hinted) {
          hints!.publish(
            i,
            offset + position - index,
            recordSize,
            queueOffset + i,
            nowMs,
            sysFlagAt(bytes, position),
            counter,
          );
        }
        position += recordSize;
      }
      if (position !== index + size) assert(false, `batch records add up to ${size} bytes`);
      this.#curBatchSizes = recordSizes;
    }
    if (copied) this.#encoder.writeMagic(bytes, index);
    this.#curTopic = topic;
    this.#curSize = size;
    outcome.wroteBytes = size;
    outcome.storeTimestampMs = nowMs;
    this.#lastAppendOffset = offset;
    this.#lastQueueOffset = queueOffset;
    return outcome;
  }

  /** The append outcome of an in-place encode that refused the message: nothing written. */
  #appendRefused(error: MqStoreError): AppendOutcome {
    this.#curError = error;
    const outcome = this.#outcome;
    outcome.wroteBytes = 0;
    outcome.storeTimestampMs = this.queue.lastFile?.storeTimestampMs ?? 0;
    return outcome;
  }

  /** Builds the answer of the append just made and waits for the flush it needs. */
  #afterAppend(
    storeHost: string | undefined,
    wait: boolean,
    startMs: number,
  ): PutAnswer {
    const size = this.#curSize;
    const count = this.#curCount;
    const offset = this.#lastAppendOffset;
    const appendResult = new AppendMessageResult(
      offset,
      size,
      this.#curNowMs,
      this.#lastQueueOffset,
      count,
      storeHost ?? DEFAULT_STORE_HOST,
      this.#curBatchSizes,
    );
    this.#curBatchSizes = undefined;
    const result: PutMessageResult = { status: "PUT_OK", appendResult };
    this.#stats.recordPut(this.#curTopic, count, size);
    const end = offset + size;
    if (this.#sync) {
      const groupCommit = this.#groupCommit!;
      if (wait) return this.#lastFlushWait = groupCommit.request(end, result, startMs);
      groupCommit.wakeup();
    } else if (this.#committer !== undefined) {
      this.#committer.onAppended(end);
    } else if (!this.#flushTimed) {
      this.#flusher!.onAppended(end);
    }
    if (end - this.queue.flushedWhere > this.#wakeFlusherBytes) {
      this.#flusher?.wakeup();
    }
    if (end >= this.#aheadOpenAt) this.#aheadOpen();
    // A put appended in the caller's own turn took under a millisecond
    // (it never awaited): no second clock read on the hot path.
    this.#stats.recordPutLatency(startMs === this.#curNowMs ? 0 : this.#clock.nowMs() - startMs);
    return result;
  }

  #answerFailure(status: PutMessageResult["status"], error: MqStoreError): PutMessageResult {
    this.#stats.recordFailure(status);
    return failed(status, error);
  }

  /** The BLANK callback: 8 bytes, the rest of the segment counted as written. */
  #blankInto(target: AppendTarget): AppendOutcome {
    const remaining = target.remainingBytes;
    writeBlankRecord(target.bytes, target.index, remaining);
    const file = this.queue.lastFile!;
    if (file.writeMode !== "mapping") {
      // A reused write buffer holds an older segment's bytes: the commit
      // copies the whole tail, which must stay zeros as in the file.
      target.bytes.fill(0, target.index + END_OF_FILE_RESERVE_BYTES, target.index + remaining);
    }
    const outcome = this.#outcome;
    outcome.wroteBytes = remaining;
    outcome.storeTimestampMs = file.storeTimestampMs;
    return outcome;
  }

  /**
   * Appends the queued puts in order, awaiting what the fast path cannot.
   * Clears `#drainRunning` in the same synchronous step that sees the
   * queue empty, so a put queued right after starts a new loop.
   */
  async #drain(): Promise<void> {
    try {
      await this.#drainQueued();
    } catch (error) {
      // A bug (an assertion) or a failed write buffer: refuse writes, answer
      // what is queued, and surface the error on close.
      this.#fail(error, "append");
      this.#drainRunning = false;
      while (this.#pendingHead < this.#pending.length) {
        const put = this.#pending[this.#pendingHead]!;
        this.#shiftPending();
        this.#stats.recordFailure("SERVICE_NOT_AVAILABLE");
        put.resolve(failed("SERVICE_NOT_AVAILABLE", this.#refusal()!));
      }
      throw error;
    }
  }

  async #drainQueued(): Promise<void> {
    const pending = this.#pending;
    for (;;) {
      if (this.#pendingHead >= pending.length) {
        // Same synchronous step as the emptiness check: see #drain.
        this.#drainRunning = false;
        return;
      }
      const warming = this.#warming;
      if (warming !== undefined) {
        await warming;
        if (this.#warming === warming) this.#warming = undefined;
        continue;
      }
      const put = pending[this.#pendingHead]!;
      const refusal = this.#refusal();
      // A close waits for the queue: queued puts are still appended.
      if (refusal !== undefined && !(this.#closed && this.#failure === undefined)) {
        this.#shiftPending();
        this.#stats.recordFailure("SERVICE_NOT_AVAILABLE");
        put.resolve(failed("SERVICE_NOT_AVAILABLE", refusal));
        continue;
      }
      if (this.#backlogged()) {
        if (!await this.#waitForProgress(put.startMs)) {
          this.#refuseBusy(
            put,
            `: the flusher is ${
              this.queue.maxWrotePosition - this.queue.flushedWhere
            } bytes behind (bound ${this.#options.unflushedBytesMax})${
              this.#pool === undefined
                ? ""
                : ` and ${
                  this.queue.maxWrotePosition - this.queue.committedWhere
                } bytes wait for the committer`
            }`,
          );
        }
        continue;
      }
      let file = this.queue.lastFile;
      if (file === undefined || file.isFull) {
        try {
          file = await this.queue.getOrCreateLastMappedFile(this.#startOffset);
        } catch (error) {
          if (error instanceof MqStoreError && error.code === "POOL_EXHAUSTED") {
            // Every pool buffer holds uncommitted bytes: wait for the committer.
            this.#committer?.wakeup();
            if (await this.#waitForProgress(put.startMs)) continue;
            this.#refuseBusy(
              put,
              `, for a write buffer: all ${this.#pool?.count} hold bytes the committer has not copied (${
                this.queue.maxWrotePosition - this.queue.committedWhere
              } bytes)`,
            );
            continue;
          }
          this.#shiftPending();
          this.#stats.recordFailure("CREATE_MAPEDFILE_FAILED");
          put.resolve(failed(
            "CREATE_MAPEDFILE_FAILED",
            error instanceof MqStoreError ? error : new MqStoreError(
              "IO_ERROR",
              `Cannot create a commit-log segment: ${String(error)}`,
              { cause: error },
            ),
          ));
          continue;
        }
      }
      const size = put.records.length;
      const remaining = this.fileSizeBytes - file.wrotePosition;
      const needed = size + END_OF_FILE_RESERVE_BYTES > remaining ? remaining : size;
      if (file.writableBytes < needed) {
        try {
          await file.ensureWritable(needed);
        } catch (error) {
          this.#fail(error, "write");
        }
        continue;
      }
      if (size + END_OF_FILE_RESERVE_BYTES > remaining) {
        // END_OF_FILE (an exact fit included): the record goes whole into
        // the next segment.
        file.append(this.#blankBound);
        continue;
      }
      // Shifted only once appended: if the append throws, #drain answers it.
      this.#appendRecords(
        file,
        put.records,
        size,
        put.count,
        put.topic,
        put.queueId,
        put.advances,
        this.#clock.nowMs(),
      );
      this.#shiftPending();
      put.resolve(this.#afterAppend(put.storeHost, put.wait, put.startMs));
    }
  }

  /**
   * Fails the head put with OS_PAGECACHE_BUSY after it waited past
   * osPageCacheBusyTimeOutMills; `waitingFor` ends the message with what
   * it waited for.
   */
  #refuseBusy(put: PendingPut, waitingFor: string): void {
    this.#shiftPending();
    this.#stats.recordFailure("OS_PAGECACHE_BUSY");
    put.resolve(failed(
      "OS_PAGECACHE_BUSY",
      new MqStoreError(
        "OS_PAGECACHE_BUSY",
        `The put waited ${
          this.#clock.nowMs() - put.startMs
        } ms, past osPageCacheBusyTimeOutMills ${this.#options.osPageCacheBusyTimeOutMills} ms${waitingFor}`,
      ),
    ));
  }

  #shiftPending(): void {
    this.#pendingHead++;
    if (this.#pendingHead === this.#pending.length) {
      this.#pending.length = 0;
      this.#pendingHead = 0;
    }
  }

  /**
   * Waits for flush or commit progress; false when the put that waits has
   * waited longer than osPageCacheBusyTimeOutMills.
   */
  #waitForProgress(startMs: number): Promise<boolean> {
    const remainingMs = startMs + this.#options.osPageCacheBusyTimeOutMills -
      this.#clock.nowMs();
    if (remainingMs <= 0 || this.#closed) return Promise.resolve(false);
    this.#flusher?.wakeup();
    this.#committer?.wakeup();
    this.#groupCommit?.wakeup();
    return new Promise<boolean>((resolve) => {
      let cancel = () => {};
      const wake = () => {
        cancel();
        resolve(true);
      };
      this.#progressWaiters.push(wake);
      cancel = this.#clock.setTimer(remainingMs, () => {
        this.#progressWaiters = this.#progressWaiters.filter((w) => w !== wake);
        resolve(false);
      });
    });
  }

  #wakeProgress(): void {
    const waiters = this.#progressWaiters;
    if (waiters.length === 0) return;
    this.#progressWaiters = [];
    for (const wake of waiters) wake();
  }

  #onFlushed(flushedWhere: number): void {
    this.#wakeProgress();
    // Without mmap a flush is also what copies the write buffer into the file.
    this.#options.onReadable?.();
    const waiters = this.#flushWaiters;
    if (waiters.length === 0) return;
    const still: FlushWaiter[] = [];
    for (const waiter of waiters) {
      if (waiter.offset <= flushedWhere) waiter.resolve();
      else still.push(waiter);
    }
    this.#flushWaiters = still;
  }

  /** Makes the log refuse writes after a write, commit or flush error. */
  #fail(error: unknown, operation: string): void {
    if (this.#failure === undefined) {
      this.#refusing = true;
      this.#failure = error instanceof MqStoreError ? error : new MqStoreError(
        "IO_ERROR",
        `The commit-log ${operation} failed: ${String(error)}`,
        { cause: error },
      );
    }
    for (const waiter of this.#flushWaiters) waiter.reject(this.#failure);
    this.#flushWaiters = [];
    this.#wakeProgress();
  }
}
