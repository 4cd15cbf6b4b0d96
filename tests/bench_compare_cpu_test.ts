import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, test } from "node:test";
import { cpuPerRecord, sampleCpu } from "../bench/compare/_cpu.ts";
import { formatCpu, summarise, tableRows } from "../bench/compare/_summary.ts";
import {
  buildCases,
  type CaseResult,
  FULL_SIZING,
  selectCases,
} from "../bench/compare/workloads.ts";

const onLinux = fs.existsSync("/proc/thread-self/schedstat");

describe("bench/compare CPU a record", () => {
  test("sampleCpu() counts the JavaScript thread's work in both its own and the process's time", {
    skip: onLinux ? false : "no /proc: no per-thread CPU",
  }, () => {
    const before = sampleCpu();
    assert.ok(before !== undefined, "no sample on Linux");
    assert.ok(before.jsThreadNs > 0 && before.processNs >= before.jsThreadNs - 1e6);
    // Work until the thread's own clock moved 50 ms (however long the wall
    // clock takes on a loaded machine).
    let after = before;
    let sink = 0;
    for (let turns = 0; after.jsThreadNs - before.jsThreadNs < 50e6; turns++) {
      for (let i = 0; i < 100_000; i++) sink = (sink + i * turns) | 0;
      after = sampleCpu()!;
      assert.ok(turns < 5000, "the thread's CPU clock did not move");
    }
    const threadNs = after.jsThreadNs - before.jsThreadNs;
    const processNs = after.processNs - before.processNs;
    // The process's clock (µs, every thread) took the same work in; a
    // scheduler tick (10 ms at 100 Hz) of slack, for the thread's clock.
    assert.ok(processNs >= threadNs - 10e6, `process ${processNs} ns, thread ${threadNs} ns`);
    // The work is used, so that no engine drops the loop.
    assert.ok(Number.isInteger(sink));
  });

  test("cpuPerRecord() splits the process's CPU into the JavaScript thread's and the rest", () => {
    const split = cpuPerRecord(
      { processNs: 1_000_000, jsThreadNs: 400_000 },
      { processNs: 4_000_000, jsThreadNs: 2_400_000 },
      1000,
    );
    assert.deepEqual(split, { jsCpuNs: 2000, otherCpuNs: 1000 });
    // Clocks a little apart never make the rest negative.
    assert.deepEqual(
      cpuPerRecord(
        { processNs: 0, jsThreadNs: 0 },
        { processNs: 999_000, jsThreadNs: 1_000_000 },
        10,
      ),
      { jsCpuNs: 100_000, otherCpuNs: 0 },
    );
    assert.equal(cpuPerRecord(undefined, { processNs: 1, jsThreadNs: 1 }, 10), undefined);
    assert.equal(
      cpuPerRecord({ processNs: 0, jsThreadNs: 0 }, { processNs: 1, jsThreadNs: 1 }, 0),
      undefined,
    );
  });

  test("summarise() takes the median CPU of the runs, and the table shows it for throughput rows only", () => {
    const cases = selectCases(buildCases(FULL_SIZING), {
      filter: ["throughput/mqstore-batch/128", "memcpy/128"],
    });
    const run = (jsCpuNs: number, otherCpuNs: number): CaseResult => ({
      id: "throughput/mqstore-batch/128",
      ratePerS: 4e6,
      count: 600_000,
      elapsedMs: 150,
      jsCpuNs,
      otherCpuNs,
    });
    const runs = {
      node: {
        "memcpy/128": [{ id: "memcpy/128", ratePerS: 7e7, count: 1, elapsedMs: 1 }],
        "throughput/mqstore-batch/128": [run(190, 120), run(170, 400), run(230, 90)],
      },
    };
    const summary = summarise(cases, runs).find((s) => s.spec.kind === "throughput")!;
    assert.equal(summary.jsCpuNs, 190);
    assert.equal(summary.otherCpuNs, 120);
    const rows = tableRows(summarise(cases, runs), "node");
    const column = rows[0]!.indexOf("CPU/record (JS + other)");
    assert.ok(column > 0);
    const cells = rows.slice(1).map((row) => row[column]);
    assert.deepEqual(cells.sort(), ["-", "190 + 120 ns"]);
  });

  test("formatCpu() writes ns, or µs from 10 µs up, and '-' without a figure", () => {
    assert.equal(formatCpu(185.4, 119.6), "185 + 120 ns");
    assert.equal(formatCpu(12_500, 900), "12.5 + 0.9 µs");
    assert.equal(formatCpu(undefined, 1), "-");
    assert.equal(formatCpu(Number.NaN, 1), "-");
  });
});
