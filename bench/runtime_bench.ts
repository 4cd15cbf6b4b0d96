/**
 * Runtime-port benchmark, per adapter on the runtime it runs on:
 * - warm mapped writes of 200-byte records into a pre-faulted mapping;
 * - flush latency of one dirty 4 KiB page (p50/p99);
 * - flush of 64 MiB dirty.
 *
 * Run alone: `deno run -A bench/runtime_bench.ts [--json]`, `bun
 * bench/runtime_bench.ts`, `node --import tsx bench/runtime_bench.ts`;
 * `tsx scripts/bench_runtime.ts` runs all three and prints them side by side.
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { availableAdapters, createPort } from "../src/runtime/mod.ts";
import type { AdapterName, FileHandle, RuntimePort } from "../src/runtime/mod.ts";

const PAGE_BYTES = 4096;
const RECORD_BYTES = 200;
const SEGMENT_BYTES = 256 * 1024 * 1024;
const BIG_FLUSH_BYTES = 64 * 1024 * 1024;
const PAGE_FLUSHES = 400;
const ROUNDS = 5;

/** One adapter's figures. */
export interface RuntimeBenchResult {
  runtime: string;
  adapter: string;
  mappedWriteGBps?: number;
  mappedWriteMRecordsPerS?: number;
  pageFlushP50Us: number;
  pageFlushP99Us: number;
  bigFlushMs: number;
  populateMs?: number;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function percentile(values: number[], fraction: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))]!;
}

async function flushPage(
  file: FileHandle,
  sync: ((position: number, length: number) => Promise<void>) | undefined,
  position: number,
): Promise<void> {
  if (sync) await sync(position, PAGE_BYTES);
  else await file.datasync();
}

async function benchAdapter(port: RuntimePort, directory: string): Promise<RuntimeBenchResult> {
  const file = await port.createFile(path.join(directory, `${port.adapter}.seg`), SEGMENT_BYTES);
  const record = new Uint8Array(RECORD_BYTES).fill(0x5a);
  const result: RuntimeBenchResult = {
    runtime: port.runtime,
    adapter: port.adapter,
    pageFlushP50Us: 0,
    pageFlushP99Us: 0,
    bigFlushMs: 0,
  };
  const mapping = port.canMap ? await file.map() : undefined;
  if (mapping) {
    mapping.advise(0, SEGMENT_BYTES, "random");
    const populateStart = performance.now();
    await mapping.populate(0, SEGMENT_BYTES);
    result.populateMs = performance.now() - populateStart;
    const bytes = mapping.bytes;
    const count = Math.floor(BIG_FLUSH_BYTES / RECORD_BYTES);
    const rates: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const started = performance.now();
      let position = 0;
      for (let i = 0; i < count; i++) {
        bytes.set(record, position);
        position += RECORD_BYTES;
      }
      const seconds = (performance.now() - started) / 1000;
      rates.push(count / seconds);
    }
    const recordsPerS = median(rates);
    result.mappedWriteMRecordsPerS = recordsPerS / 1e6;
    result.mappedWriteGBps = (recordsPerS * RECORD_BYTES) / 1e9;
    await mapping.sync(0, BIG_FLUSH_BYTES);
  }
  const sync = mapping ? mapping.sync.bind(mapping) : undefined;
  const one = new Uint8Array([1]);
  const latencies: number[] = [];
  for (let i = 0; i < PAGE_FLUSHES; i++) {
    const position = BIG_FLUSH_BYTES + i * PAGE_BYTES;
    if (mapping) mapping.bytes[position] = i & 0xff;
    else await file.write(one, position);
    const started = performance.now();
    await flushPage(file, sync, position);
    latencies.push((performance.now() - started) * 1000);
  }
  result.pageFlushP50Us = median(latencies);
  result.pageFlushP99Us = percentile(latencies, 0.99);
  const big: number[] = [];
  const chunk = new Uint8Array(1024 * 1024).fill(0x33);
  for (let round = 0; round < 3; round++) {
    const base = (round % 2) * BIG_FLUSH_BYTES + 2 * BIG_FLUSH_BYTES;
    chunk.fill(round + 1);
    for (let offset = 0; offset < BIG_FLUSH_BYTES; offset += chunk.length) {
      if (mapping) mapping.bytes.set(chunk, base + offset);
      else await file.write(chunk, base + offset);
    }
    const started = performance.now();
    if (mapping) await mapping.sync(base, BIG_FLUSH_BYTES);
    else await file.datasync();
    big.push(performance.now() - started);
  }
  result.bigFlushMs = median(big);
  mapping?.unmap();
  await file.close();
  return result;
}

async function main(): Promise<void> {
  const json = process.argv.includes("--json");
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-bench-"));
  const results: RuntimeBenchResult[] = [];
  try {
    for (const adapter of availableAdapters()) {
      if (adapter === "memory") continue;
      const port = await createPort({ adapter: adapter as AdapterName });
      results.push(await benchAdapter(port, directory));
    }
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
  if (json) console.log(JSON.stringify(results));
  else console.table(results);
}

if (import.meta.main ?? process.argv[1]?.endsWith("runtime_bench.ts")) await main();
