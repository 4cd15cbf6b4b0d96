import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Peer, PeerModule } from "../bench/compare/_peer.ts";
import { PUT_DEADLINE_MS } from "../bench/compare/_turns.ts";
import { summarise } from "../bench/compare/_summary.ts";
import {
  buildCases,
  type CaseResult,
  type CaseRun,
  type CaseSpec,
  FULL_SIZING,
  MANY_PRODUCERS,
  planRuns,
  runCase,
  runInTurns,
  runsOfRepeat,
  selectCases,
  takesTurns,
  THROUGHPUT_WARMUP_MS,
  THROUGHPUT_WARMUP_RUNS,
  THROUGHPUT_WARMUP_RUNS_MAX,
  warmUp,
} from "../bench/compare/workloads.ts";
import { withTempDirectory } from "./_helpers.ts";
import { FakeClock, FakeTimers } from "./_turn_fakes.ts";

const ALL = buildCases(FULL_SIZING);
const ids = (cases: readonly { id: string }[]) => cases.map((c) => c.id);

/** How a fake store behaves. */
type FakeBehaviour = "steady" | "open fails" | "close fails" | "close hangs";

/**
 * A store that writes nothing: a put takes 2 ms of the fake clock. It
 * records its puts and closes in `log`.
 */
function fakePeer(
  name: string,
  behaviour: FakeBehaviour,
  clock: FakeClock,
  timers: FakeTimers,
): PeerModule {
  return {
    name,
    probe: () => Promise.resolve({ version: `${name} 0` }),
    settings: () => "fake",
    supportsProducers: (producers) => producers === 1,
    open(): Promise<Peer> {
      if (behaviour === "open fails") return Promise.reject(new Error(`${name} cannot open`));
      return Promise.resolve({
        put() {
          clock.nowMs += 2;
          return Promise.resolve();
        },
        putBatch: () => Promise.reject(new Error("not in turns")),
        close() {
          timers.log.push(`close ${name}`);
          if (behaviour === "close fails") return Promise.reject(new Error(`${name} cannot close`));
          if (behaviour === "close hangs") {
            // The deadline runInTurns took for this close elapses.
            timers.expirePending();
            return new Promise<void>(() => {});
          }
          return Promise.resolve();
        },
      });
    },
  };
}

/** A one-producer durable cell of `peer`: 30 ms, three turns of 10 ms. */
function durableCell(peer: string): CaseSpec {
  return {
    id: `durable/${peer}/1/128`,
    kind: "durable",
    peer,
    payloadBytes: 128,
    producers: 1,
    durationMs: 30,
  };
}

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

  test("runsOfRepeat() keeps the plan on even repeats and reverses the runs and each turn run's cases on odd ones", () => {
    const runs = planRuns(selectCases(ALL, { filter: ["memcpy", "durable/mqstore/1/", "fsync"] }));
    const shape = (list: readonly CaseRun[]) => list.map((run) => ids(run.cases));
    assert.deepEqual(runsOfRepeat(runs, 0), runs);
    assert.deepEqual(runsOfRepeat(runs, 2), runs);
    const odd = runsOfRepeat(runs, 1);
    assert.deepEqual(shape(odd), shape(runs).reverse().map((cases) => [...cases].reverse()));
    assert.deepEqual(odd.map((run) => run.schedule), runs.map((run) => run.schedule).reverse());
    assert.deepEqual(runsOfRepeat(runs, 3), odd);
    // The plan itself is left as it was.
    assert.deepEqual(
      shape(runs),
      shape(planRuns(selectCases(ALL, { filter: ["memcpy", "durable/mqstore/1/", "fsync"] }))),
    );
    assert.throws(() => runsOfRepeat(runs, -1), RangeError);
  });

  test("warmUp() runs a throughput case until its warm-up time passed, within its run bounds, and any other case once", async () => {
    const throughput = ALL.find((spec) => spec.id === "throughput/mqstore-batch/128")!;
    const durable = ALL.find((spec) =>
      spec.kind === "durable" && spec.producers === MANY_PRODUCERS
    )!;
    const warmed = async (spec: CaseSpec, runMs: number) => {
      let now = 0;
      const ids: string[] = [];
      const runs = await warmUp(spec, (warm) => {
        ids.push(warm.id);
        now += runMs;
        return Promise.resolve();
      }, () => now);
      assert.equal(runs, ids.length);
      return ids;
    };
    // Short runs: as many as the warm-up time takes.
    const short = await warmed(throughput, 200);
    assert.equal(short.length, Math.ceil(THROUGHPUT_WARMUP_MS / 200));
    assert.deepEqual(short, short.map((_, i) => `${throughput.id}#warmup${i + 1}`));
    // Long runs: the least; very short ones: the most.
    assert.equal((await warmed(throughput, THROUGHPUT_WARMUP_MS)).length, THROUGHPUT_WARMUP_RUNS);
    assert.equal((await warmed(throughput, 1)).length, THROUGHPUT_WARMUP_RUNS_MAX);
    const once = await warmed(durable, 1);
    assert.deepEqual(once, [`${durable.id}#warmup`]);
  });

  test("runCase() refuses the cases that take turns", async () => {
    await withTempDirectory(async (directory) => {
      for (const id of ["fsync/128", "durable/mqstore/1/1024"]) {
        const spec = ALL.find((c) => c.id === id)!;
        await assert.rejects(runCase(spec, directory), RangeError);
      }
    });
  });

  test("runInTurns() reports a store that fails to open, to close, or whose close hangs, and the others' figures", async () => {
    await withTempDirectory(async (directory) => {
      const clock = new FakeClock();
      const timers = new FakeTimers();
      const behaviours: Record<string, FakeBehaviour> = {
        a: "steady",
        broken: "open fails",
        stuck: "close hangs",
        b: "steady",
        sticky: "close fails",
      };
      const peers = Object.entries(behaviours).map(([name, behaviour]) =>
        fakePeer(name, behaviour, clock, timers)
      );
      const specs = Object.keys(behaviours).map(durableCell);
      const results = await runInTurns(specs, directory, "cold", {
        peers,
        turns: { sliceMs: 10, now: clock.now, timers },
      });
      assert.deepEqual(ids(results), ids(specs));
      const [a, broken, stuck, b, sticky] = results;
      for (const result of [a!, b!]) {
        assert.equal(result.skipped, undefined);
        // Three turns of five 2 ms puts.
        assert.equal(result.turns, 3);
        assert.equal(result.count, 15);
        assert.equal(result.elapsedMs, 30);
        assert.equal(result.ratePerS, 500);
      }
      assert.equal(broken!.skipped, "failed: broken cannot open");
      assert.equal(sticky!.skipped, "failed: sticky cannot close");
      assert.equal(
        stuck!.skipped,
        `failed: Closing durable/stuck/1/128 did not settle within ${PUT_DEADLINE_MS} ms`,
      );
      // Every store opened was closed, those after the hung close too.
      assert.deepEqual(timers.log.filter((line) => line.startsWith("close")), [
        "close a",
        "close stuck",
        "close b",
        "close sticky",
      ]);
    });
  });
});
