/**
 * GroupCommitService's lone producer: its awaited puts are chained in
 * microtasks (flushed on the thread without an event-loop turn each), the
 * loop still gets a turn every LONE_CHAIN_FLUSHES_MAX flushes, puts from
 * separate events still share a flush, and one timeout timer serves a run
 * of puts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setImmediate } from "node:timers";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { GroupCommitService } from "../src/commit_log/group_commit_service.ts";
import { LONE_CHAIN_FLUSHES_MAX } from "../src/commit_log/constants.ts";
import type { PutMessageResult } from "../src/commit_log/put_message_result.ts";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { StoreStats } from "../src/commit_log/store_stats.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { body, SEGMENT_BYTES } from "./_store_helpers.ts";

/** Flushes of the commit log: on the JavaScript thread, and off it. */
interface FlushCounts {
  onThread: number;
  offThread: number;
}

/** A memory port that counts the commit log's `datasyncSync` and `datasync` calls. */
function countingPort(): { port: RuntimePort; counts: FlushCounts } {
  const counts: FlushCounts = { onThread: 0, offThread: 0 };
  const memory = new MemoryPort(runtimeName());
  const port = new Proxy(memory, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key !== "createFile" && key !== "openFile") return value.bind(target);
      return async (...args: unknown[]) => {
        const handle: FileHandle = await value.apply(target, args);
        if (!String(args[0]).includes("/commitlog/")) return handle;
        return new Proxy(handle, {
          get(inner, name) {
            const method = Reflect.get(inner, name);
            if (typeof method !== "function") return method;
            const bound = method.bind(inner);
            if (name === "datasync") {
              return () => {
                counts.offThread++;
                return bound();
              };
            }
            if (name === "datasyncSync") {
              return () => {
                counts.onThread++;
                bound();
              };
            }
            return bound;
          },
        });
      };
    },
  }) as RuntimePort;
  return { port, counts };
}

/**
 * Counts event-loop turns: an immediate that queues itself again each
 * time it runs (so once per turn) until stopped.
 */
function turnCounter(): { readonly turns: number; stop(): void } {
  let turns = 0;
  let running = true;
  const tick = () => {
    turns++;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    get turns() {
      return turns;
    },
    stop: () => running = false,
  };
}

/** Lengths of the runs of equal values in `values` (puts answered within one turn). */
function runLengths(values: number[]): number[] {
  const runs: number[] = [];
  for (let i = 0; i < values.length; i++) {
    if (i > 0 && values[i] === values[i - 1]) runs[runs.length - 1]!++;
    else runs.push(1);
  }
  return runs;
}

interface Env {
  queue: MappedFileQueue;
  groupCommit: GroupCommitService;
  clock: ManualClock;
  counts: FlushCounts;
  /** Appends 100 bytes and asks for their flush. */
  put(): { end: number; answer: Promise<PutMessageResult> };
  close(): Promise<void>;
}

async function open(): Promise<Env> {
  const { port, counts } = countingPort();
  const clock = new ManualClock(1_000);
  const queue = new MappedFileQueue({
    port,
    directory: "/lone/commitlog",
    fileSizeBytes: SEGMENT_BYTES,
    positionalWrites: true,
  });
  await queue.load();
  const groupCommit = new GroupCommitService({
    queue,
    clock,
    syncFlushTimeoutMs: 5_000,
    checkpoint: await StoreCheckpoint.load(port, "/lone/checkpoint"),
    stats: new StoreStats(),
    onFlushed: () => {},
    onError: (error) => assert.fail(`flush failed: ${String(error)}`),
  });
  const file = await queue.getOrCreateLastMappedFile(0);
  const put = () => {
    file.appendBytes(body(100));
    const end = queue.maxWrotePosition;
    return { end, answer: groupCommit.request(end, { status: "PUT_OK" }, clock.nowMs()) };
  };
  const close = async () => {
    await groupCommit.close();
    await queue.close();
  };
  return { queue, groupCommit, clock, counts, put, close };
}

/** Resolves to whether `promise` settled within a few turns. */
async function settledSoon(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(() => settled = true, () => settled = true);
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
  return settled;
}

describe("GroupCommitService, lone producer", () => {
  test("GroupCommitService chains a lone producer's awaited puts without a turn each, LONE_CHAIN_FLUSHES_MAX at most", async () => {
    const env = await open();
    const before = { ...env.counts };
    const counter = turnCounter();
    const turnAtAnswer: number[] = [];
    try {
      const putCount = 4 * LONE_CHAIN_FLUSHES_MAX;
      for (let i = 0; i < putCount; i++) {
        const { end, answer } = env.put();
        assert.equal((await answer).status, "PUT_OK");
        assert.ok(env.queue.flushedWhere >= end, "answered only once durable");
        turnAtAnswer.push(counter.turns);
      }
      assert.deepEqual(env.counts, {
        onThread: before.onThread + putCount,
        offThread: before.offThread,
      });
      const runs = runLengths(turnAtAnswer);
      // Unchained, each put waits for a turn of its own (runs of 1).
      assert.ok(Math.max(...runs) > 1, `puts answered per turn: ${runs.join(" ")}`);
      assert.ok(
        Math.max(...runs) <= LONE_CHAIN_FLUSHES_MAX,
        `the loop turns every ${LONE_CHAIN_FLUSHES_MAX} flushes at most: ${runs.join(" ")}`,
      );
    } finally {
      counter.stop();
      await env.close();
    }
  });

  test("GroupCommitService flushes puts from separate events together after a lone flush, not in a chain", async () => {
    const env = await open();
    try {
      // A lone flush answered: the chain it opens ends with this checkpoint.
      assert.equal((await env.put().answer).status, "PUT_OK");
      const before = { ...env.counts };
      // Two events of the next turn, each putting once (two HTTP requests).
      const answers = await new Promise<Promise<PutMessageResult>[]>((resolve) => {
        const puts: Promise<PutMessageResult>[] = [];
        setImmediate(() => puts.push(env.put().answer));
        setImmediate(() => resolve([...puts, env.put().answer]));
      });
      assert.equal(answers.length, 2);
      for (const answer of answers) assert.equal((await answer).status, "PUT_OK");
      assert.equal(env.counts.onThread, before.onThread, "neither was flushed alone");
      assert.equal(env.counts.offThread, before.offThread + 1, "one flush for both");
    } finally {
      await env.close();
    }
  });

  test("GroupCommitService arms one timeout timer for a run of puts and times out a later put at its own deadline", async () => {
    const env = await open();
    try {
      for (let i = 0; i < 3; i++) assert.equal((await env.put().answer).status, "PUT_OK");
      assert.equal(env.clock.pendingTimerCount, 1, "armed by the first put, not one per put");
      env.clock.advance(2_000);
      // A put whose end is past the appended bytes waits as if its flush
      // never returned.
      const stuck = env.groupCommit.request(
        env.queue.maxWrotePosition + 1,
        { status: "PUT_OK" },
        env.clock.nowMs(),
      );
      env.clock.advance(3_000); // the first timer's deadline: not this put's
      assert.equal(await settledSoon(stuck), false);
      assert.equal(env.clock.pendingTimerCount, 1, "re-armed for the waiting put");
      env.clock.advance(2_000);
      const result = await stuck;
      assert.equal(result.status, "FLUSH_DISK_TIMEOUT");
      assert.equal(result.error?.code, "FLUSH_DISK_TIMEOUT");
      assert.equal(env.clock.pendingTimerCount, 0, "nobody waits: not re-armed");
    } finally {
      await env.close();
    }
  });

  test("MessageStore.putMessage() awaited in a loop under SYNC_FLUSH is chained through the store's answer", async () => {
    const { port, counts } = countingPort();
    const store = await MessageStore.open("/lone-store", {
      port,
      clock: new ManualClock(1_000),
      flushDiskType: "SYNC_FLUSH",
      mappedFileSizeCommitLog: SEGMENT_BYTES,
      onWarning: () => {},
    });
    const counter = turnCounter();
    try {
      const message = { topic: "T", queueId: 0, body: body(100) };
      const turnAtAnswer: number[] = [];
      // Through one more async wrapper, as a producer's client would call it.
      const send = async () => (await store.putMessage(message)).status;
      for (let i = 0; i < 2 * LONE_CHAIN_FLUSHES_MAX; i++) {
        assert.equal(await send(), "PUT_OK");
        turnAtAnswer.push(counter.turns);
      }
      const runs = runLengths(turnAtAnswer);
      assert.ok(Math.max(...runs) > 1, `puts answered per turn: ${runs.join(" ")}`);
      assert.ok(Math.max(...runs) <= LONE_CHAIN_FLUSHES_MAX, runs.join(" "));
      assert.ok(counts.onThread >= 2 * LONE_CHAIN_FLUSHES_MAX - 1, "flushed on the thread");
      // Each answered put is in its queue (the chain dispatches as it goes).
      const page = await store.getMessages("T", 0, 0, 0x40);
      assert.equal(page.messages.length, 2 * LONE_CHAIN_FLUSHES_MAX);
    } finally {
      counter.stop();
      await store.close();
    }
  });
});
