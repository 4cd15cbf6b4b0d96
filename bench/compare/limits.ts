/**
 * The machine's limits, measured by the same worker as the stores so every
 * store's figure can be read as a fraction of what the hardware allows:
 *
 * - memcpy of a record into a prefaulted buffer (records/s): the ceiling of
 *   any store that copies the record once;
 * - the page-cache fill (GB/s): how fast the kernel hands a new file's
 *   pages to a mapping, the ceiling of a burst appended into new pages
 *   (measured by `bench/commit_log_bench.ts` before its ASYNC rows);
 * - 4 MiB sequential writes plus one fdatasync (GB/s): the disk's
 *   streaming bandwidth through the page cache;
 * - one 4 KiB write + fdatasync (p50/p99): the price of one durable
 *   acknowledgement, timed in turns with the one-producer stores;
 * - a raw group commit (`bench/_raw_group_commit.ts`): producers append
 *   records, one write and one fdatasync per batch of whatever queued
 *   meanwhile, one or two flushes in flight (acks/s): the ceiling of a
 *   durable log with group commit.
 *
 * The durable limits write into a file prepared as mqstore prepares a
 * SYNC_FLUSH segment (allocated, pre-faulted and its zeros written
 * through: `prepareSyncFile`), wrapping to its start, so they overwrite
 * written blocks as the store does.
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";
import { createPort } from "../../src/runtime/mod.ts";
import type { RuntimePort } from "../../src/runtime/port.ts";
import { prepareSyncFile, rawGroupCommit } from "../_raw_group_commit.ts";
import { Samples } from "./_stats.ts";

/** Size of the buffer memcpy writes into, wrapping around. */
const MEMCPY_BUFFER_BYTES = 0x400_0000;
/** Chunk of the sequential-write limit. */
const SEQUENTIAL_CHUNK_BYTES = 0x40_0000;
/** One page, the unit of the durable-write latency limit. */
const PAGE_BYTES = 0x1000;
/**
 * File of the durable limits, written round: 64 MiB takes a fraction of a
 * second to prepare, and overwriting it is what a long log does too.
 */
const DURABLE_FILE_BYTES = 0x400_0000;

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

/** A prepared file (see the module doc), opened with `node:fs`. */
async function prepared(file: string, sizeBytes: number): Promise<number> {
  const handle = await prepareSyncFile(await createPort(), file, sizeBytes);
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

/**
 * Pre-faults a new file of `sizeBytes` for writing through a mapping
 * (`MADV_POPULATE_WRITE`, as the store pre-faults a new commit-log
 * segment), then removes it: the rate at which this machine hands fresh
 * page-cache pages to an append-only log, the ceiling of a burst into
 * new pages whatever the store does per record. On a VM the first fill of
 * memory that sat idle pays the hypervisor for every page (here 0.7 GB/s
 * cold against 9–10 GB/s once the same memory was used again), so the
 * rate depends on what ran before: measure it where it matters, first.
 * Undefined where the port cannot map (the portable adapter).
 */
export async function pageCacheFillLimit(
  port: RuntimePort,
  directory: string,
  sizeBytes: number,
): Promise<LimitResult | undefined> {
  if (!port.canMap) return undefined;
  const file = path.join(directory, "fill.bin");
  const handle = await port.createFile(file, sizeBytes);
  try {
    const mapping = await handle.map(0, sizeBytes);
    try {
      const start = performance.now();
      await mapping.populate(0, sizeBytes);
      const elapsedMs = performance.now() - start;
      return { ratePerS: sizeBytes / elapsedMs * 1000, count: sizeBytes, elapsedMs };
    } finally {
      mapping.unmap();
    }
  } finally {
    await handle.close();
    await port.remove(file);
  }
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

/** The 1-producer durable limit, opened: one 4 KiB write + fdatasync per put. */
export interface DurableWrite {
  /** Writes the next 4 KiB of the prepared file and fdatasyncs it, on the calling thread. */
  put(): Promise<void>;
  /** Closes the file; the caller removes its directory. */
  close(): Promise<void>;
}

/**
 * Opens the 1-producer durable limit in `directory`: each put writes the
 * next 4 KiB of a prepared file (wrapping to its start) and fdatasyncs.
 * It is timed as the one-producer stores are, taking turns with them
 * (`_turns.ts`), so both sample the disk in the same minutes.
 */
export async function openDurableWrite(directory: string): Promise<DurableWrite> {
  const fileBytes = DURABLE_FILE_BYTES;
  const fd = await prepared(path.join(directory, "durable.bin"), fileBytes);
  const page = new Uint8Array(PAGE_BYTES).fill(0x5a);
  let position = 0;
  let open = true;
  return {
    put() {
      fs.writeSync(fd, page, 0, PAGE_BYTES, position);
      fs.fdatasyncSync(fd);
      position = position + PAGE_BYTES >= fileBytes ? 0 : position + PAGE_BYTES;
      return Promise.resolve();
    },
    close() {
      if (open) fs.closeSync(fd);
      open = false;
      return Promise.resolve();
    },
  };
}

/**
 * The raw group commit (`bench/_raw_group_commit.ts`, the one
 * `bench/commit_log_bench.ts` measures too): `producers` loops each
 * appending `payloadBytes` records and awaiting their durability, for
 * `durationMs`, with at most `flushesMax` flushes in flight, into a file
 * prepared like mqstore's SYNC_FLUSH segments.
 */
export async function groupCommitLimit(
  directory: string,
  producers: number,
  payloadBytes: number,
  durationMs: number,
  flushesMax: number,
): Promise<LimitResult & { batches: number }> {
  const latenciesUs = new Samples();
  const { acks, elapsedMs, groups } = await rawGroupCommit({
    port: await createPort(),
    file: path.join(directory, "group.bin"),
    producers,
    recordBytes: payloadBytes,
    flushesMax,
    fileBytes: DURABLE_FILE_BYTES,
    durationMs,
    onAck: (latencyMs) => latenciesUs.push(latencyMs * 1000),
  });
  return {
    ratePerS: acks / elapsedMs * 1000,
    count: acks,
    elapsedMs,
    latenciesUs: latenciesUs.values(),
    batches: groups,
  };
}
