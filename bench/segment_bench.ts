/**
 * Segment-layer benchmark, per adapter (native FFI and portable) on the
 * runtime it runs on:
 * 1. append throughput of 64 B and 1 KiB records (`MappedFile.append` with
 *    a callback copying a prepared record) into a warm segment (pre-faulted
 *    with `MappedFile.warm`) and a cold one (fresh mapping), next to a heap
 *    memcpy of the same records measured in the same rounds;
 * 2. the cost of a segment roll: the one append that crosses into a new
 *    1 MiB segment (`getOrCreateLastMappedFile` + first append), with the
 *    `AllocateMappedFileService` (given time to finish, and back to back)
 *    and with synchronous creation;
 * 3. commit throughput in pool mode (`TransientStorePool` with buffers
 *    from the port, locked in memory where allowed, + `MappedFile.commit`);
 * 4. device bytes written per 4 KiB flush at random positions of a segment
 *    (`MappedFile.flush(0)`), from the sectors-written counter of the block
 *    device holding the temp dir (`/sys/dev/block/MAJ:MIN/stat`).
 *
 * Figures are medians over rounds after a discarded warm-up round (memory
 * left idle for a few seconds fills several times slower on a VM).
 *
 * Run alone: `deno run -A bench/segment_bench.ts [--json] [--quick]`,
 * `bun bench/segment_bench.ts`, `node --import tsx bench/segment_bench.ts`;
 * `tsx scripts/bench_segment.ts` runs all three and prints them side by side.
 * `--json` prints one JSON line: a {@link SegmentBenchReport};
 * `--only append,roll,commit,flush` runs some sections only.
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { availableAdapters, createPort } from "../src/runtime/mod.ts";
import type { AdapterName, RuntimePort } from "../src/runtime/mod.ts";
import { AllocateMappedFileService } from "../src/segment/allocate_mapped_file_service.ts";
import { type AppendOutcome, type AppendTarget, MappedFile } from "../src/segment/mapped_file.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { TransientStorePool } from "../src/segment/transient_store_pool.ts";
import { deviceStatFile } from "./_device.ts";

const KIB = 0x400;
const MIB = 0x10_0000;
const PAGE_BYTES = 0x1000;
const SECTOR_BYTES = 0x200;
/** Record sizes of the append bench. */
const RECORD_SIZES_BYTES = [0x40, 0x400] as const;
/** Segment size of the roll bench. */
const ROLL_SEGMENT_BYTES = MIB;
/** Record size of the roll and commit benches. */
const ROLL_RECORD_BYTES = KIB;
/** Commit chunk of the "per 1 MiB" pool-commit case. */
const COMMIT_CHUNK_BYTES = MIB;

/** Sizes and counts of one run. */
interface Plan {
  appendSegmentBytes: number;
  appendRounds: number;
  rolls: number;
  rollWarmup: number;
  commitSegmentBytes: number;
  commitRounds: number;
  flushSegmentBytes: number;
  flushes: number;
  backgroundMs: number;
}

const FULL: Plan = {
  appendSegmentBytes: 64 * MIB,
  appendRounds: 5,
  rolls: 120,
  rollWarmup: 5,
  commitSegmentBytes: 64 * MIB,
  commitRounds: 5,
  flushSegmentBytes: 64 * MIB,
  flushes: 200,
  backgroundMs: 2000,
};

const QUICK: Plan = {
  appendSegmentBytes: 16 * MIB,
  appendRounds: 2,
  rolls: 20,
  rollWarmup: 2,
  commitSegmentBytes: 16 * MIB,
  commitRounds: 2,
  flushSegmentBytes: 16 * MIB,
  flushes: 30,
  backgroundMs: 300,
};

/** Append throughput of one record size. */
export interface AppendFigures {
  recordBytes: number;
  /** Absent where the port cannot map (warming does nothing there). */
  warmGBps?: number;
  warmMRecordsPerS?: number;
  /** The fastest round: the least disturbed by other load. */
  warmBestGBps?: number;
  coldGBps: number;
  coldMRecordsPerS: number;
  /** Heap memcpy of the same records, measured in the same rounds. */
  memcpyGBps: number;
  /** The fastest round. */
  memcpyBestGBps: number;
  /** warmGBps / memcpyGBps. */
  warmToMemcpy?: number;
}

/** Latency of the append crossing into a new segment, in ms. */
export interface RollFigures {
  mode: "ahead-idle" | "ahead-back-to-back" | "sync";
  rolls: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /**
   * The same call and append on the segment's last record, which does not
   * cross: what the machine's scheduling alone adds to such a timing.
   */
  controlP50Ms: number;
  controlP99Ms: number;
  /** The crossing split: `getOrCreateLastMappedFile` alone, p50 and p99. */
  getP50Ms: number;
  getP99Ms: number;
  /** The crossing split: the first append into the new segment, p50 and p99. */
  firstAppendP50Ms: number;
  firstAppendP99Ms: number;
}

/** Pool-mode commit throughput. */
export interface CommitFigures {
  /** One commit of a whole appended segment. */
  wholeSegmentGBps: number;
  /** A commit after every 1 MiB appended (appends included in the time). */
  perChunkGBps: number;
  /** Pool buffers locked in memory (of 2). */
  lockedBuffers: number;
}

/** Device bytes written per 4 KiB flush. */
export interface FlushFigures {
  state: "cold" | "pre-faulted" | "pre-faulted+zeros-written";
  flushes: number;
  minBytes: number;
  medianBytes: number;
  p99Bytes: number;
  /** The most frequent figure: bursts of other writers rarely repeat exactly. */
  modeBytes: number;
  /** Share of flushes that wrote at most 8 KiB. */
  atMost8KiBShare: number;
  /**
   * Bytes written to the device in an idle window as long as the previous
   * flush, taken before each flush: the noise of other writers, median.
   */
  idleMedianBytes: number;
  /** Share of those idle windows in which nothing was written. */
  idleQuietShare: number;
  /** Median write requests per flush (a journal commit adds its own). */
  medianWriteRequests: number;
  latencyP50Us: number;
  latencyP99Us: number;
}

/** One adapter's figures. */
export interface AdapterReport {
  adapter: string;
  append: AppendFigures[];
  roll: RollFigures[];
  commit?: CommitFigures;
  /** What other processes wrote to the device while idle, KiB/s. */
  backgroundWriteKiBps?: number;
  flush: FlushFigures[];
}

/** What `--json` prints. */
export interface SegmentBenchReport {
  runtime: string;
  quick: boolean;
  /** 1-minute load average at start and end. */
  loadAverage: [number, number];
  /** The block device whose counter the flush figures come from. */
  device: string | undefined;
  adapters: AdapterReport[];
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function percentile(values: readonly number[], fraction: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))]!;
}

function mode(values: readonly number[]): number {
  const counts = new Map<number, number>();
  for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1);
  let best = values[0]!;
  for (const [value, count] of counts) {
    if (count > counts.get(best)! || (count === counts.get(best)! && value < best)) best = value;
  }
  return best;
}

function runtimeLabel(): string {
  const host = globalThis as { Deno?: { version: { deno: string } }; Bun?: { version: string } };
  if (host.Deno !== undefined) return `deno ${host.Deno.version.deno}`;
  if (host.Bun !== undefined) return `bun ${host.Bun.version}`;
  return `node ${process.versions.node}`;
}

/** A 20-digit segment path in `directory` for `offset`. */
function segmentPath(directory: string, offset: number): string {
  return path.join(directory, String(offset).padStart(20, "0"));
}

/** An append callback copying a prepared record, with a constant outcome. */
function copier(record: Uint8Array): (target: AppendTarget) => AppendOutcome {
  const outcome: AppendOutcome = { wroteBytes: record.length, storeTimestampMs: 1 };
  return (target) => {
    target.bytes.set(record, target.index);
    return outcome;
  };
}

/**
 * Fills `file` with records through `append`; returns the seconds spent.
 * In `window` mode (portable adapter) the commits that make room are part
 * of the cost and timed.
 */
async function fill(file: MappedFile, record: Uint8Array): Promise<number> {
  const append = copier(record);
  const count = Math.floor(file.fileSizeBytes / record.length);
  const window = file.writeMode === "window";
  const started = performance.now();
  for (let i = 0; i < count; i++) {
    if (window && file.writableBytes < record.length) await file.ensureWritable(record.length);
    file.append(append);
  }
  return (performance.now() - started) / 1000;
}

function memcpyFill(heap: Uint8Array, record: Uint8Array): number {
  const count = Math.floor(heap.length / record.length);
  const started = performance.now();
  let position = 0;
  for (let i = 0; i < count; i++) {
    heap.set(record, position);
    position += record.length;
  }
  return (performance.now() - started) / 1000;
}

async function benchAppend(
  port: RuntimePort,
  directory: string,
  plan: Plan,
): Promise<AppendFigures[]> {
  const size = plan.appendSegmentBytes;
  const heap = new Uint8Array(size).fill(1);
  const figures: AppendFigures[] = [];
  let offset = 0;
  for (const recordBytes of RECORD_SIZES_BYTES) {
    const record = new Uint8Array(recordBytes).fill(0x5a);
    const count = Math.floor(size / recordBytes);
    const warm: number[] = [];
    const cold: number[] = [];
    const memcpy: number[] = [];
    // Round 0 is a warm-up and discarded.
    for (let round = 0; round <= plan.appendRounds; round++) {
      let warmSeconds = Number.NaN;
      let memcpySeconds = Number.NaN;
      if (port.canMap) {
        const warmFile = await MappedFile.create({
          port,
          path: segmentPath(directory, offset),
          fileSizeBytes: size,
        });
        offset += size;
        await warmFile.warm();
        // Right before the warm fill, so both see the same machine state.
        memcpySeconds = memcpyFill(heap, record);
        warmSeconds = await fill(warmFile, record);
        await warmFile.destroy({ waitMs: 0 });
      } else {
        memcpySeconds = memcpyFill(heap, record);
      }
      const coldFile = await MappedFile.create({
        port,
        path: segmentPath(directory, offset),
        fileSizeBytes: size,
      });
      offset += size;
      const coldSeconds = await fill(coldFile, record);
      await coldFile.destroy({ waitMs: 0 });
      if (round === 0) continue;
      warm.push(count / warmSeconds);
      cold.push(count / coldSeconds);
      memcpy.push(count / memcpySeconds);
    }
    const warmRate = median(warm);
    const coldRate = median(cold);
    const memcpyRate = median(memcpy);
    const figure: AppendFigures = {
      recordBytes,
      coldGBps: coldRate * recordBytes / 1e9,
      coldMRecordsPerS: coldRate / 1e6,
      memcpyGBps: memcpyRate * recordBytes / 1e9,
      memcpyBestGBps: Math.max(...memcpy) * recordBytes / 1e9,
    };
    if (port.canMap) {
      figure.warmGBps = warmRate * recordBytes / 1e9;
      figure.warmMRecordsPerS = warmRate / 1e6;
      figure.warmBestGBps = Math.max(...warm) * recordBytes / 1e9;
      figure.warmToMemcpy = warmRate / memcpyRate;
    }
    figures.push(figure);
  }
  return figures;
}

async function benchRoll(
  port: RuntimePort,
  directory: string,
  mode: RollFigures["mode"],
  plan: Plan,
): Promise<RollFigures> {
  const allocator = mode === "sync"
    ? undefined
    : new AllocateMappedFileService({ port, onWarning: () => {} });
  allocator?.start();
  const queueDirectory = path.join(directory, `roll-${mode}`);
  const queue = new MappedFileQueue({
    port,
    directory: queueDirectory,
    fileSizeBytes: ROLL_SEGMENT_BYTES,
    allocator,
  });
  await queue.load();
  const append = copier(new Uint8Array(ROLL_RECORD_BYTES).fill(0x5a));
  const latencies: number[] = [];
  const controls: number[] = [];
  const gets: number[] = [];
  const firstAppends: number[] = [];
  try {
    let file = await queue.getOrCreateLastMappedFile(0);
    await allocator?.whenIdle();
    for (let roll = 0; roll < plan.rollWarmup + plan.rolls; roll++) {
      while (file.wrotePosition + ROLL_RECORD_BYTES < file.fileSizeBytes) {
        if (file.writableBytes < ROLL_RECORD_BYTES) await file.ensureWritable(ROLL_RECORD_BYTES);
        file.append(append);
      }
      // A writer slower than the allocator: the next segment is ready.
      if (mode === "ahead-idle") await allocator?.whenIdle();
      await file.ensureWritable(ROLL_RECORD_BYTES);
      let started = performance.now();
      file = await queue.getOrCreateLastMappedFile(0);
      file.append(append);
      const controlMs = performance.now() - started;
      started = performance.now();
      file = await queue.getOrCreateLastMappedFile(0);
      const gotAt = performance.now();
      file.append(append);
      const endedAt = performance.now();
      const elapsedMs = endedAt - started;
      if (roll >= plan.rollWarmup) {
        latencies.push(elapsedMs);
        controls.push(controlMs);
        gets.push(gotAt - started);
        firstAppends.push(endedAt - gotAt);
      }
      // Keep a few segments only: the rest is deleted outside the timing.
      if (queue.files.length > 4) {
        await queue.deleteExpiredByTime({ expiredTimeMs: 0, cleanImmediately: true, maxCount: 1 });
      }
    }
  } finally {
    await allocator?.close();
    await queue.destroy();
  }
  return {
    mode,
    rolls: latencies.length,
    p50Ms: median(latencies),
    p99Ms: percentile(latencies, 0.99),
    maxMs: Math.max(...latencies),
    controlP50Ms: median(controls),
    controlP99Ms: percentile(controls, 0.99),
    getP50Ms: median(gets),
    getP99Ms: percentile(gets, 0.99),
    firstAppendP50Ms: median(firstAppends),
    firstAppendP99Ms: percentile(firstAppends, 0.99),
  };
}

async function benchCommit(
  port: RuntimePort,
  directory: string,
  plan: Plan,
): Promise<CommitFigures> {
  const size = plan.commitSegmentBytes;
  // Buffers from the port: locked in memory where the runtime allows.
  const pool = new TransientStorePool({ fileSizeBytes: size, count: 2, port });
  await pool.init();
  const lockedBuffers = pool.lockedCount;
  const record = new Uint8Array(ROLL_RECORD_BYTES).fill(0x5a);
  const append = copier(record);
  const whole: number[] = [];
  const chunked: number[] = [];
  let offset = 0;
  try {
    for (let round = 0; round <= plan.commitRounds; round++) {
      const a = await MappedFile.create({
        port,
        path: segmentPath(directory, offset),
        fileSizeBytes: size,
        pool,
      });
      offset += size;
      while (!a.isFull) a.append(append);
      let started = performance.now();
      await a.commit(0);
      const wholeSeconds = (performance.now() - started) / 1000;
      await a.destroy({ waitMs: 0 });
      const b = await MappedFile.create({
        port,
        path: segmentPath(directory, offset),
        fileSizeBytes: size,
        pool,
      });
      offset += size;
      const perChunk = COMMIT_CHUNK_BYTES / ROLL_RECORD_BYTES;
      started = performance.now();
      while (!b.isFull) {
        for (let i = 0; i < perChunk && !b.isFull; i++) b.append(append);
        await b.commit(0);
      }
      const chunkedSeconds = (performance.now() - started) / 1000;
      await b.destroy({ waitMs: 0 });
      if (round === 0) continue;
      whole.push(size / wholeSeconds / 1e9);
      chunked.push(size / chunkedSeconds / 1e9);
    }
  } finally {
    await pool.close();
  }
  return { wholeSegmentGBps: median(whole), perChunkGBps: median(chunked), lockedBuffers };
}

/** Write requests and sectors written (fields 5 and 7 of the block device's `stat`). */
function deviceWrites(statPath: string): { requests: number; sectors: number } {
  const fields = fs.readFileSync(statPath, "utf8").trim().split(/\s+/);
  return { requests: Number(fields[4]), sectors: Number(fields[6]) };
}

async function benchFlush(
  port: RuntimePort,
  directory: string,
  state: FlushFigures["state"],
  statPath: string,
  plan: Plan,
  baseOffset: number,
): Promise<FlushFigures> {
  const size = plan.flushSegmentBytes;
  const file = await MappedFile.create({
    port,
    path: segmentPath(directory, baseOffset),
    fileSizeBytes: size,
  });
  if (state === "pre-faulted") await file.warm();
  if (state === "pre-faulted+zeros-written") await file.prepare({ writeZeros: true });
  // Distinct random pages: a page flushed once is no longer an unwritten
  // extent, which would change what a second flush of it costs.
  const pages = size / PAGE_BYTES;
  const order = Array.from({ length: pages }, (_, i) => i);
  for (let i = pages - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const page = new Uint8Array(PAGE_BYTES);
  const bytes: number[] = [];
  const latencies: number[] = [];
  const requests: number[] = [];
  const idle: number[] = [];
  let windowMs = 1;
  try {
    for (let i = 0; i < Math.min(plan.flushes, pages); i++) {
      const position = order[i]! * PAGE_BYTES;
      page.fill((i & 0xff) | 1);
      file.resetPositions(position);
      if (file.writableBytes < PAGE_BYTES) await file.ensureWritable(PAGE_BYTES);
      file.appendBytes(page);
      const idleBefore = deviceWrites(statPath).sectors;
      await new Promise((resolve) => setTimeout(resolve, windowMs));
      idle.push((deviceWrites(statPath).sectors - idleBefore) * SECTOR_BYTES);
      const before = deviceWrites(statPath);
      const started = performance.now();
      await file.flush(0);
      const after = deviceWrites(statPath);
      latencies.push((performance.now() - started) * 1000);
      windowMs = Math.max(1, Math.round(latencies[latencies.length - 1]! / 1000));
      bytes.push((after.sectors - before.sectors) * SECTOR_BYTES);
      requests.push(after.requests - before.requests);
    }
  } finally {
    await file.destroy({ waitMs: 0 });
  }
  return {
    state,
    flushes: bytes.length,
    minBytes: Math.min(...bytes),
    medianBytes: median(bytes),
    p99Bytes: percentile(bytes, 0.99),
    medianWriteRequests: median(requests),
    modeBytes: mode(bytes),
    atMost8KiBShare: bytes.filter((b) => b <= 8 * KIB).length / bytes.length,
    idleMedianBytes: median(idle),
    idleQuietShare: idle.filter((b) => b === 0).length / idle.length,
    latencyP50Us: median(latencies),
    latencyP99Us: percentile(latencies, 0.99),
  };
}

/** The sections of the bench, for `--only`. */
type Section = "append" | "roll" | "commit" | "flush";

/** Sectors the rest of the machine writes per second, over `durationMs`. */
async function backgroundBytesPerS(statPath: string, durationMs: number): Promise<number> {
  const before = deviceWrites(statPath).sectors;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, durationMs));
  const seconds = (performance.now() - started) / 1000;
  return (deviceWrites(statPath).sectors - before) * SECTOR_BYTES / seconds;
}

async function benchAdapter(
  port: RuntimePort,
  directory: string,
  statPath: string | undefined,
  plan: Plan,
  sections: ReadonlySet<Section>,
  log: (line: string) => void,
): Promise<AdapterReport> {
  const own = path.join(directory, port.adapter);
  fs.mkdirSync(own, { recursive: true });
  const report: AdapterReport = { adapter: port.adapter, append: [], roll: [], flush: [] };
  if (sections.has("append")) {
    log(`${port.adapter}: append`);
    report.append = await benchAppend(port, own, plan);
  }
  if (sections.has("roll")) {
    for (const mode of ["ahead-idle", "ahead-back-to-back", "sync"] as const) {
      log(`${port.adapter}: roll ${mode}`);
      report.roll.push(await benchRoll(port, own, mode, plan));
    }
  }
  if (sections.has("commit")) {
    log(`${port.adapter}: commit`);
    report.commit = await benchCommit(port, own, plan);
  }
  if (sections.has("flush") && statPath !== undefined) {
    // What the rest of the machine writes meanwhile: the noise in the
    // per-flush figures is about this rate times the flush latency.
    report.backgroundWriteKiBps = await backgroundBytesPerS(statPath, plan.backgroundMs) / KIB;
    const states: FlushFigures["state"][] = port.canMap
      ? ["cold", "pre-faulted", "pre-faulted+zeros-written"]
      : ["cold"];
    let offset = 0;
    for (const state of states) {
      log(`${port.adapter}: flush ${state}`);
      report.flush.push(await benchFlush(port, own, state, statPath, plan, offset));
      offset += plan.flushSegmentBytes;
    }
  }
  return report;
}

function printReport(report: SegmentBenchReport): void {
  console.log(
    `runtime: ${report.runtime}  load average: ${report.loadAverage.join(" → ")}  device: ${
      report.device ?? "-"
    }`,
  );
  const table = (title: string, rows: readonly object[]) => {
    if (rows.length === 0) return;
    console.log(title);
    console.table(rows);
  };
  for (const adapter of report.adapters) {
    table(`\n[${adapter.adapter}] append`, adapter.append);
    table(`[${adapter.adapter}] roll (crossing append)`, adapter.roll);
    table(`[${adapter.adapter}] pool commit`, adapter.commit === undefined ? [] : [adapter.commit]);
    table(
      `[${adapter.adapter}] device bytes per 4 KiB flush (background ${
        adapter.backgroundWriteKiBps?.toFixed(0) ?? "-"
      } KiB/s)`,
      adapter.flush,
    );
  }
}

async function main(): Promise<void> {
  const json = process.argv.includes("--json");
  const quick = process.argv.includes("--quick");
  const plan = quick ? QUICK : FULL;
  const onlyAt = process.argv.indexOf("--only");
  const sections = new Set<Section>(
    onlyAt >= 0
      ? (process.argv[onlyAt + 1] ?? "").split(",") as Section[]
      : ["append", "roll", "commit", "flush"],
  );
  const log = json ? (line: string) => console.error(line) : (line: string) => console.log(line);
  const loadStart = os.loadavg()[0]!;
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-segment-bench-"));
  const device = deviceStatFile(directory);
  const adapters: AdapterReport[] = [];
  try {
    for (const adapter of availableAdapters()) {
      if (adapter === "memory") continue;
      const port = await createPort({ adapter: adapter as AdapterName });
      adapters.push(await benchAdapter(port, directory, device?.statPath, plan, sections, log));
    }
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
  const report: SegmentBenchReport = {
    runtime: runtimeLabel(),
    quick,
    loadAverage: [loadStart, os.loadavg()[0]!],
    device: device?.device,
    adapters,
  };
  if (json) console.log(JSON.stringify(report));
  else printReport(report);
}

if (import.meta.main ?? process.argv[1]?.endsWith("segment_bench.ts")) await main();
