/**
 * The segment pacer of the commit log: under SYNC_FLUSH, a new segment's
 * zeros go only once the group commit has been idle PREPARE_IDLE_MS, and
 * while it stays busy the pacer checks less and less often (each timer
 * that wakes an idle event loop costs hundreds of µs of CPU).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { PREPARE_IDLE_MS } from "../src/commit_log/constants.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import type { FileHandle } from "../src/runtime/port.ts";
import {
  body,
  commitLogHandlesPort,
  openMemoryStore,
  SEGMENT_BYTES,
  settle,
} from "./_store_helpers.ts";

/** A manual clock that records the delay of every timer set. */
class RecordingClock extends ManualClock {
  delaysMs: number[] = [];

  override setTimer(delayMs: number, callback: () => void): () => void {
    this.delaysMs.push(delayMs);
    return super.setTimer(delayMs, callback);
  }
}

/**
 * A port whose commit-log `datasync` (the group commit's flush) waits
 * while held; segment preparation (`Mapping.sync`) is left alone.
 */
function datasyncGate(inner: MemoryPort) {
  let held = false;
  let waiters: Array<() => void> = [];
  const port = commitLogHandlesPort(inner, (handle: FileHandle) =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "datasync") {
          return async () => {
            if (held) await new Promise<void>((resolve) => waiters.push(resolve));
            return value.apply(target, []);
          };
        }
        // A flush on the thread cannot be held: without it the store
        // flushes through datasync() only.
        if (key === "datasyncSync") return undefined;
        return value.bind(target);
      },
    }));
  return {
    port,
    hold: () => held = true,
    release: () => {
      held = false;
      const list = waiters;
      waiters = [];
      for (const wake of list) wake();
    },
  };
}

/** Timers of the pacer's range: a gap check (PREPARE_IDLE_MS up to 16 times it). */
function paceTimers(delaysMs: readonly number[]): number {
  return delaysMs.filter((ms) => ms > 0 && ms <= PREPARE_IDLE_MS * 0x10).length;
}

describe("CommitLog segment pacer", () => {
  test("putMessage() under SYNC_FLUSH: a busy group commit makes the pacer check less and less often", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = datasyncGate(memory);
    const clock = new RecordingClock(1_700_000_000_000);
    const env = await openMemoryStore(
      { flushDiskType: "SYNC_FLUSH", port: gate.port, clock },
      memory,
    );
    const puts: Promise<unknown>[] = [];
    try {
      const message = { topic: "T", queueId: 0, body: body(0x400) };
      assert.equal((await env.store.putMessage(message)).status, "PUT_OK");
      // Held flushes keep the group commit busy; enough puts to roll into
      // the segment prepared ahead, whose successor's preparation is then
      // paced.
      gate.hold();
      for (let i = 0; i < SEGMENT_BYTES / 0x400; i++) puts.push(env.store.putMessage(message));
      await settle();
      clock.delaysMs = [];
      // Two seconds of a busy group commit, in 10 ms steps.
      const stepsCount = 200;
      for (let i = 0; i < stepsCount; i++) {
        clock.advance(PREPARE_IDLE_MS);
        await settle();
      }
      const checks = paceTimers(clock.delaysMs);
      // Every 10 ms (200 checks) before; now at most every 160 ms after
      // four doublings: about 16.
      assert.ok(checks >= 1, "a preparation waits for a gap");
      assert.ok(checks <= 30, `${checks} gap checks in 2 s of a busy group commit`);
    } finally {
      gate.release();
      await Promise.all(puts);
      await env.store.close();
    }
  });
});
