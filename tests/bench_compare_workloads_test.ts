import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { summarise } from "../bench/compare/_summary.ts";
import {
  buildCases,
  type CaseResult,
  FULL_SIZING,
  MANY_PRODUCERS,
  planRuns,
  selectCases,
  takesTurns,
} from "../bench/compare/workloads.ts";

const ALL = buildCases(FULL_SIZING);
const ids = (cases: readonly { id: string }[]) => cases.map((c) => c.id);

describe("bench/compare/workloads", () => {
  test("planRuns() puts each payload's one-producer durable cells and fsync limit in one turn run, and every other case alone", () => {
    const runs = planRuns(ALL);
    const turns = runs.filter((run) => run.schedule === "turns");
    assert.deepEqual(turns.map((run) => ids(run.cases)), [
      [
        "fsync/128",
        "durable/mqstore/1/128",
        "durable/lmdb/1/128",
        "durable/sqlite/1/128",
        "durable/level/1/128",
      ],
      [
        "fsync/1024",
        "durable/mqstore/1/1024",
        "durable/lmdb/1/1024",
        "durable/sqlite/1/1024",
        "durable/level/1/1024",
      ],
    ]);
    for (const run of runs.filter((run) => run.schedule === "alone")) {
      assert.equal(run.cases.length, 1);
      assert.equal(takesTurns(run.cases[0]!), false);
    }
    // Every case runs exactly once, the 64-producer cells alone.
    assert.deepEqual(ids(runs.flatMap((run) => run.cases)).sort(), ids(ALL).sort());
    const many = runs.filter((run) => run.cases.some((c) => c.producers === MANY_PRODUCERS));
    assert.ok(many.length > 0);
    assert.ok(many.every((run) => run.schedule === "alone"));
  });

  test("selectCases() and planRuns() run just the filtered stores in turns, and one store alone", () => {
    const two = selectCases(ALL, { filter: ["durable/mqstore/1/1024", "durable/sqlite/1/1024"] });
    assert.deepEqual(planRuns(two), [{ schedule: "turns", cases: two }]);
    assert.deepEqual(ids(two), ["durable/mqstore/1/1024", "durable/sqlite/1/1024"]);

    const one = selectCases(ALL, { filter: ["durable/lmdb/1/128"] });
    assert.deepEqual(planRuns(one).map((run) => ids(run.cases)), [["durable/lmdb/1/128"]]);

    const withLimit = selectCases(ALL, { filter: ["durable/mqstore/1/", "fsync"] });
    assert.deepEqual(planRuns(withLimit).map((run) => ids(run.cases)), [
      ["fsync/128", "durable/mqstore/1/128"],
      ["fsync/1024", "durable/mqstore/1/1024"],
    ]);
  });

  test("selectCases() with only keeps every limit and the stores' matching cases", () => {
    const cases = selectCases(ALL, { only: "durable/sqlite/1/" });
    assert.deepEqual(
      ids(cases.filter((c) => c.peer !== undefined)),
      ["durable/sqlite/1/128", "durable/sqlite/1/1024"],
    );
    assert.deepEqual(
      ids(cases.filter((c) => c.peer === undefined)),
      ids(ALL.filter((c) => c.peer === undefined)),
    );
  });

  test("summarise() reads a one-producer durable cell against the fsync limit of its payload size", () => {
    const cases = selectCases(ALL, {
      filter: ["durable/mqstore/1/", "durable/sqlite/1/", "fsync"],
    });
    const result = (id: string, ratePerS: number): CaseResult => ({
      id,
      ratePerS,
      count: ratePerS,
      elapsedMs: 1000,
    });
    const runs = {
      node: {
        "fsync/128": [result("fsync/128", 4000)],
        "fsync/1024": [result("fsync/1024", 2000)],
        "durable/mqstore/1/128": [result("durable/mqstore/1/128", 3000)],
        "durable/sqlite/1/128": [result("durable/sqlite/1/128", 2000)],
        "durable/mqstore/1/1024": [result("durable/mqstore/1/1024", 1000)],
        "durable/sqlite/1/1024": [result("durable/sqlite/1/1024", 1000)],
      },
    };
    const byId = new Map(summarise(cases, runs).map((s) => [s.spec.id, s]));
    assert.equal(byId.get("durable/mqstore/1/128")!.limitId, "fsync/128");
    assert.equal(byId.get("durable/mqstore/1/128")!.toLimit, 0.75);
    assert.equal(byId.get("durable/mqstore/1/128")!.toBestPeer, 1.5);
    assert.equal(byId.get("durable/mqstore/1/1024")!.limitId, "fsync/1024");
    assert.equal(byId.get("durable/mqstore/1/1024")!.toLimit, 0.5);
  });
});
