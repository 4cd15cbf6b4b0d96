/**
 * Runs `bench/runtime_bench.ts` on Deno, Bun and Node and prints the
 * figures of every adapter side by side.
 *
 * Usage: `tsx scripts/bench_runtime.ts` (or `npm run bench:runtime`).
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import path from "node:path";
import process from "node:process";
import type { RuntimeBenchResult } from "../bench/runtime_bench.ts";

const ROOT = path.resolve(import.meta.dirname ?? ".", "..");
const BIN = path.join(ROOT, "node_modules", ".bin");
const SCRIPT = "bench/runtime_bench.ts";

const commands: Array<[string, string, string[]]> = [
  ["deno", path.join(BIN, "deno"), ["run", "-A", SCRIPT, "--json"]],
  ["bun", path.join(BIN, "bun"), [SCRIPT, "--json"]],
  ["node", process.execPath, ["--import", "tsx", SCRIPT, "--json"]],
];

const rows: RuntimeBenchResult[] = [];
for (const [runtime, command, args] of commands) {
  const result = spawnSync(command, args, { cwd: ROOT, encoding: "utf8" });
  const line = result.stdout.trim().split("\n").at(-1) ?? "";
  try {
    rows.push(...JSON.parse(line) as RuntimeBenchResult[]);
  } catch {
    console.error(`${runtime}: no result (exit ${result.status}): ${result.stderr.trim()}`);
  }
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
