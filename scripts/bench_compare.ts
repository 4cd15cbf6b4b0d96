/**
 * The side-by-side comparison: mqstore against lmdb, SQLite (WAL) and
 * LevelDB (classic-level), and against the machine's own limits, on Deno,
 * Bun and Node, with durability held equal on both sides.
 *
 * Usage: `tsx scripts/bench_compare.ts [options]` (or `npm run bench:compare`)
 *
 *   --quick            small sizes and 1 repeat: a smoke run
 *   --repeats N        runs of every case per runtime (default 3; quick 1)
 *   --runtimes LIST    e.g. `deno,node` (default deno,bun,node)
 *   --only TEXT        only cases whose id contains TEXT (limits always run)
 *   --filter LIST      only cases, limits included, whose id contains one of
 *                      the comma-separated texts (e.g.
 *                      `durable/mqstore/1/128,durable/sqlite/1/128,fsync/128`)
 *   --out DIR          where BENCHMARKS.md and docs/benchmarks.svg go
 *                      (default: the repository root)
 *   --dir DIR          where the stores are created (default: the OS temp dir)
 *   --raw FILE         also save the workers' raw reports as JSON
 *
 * Every case runs in a worker process of its own (`bench/compare/worker.ts`),
 * so nothing a case leaves in the runtime reaches the next (see
 * {@link runCases}), except the one-producer durable cells
 * (`durable/<store>/1/<payload>`): those of a payload size, with the
 * 4 KiB write + fdatasync limit of that size (`fsync/<payload>`), run in
 * one worker process and take turns of 100 ms (`bench/compare/_turns.ts`,
 * whose module doc gives the rotation and the why, with figures), until
 * each has had the case's duration; a store's acks/s is its acks over
 * its own turn time, its latencies from its turns only. A filter naming
 * one of these cells runs it alone; naming several runs just those in
 * turns.
 *
 * The runtimes take turns, and the order of the runs (and of the cases in
 * a turn run) is reversed every other repeat, so no store always runs
 * first or last (memory left idle refills several times slower on this
 * VM). Each throughput case is timed after untimed runs of its full
 * size, each on a fresh store: two (`THROUGHPUT_WARMUP_RUNS`), then more
 * until 1.5 s of them passed (`THROUGHPUT_WARMUP_MS`, see `warmUp`), the
 * same rule for every store; the other cases after a tenth of their size
 * (in a turn run, each store puts for a tenth of its duration into the
 * very store it is then timed on, one after the other, before the
 * turns). The
 * report gives medians and the spread (min–max) over the repeats.
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { renderChart } from "../bench/compare/_chart.ts";
import {
  describe,
  isMqstore,
  renderTable,
  type Runtime,
  RUNTIMES,
  summarise,
  type Summary,
  tableRows,
} from "../bench/compare/_summary.ts";
import type { WorkerConfig, WorkerLine, WorkerReport } from "../bench/compare/worker.ts";
import {
  BATCH_RECORDS,
  buildCases,
  type CaseResult,
  type CaseRun,
  type CaseSpec,
  failedResult,
  FULL_SIZING,
  MANY_PRODUCERS,
  planRuns,
  QUICK_SIZING,
  runsOfRepeat,
  selectCases,
  THROUGHPUT_WARMUP_MS,
  THROUGHPUT_WARMUP_RUNS,
  THROUGHPUT_WARMUP_RUNS_MAX,
} from "../bench/compare/workloads.ts";
import { PUT_DEADLINE_MS, SLICE_MS } from "../bench/compare/_turns.ts";
import { readFlags } from "../bench/_harness.ts";
import { BIN, exitOf, jsonLines, ROOT, runBench } from "./_bench_runner.ts";

const WORKER = "bench/compare/worker.ts";
/**
 * A worker still running by then is stuck: it is killed, and its cases not
 * yet reported are reported failed. One case alone, its warm-ups included,
 * takes 1–10 s here; the longest run is a payload's turn run, about
 * 6 takers (5 stores and the limit) × (2 s of turns + 0.2 s of warm-up)
 * + the opens, so 12–15 s: three minutes is more than 10× that. A put or
 * close that hangs fails its store after 6 s (`PUT_DEADLINE_MS`), so even
 * with every taker's put and close hanging (about 6 × 12 s + 15 s) the
 * run ends within the timeout, with a margin of about 2×.
 */
const WORKER_TIMEOUT_MS = 3 * 60_000;

interface Options {
  quick: boolean;
  repeats: number;
  runtimes: Runtime[];
  only: string | undefined;
  filter: string[] | undefined;
  out: string;
  directory: string;
  raw: string | undefined;
}

const USAGE = "Usage: tsx scripts/bench_compare.ts [--quick] [--repeats N] [--runtimes LIST] " +
  "[--only TEXT] [--filter LIST] [--out DIR] [--dir DIR] [--raw FILE] (see the file's header)";

/**
 * The command line, strictly: an unknown or misspelt flag ends the script
 * before a 15-minute run starts without it. `undefined` for `--help`.
 */
function parseOptions(argv: readonly string[]): Options | undefined {
  const given = readFlags(argv, ["--help", "--quick"], [
    "--repeats",
    "--runtimes",
    "--only",
    "--filter",
    "--out",
    "--dir",
    "--raw",
  ]);
  if (given.has("--help")) return undefined;
  const quick = given.has("--quick");
  const repeats = Number(given.get("--repeats") ?? (quick ? 1 : 3));
  if (!Number.isInteger(repeats) || repeats < 1) {
    throw new RangeError(`--repeats takes a count ≥ 1, not ${given.get("--repeats")}`);
  }
  const runtimes = (given.get("--runtimes") ?? RUNTIMES.join(",")).split(",") as Runtime[];
  for (const runtime of runtimes) {
    if (!RUNTIMES.includes(runtime)) throw new RangeError(`Unknown runtime ${runtime}`);
  }
  return {
    quick,
    repeats,
    runtimes,
    only: given.get("--only"),
    filter: given.get("--filter")?.split(",").filter((text) => text.length > 0),
    out: path.resolve(given.get("--out") ?? ROOT),
    directory: path.resolve(given.get("--dir") ?? os.tmpdir()),
    raw: given.get("--raw"),
  };
}

function runWorker(runtime: Runtime, config: WorkerConfig): WorkerReport | undefined {
  // The worker's stores go in a directory made and removed here, so that
  // a worker killed (timeout, signal) leaves nothing behind.
  const directory = fs.mkdtempSync(path.join(config.directory, `mqstore-compare-${runtime}-`));
  const configFile = path.join(directory, "config.json");
  fs.writeFileSync(configFile, JSON.stringify({ ...config, directory }));
  try {
    const result = runBench(runtime, WORKER, ["--config", configFile], {
      inheritStderr: true,
      timeoutMs: WORKER_TIMEOUT_MS,
    });
    let report: WorkerReport | undefined;
    for (const line of jsonLines<WorkerLine>(result.stdout)) {
      if (line.type === "header") report = { ...line.header, results: [] };
      else report?.results.push(line.result);
    }
    if (result.status !== 0 || report === undefined) {
      const cases = config.runs.flatMap((run) => run.cases);
      const done = report?.results.length ?? 0;
      console.error(
        `${runtime}: worker ended with ${exitOf(result)}` +
          `${result.error ? ` (${result.error.message})` : ""}; ` +
          `${done} of ${cases.length} cases reported`,
      );
      // Every case it did not report failed with it: a turn run reports
      // its cases together at its end.
      const reported = new Set(report?.results.map((r) => r.id));
      for (const spec of report === undefined ? [] : cases) {
        if (reported.has(spec.id)) continue;
        report!.results.push(
          failedResult(
            spec.id,
            `the worker ended (${result.signal ?? result.status}) in this case`,
          ),
        );
      }
    }
    return report;
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

/**
 * Runs `runs` ({@link planRuns}) on `runtime`, each in a fresh worker
 * process, and puts the workers' reports together (`undefined` when no
 * worker reported).
 *
 * One process per run, that is per case except the one-producer durable
 * cells of a payload size, which take turns in one process (see the
 * module doc). Not one per runtime: a case's warm-ups and timed
 * run share a process, but nothing a case leaves in the runtime reaches
 * the next case, for any store. Measured on Node 20 (session 16), one
 * worker running every case in turn gave mqstore's `putMessages` 128 B
 * case 1.6–2.4 M records/s after the single-put case against 3.0–4.3 M in
 * a process of its own. The earlier case had grown V8's young generation
 * to its largest size; at that size V8 decides, from one collection in
 * which most objects of an allocation site are still alive, to allocate
 * that site's objects in the old generation from then on, and never
 * reverts. A fresh store's first batch is alive across the collections
 * its new memory mappings start, so the benchmark's own message objects
 * went to the old generation, into pages the VM had to fault in afresh
 * after every full collection (7,000 page faults a run instead of 400).
 * Every store's case can inherit such state from the one before it (the
 * other peers' batches allocate an object per record too), so each is
 * measured from the same fresh start. The cost is a process start per
 * case: 0.5–1.2 s here, a few minutes over a full comparison.
 */
function runCases(
  runtime: Runtime,
  runs: readonly CaseRun[],
  directory: string,
): WorkerReport | undefined {
  let report: WorkerReport | undefined;
  // Cases whose worker died before its header: reported failed once a
  // header (the runtime's versions) is known.
  const lost: CaseSpec[] = [];
  for (const run of runs) {
    const one = runWorker(runtime, { runs: [run], directory, warmup: true });
    if (one === undefined) lost.push(...run.cases);
    else if (report === undefined) report = one;
    else report.results.push(...one.results);
  }
  for (const spec of lost) {
    report?.results.push(failedResult(spec.id, "the worker ended before it reported"));
  }
  return report;
}

function shell(commandLine: string): string {
  const result = spawnSync("sh", ["-c", commandLine], { encoding: "utf8" });
  return (result.stdout ?? "").trim();
}

function machine(directory: string, loadAtStart: readonly number[]): string[] {
  const cpu = os.cpus()[0]?.model ?? "?";
  const load = (values: readonly number[]) => values.map((v) => v.toFixed(2)).join(", ");
  return [
    `- Load average (1, 5, 15 min) at start: ${load(loadAtStart)}; at end: ${load(os.loadavg())}`,
    `- CPU: ${cpu}, nproc ${shell("nproc") || os.cpus().length}`,
    `- Memory: ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
    `- Kernel: ${os.type()} ${os.release()} ${os.arch()}`,
    `- Disk (df -hT of the store directory ${directory}):`,
    "",
    "```",
    shell(`df -hT ${JSON.stringify(directory)}`),
    "```",
  ];
}

function mqstoreSummary(summaries: readonly Summary[], runtimes: readonly Runtime[]): string[][] {
  const rows = [[
    "workload",
    "store",
    ...runtimes.map((r) => `${r} × best peer`),
    ...runtimes.map((r) => `${r} × limit`),
  ]];
  const seen = new Set<string>();
  for (const s of summaries) {
    if (!isMqstore(s.spec.peer) || seen.has(s.spec.id)) continue;
    seen.add(s.spec.id);
    const cells = runtimes.map((runtime) =>
      summaries.find((o) => o.spec.id === s.spec.id && o.runtime === runtime)
    );
    const ratio = (value: number | undefined, skipped: string | undefined) =>
      skipped !== undefined
        ? skipped.startsWith("pending") ? "pending" : "n/a"
        : value === undefined
        ? "-"
        : `${value.toFixed(2)}×`;
    rows.push([
      describe(s.spec),
      s.spec.peer ?? "",
      ...cells.map((c) =>
        c === undefined
          ? "-"
          : `${ratio(c.toBestPeer, c.skipped)}${c.bestPeer ? ` (${c.bestPeer})` : ""}`
      ),
      ...cells.map((c) => c === undefined ? "-" : ratio(c.toLimit, c.skipped)),
    ]);
  }
  return rows;
}

function main(): void {
  let options: Options | undefined;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    // A user's mistake: one line, no stack.
    console.error(`bench_compare: ${(error as Error).message}`);
    process.exitCode = 2;
    return;
  }
  if (options === undefined) {
    console.log(USAGE);
    return;
  }
  const sizing = options.quick ? QUICK_SIZING : FULL_SIZING;
  const cases = selectCases(buildCases(sizing), options);
  if (cases.length === 0) throw new RangeError("--only/--filter leave no case to run");
  const workerRuns = planRuns(cases);
  // Before the run, not after it: a missing directory failed a 15-minute run at its end.
  fs.mkdirSync(options.out, { recursive: true });
  if (options.raw !== undefined) fs.mkdirSync(path.dirname(options.raw), { recursive: true });
  const started = new Date();
  const loadAtStart = os.loadavg();
  console.error(
    `bench:compare: ${cases.length} cases in ${workerRuns.length} worker runs × ${options.repeats} repeats on ${
      options.runtimes.join(", ")
    }` +
      (options.quick ? " (quick)" : ""),
  );

  const runs: Record<string, Record<string, CaseResult[]>> = {};
  const reports: Partial<Record<Runtime, WorkerReport>> = {};
  const raw: WorkerReport[] = [];
  for (let repeat = 0; repeat < options.repeats; repeat++) {
    const order = options.runtimes.map((_, i) =>
      options.runtimes[(i + repeat) % options.runtimes.length]!
    );
    const repeatRuns = runsOfRepeat(workerRuns, repeat);
    for (const runtime of order) {
      console.error(`--- repeat ${repeat + 1}/${options.repeats}: ${runtime}`);
      const report = runCases(runtime, repeatRuns, options.directory);
      if (report === undefined) continue;
      raw.push(report);
      reports[runtime] ??= report;
      const byCase = runs[runtime] ??= {};
      for (const result of report.results) (byCase[result.id] ??= []).push(result);
    }
  }
  if (options.raw !== undefined) fs.writeFileSync(options.raw, JSON.stringify(raw, null, 1));

  const summaries = summarise(cases, runs);
  const runtimes = options.runtimes.filter((r) => reports[r] !== undefined);
  const tables = runtimes.map((runtime) => ({
    runtime,
    table: renderTable(tableRows(summaries, runtime)),
  }));
  const summaryTable = renderTable(mqstoreSummary(summaries, runtimes));
  for (const { runtime, table } of tables) {
    console.log(`\n## ${runtime} ${reports[runtime]?.runtimeVersion}\n\n${table}`);
  }
  console.log(`\n## mqstore against the best peer and the limit\n\n${summaryTable}`);

  const commandLine = `tsx scripts/bench_compare.ts ${process.argv.slice(2).join(" ")}`.trim();
  const versions = runtimes.map((runtime) => {
    const report = reports[runtime]!;
    const peers = Object.entries(report.peers).map(([name, probe]) =>
      `${name}: ${probe.version ?? `unavailable (${probe.reason ?? "?"})`}`
    );
    return `- ${runtime} ${report.runtimeVersion}: ${peers.join("; ")}`;
  });
  const anyReport = runtimes.map((r) => reports[r]!).at(0);
  const settings = anyReport === undefined
    ? []
    : Object.entries(anyReport.settings).map(([name, s]) =>
      `- **${name}** — async: ${s.async}; sync: ${s.sync}`
    );
  const svgName = "benchmarks.svg";
  const markdown = [
    "# Benchmarks: mqstore against its peers",
    "",
    "Generated by `scripts/bench_compare.ts` (`npm run bench:compare`); rerun it to refresh this file and `docs/benchmarks.svg`.",
    "",
    `- Command: \`${commandLine}\``,
    `- Date: ${started.toISOString()} (took ${
      ((Date.now() - started.getTime()) / 60_000).toFixed(1)
    } min)`,
    `- Repeats: ${options.repeats} per case and runtime${
      options.quick ? " (quick sizes: a smoke run, not a measurement)" : ""
    }`,
    "",
    "## Machine",
    "",
    ...machine(options.directory, loadAtStart),
    "",
    "## Runtimes and stores",
    "",
    ...versions,
    "",
    "## Method",
    "",
    `- Durability is held equal. **async**: a record is acknowledged once it is in the store, which syncs on its own schedule, never once per record; throughput workloads put ${
      sizing.throughputRecords[128]!.toLocaleString("en")
    } records of 128 B or ${
      sizing.throughputRecords[1024]!.toLocaleString("en")
    } of 1 KiB in batches of ${BATCH_RECORDS}. **sync**: a record is acknowledged only once it is on disk; 1 producer, or ${MANY_PRODUCERS} concurrent producers, put for ${sizing.durableMs} ms and every ack's latency is recorded.`,
    "- Limits are measured on the same runtime as the stores, each in a worker process of its own like the stores' cases (the 4 KiB write + fdatasync limit excepted, see below): memcpy of a record into a prefaulted buffer; 4 MiB sequential writes plus one fdatasync; a 4 KiB write + fdatasync (the 1-producer limit, measured once per payload size in turns with that size's 1-producer stores); a raw group commit of 64 producers, one write + fdatasync per batch, with 1 and with 2 flushes in flight (the 64-producer limit is the better of the two). The durable limits write into a file prepared as mqstore's SYNC_FLUSH segments are (allocated, pre-faulted, zeros written through), as `bench/commit_log_bench.ts` measures them too (`bench/_raw_group_commit.ts`).",
    `- **1-producer sync cells are measured in turns.** For each payload size, every store and the 4 KiB write + fdatasync limit are opened in one worker process, each warmed up on the very store (or file) it is then timed on (untimed, one after the other), then they take turns of ${SLICE_MS} ms until each has had ${sizing.durableMs} ms. The rounds follow the rows of a balanced (Williams) Latin square, so each store's turn follows every other store's about equally often (exactly, within a cycle of rows; a store's background flushes can fall in the next turn), and an untimed yield to the event loop before each turn (a zero timer, then an immediate) lets the last store's due timers run outside the next store's turn (work on the runtime's thread pool can still overlap it). A store's acks/s is its acks over its own turn time, and its latencies come from its turns only; a put that does not settle within ${
      PUT_DEADLINE_MS / 1000
    } s fails its store alone. Why: this VM's fdatasync latency moves 2–3× from minute to minute, and stores timed one after the other drew different minutes: in a run on 2026-12-02 with separate workers, Node 1 KiB, mqstore made 1.8 k acks/s (1.6–5.6 k over 3 repeats) against SQLite's 4.2 k (1.7–4.8 k); in turns, 3 repeats, mqstore ÷ SQLite was 1.07–1.13×. Repeats, medians and spreads are as for every other case; the limit's × is read from the same turns.`,
    `- Every other case runs on a fresh directory, in a worker process of its own: nothing a case leaves in the runtime (heap sizes, the engine's allocation decisions) reaches the next. Each throughput case is timed after untimed runs of its full size, each on a fresh store: at least ${THROUGHPUT_WARMUP_RUNS}, then more until ${
      THROUGHPUT_WARMUP_MS / 1000
    } s of them passed (at most ${THROUGHPUT_WARMUP_RUNS_MAX}; the same rule for every store: before that, mqstore's JavaScript put path had not reached its steady speed, on Node not before its fourth to sixth run); the other cases after a warm-up of a tenth of their size. Runtimes take turns and the order of the runs (and of the stores in a turn run) is reversed every other repeat. Figures are medians over the repeats, with the spread (min–max). × limit is the median over the limit's; × best peer is over the fastest store other than mqstore on the same runtime and workload.`,
    "- **CPU/record** (async rows, Linux): the CPU each record took on the JavaScript thread that puts, then on the process's other threads (the store's background work, such as pre-faulting new pages, flushing and compaction, and the runtime's garbage collector and compiler), each the median over the repeats (`bench/compare/_cpu.ts`). The process's threads share the machine's cores: where they add up to more than the cores, the JavaScript thread waits for its turn on one.",
    "- SQLite's drivers are synchronous, so it has no 64-producer row (producers on one thread would only take turns). `mqstore-batch` sends each 1000 records as one `putMessages()` batch; `mqstore` issues 1000 `putMessage()` calls and awaits them together.",
    "- Other processes on this VM may have run meanwhile: read the spread before the medians.",
    "",
    "### Settings",
    "",
    ...settings,
    "",
    `![Throughput and latency by store and runtime](docs/${svgName})`,
    "",
    "## mqstore against the best peer and the limit",
    "",
    summaryTable,
    "",
    ...tables.flatMap((
      { runtime, table },
    ) => [`## ${runtime} ${reports[runtime]?.runtimeVersion}`, "", table, ""]),
  ].join("\n");
  fs.mkdirSync(path.join(options.out, "docs"), { recursive: true });
  const markdownFile = path.join(options.out, "BENCHMARKS.md");
  fs.writeFileSync(markdownFile, markdown);
  const title = `mqstore vs lmdb, SQLite, LevelDB — medians of ${options.repeats} run${
    options.repeats === 1 ? "" : "s"
  }, ${started.toISOString().slice(0, 10)}${options.quick ? " (quick)" : ""}`;
  const svgFile = path.join(options.out, "docs", svgName);
  fs.writeFileSync(svgFile, renderChart(summaries, title));
  // The repository's `deno fmt --check` covers Markdown and SVG: hand it
  // files it already accepts.
  const fmt = spawnSync(path.join(BIN, "deno"), ["fmt", "--quiet", markdownFile, svgFile], {
    cwd: ROOT,
    encoding: "utf8",
  });
  if (fmt.status !== 0) console.error(`deno fmt of the report failed: ${fmt.stderr.trim()}`);
  console.error(`\nwrote ${markdownFile} and ${svgFile}`);
}

main();
