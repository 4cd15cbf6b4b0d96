/**
 * Spawns one bench file on Deno, Bun or Node and reads its JSON output:
 * the runner the `scripts/bench_*.ts` orchestrators share, so each only
 * says which script, which flags, and how to print the reports.
 *
 * @module
 */

import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import path from "node:path";
import process from "node:process";

/** The repository root. */
export const ROOT: string = path.resolve(import.meta.dirname ?? ".", "..");
/** The repository's `node_modules/.bin`, where deno and bun are installed. */
export const BIN: string = path.join(ROOT, "node_modules", ".bin");
/** The runtimes a bench runs on, in report order. */
export const BENCH_RUNTIMES = ["deno", "bun", "node"] as const;
/** A runtime a bench runs on. */
export type BenchRuntime = typeof BENCH_RUNTIMES[number];

/** How {@link benchCommand} and {@link runBench} run the script. */
export interface BenchRunOptions {
  /** Expose `gc()` (Deno and Node; Bun always has `Bun.gc`). */
  exposeGc?: boolean;
  /** Let the bench's stderr through (progress) instead of capturing it. */
  inheritStderr?: boolean;
  /** Kill the run after this long. */
  timeoutMs?: number;
}

/** The executable and arguments that run `script` with `args` on `runtime`. */
export function benchCommand(
  runtime: BenchRuntime,
  script: string,
  args: readonly string[],
  options: BenchRunOptions = {},
): [string, string[]] {
  const gc = options.exposeGc === true;
  switch (runtime) {
    case "deno":
      return [
        path.join(BIN, "deno"),
        ["run", "-A", ...(gc ? ["--v8-flags=--expose-gc"] : []), script, ...args],
      ];
    case "bun":
      return [path.join(BIN, "bun"), [script, ...args]];
    case "node":
      return [
        process.execPath,
        [...(gc ? ["--expose-gc"] : []), "--import", "tsx", script, ...args],
      ];
  }
}

/** The runtimes a `--runtimes deno,bun,node` value names, checked. */
export function parseRuntimes(value: string | undefined): BenchRuntime[] {
  const names = (value ?? BENCH_RUNTIMES.join(",")).split(",");
  for (const name of names) {
    if (!(BENCH_RUNTIMES as readonly string[]).includes(name)) {
      throw new RangeError(`--runtimes names "${name}"; use ${BENCH_RUNTIMES.join(", ")}`);
    }
  }
  return names as BenchRuntime[];
}

/**
 * Runs `script` on `runtime` from the repository root, stdout captured
 * (up to 256 MiB), and answers what `spawnSync` answers.
 */
export function runBench(
  runtime: BenchRuntime,
  script: string,
  args: readonly string[],
  options: BenchRunOptions = {},
): SpawnSyncReturns<string> {
  const [command, commandArgs] = benchCommand(runtime, script, args, options);
  return spawnSync(command, commandArgs, {
    cwd: ROOT,
    encoding: "utf8",
    stdio: ["ignore", "pipe", options.inheritStderr === true ? "inherit" : "pipe"],
    maxBuffer: 0x1000_0000,
    ...(options.timeoutMs === undefined ? {} : { timeout: options.timeoutMs }),
  });
}

/** How a run ended, for a message: `exit 1`, `SIGKILL`. */
export function exitOf(run: SpawnSyncReturns<string>): string {
  return run.signal ?? `exit ${run.status}`;
}

/** The lines of `stdout` that are JSON objects, parsed; other lines are skipped. */
export function jsonLines<T>(stdout: string | null): T[] {
  const values: T[] = [];
  for (const line of (stdout ?? "").split("\n")) {
    if (!line.startsWith("{") && !line.startsWith("[")) continue;
    try {
      values.push(JSON.parse(line) as T);
    } catch {
      // A log line that merely starts like JSON.
    }
  }
  return values;
}

/** The last line of `stdout` parsed as JSON, or undefined when it is not JSON. */
export function lastJsonLine<T>(stdout: string | null): T | undefined {
  const line = (stdout ?? "").trim().split("\n").at(-1) ?? "";
  try {
    return JSON.parse(line) as T;
  } catch {
    return undefined;
  }
}
