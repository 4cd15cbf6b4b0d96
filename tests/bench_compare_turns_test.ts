import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  PUT_DEADLINE_MS,
  roundOrder,
  roundsPerCycle,
  takeTurns,
  type TurnPut,
} from "../bench/compare/_turns.ts";
import { FakeClock, FakeTimers } from "./_turn_fakes.ts";

/** A fake durable writer taking `costMs` of the fake clock a put; counts its puts. */
function fakeTaker(clock: FakeClock, costMs: number): { put: TurnPut; puts: () => number } {
  let puts = 0;
  return {
    put: () => {
      puts++;
      clock.nowMs += costMs;
      return Promise.resolve();
    },
    puts: () => puts,
  };
}

describe("bench/compare/_turns", () => {
  test("roundOrder() answers the rows of a Williams square, every taker once a round, cycling", () => {
    // Row 0 is 0, 1, n−1, 2, n−2, …; row r adds r.
    assert.deepEqual(roundOrder(0, 5), [0, 1, 4, 2, 3]);
    assert.deepEqual(roundOrder(2, 5), [2, 3, 1, 4, 0]);
    assert.deepEqual(roundOrder(0, 4), [0, 1, 3, 2]);
    assert.deepEqual(roundOrder(3, 4), [3, 0, 2, 1]);
    // An odd count also has the reversed rows, starting with row n−2's.
    assert.deepEqual(roundOrder(3, 3), [0, 2, 1]);
    assert.deepEqual(roundOrder(4, 1), [0]);
    for (let count = 1; count <= 8; count++) {
      const rows = roundsPerCycle(count);
      assert.equal(rows, count <= 2 ? 1 : count % 2 === 0 ? count : 2 * count);
      for (let round = 0; round < rows; round++) {
        const order = roundOrder(round, count);
        assert.deepEqual([...order].sort((a, b) => a - b), [...Array(count).keys()]);
        assert.deepEqual(roundOrder(round + rows, count), order);
      }
    }
    assert.throws(() => roundOrder(0, 0), RangeError);
    assert.throws(() => roundOrder(-1, 2), RangeError);
    assert.throws(() => roundsPerCycle(0), RangeError);
  });

  test("takeTurns() gives every taker ceil(durationMs / sliceMs) turns, in roundOrder()'s order", async () => {
    const clock = new FakeClock();
    const timers = new FakeTimers();
    const takers = [1, 2, 5].map((cost) => fakeTaker(clock, cost));
    const order: number[] = [];
    const tallies = await takeTurns(takers.map((t) => t.put), {
      sliceMs: 10,
      durationMs: 25,
      now: clock.now,
      timers,
      onTurn: (i) => order.push(i),
    });
    assert.deepEqual(order, [0, 1, 2].flatMap((round) => roundOrder(round, 3)));
    assert.deepEqual(tallies.map((t) => t.turns), [3, 3, 3]);
  });

  test("takeTurns() has every taker follow every other equally often within the rounds of a cycle, round boundaries adding at most one a pair, and none follow itself", async () => {
    for (let count = 3; count <= 7; count++) {
      const clock = new FakeClock();
      // One put of a whole slice a turn; two cycles, to see the boundary between them too.
      const takers = Array.from({ length: count }, () => fakeTaker(clock, 10));
      const rows = roundsPerCycle(count);
      const order: number[] = [];
      await takeTurns(takers.map((t) => t.put), {
        sliceMs: 10,
        durationMs: 2 * rows * 10,
        now: clock.now,
        timers: new FakeTimers(),
        onTurn: (i) => order.push(i),
      });
      assert.equal(order.length, 2 * rows * count);
      const within = new Map<string, number>();
      const across = new Map<string, number>();
      // The first cycle's turns, each with the turn after it (the last with the next cycle's first).
      for (let k = 0; k < rows * count; k++) {
        const pair = `${order[k]}→${order[k + 1]}`;
        assert.notEqual(order[k], order[k + 1], `count ${count}: ${pair} at turn ${k}`);
        const tally = (k + 1) % count === 0 ? across : within;
        tally.set(pair, (tally.get(pair) ?? 0) + 1);
      }
      // rows × (count − 1) adjacencies within rounds, over count × (count − 1) ordered pairs.
      assert.equal(within.size, count * (count - 1), `count ${count}`);
      for (const [pair, n] of within) assert.equal(n, rows / count, `count ${count}: ${pair}`);
      // Each round boundary adds one to a pair, no pair twice in a cycle.
      assert.equal(across.size, rows, `count ${count}`);
    }
  });

  test("takeTurns() alternates two takers, with no double turn at a round's boundary", async () => {
    const clock = new FakeClock();
    const takers = [fakeTaker(clock, 10), fakeTaker(clock, 10)];
    const order: number[] = [];
    await takeTurns(takers.map((t) => t.put), {
      sliceMs: 10,
      durationMs: 50,
      now: clock.now,
      timers: new FakeTimers(),
      onTurn: (i) => order.push(i),
    });
    assert.deepEqual(order, [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
  });

  test("takeTurns() yields to the event loop before every turn, outside the turn's time", async () => {
    const clock = new FakeClock();
    // Each yield takes 5 ms of the clock: none of it may count as turn time.
    const timers = new FakeTimers({ clock, ms: 5 });
    const takers = [fakeTaker(clock, 4), fakeTaker(clock, 4)];
    const [a, b] = await takeTurns(takers.map((t) => t.put), {
      sliceMs: 10,
      durationMs: 20,
      now: clock.now,
      timers,
      onTurn: (i) => timers.log.push(`turn ${i}`),
    });
    assert.deepEqual(timers.log, [
      ...["yield", "turn 0", "yield", "turn 1"],
      ...["yield", "turn 0", "yield", "turn 1"],
    ]);
    // Three puts of 4 ms a turn: the yields (5 ms each) took none of it.
    assert.equal(a!.busyMs, 24);
    assert.equal(b!.busyMs, 24);
    // Every put's deadline was cleared once the put settled.
    assert.equal(timers.pendingCount, 0);
  });

  test("takeTurns() counts each taker's acks, turn time and latencies from its own turns, warm-up excluded", async () => {
    const clock = new FakeClock();
    const fast = fakeTaker(clock, 1);
    const slow = fakeTaker(clock, 3);
    const [a, b] = await takeTurns([fast.put, slow.put], {
      sliceMs: 10,
      durationMs: 20,
      warmUpMs: 5,
      now: clock.now,
      timers: new FakeTimers(),
    });
    // Warm-up: the fast one puts at 0..4 (5 puts), the slow one at 5 and 8 (2 puts).
    // Turns of 10 ms: the fast one puts 10 times a turn, the slow one 4 (at
    // +0, +3, +6, +9), its last put running over to +12.
    assert.equal(a!.acks, 20);
    assert.equal(a!.busyMs, 20);
    assert.equal(a!.ratePerS, 1000);
    assert.deepEqual([...new Set(a!.latenciesUs)], [1000]);
    assert.equal(fast.puts(), 5 + 20);
    assert.equal(b!.acks, 8);
    assert.equal(b!.busyMs, 24);
    assert.equal(b!.ratePerS, 8 / 24 * 1000);
    assert.equal(b!.latenciesUs.length, 8);
    assert.deepEqual([...new Set(b!.latenciesUs)], [3000]);
    assert.equal(slow.puts(), 2 + 8);
    assert.equal(a!.failure, undefined);
    assert.equal(b!.failure, undefined);
  });

  test("takeTurns() stops a taker whose put fails, keeps its failure and goes on with the others", async () => {
    const clock = new FakeClock();
    const steady = fakeTaker(clock, 2);
    let puts = 0;
    const failing: TurnPut = () => {
      clock.nowMs += 2;
      // A rejection that is not an Error is kept as one.
      return ++puts === 3 ? Promise.reject("device gone") : Promise.resolve();
    };
    const order: number[] = [];
    const [a, b] = await takeTurns([steady.put, failing], {
      sliceMs: 10,
      durationMs: 30,
      now: clock.now,
      timers: new FakeTimers(),
      onTurn: (i) => order.push(i),
    });
    assert.deepEqual(order, [0, 1, 0, 0]);
    assert.equal(a!.turns, 3);
    assert.equal(a!.acks, 15);
    assert.equal(a!.failure, undefined);
    assert.equal(b!.turns, 1);
    assert.equal(b!.acks, 2);
    assert.ok(b!.failure instanceof Error);
    assert.equal(b!.failure.message, "device gone");
  });

  test("takeTurns() fails a taker whose put does not settle by the deadline, and goes on with the others", async () => {
    const clock = new FakeClock();
    const timers = new FakeTimers();
    const steady = fakeTaker(clock, 2);
    let puts = 0;
    const hanging: TurnPut = () => {
      clock.nowMs += 2;
      if (++puts < 3) return Promise.resolve();
      // Its third put never settles: the deadline taken for it elapses.
      timers.expirePending();
      return new Promise<void>(() => {});
    };
    const order: number[] = [];
    const [a, b] = await takeTurns([steady.put, hanging], {
      sliceMs: 10,
      durationMs: 30,
      now: clock.now,
      timers,
      onTurn: (i) => order.push(i),
    });
    assert.deepEqual(order, [0, 1, 0, 0]);
    assert.equal(a!.acks, 15);
    assert.equal(a!.failure, undefined);
    assert.equal(b!.turns, 1);
    assert.equal(b!.acks, 2);
    assert.match(
      b!.failure?.message ?? "",
      new RegExp(`did not settle within ${PUT_DEADLINE_MS} ms`),
    );
    // Every put had its deadline, the default one.
    assert.equal(timers.deadlinesMs.length, 15 + 3);
    assert.deepEqual([...new Set(timers.deadlinesMs)], [PUT_DEADLINE_MS]);
  });

  test("takeTurns() refuses a slice, duration or put deadline that is not positive", async () => {
    const clock = new FakeClock();
    const { put } = fakeTaker(clock, 1);
    await assert.rejects(
      takeTurns([put], { sliceMs: 0, durationMs: 10, now: clock.now }),
      RangeError,
    );
    await assert.rejects(takeTurns([put], { durationMs: Number.NaN, now: clock.now }), RangeError);
    await assert.rejects(
      takeTurns([put], { durationMs: 10, putDeadlineMs: 0, now: clock.now }),
      RangeError,
    );
    assert.equal(clock.nowMs, 0);
  });
});
