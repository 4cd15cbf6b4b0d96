/**
 * Runs comparison cases on the runtime that runs this file and prints JSON
 * lines on stdout ({@link WorkerLine}): a header first, then each case's
 * result as soon as it is measured (a turn run's all at its end), so the
 * cases finished before a worker hung or died still count. Progress goes
 * to stderr.
 *
 * Spawned by `scripts/bench_compare.ts`, once per run of
 * {@link planRuns} (one case alone, or the cases that take turns), as
 * `deno run -A bench/compare/worker.ts --config FILE`,
 * `bun bench/compare/worker.ts --config FILE`,
 * `node --import tsx bench/compare/worker.ts --config FILE`, where FILE
 * holds a {@link WorkerConfig}. Without `--config` it runs every case once
 * at the quick sizes (a smoke test of one runtime).
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import type { Durability, PeerProbe } from "./_peer.ts";
import { formatCpu } from "./_summary.ts";
import {
  buildCases,
  type CaseResult,
  type CaseRun,
  type CaseSpec,
  failedResult,
  PEERS,
  planRuns,
  QUICK_SIZING,
  runCase,
  runInTurns,
  warmUp,
} from "./workloads.ts";

/** What the orchestrator asks of one worker process. */
export interface WorkerConfig {
  /** Run one after the other. */
  runs: CaseRun[];
  /** Parent of the runs' directories. */
  directory: string;
  /** Warm each case up first (`warmUp`). */
  warmup: boolean;
}

/** One line of a worker's stdout. */
export type WorkerLine =
  | { type: "header"; header: Omit<WorkerReport, "results"> }
  | { type: "result"; result: CaseResult };

/** What a worker reports, once its lines are put together. */
export interface WorkerReport {
  runtime: "deno" | "bun" | "node";
  runtimeVersion: string;
  /** Each store's version, or why it is unavailable. */
  peers: Record<string, PeerProbe>;
  /** Each store's settings per durability. */
  settings: Record<string, Record<Durability, string>>;
  results: CaseResult[];
}

function runtime(): { name: WorkerReport["runtime"]; version: string } {
  const host = globalThis as {
    Deno?: { version: { deno: string; v8: string } };
    Bun?: { version: string };
  };
  if (host.Deno !== undefined) return { name: "deno", version: host.Deno.version.deno };
  if (host.Bun !== undefined) return { name: "bun", version: host.Bun.version };
  return { name: "node", version: process.versions.node };
}

function readConfig(): WorkerConfig {
  const at = process.argv.indexOf("--config");
  if (at >= 0) {
    const file = process.argv[at + 1];
    if (file === undefined) throw new TypeError("--config needs a file");
    return JSON.parse(fs.readFileSync(file, "utf8")) as WorkerConfig;
  }
  return { runs: planRuns(buildCases(QUICK_SIZING)), directory: os.tmpdir(), warmup: false };
}

async function main(): Promise<void> {
  const config = readConfig();
  const host = runtime();
  const peers: Record<string, PeerProbe> = {};
  const settings: Record<string, Record<Durability, string>> = {};
  for (const peer of PEERS) {
    peers[peer.name] = await peer.probe();
    settings[peer.name] = { async: peer.settings("async"), sync: peer.settings("sync") };
  }
  const emit = (line: WorkerLine) => process.stdout.write(`${JSON.stringify(line)}\n`);
  const skip = (id: string, skipped: string | undefined) =>
    emit({ type: "result", result: { id, ratePerS: 0, count: 0, elapsedMs: 0, skipped } });
  emit({
    type: "header",
    header: { runtime: host.name, runtimeVersion: host.version, peers, settings },
  });
  const report = (result: CaseResult) => {
    emit({ type: "result", result });
    process.stderr.write(
      `${host.name} ${result.id}: ` +
        (result.skipped !== undefined ? `${result.skipped}\n` : `${result.ratePerS.toFixed(0)}/s` +
          (result.p50Us === undefined
            ? ""
            : ` p50 ${result.p50Us.toFixed(0)} µs p99 ${result.p99Us?.toFixed(0)} µs`) +
          (result.turns === undefined ? "" : ` (${result.turns} turns)`) +
          (result.jsCpuNs === undefined
            ? ""
            : ` CPU/record ${formatCpu(result.jsCpuNs, result.otherCpuNs)}`) +
          "\n"),
    );
  };
  const failed = (spec: CaseSpec, error: unknown) => report(failedResult(spec.id, error));
  // A store missing on this runtime is reported skipped and left out of its run.
  const available = (spec: CaseSpec) => {
    if (spec.peer === undefined || peers[spec.peer]?.version !== undefined) return true;
    skip(spec.id, peers[spec.peer]?.reason ?? `unknown peer ${spec.peer}`);
    return false;
  };
  const directory = fs.mkdtempSync(path.join(config.directory, "mqstore-compare-"));
  try {
    for (const run of config.runs) {
      const cases = run.cases.filter(available);
      if (run.schedule === "turns") {
        if (cases.length === 0) continue;
        try {
          const results = await runInTurns(cases, directory, config.warmup ? "warmed" : "cold");
          for (const result of results) report(result);
        } catch (error) {
          for (const spec of cases) failed(spec, error);
        }
        continue;
      }
      for (const spec of cases) {
        try {
          if (config.warmup) await warmUp(spec, (warm) => runCase(warm, directory));
          report(await runCase(spec, directory));
        } catch (error) {
          failed(spec, error);
        }
      }
    }
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

await main();
// A store whose close was failed by its deadline may still hold timers
// that keep the process alive (and would meet its removed directory):
// everything is reported once stdout has taken the last line.
await new Promise<void>((resolve) => process.stdout.write("", () => resolve()));
process.exit(process.exitCode ?? 0);
