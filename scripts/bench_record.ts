/**
 * Runs `bench/record_bench.ts --json` on Deno, Bun and Node, one after the
 * other, and prints every case side by side (M records/s and GB/s per
 * runtime, from the median sample, with the fastest sample's records/s in
 * brackets), then the encode targets and how far each runtime is from them.
 *
 * Usage: `tsx scripts/bench_record.ts [--filter <text>] [--time-ms <n>]
 * [--runtimes deno,bun,node] [--rounds <n>] [--script <bench file>]` (or
 * `npm run bench:record`); `--script` runs another copy of the bench (e.g.
 * a baseline checkout's) instead.
 * `--filter` and `--time-ms` are passed to the bench. On a shared machine,
 * `--rounds n` runs the runtimes in turn n times and keeps, per case and
 * runtime, the round with the fastest median (and the fastest sample of all).
 *
 * @module
 */

import process from "node:process";
import type { BenchResult } from "../bench/_harness.ts";
import { exitOf, jsonLines, parseRuntimes, runBench } from "./_bench_runner.ts";

const SCRIPT_DEFAULT = "bench/record_bench.ts";

/** An encode throughput the record codec must reach. */
interface Target {
  /** Exact name of the bench case. */
  name: string;
  /** Records per second required. */
  recordsPerSecond: number;
  /** The runtimes the target applies to. */
  runtimes: readonly string[];
}

/** The record codec's encode targets (CRC included), on Bun and Deno. */
const TARGETS: readonly Target[] = [
  { name: "encode+patch 128 B TAGS+KEYS", recordsPerSecond: 5e6, runtimes: ["deno", "bun"] },
  { name: "encode+patch 1 KiB TAGS+KEYS", recordsPerSecond: 3e6, runtimes: ["deno", "bun"] },
];

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at < 0 ? undefined : process.argv[at + 1];
}

const SCRIPT = flag("--script") ?? SCRIPT_DEFAULT;
const benchArgs = ["--json"];
for (const name of ["--filter", "--time-ms"]) {
  const value = flag(name);
  if (value !== undefined) benchArgs.push(name, value);
}
const wanted = parseRuntimes(flag("--runtimes"));

const rounds = Math.max(1, Number(flag("--rounds") ?? 1));

/** Results per runtime short name ("deno", "bun", "node"). */
const results = new Map<string, BenchResult[]>();

/** Keeps, per case, the fastest median and the fastest sample seen so far. */
function merge(runtime: string, rows: BenchResult[]): void {
  const kept = results.get(runtime);
  if (kept === undefined) {
    results.set(runtime, rows);
    return;
  }
  for (const row of rows) {
    const at = kept.findIndex((old) => old.group === row.group && old.name === row.name);
    if (at < 0) {
      kept.push(row);
      continue;
    }
    const old = kept[at]!;
    const better = row.nsPerIteration < old.nsPerIteration ? { ...row } : { ...old };
    better.bestNsPerIteration = Math.min(row.bestNsPerIteration, old.bestNsPerIteration);
    kept[at] = better;
  }
}

for (let round = 0; round < rounds * wanted.length; round++) {
  const runtime = wanted[round % wanted.length]!;
  console.error(
    `running ${SCRIPT} on ${runtime} (round ${
      Math.floor(round / wanted.length) + 1
    } of ${rounds})...`,
  );
  const run = runBench(runtime, SCRIPT, benchArgs);
  const rows = jsonLines<BenchResult>(run.stdout);
  if (rows.length === 0 || run.status !== 0) {
    console.error(`${runtime}: ${exitOf(run)}: ${run.stderr.trim()}`);
  }
  if (rows.length > 0) merge(runtime, rows);
}

const runtimes = [...results.keys()];
const versions = runtimes.map((runtime) => results.get(runtime)![0]!.runtime);
console.log(`# Record bench: ${versions.join(", ")}\n`);

/** Cases in the order the bench ran them, with their group. */
const cases: Array<{ group: string; name: string }> = [];
const seen = new Set<string>();
for (const runtime of runtimes) {
  for (const row of results.get(runtime)!) {
    const key = `${row.group}\u0000${row.name}`;
    if (seen.has(key)) continue;
    seen.add(key);
    cases.push({ group: row.group, name: row.name });
  }
}

function resultOf(runtime: string, name: string): BenchResult | undefined {
  return results.get(runtime)?.find((row) => row.name === name);
}

const mega = (perSecond: number) => (perSecond / 1e6).toFixed(2);

/** Records/s of the fastest sample (the harness reports the median's). */
function bestRecordsPerSecond(result: BenchResult): number {
  return result.recordsPerSecond * result.nsPerIteration / result.bestNsPerIteration;
}

function printTable(header: string[], rows: string[][], rightFrom: number): void {
  const widths = header.map((title, i) =>
    Math.max(title.length, ...rows.map((row) => row[i]!.length))
  );
  const cell = (text: string, i: number) =>
    i >= rightFrom ? text.padStart(widths[i]!) : text.padEnd(widths[i]!);
  console.log(`| ${header.map(cell).join(" | ")} |`);
  console.log(
    `|${
      widths.map((
        width,
        i,
      ) => (i >= rightFrom ? "-".repeat(width + 1) + ":" : "-".repeat(width + 2))).join("|")
    }|`,
  );
  for (const row of rows) console.log(`| ${row.map(cell).join(" | ")} |`);
}

const header = ["group", "case"];
for (const runtime of runtimes) header.push(`${runtime} M rec/s (best)`, `${runtime} GB/s`);
const rows = cases.map(({ group, name }) => {
  const row = [group, name];
  for (const runtime of runtimes) {
    const result = resultOf(runtime, name);
    if (result === undefined) {
      row.push("-", "-");
      continue;
    }
    row.push(
      `${mega(result.recordsPerSecond)} (${mega(bestRecordsPerSecond(result))})`,
      result.gigabytesPerSecond === undefined ? "-" : result.gigabytesPerSecond.toFixed(2),
    );
  }
  return row;
});
printTable(header, rows, 2);

console.log("\n## Encode targets (ratio = measured / target; ≥ 1 meets it)\n");
const targetRows: string[][] = [];
for (const target of TARGETS) {
  for (const runtime of runtimes) {
    const result = resultOf(runtime, target.name);
    if (result === undefined) continue;
    const best = bestRecordsPerSecond(result);
    const applies = target.runtimes.includes(runtime);
    targetRows.push([
      target.name,
      runtime,
      mega(target.recordsPerSecond) + (applies ? "" : " (n/a)"),
      mega(result.recordsPerSecond),
      (result.recordsPerSecond / target.recordsPerSecond).toFixed(2),
      mega(best),
      (best / target.recordsPerSecond).toFixed(2),
    ]);
  }
}
printTable(
  ["case", "runtime", "target M rec/s", "median M rec/s", "ratio", "best M rec/s", "ratio"],
  targetRows,
  2,
);
