/**
 * The long SIGKILL crash loop: hundreds of kill/recover cycles of children
 * on Deno, Bun and Node (see `tests/_kill_harness.ts`), in chains of
 * `--chain` cycles on a fresh store directory each, so the store stays
 * small enough to check whole after every kill.
 *
 * Usage: `tsx scripts/kill_loop.ts [--iterations N] [--runtime deno|bun|node|all]
 * [--seed S] [--chain N] [--verbose]`
 *
 * Prints one line per chain and a summary. A chain stops at its first
 * violation (a lost or wrong acknowledged message, a failed recovery, a
 * missing LOCKED, a child that hangs), which is printed with its seed and
 * iteration and its store kept; the loop goes on with the next chain and
 * exits 1 at the end.
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import type { RuntimeName } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { emptyChainReport, runKillChain } from "../tests/_kill_harness.ts";

const SEGMENT_BYTES = 0x4_0000;
/** Stop after this many failed chains. */
const FAILURES_MAX = 10;

function parseArguments(argv: readonly string[]) {
  const options = {
    iterations: 300,
    runtimes: ["deno", "bun", "node"] as RuntimeName[],
    seed: Date.now() % 0x7FFF_FFFF,
    chain: 10,
    verbose: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = (): string => {
      const next = argv[++i];
      if (next === undefined) throw new Error(`${flag} needs a value`);
      return next;
    };
    const count = (text: string): number => {
      const n = Number(text);
      if (!Number.isSafeInteger(n) || n < 1) throw new RangeError(`${flag} takes a count ≥ 1`);
      return n;
    };
    switch (flag) {
      case "--iterations":
        options.iterations = count(value());
        break;
      case "--runtime": {
        const runtime = value();
        if (runtime === "all") options.runtimes = ["deno", "bun", "node"];
        else if (runtime === "deno" || runtime === "bun" || runtime === "node") {
          options.runtimes = [runtime];
        } else throw new RangeError(`--runtime takes deno, bun, node or all, not ${runtime}`);
        break;
      }
      case "--seed":
        options.seed = Number(value());
        if (!Number.isSafeInteger(options.seed)) throw new RangeError("--seed takes an integer");
        break;
      case "--chain":
        options.chain = count(value());
        break;
      case "--verbose":
        options.verbose = true;
        break;
      default:
        throw new Error(
          `Unknown flag ${flag}. Usage: kill_loop.ts [--iterations N] [--runtime deno|bun|node|all] [--seed S] [--chain N] [--verbose]`,
        );
    }
  }
  return options;
}

async function main(): Promise<number> {
  const options = parseArguments(process.argv.slice(2));
  console.log(
    `kill loop: ${options.iterations} kills of ${
      options.runtimes.join("/")
    } children, chains of ${options.chain}, seed ${options.seed}, parent ${runtimeName()}`,
  );
  const total = emptyChainReport();
  const startedMs = Date.now();
  const failures: string[] = [];
  for (let chain = 0; total.kills < options.iterations; chain++) {
    const seed = options.seed + chain;
    const root = fs.mkdtempSync(`${os.tmpdir()}/mqstore-kill-`);
    const chainStartedMs = Date.now();
    try {
      const report = await runKillChain({
        directory: `${root}/store`,
        runtimes: options.runtimes,
        iterations: Math.min(options.chain, options.iterations - total.kills),
        seed,
        segmentBytes: SEGMENT_BYTES,
        lockCheckProbability: 0.2,
        childReopenProbability: 0.3,
        snapshotDirectory: `${root}/before-reopen`,
        log: options.verbose ? (line) => console.log(line) : undefined,
      });
      total.kills += report.kills;
      for (const runtime of ["deno", "bun", "node"] as const) {
        total.killsByRuntime[runtime] += report.killsByRuntime[runtime];
      }
      total.killsBeforeReady += report.killsBeforeReady;
      total.acksVerified += report.acksVerified;
      total.acksLostAllowed += report.acksLostAllowed;
      total.acksLost += report.acksLost;
      total.lockChecks += report.lockChecks;
      total.parentReopens += report.parentReopens;
      total.childReopens += report.childReopens;
      total.parentPuts += report.parentPuts;
      total.putFailures += report.putFailures;
      console.log(
        `chain ${chain} (seed ${seed}): ${report.kills} kills, ${report.acksVerified} acks verified, ` +
          `${report.acksLostAllowed} non-strict acks past the cut, store ${
            (report.maxOffset / 0x10_0000).toFixed(1)
          } MiB, ${((Date.now() - chainStartedMs) / 1000).toFixed(1)} s`,
      );
    } catch (error) {
      console.error(
        `chain ${chain} (seed ${seed}) FAILED; store kept in ${root}/store, as the last reopen here got it in ${root}/before-reopen`,
      );
      console.error(error instanceof Error ? error.stack ?? error.message : error);
      failures.push(
        `chain ${chain} (seed ${seed}): ${error instanceof Error ? error.message : error}`,
      );
      // The kills of a failed chain are not counted; the next chain starts afresh.
      if (failures.length >= FAILURES_MAX) break;
      continue;
    }
    fs.rmSync(root, { recursive: true, force: true });
  }
  const seconds = (Date.now() - startedMs) / 1000;
  console.log(
    `\n${total.kills} kills (deno ${total.killsByRuntime.deno}, bun ${total.killsByRuntime.bun}, node ${total.killsByRuntime.node}; ${total.killsBeforeReady} before ready) in ${
      seconds.toFixed(1)
    } s`,
  );
  console.log(
    `${total.acksVerified} acknowledged messages verified, ${total.acksLost} lost; ` +
      `${total.acksLostAllowed} non-strict (ASYNC portable/pool) acks past the cut; ` +
      `${total.lockChecks} LOCKED checks; ${total.parentReopens} reopens here, ${total.childReopens} by the next child; ` +
      `${total.parentPuts} puts after recovery; ${total.putFailures} FLUSH_DISK_TIMEOUT`,
  );
  console.log(`${failures.length} failed chains${failures.length > 0 ? ":" : ""}`);
  for (const failure of failures) console.log(`  ${failure.slice(0, 1000)}`);
  return total.acksLost === 0 && failures.length === 0 ? 0 : 1;
}

process.exit(await main());
