/**
 * The machine's limits, measured by the same worker as the stores so every
 * store's figure can be read as a fraction of what the hardware allows:
 *
 * - memcpy of a record into a prefaulted buffer (records/s): the ceiling of
 *   any store that copies the record once;
 * - 4 MiB sequential writes plus one fdatasync (GB/s): the disk's
 *   streaming bandwidth through the page cache;
 * - one 4 KiB write + fdatasync into a fallocated file (p50/p99): the
 *   price of one durable acknowledgement;
 * - a raw group commit: 64 producers append 1 KiB records into a
 *   fallocated file, one write and one fdatasync per batch of whatever
 *   queued meanwhile (acks/s): the ceiling of a durable log with group
 *   commit.
 *
 * Files are allocated with the runtime port's `createFile` (posix_fallocate,
 * like mqstore's segments) and written with `node:fs`.
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";
import { createPort } from "../../src/runtime/mod.ts";
import { Samples } from "./_stats.ts";

/** Size of the buffer memcpy writes into, wrapping around. */
const MEMCPY_BUFFER_BYTES = 0x400_0000;
/** Chunk of the sequential-write limit. */
const SEQUENTIAL_CHUNK_BYTES = 0x40_0000;
/** One page, the unit of the durable-write latency limit. */
const PAGE_BYTES = 0x1000;

/** A measured limit. */
export interface LimitResult {
  /** Operations (records, acks, bytes) per second. */
  ratePerS: number;
  /** Operations counted. */
  count: number;
  /** Wall time of the measured part. */
  elapsedMs: number;
  /** Latency samples in µs, when the limit has latencies. */
  latenciesUs?: Float64Array;
}

async function allocate(file: string, sizeBytes: number): Promise<number> {
  const port = await createPort();
  const handle = await port.createFile(file, sizeBytes);
  await handle.close();
  return fs.openSync(file, "r+");
}

/** Copies `count` records of `payloadBytes` into a prefaulted buffer. */
export function memcpyLimit(payloadBytes: number, count: number): LimitResult {
  const target = new Uint8Array(MEMCPY_BUFFER_BYTES);
  target.fill(1); // Prefault: memory that was never touched fills several times slower.
  const source = new Uint8Array(payloadBytes).fill(0x5a);
  const end = MEMCPY_BUFFER_BYTES - payloadBytes;
  let position = 0;
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    target.set(source, position);
    position += payloadBytes;
    if (position > end) position = 0;
  }
  const elapsedMs = performance.now() - start;
  if (target[0] !== 0x5a) throw new Error("memcpy limit: the copy did not land");
  return { ratePerS: count / elapsedMs * 1000, count, elapsedMs };
}

/** Writes `totalBytes` in 4 MiB chunks to a new file, then one fdatasync. */
export function sequentialWriteLimit(directory: string, totalBytes: number): LimitResult {
  const file = path.join(directory, "sequential.bin");
  const chunk = new Uint8Array(SEQUENTIAL_CHUNK_BYTES).fill(0x5a);
  const fd = fs.openSync(file, "w");
  try {
    const start = performance.now();
    let written = 0;
    while (written < totalBytes) {
      written += fs.writeSync(fd, chunk, 0, chunk.length, written);
    }
    fs.fdatasyncSync(fd);
    const elapsedMs = performance.now() - start;
    return { ratePerS: written / elapsedMs * 1000, count: written, elapsedMs };
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * For `durationMs`: write the next 4 KiB of a fallocated file, fdatasync.
 * Time-bound like the durable workloads it is the limit of, so both sample
 * the disk over spans of the same length.
 */
export async function durableWriteLimit(
  directory: string,
  durationMs: number,
  fileBytes: number,
): Promise<LimitResult> {
  const file = path.join(directory, "durable.bin");
  const fd = await allocate(file, fileBytes);
  const page = new Uint8Array(PAGE_BYTES).fill(0x5a);
  const latenciesUs = new Samples();
  try {
    const start = performance.now();
    const deadline = start + durationMs;
    let position = 0;
    let count = 0;
    while (performance.now() < deadline) {
      const t = performance.now();
      fs.writeSync(fd, page, 0, PAGE_BYTES, position);
      fs.fdatasyncSync(fd);
      latenciesUs.push((performance.now() - t) * 1000);
      count++;
      position = position + PAGE_BYTES >= fileBytes ? 0 : position + PAGE_BYTES;
    }
    const elapsedMs = performance.now() - start;
    return {
      ratePerS: count / elapsedMs * 1000,
      count,
      elapsedMs,
      latenciesUs: latenciesUs.values(),
    };
  } finally {
    fs.closeSync(fd);
  }
}

function writeAsync(fd: number, bytes: Uint8Array, position: number): Promise<void> {
  return new Promise((resolve, reject) => {
    fs.write(fd, bytes, 0, bytes.length, position, (error, written) => {
      if (error) reject(error);
      else if (written !== bytes.length) {
        reject(new Error(`Short write: ${written} of ${bytes.length}`));
      } else resolve();
    });
  });
}

function datasyncAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) =>
    fs.fdatasync(fd, (error) => error ? reject(error) : resolve())
  );
}

/**
 * A plain group commit: appends queue while a write + fdatasync is in
 * flight; the next flush takes everything queued, copies it into one
 * buffer, writes it at the log's end and syncs once.
 */
class GroupCommitLog {
  #fd: number;
  #fileBytes: number;
  #offset = 0;
  #queued: Uint8Array[] = [];
  #waiters: Array<() => void> = [];
  #flushing = false;
  #failure: unknown;
  #staging: Uint8Array;
  /** Batches flushed, for the report. */
  batches = 0;

  constructor(fd: number, fileBytes: number, batchBytesMax: number) {
    this.#fd = fd;
    this.#fileBytes = fileBytes;
    this.#staging = new Uint8Array(batchBytesMax);
  }

  append(record: Uint8Array): Promise<void> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    return new Promise((resolve) => {
      this.#queued.push(record);
      this.#waiters.push(resolve);
      if (!this.#flushing) void this.#flushLoop();
    });
  }

  async #flushLoop(): Promise<void> {
    this.#flushing = true;
    try {
      while (this.#queued.length > 0) {
        const records = this.#queued;
        const waiters = this.#waiters;
        this.#queued = [];
        this.#waiters = [];
        let length = 0;
        for (const record of records) {
          this.#staging.set(record, length);
          length += record.length;
        }
        // Wrap to the start rather than grow the file: a run never needs
        // more than the file, and overwriting keeps the blocks allocated.
        if (this.#offset + length > this.#fileBytes) this.#offset = 0;
        await writeAsync(this.#fd, this.#staging.subarray(0, length), this.#offset);
        await datasyncAsync(this.#fd);
        this.#offset += length;
        this.batches++;
        for (const wake of waiters) wake();
      }
    } catch (error) {
      this.#failure = error;
    } finally {
      this.#flushing = false;
    }
  }
}

/**
 * `producers` loops, each appending `payloadBytes` records and awaiting
 * their durability, for `durationMs`.
 */
export async function groupCommitLimit(
  directory: string,
  producers: number,
  payloadBytes: number,
  durationMs: number,
  fileBytes: number,
): Promise<LimitResult & { batches: number }> {
  const file = path.join(directory, "group.bin");
  const fd = await allocate(file, fileBytes);
  const log = new GroupCommitLog(fd, fileBytes, producers * payloadBytes);
  const latenciesUs = new Samples();
  try {
    const start = performance.now();
    const deadline = start + durationMs;
    let acks = 0;
    const producer = async () => {
      const record = new Uint8Array(payloadBytes).fill(0x5a);
      while (performance.now() < deadline) {
        const t = performance.now();
        await log.append(record);
        latenciesUs.push((performance.now() - t) * 1000);
        acks++;
      }
    };
    await Promise.all(Array.from({ length: producers }, producer));
    const elapsedMs = performance.now() - start;
    return {
      ratePerS: acks / elapsedMs * 1000,
      count: acks,
      elapsedMs,
      latenciesUs: latenciesUs.values(),
      batches: log.batches,
    };
  } finally {
    fs.closeSync(fd);
  }
}
