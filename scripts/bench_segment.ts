/**
 * Runs `bench/segment_bench.ts` on Deno, Bun and Node and prints every
 * figure side by side: one row per figure, one column per runtime and
 * adapter, with the targets of the segment layer marked ✓ or ✗.
 *
 * Usage: `tsx scripts/bench_segment.ts [--quick] [--only append,roll,commit,flush]`
 * (or `npm run bench:segment`). `--quick` is a smoke run with small
 * segments and few rounds: its figures are not for comparison.
 *
 * @module
 */

import os from "node:os";
import process from "node:process";
import type { AdapterReport, SegmentBenchReport } from "../bench/segment_bench.ts";
import { BENCH_RUNTIMES, exitOf, lastJsonLine, runBench } from "./_bench_runner.ts";

const SCRIPT = "bench/segment_bench.ts";
const onlyAt = process.argv.indexOf("--only");
const extra = [
  "--json",
  ...(process.argv.includes("--quick") ? ["--quick"] : []),
  ...(onlyAt >= 0 ? ["--only", process.argv[onlyAt + 1] ?? ""] : []),
];

const loadBefore = os.loadavg().map((load) => load.toFixed(2)).join(" ");
const reports: SegmentBenchReport[] = [];
for (const runtime of BENCH_RUNTIMES) {
  console.error(`running ${runtime}...`);
  const run = runBench(runtime, SCRIPT, extra, { inheritStderr: true });
  const report = lastJsonLine<SegmentBenchReport>(run.stdout);
  if (report === undefined) console.error(`${runtime}: no result (${exitOf(run)})`);
  else reports.push(report);
}

/** One column: a runtime's adapter. */
interface Column {
  title: string;
  runtime: string;
  adapter: AdapterReport;
}

const columns: Column[] = [];
for (const native of [true, false]) {
  for (const report of reports) {
    for (const adapter of report.adapters) {
      if ((adapter.adapter === "portable") === native) continue;
      columns.push({
        title: `${report.runtime.split(" ")[0]} ${adapter.adapter}`,
        runtime: report.runtime,
        adapter,
      });
    }
  }
}

/** A figure row: its label, the target, and how to read it from a column. */
interface Row {
  label: string;
  target?: string;
  /** Whether a value meets the target, for columns the target applies to. */
  meets?: (value: number, column: Column) => boolean | undefined;
  digits: number;
  value: (adapter: AdapterReport) => number | undefined;
}

const rows: Row[] = [];
for (const [index, size] of [[0, "64 B"], [1, "1 KiB"]] as const) {
  const append = (adapter: AdapterReport) => adapter.append[index];
  const bunOrDeno = (column: Column) => /^(bun|deno) /.test(column.runtime);
  rows.push(
    {
      label: `append ${size} warm GB/s`,
      digits: 2,
      value: (a) => append(a)?.warmGBps,
      ...(index === 1
        ? {
          target: "≥ 3 (bun, deno)",
          meets: (v: number, c: Column) => bunOrDeno(c) ? v >= 3 : undefined,
        }
        : {}),
    },
    {
      label: `append ${size} warm GB/s, best round`,
      digits: 2,
      value: (a) => append(a)?.warmBestGBps,
    },
    { label: `append ${size} warm M rec/s`, digits: 2, value: (a) => append(a)?.warmMRecordsPerS },
    { label: `append ${size} cold GB/s`, digits: 2, value: (a) => append(a)?.coldGBps },
    { label: `append ${size} cold M rec/s`, digits: 2, value: (a) => append(a)?.coldMRecordsPerS },
    { label: `heap memcpy ${size} GB/s`, digits: 2, value: (a) => append(a)?.memcpyGBps },
    {
      label: `heap memcpy ${size} GB/s, best round`,
      digits: 2,
      value: (a) => append(a)?.memcpyBestGBps,
    },
    { label: `append ${size} warm / memcpy`, digits: 2, value: (a) => append(a)?.warmToMemcpy },
  );
}
for (const mode of ["ahead-idle", "ahead-back-to-back", "sync"] as const) {
  const roll = (adapter: AdapterReport) => adapter.roll.find((r) => r.mode === mode);
  rows.push(
    { label: `roll 1 MiB ${mode} p50 ms`, digits: 3, value: (a) => roll(a)?.p50Ms },
    {
      label: `roll 1 MiB ${mode} p99 ms`,
      digits: 3,
      value: (a) => roll(a)?.p99Ms,
      ...(mode === "ahead-idle" ? { target: "< 1", meets: (v: number) => v < 1 } : {}),
    },
    { label: `roll 1 MiB ${mode} max ms`, digits: 3, value: (a) => roll(a)?.maxMs },
    { label: `  of which get p50 ms`, digits: 3, value: (a) => roll(a)?.getP50Ms },
    { label: `  of which get p99 ms`, digits: 3, value: (a) => roll(a)?.getP99Ms },
    {
      label: `  of which first append p50 ms`,
      digits: 3,
      value: (a) => roll(a)?.firstAppendP50Ms,
    },
    {
      label: `  of which first append p99 ms`,
      digits: 3,
      value: (a) => roll(a)?.firstAppendP99Ms,
    },
    {
      label: `  control (no crossing) p50 ms`,
      digits: 3,
      value: (a) => roll(a)?.controlP50Ms,
    },
    {
      label: `  control (no crossing) p99 ms`,
      digits: 3,
      value: (a) => roll(a)?.controlP99Ms,
    },
  );
}
rows.push(
  { label: "pool commit, whole segment GB/s", digits: 2, value: (a) => a.commit?.wholeSegmentGBps },
  { label: "pool append+commit per 1 MiB GB/s", digits: 2, value: (a) => a.commit?.perChunkGBps },
);
rows.push({
  label: "device writes by others, idle KiB/s",
  digits: 0,
  value: (a) => a.backgroundWriteKiBps,
});
for (const state of ["cold", "pre-faulted", "pre-faulted+zeros-written"] as const) {
  const flush = (adapter: AdapterReport) => adapter.flush.find((f) => f.state === state);
  const kib = (bytes: number | undefined) => bytes === undefined ? undefined : bytes / 0x400;
  rows.push(
    { label: `4 KiB flush ${state}: min KiB`, digits: 0, value: (a) => kib(flush(a)?.minBytes) },
    {
      label: `4 KiB flush ${state}: median KiB`,
      digits: 0,
      value: (a) => kib(flush(a)?.medianBytes),
      target: "≤ 8",
      meets: (v: number) => v <= 8,
    },
    { label: `4 KiB flush ${state}: p99 KiB`, digits: 0, value: (a) => kib(flush(a)?.p99Bytes) },
    {
      label: `4 KiB flush ${state}: most frequent KiB`,
      digits: 0,
      value: (a) => kib(flush(a)?.modeBytes),
    },
    {
      label: `4 KiB flush ${state}: share ≤ 8 KiB %`,
      digits: 0,
      value: (a) => {
        const share = flush(a)?.atMost8KiBShare;
        return share === undefined ? undefined : share * 100;
      },
    },
    {
      label: `  idle window as long: median KiB`,
      digits: 0,
      value: (a) => kib(flush(a)?.idleMedianBytes),
    },
    {
      label: `  idle window as long: quiet %`,
      digits: 0,
      value: (a) => {
        const share = flush(a)?.idleQuietShare;
        return share === undefined ? undefined : share * 100;
      },
    },
    {
      label: `4 KiB flush ${state}: median write requests`,
      digits: 0,
      value: (a) => flush(a)?.medianWriteRequests,
    },
    { label: `4 KiB flush ${state}: p50 µs`, digits: 0, value: (a) => flush(a)?.latencyP50Us },
    { label: `4 KiB flush ${state}: p99 µs`, digits: 0, value: (a) => flush(a)?.latencyP99Us },
  );
}

const header = ["figure", "target", ...columns.map((column) => column.title)];
const table = rows.map((row) => [
  row.label,
  row.target ?? "",
  ...columns.map((column) => {
    const value = row.value(column.adapter);
    if (value === undefined || !Number.isFinite(value)) return "-";
    const verdict = row.meets?.(value, column);
    return `${value.toFixed(row.digits)}${verdict === undefined ? "" : verdict ? " ✓" : " ✗"}`;
  }),
]);
const widths = header.map((title, i) =>
  Math.max(title.length, ...table.map((row) => row[i]!.length))
);
const line = (cells: string[]) =>
  `| ${
    cells.map((cell, i) => (i < 2 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join(
      " | ",
    )
  } |`;
console.log(line(header));
console.log(`|${widths.map((width) => "-".repeat(width + 2)).join("|")}|`);
for (const row of table) console.log(line(row));
console.log();
for (const report of reports) {
  console.log(
    `${report.runtime}: load average ${report.loadAverage.map((l) => l.toFixed(2)).join(" → ")}` +
      `${report.quick ? " (quick)" : ""}, flush bytes from ${report.device ?? "-"}`,
  );
}
console.log(
  `load average (1/5/15 min) before: ${loadBefore}, after: ${
    os.loadavg().map((load) => load.toFixed(2)).join(" ")
  }; ${os.cpus().length} CPUs`,
);
