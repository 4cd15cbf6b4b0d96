/**
 * Runs `bench/runtime_bench.ts` on Deno, Bun and Node and prints the
 * figures of every adapter side by side.
 *
 * Usage: `tsx scripts/bench_runtime.ts` (or `npm run bench:runtime`).
 *
 * @module
 */

import type { RuntimeBenchResult } from "../bench/runtime_bench.ts";
import { BENCH_RUNTIMES, exitOf, lastJsonLine, runBench } from "./_bench_runner.ts";

const SCRIPT = "bench/runtime_bench.ts";

const rows: RuntimeBenchResult[] = [];
for (const runtime of BENCH_RUNTIMES) {
  const run = runBench(runtime, SCRIPT, ["--json"]);
  const results = lastJsonLine<RuntimeBenchResult[]>(run.stdout);
  if (results === undefined) {
    console.error(`${runtime}: no result (${exitOf(run)}): ${run.stderr.trim()}`);
  } else rows.push(...results);
}

const format = (value: number | undefined, digits: number) =>
  value === undefined ? "-" : value.toFixed(digits);
const header = [
  "runtime",
  "adapter",
  "200 B writes M rec/s",
  "GB/s",
  "populate 256 MiB ms",
  "4 KiB flush p50 µs",
  "p99 µs",
  "64 MiB flush ms",
];
const table = rows.map((row) => [
  row.runtime,
  row.adapter,
  format(row.mappedWriteMRecordsPerS, 1),
  format(row.mappedWriteGBps, 2),
  format(row.populateMs, 0),
  format(row.pageFlushP50Us, 0),
  format(row.pageFlushP99Us, 0),
  format(row.bigFlushMs, 0),
]);
const widths = header.map((title, i) =>
  Math.max(title.length, ...table.map((row) => row[i]!.length))
);
const line = (cells: string[]) =>
  `| ${cells.map((cell, i) => cell.padEnd(widths[i]!)).join(" | ")} |`;
console.log(line(header));
console.log(`|${widths.map((width) => "-".repeat(width + 2)).join("|")}|`);
for (const row of table) console.log(line(row));
