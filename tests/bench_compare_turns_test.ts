import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { roundOrder, takeTurns, type TurnPut } from "../bench/compare/_turns.ts";

/** A clock the test moves: each fake put advances it by its cost. */
class FakeClock {
  nowMs = 0;
  readonly now = (): number => this.nowMs;
}

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
  test("roundOrder() starts round r with taker r mod n and goes on in list order", () => {
    assert.deepEqual(roundOrder(0, 3), [0, 1, 2]);
    assert.deepEqual(roundOrder(1, 3), [1, 2, 0]);
    assert.deepEqual(roundOrder(5, 3), [2, 0, 1]);
    assert.deepEqual(roundOrder(4, 1), [0]);
    assert.throws(() => roundOrder(0, 0), RangeError);
    assert.throws(() => roundOrder(-1, 2), RangeError);
  });

  test("takeTurns() gives every taker ceil(durationMs / sliceMs) turns, each round starting with the next", async () => {
    const clock = new FakeClock();
    const takers = [1, 2, 5].map((cost) => fakeTaker(clock, cost));
    const order: number[] = [];
    const tallies = await takeTurns(takers.map((t) => t.put), {
      sliceMs: 10,
      durationMs: 25,
      now: clock.now,
      onTurn: (i) => order.push(i),
    });
    assert.deepEqual(order, [0, 1, 2, 1, 2, 0, 2, 0, 1]);
    assert.deepEqual(tallies.map((t) => t.turns), [3, 3, 3]);
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

  test("takeTurns() refuses a slice or duration that is not positive", async () => {
    const clock = new FakeClock();
    const { put } = fakeTaker(clock, 1);
    await assert.rejects(
      takeTurns([put], { sliceMs: 0, durationMs: 10, now: clock.now }),
      RangeError,
    );
    await assert.rejects(takeTurns([put], { durationMs: Number.NaN, now: clock.now }), RangeError);
    assert.equal(clock.nowMs, 0);
  });
});
