/**
 * A tiny bench harness shared by the files in `bench/`: one bench file runs
 * under `deno bench` (cases go to `Deno.bench`) and standalone on every
 * runtime (`deno run -A`, `bun`, `node --import tsx`), where it times each
 * case itself and prints median ns/iteration (and the fastest sample, the
 * figure least disturbed by other load on a shared machine), records/s and
 * GB/s (both from the median).
 *
 * @example A bench file
 * ```ts
 * import { bench, runStandalone } from "./_harness.ts";
 *
 * const bytes = new Uint8Array(1024);
 * bench({ name: "fill 1 KiB", group: "fill", bytesPerIteration: 1024, fn: () => bytes.fill(1) });
 * await runStandalone(import.meta.main);
 * ```
 *
 * Standalone flags: `--json` (one JSON object per case), `--filter <text>`
 * (the cases whose group and name it selects: {@link filterMatches}),
 * `--time-ms <n>` (time per sample, default 100).
 *
 * @module
 */

import process from "node:process";

/** One measured case. */
export interface BenchCase {
  /** Name shown in reports. */
  name: string;
  /** Cases of one group are compared with each other. */
  group?: string;
  /** Marks the group's reference case (`deno bench` shows ratios against it). */
  baseline?: boolean;
  /** Bytes processed per call of `fn`, for GB/s. */
  bytesPerIteration?: number;
  /** Records processed per call of `fn`, for records/s. @default {1} */
  recordsPerIteration?: number;
  /** The measured work; its result is kept alive so engines cannot drop it. */
  fn: () => unknown;
}

/** Figures of one case, from a standalone run. */
export interface BenchResult {
  runtime: string;
  group: string;
  name: string;
  /** Median of the samples. */
  nsPerIteration: number;
  /** Fastest sample: the least disturbed by other load on a shared machine. */
  bestNsPerIteration: number;
  recordsPerSecond: number;
  gigabytesPerSecond?: number;
}

interface DenoBenchHost {
  bench(definition: { name: string; group?: string; baseline?: boolean; fn: () => void }): void;
}

const registered: BenchCase[] = [];

/** Keeps results reachable so the optimiser cannot remove the measured work. */
let sink: unknown;

function denoHost(): DenoBenchHost | undefined {
  const host = (globalThis as { Deno?: DenoBenchHost }).Deno;
  return host !== undefined && typeof host.bench === "function" ? host : undefined;
}

/** The runtime this bench runs on, for reports. */
export function benchRuntime(): string {
  const host = globalThis as { Deno?: { version: { deno: string } }; Bun?: { version: string } };
  if (host.Deno !== undefined) return `deno ${host.Deno.version.deno}`;
  if (host.Bun !== undefined) return `bun ${host.Bun.version}`;
  return `node ${process.versions.node}`;
}

/**
 * Registers a case: with `Deno.bench` when present (ignored by `deno run`),
 * and for {@link runStandalone}.
 *
 * @param benchCase The case.
 */
export function bench(benchCase: BenchCase): void {
  registered.push(benchCase);
  const deno = denoHost();
  if (deno !== undefined) {
    const definition: { name: string; group?: string; baseline?: boolean; fn: () => void } = {
      name: benchCase.name,
      fn: () => {
        sink = benchCase.fn();
      },
    };
    if (benchCase.group !== undefined) definition.group = benchCase.group;
    if (benchCase.baseline === true) definition.baseline = true;
    deno.bench(definition);
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function timeLoop(fn: () => unknown, iterations: number): number {
  const start = performance.now();
  for (let i = 0; i < iterations; i++) sink = fn();
  return performance.now() - start;
}

/**
 * Times one case: calibrates the iteration count to `sampleMs`, then takes
 * `samples` samples.
 *
 * @param fn The work.
 * @param sampleMs Target duration of one sample.
 * @param samples Number of samples.
 * @returns Median and fastest nanoseconds per iteration.
 */
export function measure(
  fn: () => unknown,
  sampleMs = 100,
  samples = 7,
): { medianNs: number; bestNs: number } {
  let iterations = 1;
  // Warm up and calibrate: double until one loop takes a tenth of a sample.
  for (let round = 0; round < 40; round++) {
    const elapsed = timeLoop(fn, iterations);
    if (elapsed >= sampleMs / 10) {
      iterations = Math.max(1, Math.ceil(iterations * sampleMs / elapsed));
      break;
    }
    iterations *= 2;
  }
  timeLoop(fn, iterations);
  const perIteration: number[] = [];
  for (let s = 0; s < samples; s++) perIteration.push(timeLoop(fn, iterations) * 1e6 / iterations);
  return { medianNs: median(perIteration), bestNs: Math.min(...perIteration) };
}

function format(value: number, digits: number): string {
  return value.toLocaleString("en-US", { maximumFractionDigits: digits });
}

/**
 * Runs the registered cases when the bench file is not driven by
 * `deno bench` (pass the file's `import.meta.main`; under `deno bench` it is
 * false and this returns at once) and prints a table, or JSON lines with
 * `--json`.
 *
 * @param isMain The bench file's `import.meta.main`.
 * @returns The figures (empty under `deno bench`).
 */
export function runStandalone(isMain: boolean | undefined): BenchResult[] {
  if (denoHost() !== undefined && isMain !== true) return [];
  const flags = readFlags(process.argv.slice(2), ["--json"], ["--filter", "--time-ms"]);
  const json = flags.has("--json");
  const filter = flags.get("--filter") ?? "";
  const sampleMs = Number(flags.get("--time-ms") ?? 100);
  if (!(sampleMs > 0)) {
    throw new RangeError(`--time-ms is ${flags.get("--time-ms")}; it must be positive`);
  }
  const runtime = benchRuntime();
  const results: BenchResult[] = [];
  if (!json) console.log(`runtime: ${runtime}`);
  let group: string | undefined;
  for (const benchCase of registered) {
    const groupName = benchCase.group ?? "";
    if (filter !== "" && !filterMatches(`${groupName} ${benchCase.name}`, filter)) continue;
    const { medianNs: ns, bestNs } = measure(benchCase.fn, sampleMs);
    const records = benchCase.recordsPerIteration ?? 1;
    const result: BenchResult = {
      runtime,
      group: groupName,
      name: benchCase.name,
      nsPerIteration: ns,
      bestNsPerIteration: bestNs,
      recordsPerSecond: records * 1e9 / ns,
    };
    if (benchCase.bytesPerIteration !== undefined) {
      result.gigabytesPerSecond = benchCase.bytesPerIteration / ns;
    }
    results.push(result);
    if (json) {
      console.log(JSON.stringify(result));
      continue;
    }
    if (groupName !== group) {
      group = groupName;
      console.log(`\n[${groupName}]`);
    }
    const gb = result.gigabytesPerSecond === undefined
      ? ""
      : `${format(result.gigabytesPerSecond, 2).padStart(8)} GB/s`;
    console.log(
      `  ${benchCase.name.padEnd(40)} ${format(ns, 1).padStart(9)} ns/iter ` +
        `(best ${format(bestNs, 1).padStart(8)}) ` +
        `${format(result.recordsPerSecond / 1e6, 2).padStart(7)} M rec/s ${gb}`,
    );
  }
  if (typeof sink === "symbol") console.log(String(sink));
  return results;
}

/**
 * Forces a full collection where the runtime offers one (Bun; Node and
 * Deno run with `--expose-gc`).
 *
 * @returns Whether a collection could be forced.
 */
export function collectGarbage(): boolean {
  const host = globalThis as { Bun?: { gc(force: boolean): void }; gc?: () => void };
  if (host.Bun !== undefined) {
    host.Bun.gc(true);
    return true;
  }
  if (typeof host.gc === "function") {
    host.gc();
    return true;
  }
  return false;
}

/** The flags every scenario bench reads. */
export interface ScenarioFlags {
  /** `--json`: one report object on the last line. */
  json: boolean;
  /** `--filter <text>` ("" when absent). */
  filter: string;
  /** `--scale <factor>` (1 when absent). */
  scale: number;
}

/**
 * Reads `--json`, `--filter <text>` and `--scale <factor>` from the command line.
 *
 * @throws {RangeError} When the scale is not a positive number.
 */
export function scenarioFlags(argv: readonly string[] = process.argv.slice(2)): ScenarioFlags {
  const flags = readFlags(argv, ["--json"], ["--filter", "--scale"]);
  const scale = Number(flags.get("--scale") ?? 1);
  if (!(scale > 0)) throw new RangeError(`--scale is ${flags.get("--scale")}; it must be positive`);
  return { json: flags.has("--json"), filter: flags.get("--filter") ?? "", scale };
}

/**
 * Whether `--filter` text selects the scenario `name`: the text is one or
 * more alternatives separated by `|`; an alternative selects the names that
 * contain it, or, written `^text`, the names that start with it.
 *
 * @example
 * ```ts
 * filterMatches("sync 1 KiB 256p", "^async|256p"); // true
 * filterMatches("async 1 KiB 1p", "^sync"); // false
 * ```
 */
export function filterMatches(name: string, filter: string): boolean {
  return filter.split("|").some((alternative) =>
    alternative.startsWith("^") ? name.startsWith(alternative.slice(1)) : name.includes(alternative)
  );
}

/**
 * The command line, strictly: a misspelt flag ends the bench at once
 * rather than running every scenario without it. A switch given maps to "".
 *
 * @throws {RangeError} For an unknown argument or a flag without its value.
 */
export function readFlags(
  argv: readonly string[],
  switches: readonly string[],
  valued: readonly string[],
): Map<string, string> {
  const usage = [...switches, ...valued.map((flag) => `${flag} <value>`)].join(", ");
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    if (switches.includes(flag)) {
      flags.set(flag, "");
    } else if (valued.includes(flag)) {
      const value = argv[++i];
      if (value === undefined || value.startsWith("--")) {
        throw new RangeError(`${flag} needs a value (flags: ${usage})`);
      }
      flags.set(flag, value);
    } else {
      throw new RangeError(`Unknown argument ${flag} (flags: ${usage})`);
    }
  }
  return flags;
}
