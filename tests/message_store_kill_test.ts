/**
 * Real crash tests: a child process (Deno, Bun and Node in turn) puts
 * messages into a store on disk and is killed with SIGKILL at a seeded
 * moment; this process then checks that the lock was released, that
 * recovery ran as unclean, that every acknowledged message is at its
 * offset with its content, that nothing past the first invalid record
 * survives, that queue offsets are contiguous, and that puts go on. See
 * `tests/_kill_harness.ts`; `scripts/kill_loop.ts` runs the long version.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { RuntimeName } from "../src/runtime/port.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";
import { type ChainOptions, type ChainReport, runKillChain } from "./_kill_harness.ts";

/** Kill/reopen cycles per chain: short enough for every CI run. */
const CYCLES = 6;
const SEGMENT_BYTES = 0x4_0000;

/** Turns a hung child into a failure (Bun's default is 5 s); nothing is timed. */
const TIMEOUT_MS = 180_000;

async function chain(
  options: Omit<ChainOptions, "directory" | "segmentBytes">,
): Promise<ChainReport> {
  const root = makeTempDirectory();
  try {
    const report = await runKillChain({
      ...options,
      directory: `${root}/store`,
      segmentBytes: SEGMENT_BYTES,
    });
    assert.equal(report.kills, options.iterations);
    assert.equal(report.acksLost, 0);
    // The first cycle always checks the lock; the last always reopens here.
    assert.ok(report.lockChecks >= 1, "no LOCKED check ran");
    assert.ok(report.parentReopens >= 1, "no reopen in this process");
    return report;
  } finally {
    removeDirectory(root);
  }
}

describe("SIGKILL crashes", () => {
  const single: Array<{ runtime: RuntimeName; seed: number }> = [
    { runtime: "deno", seed: 0xDE70 },
    { runtime: "bun", seed: 0xB0B },
    { runtime: "node", seed: 0x40DE },
  ];
  for (const { runtime, seed } of single) {
    test(
      `MessageStore.open() after ${CYCLES} SIGKILLs of ${runtime} children keeps every acknowledged put`,
      { timeout: TIMEOUT_MS },
      async () => {
        const report = await chain({
          runtimes: [runtime],
          iterations: CYCLES,
          seed,
          lockCheckProbability: 0.3,
          childReopenProbability: 0.3,
        });
        // Enough was at stake for the checks to mean something.
        assert.ok(report.acksVerified > 0, "no acknowledged put was checked");
      },
    );
  }

  test(
    "MessageStore.open() in a child of another runtime recovers what a SIGKILLed child left",
    { timeout: TIMEOUT_MS },
    async () => {
      const report = await chain({
        runtimes: ["deno", "bun", "node"],
        rotate: true,
        iterations: 3,
        seed: 0xA11,
        lockCheckProbability: 0,
        earlyKillProbability: 0,
        childReopenProbability: 1,
      });
      // deno's kill recovered by bun, bun's by node, node's here.
      assert.equal(report.childReopens, 2);
    },
  );
});
