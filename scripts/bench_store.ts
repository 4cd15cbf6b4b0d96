/**
 * Runs `bench/store_bench.ts` on Deno, Bun and Node and prints the main
 * figures side by side: one line per case and figure, one column per
 * runtime, with the targets of issue 6 marked ✓ or ✗:
 *
 * - recovery scan with CRC checks ≥ 1 GB/s of commit log (Bun and Deno);
 * - dispatch lag bounded under sustained 1 KiB puts (its maximum over the
 *   second half of the run at most twice the first half's, plus 1 MiB);
 * - put→subscriber p99 ≤ 2 ms (ASYNC_FLUSH);
 * - open time independent of the message count (same bytes, 16× the
 *   messages: at most 2× the time), heap flat within ±32 MiB.
 *
 * Usage: `tsx scripts/bench_store.ts [--runtimes deno,bun,node] [--filter <text>]
 * [--scale <factor>]` (or `npm run bench:store`). The machine should be
 * quiet: the bench writes and reads gigabytes and times it.
 *
 * @module
 */

import os from "node:os";
import process from "node:process";
import type { StoreBenchReport, StoreBenchRow } from "../bench/store_bench.ts";
import { exitOf, lastJsonLine, parseRuntimes, runBench } from "./_bench_runner.ts";

const SCRIPT = "bench/store_bench.ts";
const argv = process.argv.slice(2);
const valueOf = (flag: string) => {
  const at = argv.indexOf(flag);
  return at >= 0 ? argv[at + 1] : undefined;
};
const passThrough = ["--filter", "--scale"].flatMap((flag) => {
  const value = valueOf(flag);
  return value === undefined ? [] : [flag, value];
});
const runtimes = parseRuntimes(valueOf("--runtimes"));

const loadBefore = os.loadavg().map((load) => load.toFixed(2)).join(" ");
const reports: StoreBenchReport[] = [];
for (const runtime of runtimes) {
  console.error(`running ${runtime}...`);
  const run = runBench(runtime, SCRIPT, ["--json", ...passThrough], {
    exposeGc: true,
    inheritStderr: true,
  });
  const report = lastJsonLine<StoreBenchReport>(run.stdout);
  if (report === undefined) console.error(`${runtime}: no result (${exitOf(run)})`);
  else reports.push(report);
}

/** Figures worth a line, by name; the others stay in the JSON. */
const SHOWN = [
  "putMsgPerSecond",
  "flushAtEndMs",
  "openMs",
  "cpuMs",
  "gbPerSecond",
  "gbPerCpuSecond",
  "msgPerSecond",
  "msgPerCpuSecond",
  "cachedShareBefore",
  "lagP99Bytes",
  "lagMaxBytes",
  "lagMaxFirstHalfBytes",
  "lagMaxSecondHalfBytes",
  "catchUpMs",
  "p50Ms",
  "p99Ms",
  "maxMs",
  "putp99Ms",
  "putmaxMs",
  "startDelayp50Ms",
  "startDelayp99Ms",
  "startDelaymaxMs",
  "messages",
  "segments",
  "heapDeltaMiB",
  "rssDeltaMiB",
  "heapMiB",
  "rssMiB",
  "heapRangeMiB",
  "heapGrowthMiB",
  "failed",
];

/** A target: the text shown, and whether a row's figure meets it (undefined: not judged). */
interface Target {
  text: string;
  meets: (value: number, row: StoreBenchRow, runtime: string) => boolean | undefined;
}

function targetOf(row: StoreBenchRow, figure: string): Target | undefined {
  if (row.scenario === "recovery" && row.name.startsWith("scan:") && figure === "gbPerSecond") {
    if (!row.name.includes(", CRC")) return undefined;
    return {
      text: "≥ 1 (bun, deno)",
      meets: (value, _row, runtime) => runtime === "node" ? undefined : value >= 1,
    };
  }
  if (row.scenario === "dispatch" && row.name.startsWith("lag") && figure === "lagMaxBytes") {
    return {
      text: "bounded",
      meets: (_value, r) =>
        r.figures.lagMaxSecondHalfBytes! <= 2 * r.figures.lagMaxFirstHalfBytes! + 0x10_0000,
    };
  }
  if (row.scenario === "subscribe" && figure === "p99Ms") {
    return { text: "≤ 2", meets: (value) => value <= 2 };
  }
  if (row.scenario === "heap" && figure === "heapRangeMiB") {
    return { text: "≤ 64 (±32)", meets: (value) => value <= 64 };
  }
  if (figure === "failed") return { text: "0", meets: (value) => value === 0 };
  return undefined;
}

/** Open CPU time with 16× the messages over that with 1×, same segments (derived). */
function openRatio(report: StoreBenchReport, state: string): number | undefined {
  const find = (body: string) =>
    report.rows.find((row) =>
      row.scenario === "open" && row.name.includes(body) && row.name.endsWith(state)
    );
  const many = find("128 B bodies");
  const few = find("4 KiB bodies");
  if (many === undefined || few === undefined) return undefined;
  // CPU time: less disturbed than wall time by other load on the machine.
  return (many.figures.cpuMs ?? many.figures.openMs!) / (few.figures.cpuMs ?? few.figures.openMs!);
}

const columns = reports.map((report) => report.runtime.split(" ")[0]!);
const width = 14;
const format = (value: number | undefined) => {
  if (value === undefined) return "-".padStart(width);
  const magnitude = Math.abs(value);
  const digits = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : magnitude >= 1 ? 2 : 3;
  return value.toLocaleString("en-US", { maximumFractionDigits: digits }).padStart(width);
};
const labelWidth = 72;
console.log(
  `load before: ${loadBefore}; after: ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`,
);
for (const report of reports) {
  console.log(`${report.runtime}: ${report.adapter}, scale ${report.scale}, gc ${report.gcForced}`);
}
console.log(
  `\n${"case / figure".padEnd(labelWidth)}${
    columns.map((c) => c.padStart(width)).join("")
  }  target`,
);
const seen = new Set<string>();
let scenario = "";
for (const report of reports) {
  for (const row of report.rows) {
    const key = `${row.scenario}\u0000${row.name}`;
    if (seen.has(key)) continue;
    seen.add(key);
    if (row.scenario !== scenario) {
      scenario = row.scenario;
      console.log(`\n[${scenario}]`);
    }
    for (const figure of SHOWN) {
      if (!(figure in row.figures)) continue;
      const target = targetOf(row, figure);
      const cells: string[] = [];
      const marks: string[] = [];
      for (let i = 0; i < reports.length; i++) {
        const other = reports[i]!.rows.find((r) =>
          r.scenario === row.scenario && r.name === row.name
        );
        const value = other?.figures[figure];
        cells.push(format(value));
        const meets = value === undefined || other === undefined
          ? undefined
          : target?.meets(value, other, columns[i]!);
        if (meets !== undefined) marks.push(`${columns[i]} ${meets ? "✓" : "✗"}`);
      }
      const label = `${row.name} · ${figure}`;
      const mark = target === undefined ? "" : `  ${target.text}: ${marks.join(" ")}`;
      console.log(`${label.slice(0, labelWidth - 1).padEnd(labelWidth)}${cells.join("")}${mark}`);
    }
  }
}
for (const state of ["warm", "cold"]) {
  const ratios = reports.map((report) => openRatio(report, state));
  if (ratios.every((ratio) => ratio === undefined)) continue;
  const marks = ratios.flatMap((ratio, i) =>
    ratio === undefined ? [] : [`${columns[i]} ${ratio <= 2 ? "✓" : "✗"}`]
  );
  console.log(
    `${`open CPU time, 16× the messages / 1×, ${state}`.padEnd(labelWidth)}${
      ratios.map(format).join("")
    }  ≤ 2 (independent): ${marks.join(" ")}`,
  );
}
