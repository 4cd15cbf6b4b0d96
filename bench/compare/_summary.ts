/**
 * Turns the workers' repeated runs into one summary per runtime and case:
 * medians, spread (min–max), and each figure's ratio to the machine's limit
 * and to the best peer (the fastest store that is not mqstore) on the same
 * runtime and workload.
 *
 * @module
 */

import { median } from "./_stats.ts";
import { type CaseResult, type CaseSpec, groupIdOf } from "./workloads.ts";

/** The runtimes compared, in report order. */
export const RUNTIMES = ["deno", "bun", "node"] as const;
/** A runtime compared. */
export type Runtime = typeof RUNTIMES[number];

/** One case on one runtime across repeats. */
export interface Summary {
  spec: CaseSpec;
  runtime: Runtime;
  /** Runs that produced a figure. */
  runs: number;
  medianPerS: number;
  minPerS: number;
  maxPerS: number;
  p50Us?: number;
  p99Us?: number;
  /** Median JavaScript-thread CPU a record, ns (throughput cases, Linux). */
  jsCpuNs?: number;
  /** Median CPU a record of the process's other threads, ns. */
  otherCpuNs?: number;
  /** Why there is no figure (peer missing, pending, failed). */
  skipped?: string;
  /** Median over the matching limit's median. */
  toLimit?: number;
  /** The limit's case id. */
  limitId?: string;
  /** Median over the best peer's median (peers themselves included). */
  toBestPeer?: number;
  /** The best peer's name. */
  bestPeer?: string;
}

/** Whether a store is mqstore (never its own "best peer"). */
export function isMqstore(peer: string | undefined): boolean {
  return peer?.startsWith("mqstore") ?? false;
}

/**
 * Whether `limit` is a limit `spec` is read against: memcpy for
 * throughput, one 4 KiB write + fdatasync for one durable producer (the
 * run that took turns with the producer's payload size), the
 * raw group commit of as many producers and the same payload (any flush
 * count) for many. A case is read against the best of its limits.
 */
export function isLimitOf(limit: CaseSpec, spec: CaseSpec): boolean {
  if (spec.kind === "throughput") return limit.id === `memcpy/${spec.payloadBytes}`;
  if (spec.kind !== "durable") return false;
  if (spec.producers === 1) return limit.id === `fsync/${spec.payloadBytes}`;
  return limit.kind === "group" &&
    limit.id.startsWith(`${groupIdOf(spec.producers, spec.payloadBytes)}/`);
}

/** The key of a case's workload, shared by every store running it. */
export function workloadOf(spec: CaseSpec): string {
  return `${spec.kind}/${spec.producers}/${spec.payloadBytes}`;
}

/** Summaries of every case on every runtime, in case order. */
export function summarise(
  cases: readonly CaseSpec[],
  runs: Readonly<Record<string, Record<string, CaseResult[]>>>,
): Summary[] {
  const summaries: Summary[] = [];
  for (const runtime of RUNTIMES) {
    const byRuntime = runs[runtime];
    if (byRuntime === undefined) continue;
    for (const spec of cases) {
      const results = byRuntime[spec.id] ?? [];
      const measured = results.filter((r) => r.skipped === undefined);
      const rates = measured.map((r) => r.ratePerS);
      const summary: Summary = {
        spec,
        runtime,
        runs: measured.length,
        medianPerS: median(rates),
        minPerS: Math.min(...rates),
        maxPerS: Math.max(...rates),
      };
      const p50 = measured.flatMap((r) => r.p50Us === undefined ? [] : [r.p50Us]);
      const p99 = measured.flatMap((r) => r.p99Us === undefined ? [] : [r.p99Us]);
      if (p50.length > 0) summary.p50Us = median(p50);
      if (p99.length > 0) summary.p99Us = median(p99);
      const js = measured.flatMap((r) => r.jsCpuNs === undefined ? [] : [r.jsCpuNs]);
      const other = measured.flatMap((r) => r.otherCpuNs === undefined ? [] : [r.otherCpuNs]);
      if (js.length > 0) summary.jsCpuNs = median(js);
      if (other.length > 0) summary.otherCpuNs = median(other);
      if (measured.length === 0) {
        summary.skipped = results.find((r) => r.skipped !== undefined)?.skipped ?? "not run";
      }
      summaries.push(summary);
    }
  }
  for (const summary of summaries) {
    if (summary.skipped !== undefined) continue;
    let limit: Summary | undefined;
    for (const s of summaries) {
      if (
        s.runtime !== summary.runtime || s.skipped !== undefined || !isLimitOf(s.spec, summary.spec)
      ) continue;
      if (limit === undefined || s.medianPerS > limit.medianPerS) limit = s;
    }
    if (limit !== undefined) {
      summary.limitId = limit.spec.id;
      summary.toLimit = summary.medianPerS / limit.medianPerS;
    }
    if (summary.spec.peer === undefined) continue;
    let best: Summary | undefined;
    for (const other of summaries) {
      if (
        other.runtime !== summary.runtime || other.skipped !== undefined ||
        isMqstore(other.spec.peer) || other.spec.peer === undefined ||
        workloadOf(other.spec) !== workloadOf(summary.spec)
      ) continue;
      if (best === undefined || other.medianPerS > best.medianPerS) best = other;
    }
    if (best !== undefined) {
      summary.bestPeer = best.spec.peer;
      summary.toBestPeer = summary.medianPerS / best.medianPerS;
    }
  }
  return summaries;
}

/** A rate with a unit scale: `1.23 M`, `129 k`, `2.9 k`, `512`. */
export function formatRate(perS: number): string {
  if (!Number.isFinite(perS)) return "-";
  if (perS >= 1e9) return `${(perS / 1e9).toFixed(2)} G`;
  if (perS >= 1e6) return `${(perS / 1e6).toFixed(perS >= 1e7 ? 1 : 2)} M`;
  if (perS >= 1e3) return `${(perS / 1e3).toFixed(perS >= 1e4 ? 0 : 1)} k`;
  return perS.toFixed(0);
}

/** A latency in µs or ms. */
export function formatLatency(us: number | undefined): string {
  if (us === undefined || !Number.isFinite(us)) return "-";
  return us >= 10_000 ? `${(us / 1000).toFixed(1)} ms` : `${us.toFixed(0)} µs`;
}

/** A ratio such as `0.42×`. */
export function formatRatio(ratio: number | undefined): string {
  if (ratio === undefined || !Number.isFinite(ratio)) return "-";
  return ratio >= 10 ? `${ratio.toFixed(0)}×` : `${ratio.toFixed(2)}×`;
}

/**
 * CPU a record as `JavaScript thread + other threads`, in ns or µs:
 * `180 + 410 ns`, `12.5 + 0.9 µs` (µs once either is 10 µs or more).
 */
export function formatCpu(jsNs: number | undefined, otherNs: number | undefined): string {
  if (jsNs === undefined || otherNs === undefined) return "-";
  if (!Number.isFinite(jsNs) || !Number.isFinite(otherNs)) return "-";
  return Math.max(jsNs, otherNs) >= 10_000
    ? `${(jsNs / 1000).toFixed(1)} + ${(otherNs / 1000).toFixed(1)} µs`
    : `${jsNs.toFixed(0)} + ${otherNs.toFixed(0)} ns`;
}

/** What a case measures, for table rows. */
export function describe(spec: CaseSpec): string {
  const size = spec.payloadBytes >= 1024
    ? `${spec.payloadBytes / 1024} KiB`
    : `${spec.payloadBytes} B`;
  switch (spec.kind) {
    case "memcpy":
      return `limit: memcpy ${size} records/s`;
    case "sequential":
      return "limit: 4 MiB writes + fdatasync, bytes/s";
    case "fsync":
      return `limit: 4 KiB write + fdatasync /s, in turns with sync 1 producer ${size}`;
    case "group":
      return `limit: raw group commit, ${spec.producers} producers, ${size}, ${
        spec.flushesMax ?? 1
      } flush${(spec.flushesMax ?? 1) === 1 ? "" : "es"} in flight, acks/s`;
    case "throughput":
      return `async ${size} records/s`;
    case "durable":
      return `sync ${spec.producers} producer${spec.producers === 1 ? "" : "s"} ${size} acks/s`;
  }
}

/** Table rows (header first) of one runtime's summaries. */
export function tableRows(summaries: readonly Summary[], runtime: Runtime): string[][] {
  const rows = [[
    "workload",
    "store",
    "median",
    "min–max",
    "p50",
    "p99",
    "CPU/record (JS + other)",
    "× limit",
    "× best peer",
  ]];
  for (const s of summaries) {
    if (s.runtime !== runtime) continue;
    const rate = s.spec.kind === "sequential"
      ? (v: number) => `${(v / 1e9).toFixed(2)} GB/s`
      : formatRate;
    rows.push([
      describe(s.spec),
      s.spec.peer ?? "(machine)",
      s.skipped === undefined
        ? rate(s.medianPerS)
        : s.skipped.startsWith("pending")
        ? "pending"
        : "n/a",
      s.skipped === undefined ? `${rate(s.minPerS)}–${rate(s.maxPerS)}` : s.skipped.slice(0, 60),
      formatLatency(s.p50Us),
      formatLatency(s.p99Us),
      formatCpu(s.jsCpuNs, s.otherCpuNs),
      formatRatio(s.toLimit),
      s.bestPeer === undefined ? "-" : `${formatRatio(s.toBestPeer)} (${s.bestPeer})`,
    ]);
  }
  return rows;
}

/** Rows as an aligned plain-text (and Markdown) table. */
export function renderTable(rows: readonly string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  const line = (cells: readonly string[]) =>
    `| ${cells.map((cell, i) => cell.padEnd(widths[i]!)).join(" | ")} |`;
  return [
    line(rows[0]!),
    `|${widths.map((width) => "-".repeat(width + 2)).join("|")}|`,
    ...rows.slice(1).map(line),
  ].join("\n");
}
