/**
 * The raw group commit, the best this device does by hand: the ceiling a
 * durable log with group commit is read against, shared by
 * `bench/commit_log_bench.ts` (its `raw group commit` rows) and the
 * comparison's limit (`bench/compare/limits.ts`), so both measure it the
 * same way.
 *
 * `producers` loops each append their record into a shared buffer (a
 * copy, as a store encodes into its write buffer) and wait for the flush
 * that covers it. A flush is one positional write of the buffered bytes on
 * the JavaScript thread (a page-cache copy) and one `fdatasync` off it; up
 * to `flushesMax` run at once. With one, the next starts once every
 * producer is back (or on the next turn when some is not); with two, once
 * half of them are (each flush takes half of the load, the other half's
 * flush running meanwhile), answered in the order they began.
 *
 * The file is prepared as the store prepares a SYNC_FLUSH segment
 * ({@link prepareSyncFile}), so the flushes overwrite written blocks in
 * single-page folios; past the prepared bytes the log wraps to the start,
 * overwriting what it wrote.
 *
 * @module
 */

import { performance } from "node:perf_hooks";
import { setImmediate } from "node:timers";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";

/** Step of the preparation: populate, then write through, 4 MiB at a time. */
const PREPARE_STEP_BYTES = 0x40_0000;
/** Appends before the clock runs: the JIT and the first flushes. */
const WARMUP_APPENDS = 200;

/** What {@link rawGroupCommit} runs. */
export interface RawGroupCommitOptions {
  /** Creates and maps the file. */
  port: RuntimePort;
  /** The log file, created here (removed by the caller). */
  file: string;
  /** Concurrent producers, each awaiting its append before the next. */
  producers: number;
  /** Bytes of one appended record. */
  recordBytes: number;
  /** Flushes in flight at most (1 or 2 in the benches). */
  flushesMax: number;
  /** Size of the file; what is appended past it wraps to the start. */
  fileBytes: number;
  /**
   * Appends each producer makes (count-bound); else they append until
   * `durationMs` has passed.
   */
  appendsPerProducer?: number;
  /** Time-bound: producers append until this much time has passed. */
  durationMs?: number;
  /** Called with each measured ack's latency. */
  onAck?: (latencyMs: number) => void;
}

/** What {@link rawGroupCommit} measured. */
export interface RawGroupCommitResult {
  /** Appends acknowledged while the clock ran. */
  acks: number;
  /** Wall time of the measured part. */
  elapsedMs: number;
  /** Flushes while the clock ran. */
  groups: number;
}

/**
 * Creates a file as the store prepares a SYNC_FLUSH segment
 * (`warmMapedFileEnable`): allocated, its first `preparedBytes`
 * pre-faulted under MADV_RANDOM (single-page folios) and their zeros
 * written through, so later writes overwrite written blocks: no extent
 * conversion in the `fdatasync`, no large folio written back for a page.
 * Without a mapping (the portable adapter) the file is only allocated.
 */
export async function prepareSyncFile(
  port: RuntimePort,
  file: string,
  fileBytes: number,
  preparedBytes: number = fileBytes,
): Promise<FileHandle> {
  const handle = await port.createFile(file, fileBytes);
  if (port.canMap) {
    const mapping = await handle.map(0, fileBytes);
    mapping.advise(0, fileBytes, "random");
    const end = Math.min(fileBytes, preparedBytes);
    for (let at = 0; at < end; at += PREPARE_STEP_BYTES) {
      const length = Math.min(PREPARE_STEP_BYTES, end - at);
      await mapping.populate(at, length);
      await mapping.sync(at, length);
    }
    mapping.unmap();
  }
  return handle;
}

/** Runs the raw group commit the module doc describes. */
export async function rawGroupCommit(
  options: RawGroupCommitOptions,
): Promise<RawGroupCommitResult> {
  const { producers, recordBytes, flushesMax, appendsPerProducer, durationMs, onAck } = options;
  if ((appendsPerProducer === undefined) === (durationMs === undefined)) {
    throw new TypeError("rawGroupCommit needs one of appendsPerProducer and durationMs");
  }
  // Count-bound: prepare what the run writes (and a margin); time-bound: all.
  const usedBytes = appendsPerProducer === undefined
    ? options.fileBytes
    : (appendsPerProducer * producers + WARMUP_APPENDS) * recordBytes + 0x10_0000;
  const wrapBytes = Math.min(options.fileBytes, usedBytes);
  const handle = await prepareSyncFile(options.port, options.file, options.fileBytes, wrapBytes);
  try {
    const record = new Uint8Array(recordBytes).fill(0x5A);
    // Appended records not yet written; at most one per producer.
    const buffer = new Uint8Array(producers * recordBytes);
    let pendingBytes = 0;
    let filePosition = 0;
    // Producers waiting for the flush that will cover them (not begun yet).
    let waiting: Array<() => void> = [];
    let inFlight = 0;
    let scheduled = false;
    let groups = 0;
    // Settles after the last flush begun: flushes answer in begin order.
    let last: Promise<void> = Promise.resolve();
    const share = Math.ceil(producers / flushesMax);
    const begin = (): void => {
      const answers = waiting;
      waiting = [];
      if (pendingBytes > 0) {
        if (filePosition + pendingBytes > wrapBytes) filePosition = 0;
        handle.writeSync(buffer.subarray(0, pendingBytes), filePosition);
        filePosition += pendingBytes;
        pendingBytes = 0;
      }
      inFlight++;
      groups++;
      const own = handle.datasync();
      const earlier = last;
      last = Promise.all([earlier, own]).then(() => {
        inFlight--;
        for (const answer of answers) answer();
        if (waiting.length > 0) maybeBegin(false);
      });
    };
    const maybeBegin = (onTurn: boolean): void => {
      if (waiting.length === 0 || inFlight >= flushesMax) return;
      if (waiting.length >= share || (onTurn && inFlight === 0)) begin();
      else if (!scheduled) {
        scheduled = true;
        setImmediate(() => {
          scheduled = false;
          maybeBegin(true);
        });
      }
    };
    const append = (): Promise<void> => {
      buffer.set(record, pendingBytes);
      pendingBytes += recordBytes;
      return new Promise<void>((resolve) => {
        waiting.push(resolve);
        maybeBegin(false);
      });
    };
    for (let i = 0; i < WARMUP_APPENDS; i++) await append();
    await last;
    groups = 0;
    let acks = 0;
    const start = performance.now();
    const deadline = start + (durationMs ?? Infinity);
    const appends = appendsPerProducer ?? Infinity;
    await Promise.all(Array.from({ length: producers }, async () => {
      for (let i = 0; i < appends && performance.now() < deadline; i++) {
        const t0 = performance.now();
        await append();
        onAck?.(performance.now() - t0);
        acks++;
      }
    }));
    const elapsedMs = performance.now() - start;
    await last;
    return { acks, elapsedMs, groups };
  } finally {
    await handle.close();
  }
}
