/**
 * Recovery of the consume queues and the index on open (SPEC §7, §8):
 * re-dispatch from the checkpoint's offsets, index files newer than the
 * checkpoint dropped and rebuilt after a crash, recovery progress written
 * to the checkpoint, leftovers of an interrupted segment creation removed,
 * and a torn tail zeroed durably before any new put.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import {
  body,
  type MemoryStoreEnv,
  openMemoryStore,
  readRecords,
  SEGMENT_BYTES,
  segmentNames,
  settle,
} from "./_store_helpers.ts";

/** Puts `count` messages round-robin over queues 0-2 of topic R, keys `key-<i>`. */
async function putMany(store: MessageStore, count: number, from = 0): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const r = await store.putMessage({
      topic: "R",
      queueId: i % 3,
      body: body(200 + (i % 7) * 100, i),
      properties: { KEYS: `key-${i}`, TAGS: `t${i % 2}` },
    });
    assert.equal(r.status, "PUT_OK");
  }
}

/** Every queue of topic R read whole: queue offsets contiguous, each message once. */
async function readAll(store: MessageStore): Promise<number[]> {
  const offsets: number[] = [];
  for (let queueId = 0; queueId < 3; queueId++) {
    let next = store.getMinQueueOffset("R", queueId);
    for (let round = 0; round < 1000; round++) {
      const page = await store.getMessages("R", queueId, next, 16);
      if (page.status !== "FOUND") break;
      for (const [i, message] of page.messages.entries()) {
        assert.equal(message.queueOffset, next + i);
        offsets.push(message.physicalOffset);
      }
      next = page.nextQueueOffset;
    }
    assert.equal(next, store.nextQueueOffset("R", queueId));
  }
  return offsets.sort((a, b) => a - b);
}

/** Crashes the memory disk once the store is idle (every put answered, nothing in flight). */
async function crash(env: MemoryStoreEnv): Promise<void> {
  await settle();
  env.port.crash();
}

describe("MessageStore recovery of queues and index", () => {
  test("MessageStore.open() after a crash re-dispatches what the consume queues lost", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    await putMany(env.store, 150);
    const expected = (await readRecords(env.port, env.directory)).map((r) => r.offset);
    // Nothing advanced the clock: no consume-queue flush ran, so the crash
    // takes every unit back.
    await crash(env);
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal(again.recovery.dispatchedFrom, 0);
      assert.deepEqual(await readAll(again), expected);
      for (const i of [0, 75, 149]) {
        const found = await again.queryMessages("R", `key-${i}`);
        assert.equal(found.messages.length, 1, `key-${i}`);
      }
      // Progress is in the checkpoint file already (not only at close).
      const checkpoint = await StoreCheckpoint.load(env.port, `${env.directory}/checkpoint`);
      assert.equal(checkpoint.consumeQueueOffset, again.maxOffset);
      assert.equal(checkpoint.indexOffset, again.maxOffset);
      await putMany(again, 10, 150);
      assert.equal((await readAll(again)).length, 160);
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() after a clean close dispatches nothing again", async () => {
    const env = await openMemoryStore({ flushDiskType: "ASYNC_FLUSH" });
    await putMany(env.store, 120);
    await env.store.close();
    const checkpoint = await StoreCheckpoint.load(env.port, `${env.directory}/checkpoint`);
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, true);
      assert.equal(checkpoint.consumeQueueOffset, again.maxOffset);
      assert.equal(again.recovery.dispatchedFrom, again.maxOffset);
      assert.equal((await readAll(again)).length, 120);
      assert.equal((await again.queryMessages("R", "key-7")).messages.length, 1);
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() re-dispatches from the checkpoint's offsets, not from timestamps", async () => {
    const env = await openMemoryStore({
      flushDiskType: "SYNC_FLUSH",
      flushConsumeQueueThoroughInterval: 0,
    });
    await putMany(env.store, 100);
    await env.store.whenDispatched(env.store.maxOffset);
    // A thorough consume-queue flush: queues, index and checkpoint durable.
    env.clock.advance(1_000);
    const written = await waitForCheckpoint(env, env.store.maxOffset);
    await putMany(env.store, 50, 100);
    await crash(env);
    const again = await env.reopen();
    try {
      // From the checkpoint (the index restarts at its last durable entry,
      // one record before), not from the first segment.
      assert.ok(
        again.recovery.dispatchedFrom > 0 && again.recovery.dispatchedFrom <= written,
        `dispatched from ${again.recovery.dispatchedFrom}, checkpoint at ${written}`,
      );
      assert.equal((await readAll(again)).length, 150);
      assert.equal((await again.queryMessages("R", "key-120")).messages.length, 1);
      assert.equal((await again.queryMessages("R", "key-20")).messages.length, 1);
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() removes a temporary and a zero-length segment left by a crash", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    await putMany(env.store, 20);
    await env.store.close();
    const commitLog = `${env.directory}/commitlog`;
    const last = (await segmentNames(env.port, env.directory)).at(-1)!;
    const next = String(Number(last) + SEGMENT_BYTES).padStart(20, "0");
    await env.port.writeFileAtomic(`${commitLog}/${next}`, new Uint8Array(0));
    const temporary = await env.port.createFile(
      `${commitLog}/${String(Number(next) + SEGMENT_BYTES).padStart(20, "0")}.tmp`,
      SEGMENT_BYTES,
      { sparse: true },
    );
    await temporary.close();
    const again = await env.reopen();
    try {
      const names = await env.port.list(commitLog);
      assert.ok(!names.some((name) => name.endsWith(".tmp")), names.join());
      assert.ok((await env.port.stat(`${commitLog}/${next}`))?.sizeBytes !== 0);
      assert.equal((await readAll(again)).length, 20);
      await putMany(again, 5, 20);
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() zeroes a torn tail durably before any new put", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    await putMany(env.store, 30);
    const records = await readRecords(env.port, env.directory);
    const victim = records[20]!;
    const end = env.store.maxOffset;
    const segment = String(Math.floor(victim.offset / SEGMENT_BYTES) * SEGMENT_BYTES).padStart(
      20,
      "0",
    );
    const path = `${env.directory}/commitlog/${segment}`;
    const position = victim.offset % SEGMENT_BYTES;
    // Tear record 20: zero its last 50 bytes (its body CRC no longer matches).
    const file = await env.port.openFile(path);
    await file.write(new Uint8Array(50), position + victim.message.storeSize - 50);
    await file.datasync();
    await file.close();
    await crash(env);
    const again = await env.reopen();
    assert.equal(again.maxOffset, victim.offset);
    assert.equal(again.recovery.endKind, "invalid");
    // A crash right after open: the stale records 21-29 must not come back.
    await settle();
    env.port.crash();
    const third = await env.reopen();
    try {
      assert.equal(third.maxOffset, victim.offset);
      const bytes = (await env.port.readFile(path))!;
      assert.ok(
        bytes.subarray(position, end % SEGMENT_BYTES || SEGMENT_BYTES).every((b) => b === 0),
      );
      assert.equal((await readAll(third)).length, 20);
      await putMany(third, 3, 30);
      assert.equal((await readAll(third)).length, 23);
    } finally {
      await third.close();
    }
  });
});

/** Waits (bounded, on the file's content) until the checkpoint file records `offset`. */
async function waitForCheckpoint(env: MemoryStoreEnv, offset: number): Promise<number> {
  for (let turn = 0; turn < 10_000; turn++) {
    const checkpoint = await StoreCheckpoint.load(env.port, `${env.directory}/checkpoint`);
    if (checkpoint.consumeQueueOffset >= offset) return checkpoint.consumeQueueOffset;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`the checkpoint never reached ${offset}`);
}
