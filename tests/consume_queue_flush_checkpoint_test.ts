/**
 * The consume-queue flusher's least-pages flushes move the checkpoint
 * (session 9, helper H) only when every unit before the progress snapshot
 * is durable, and the index point with it when no key went in since the
 * index's last flush or enough did (the index flushed first); an abnormal
 * open then re-dispatches from there, not from the last thorough flush.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import {
  ConsumeQueueFlushService,
  INDEX_FLUSH_LEAST_BYTES,
} from "../src/store/consume_queue_flush_service.ts";
import type { ConsumeQueueTable } from "../src/store/consume_queue_table.ts";
import type { IndexService } from "../src/store/index_service.ts";
import { body, openMemoryStore, settle } from "./_store_helpers.ts";

const UNIT_BYTES = 20;
const INTERVAL_MS = 1_000;

/** A queue as the flusher sees it: its end and how far it is durable. */
interface StubQueue {
  maxOffsetInQueue: number;
  flushedWhere: number;
  /** Whether a least-pages flush flushes it (enough dirty pages). */
  flushes: boolean;
}

interface Env {
  port: MemoryPort;
  clock: ManualClock;
  checkpoint: StoreCheckpoint;
  queues: StubQueue[];
  progress: { offset: number; timestampMs: number };
  index: { isFlushed: boolean; unflushedEntryBytes: number; flushed: number };
  service: ConsumeQueueFlushService;
}

async function flusherEnv(withIndex: boolean): Promise<Env> {
  const port = new MemoryPort(runtimeName());
  await port.makeDirectory("/store");
  const checkpoint = await StoreCheckpoint.load(port, "/store/checkpoint");
  const clock = new ManualClock(1_700_000_000_000);
  const queues: StubQueue[] = [];
  const table = {
    *queues() {
      yield* queues;
    },
    flush(leastPages: number) {
      for (const queue of queues) {
        if (leastPages === 0 || queue.flushes) {
          queue.flushedWhere = queue.maxOffsetInQueue * UNIT_BYTES;
        }
      }
      return Promise.resolve(true);
    },
  };
  const index = { isFlushed: true, unflushedEntryBytes: 0, flushed: 0 };
  const indexStub = {
    get isFlushed() {
      return index.isFlushed;
    },
    get unflushedEntryBytes() {
      return index.unflushedEntryBytes;
    },
    flush() {
      index.flushed++;
      index.isFlushed = true;
      index.unflushedEntryBytes = 0;
      return Promise.resolve(0);
    },
  };
  const progress = { offset: 0, timestampMs: 0 };
  const service = new ConsumeQueueFlushService({
    consumeQueues: table as unknown as ConsumeQueueTable,
    index: withIndex ? indexStub as unknown as IndexService : undefined,
    checkpoint,
    clock,
    intervalMs: INTERVAL_MS,
    leastPages: 2,
    thoroughIntervalMs: 60_000,
    progress: () => ({ ...progress }),
    onError: (error) => {
      throw error;
    },
  });
  service.start();
  return { port, clock, checkpoint, queues, progress, index, service };
}

/** The checkpoint file as written. */
function written(env: Env): Promise<StoreCheckpoint> {
  return StoreCheckpoint.load(env.port, "/store/checkpoint");
}

/** Fires one least-pages flush and waits (bounded, on the outcome) for the file to show `offset`. */
async function tickUntilWritten(env: Env, offset: number): Promise<StoreCheckpoint> {
  env.clock.advance(INTERVAL_MS);
  for (let turn = 0; turn < 1_000; turn++) {
    const checkpoint = await written(env);
    if (checkpoint.consumeQueueOffset >= offset) return checkpoint;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`the checkpoint file never reached ${offset}`);
}

describe("ConsumeQueueFlushService least-pages checkpoint", () => {
  test("ConsumeQueueFlushService moves the checkpoint at a least-pages flush that flushed every queue", async () => {
    const env = await flusherEnv(true);
    try {
      env.queues.push(
        { maxOffsetInQueue: 500, flushedWhere: 0, flushes: true },
        { maxOffsetInQueue: 0, flushedWhere: 0, flushes: false },
      );
      env.progress.offset = 64_000;
      env.progress.timestampMs = env.clock.nowMs();
      const checkpoint = await tickUntilWritten(env, 64_000);
      assert.equal(checkpoint.consumeQueueOffset, 64_000);
      assert.equal(checkpoint.logicsMsgTimestamp, env.progress.timestampMs);
      assert.equal(checkpoint.indexOffset, 64_000);
      assert.equal(checkpoint.indexMsgTimestamp, env.progress.timestampMs);
      // Not a thorough flush: the index was not flushed.
      assert.equal(env.index.flushed, 0);
    } finally {
      await env.service.close();
    }
  });

  test("ConsumeQueueFlushService leaves the checkpoint when a queue kept unflushed units", async () => {
    const env = await flusherEnv(false);
    try {
      env.queues.push(
        { maxOffsetInQueue: 500, flushedWhere: 0, flushes: true },
        // Fewer dirty pages than leastPages: not flushed.
        { maxOffsetInQueue: 30, flushedWhere: 0, flushes: false },
      );
      env.progress.offset = 64_000;
      env.progress.timestampMs = env.clock.nowMs();
      env.clock.advance(INTERVAL_MS);
      await settle();
      assert.equal(env.queues[0]!.flushedWhere, 500 * UNIT_BYTES);
      assert.equal(env.checkpoint.consumeQueueOffset, -1);
      assert.equal((await written(env)).consumeQueueOffset, -1);
      // Once that queue is flushed too, the point moves.
      env.queues[1]!.flushes = true;
      const checkpoint = await tickUntilWritten(env, 64_000);
      assert.equal(checkpoint.consumeQueueOffset, 64_000);
      // Without the index, its point is not the flusher's to move.
      assert.equal(checkpoint.indexOffset, -1);
    } finally {
      await env.service.close();
    }
  });

  test("ConsumeQueueFlushService flushes an index with enough unflushed entries and moves its point", async () => {
    const env = await flusherEnv(true);
    try {
      env.queues.push({ maxOffsetInQueue: 500, flushedWhere: 0, flushes: true });
      env.index.isFlushed = false;
      env.index.unflushedEntryBytes = INDEX_FLUSH_LEAST_BYTES;
      env.progress.offset = 64_000;
      env.progress.timestampMs = env.clock.nowMs();
      const checkpoint = await tickUntilWritten(env, 64_000);
      assert.equal(checkpoint.consumeQueueOffset, 64_000);
      assert.equal(env.index.flushed, 1);
      assert.equal(checkpoint.indexOffset, 64_000);
      assert.equal(checkpoint.indexMsgTimestamp, env.progress.timestampMs);
      // A unit put after the snapshot does not hold the point back, one
      // before it does.
      env.queues[0]!.flushes = false;
      env.queues[0]!.maxOffsetInQueue = 520;
      env.progress.offset = 66_000;
      env.clock.advance(INTERVAL_MS);
      await settle();
      assert.equal(env.checkpoint.consumeQueueOffset, 64_000);
    } finally {
      await env.service.close();
    }
  });

  test("ConsumeQueueFlushService leaves an index with few unflushed entries for the thorough flush", async () => {
    const env = await flusherEnv(true);
    try {
      env.queues.push({ maxOffsetInQueue: 500, flushedWhere: 0, flushes: true });
      env.index.isFlushed = false;
      env.index.unflushedEntryBytes = INDEX_FLUSH_LEAST_BYTES - 20;
      env.progress.offset = 64_000;
      env.progress.timestampMs = env.clock.nowMs();
      const checkpoint = await tickUntilWritten(env, 64_000);
      // The queues' point moved; the index was neither flushed nor moved.
      assert.equal(checkpoint.consumeQueueOffset, 64_000);
      assert.equal(env.index.flushed, 0);
      assert.equal(checkpoint.indexOffset, -1);
      // The thorough flush flushes it and moves its point.
      env.progress.offset = 66_000;
      env.clock.advance(60_000);
      for (let turn = 0; (await written(env)).indexOffset !== 66_000; turn++) {
        assert.ok(turn < 1_000, "the thorough flush never moved the index point");
        // The flusher's next timer may be set only after the last flush
        // settled: every turn moves the clock one interval on.
        env.clock.advance(INTERVAL_MS);
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      assert.equal(env.index.flushed, 1);
    } finally {
      await env.service.close();
    }
  });

  // A plain crash, then torn ones (each dirty page kept or lost); with a
  // key on every message, the index point moves too.
  const cases = [
    ...[undefined, 0x5EED1, 0x5EED2, 0x5EED3].map((seed) => ({ seed, keyed: false })),
    ...[undefined, 0x5EED4].map((seed) => ({ seed, keyed: true })),
  ];
  for (const { seed, keyed } of cases) {
    test(
      `MessageStore.open() after a ${seed === undefined ? "" : "torn "}crash ${
        keyed ? "of a keyed store " : ""
      }re-dispatches from the last least-pages flush`,
      async () => {
        await crashAfterLeastPagesFlush(seed, keyed);
      },
    );
  }
});

async function crashAfterLeastPagesFlush(seed: number | undefined, keyed: boolean): Promise<void> {
  {
    const env = await openMemoryStore({
      flushDiskType: "SYNC_FLUSH",
      flushConsumeQueueLeastPages: 1,
      flushConsumeQueueThoroughInterval: 600_000,
    });
    // Two queues, 300 units each: over a page (204 units) of each.
    for (let i = 0; i < 600; i++) {
      const r = await env.store.putMessage({
        topic: "L",
        queueId: i % 2,
        body: body(40, i),
        properties: keyed ? { KEYS: `k${i}` } : undefined,
      });
      assert.equal(r.status, "PUT_OK");
    }
    const point = env.store.maxOffset;
    await env.store.whenDispatched(point);
    env.clock.advance(INTERVAL_MS);
    for (let turn = 0;; turn++) {
      assert.ok(turn < 10_000, "the checkpoint never moved");
      const checkpoint = await StoreCheckpoint.load(env.port, `${env.directory}/checkpoint`);
      if (checkpoint.consumeQueueOffset === point) {
        // Without keys the index point moves with the queues'; 600 keys
        // (12 KB of entries) leave it for the thorough flush.
        assert.equal(checkpoint.indexOffset, keyed ? -1 : point);
        break;
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    for (let i = 600; i < 640; i++) {
      const properties = i === 620 ? { KEYS: "late" } : undefined;
      await env.store.putMessage({ topic: "L", queueId: i % 2, body: body(40, i), properties });
    }
    await settle();
    env.port.crash({ seed });
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      // Keyed: from before the point, where the index's keys were durable.
      if (keyed) assert.ok(again.recovery.dispatchedFrom < point);
      else assert.equal(again.recovery.dispatchedFrom, point);
      for (const queueId of [0, 1]) {
        assert.equal(again.nextQueueOffset("L", queueId), 320);
        let next = 0;
        for (let round = 0; round < 100 && next < 320; round++) {
          const page = await again.getMessages("L", queueId, next, 32);
          assert.equal(page.status, "FOUND");
          assert.equal(page.messages[0]?.queueOffset, next);
          next = page.nextQueueOffset;
        }
        assert.equal(next, 320);
      }
      assert.equal((await again.queryMessages("L", "late")).messages.length, 1);
      if (keyed) {
        for (let i = 0; i < 600; i++) {
          const found = await again.queryMessages("L", `k${i}`);
          assert.equal(found.messages.length, 1, `key k${i}`);
          assert.deepEqual(found.messages[0]!.body, body(40, i));
        }
      }
    } finally {
      await again.close();
    }
  }
}
