/**
 * Where re-dispatch starts after a crash with the index enabled (session
 * 9, helper H): a store whose messages carry no key (no index file, or
 * one whose last entry is far behind) must restart at the checkpoint's
 * point, not replay the whole commit log; index files a crash made newer
 * than the checkpoint are dropped and rebuilt from early enough.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { IndexService } from "../src/store/index_service.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import { body, type MemoryStoreEnv, openMemoryStore, settle } from "./_store_helpers.ts";

const TOPIC = "R";
const QUEUES = 3;

/** Puts messages `from` … `from + count − 1` round-robin over the queues; those `keyed` picks get `key-<i>`. */
async function putRange(
  store: MessageStore,
  from: number,
  count: number,
  keyed: (i: number) => boolean,
): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const properties: Record<string, string> = { TAGS: `t${i % 2}` };
    if (keyed(i)) properties.KEYS = `key-${i}`;
    const r = await store.putMessage({
      topic: TOPIC,
      queueId: i % QUEUES,
      body: body(100 + (i % 5) * 60, i),
      properties,
    });
    assert.equal(r.status, "PUT_OK");
  }
}

/** Messages served through the queues, read whole. */
async function servedCount(store: MessageStore): Promise<number> {
  let count = 0;
  for (let queueId = 0; queueId < QUEUES; queueId++) {
    let next = store.getMinQueueOffset(TOPIC, queueId);
    for (let round = 0; round < 1000; round++) {
      const page = await store.getMessages(TOPIC, queueId, next, 32);
      if (page.status !== "FOUND") break;
      for (const [i, message] of page.messages.entries()) {
        assert.equal(message.queueOffset, next + i);
      }
      count += page.messages.length;
      next = page.nextQueueOffset;
    }
    assert.equal(next, store.nextQueueOffset(TOPIC, queueId));
  }
  return count;
}

/**
 * Fires a thorough consume-queue flush (the clock's timer) and waits, on
 * observable progress and bounded, until the checkpoint file covers
 * `offset`; returns the checkpoint as written.
 */
async function checkpointAt(env: MemoryStoreEnv, offset: number): Promise<StoreCheckpoint> {
  await env.store.whenDispatched(offset);
  env.clock.advance(1_000);
  for (let turn = 0; turn < 10_000; turn++) {
    const checkpoint = await StoreCheckpoint.load(env.port, `${env.directory}/checkpoint`);
    if (checkpoint.consumeQueueOffset >= offset) return checkpoint;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`the checkpoint never reached ${offset}`);
}

/** Crashes the memory disk once the store is idle. */
async function crash(env: MemoryStoreEnv): Promise<void> {
  await settle();
  env.port.crash();
}

const OPTIONS = { flushDiskType: "SYNC_FLUSH", flushConsumeQueueThoroughInterval: 0 } as const;

describe("MessageStore re-dispatch of the index after a crash", () => {
  test("MessageStore.open() after a crash re-dispatches from the checkpoint when no message has a key", async () => {
    const env = await openMemoryStore(OPTIONS);
    await putRange(env.store, 0, 120, () => false);
    const checkpoint = await checkpointAt(env, env.store.maxOffset);
    assert.equal(checkpoint.indexOffset, checkpoint.consumeQueueOffset);
    await putRange(env.store, 120, 60, () => false);
    await crash(env);
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      // Not 0: the index lacks nothing before the checkpoint (it never
      // had a file), so only the records after it are dispatched again.
      assert.equal(again.recovery.dispatchedFrom, checkpoint.consumeQueueOffset);
      assert.equal(await servedCount(again), 180);
      await putRange(again, 180, 1, (i) => i === 180);
      await again.whenDispatched(again.maxOffset);
      assert.equal((await again.queryMessages(TOPIC, "key-180")).messages.length, 1);
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() after a crash re-dispatches from the checkpoint when the last key is far behind", async () => {
    const env = await openMemoryStore(OPTIONS);
    // Keys only at first: the index file's last entry is the 10th record.
    await putRange(env.store, 0, 150, (i) => i < 10);
    const checkpoint = await checkpointAt(env, env.store.maxOffset);
    await putRange(env.store, 150, 60, (i) => i === 170);
    await crash(env);
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal(again.recovery.dispatchedFrom, checkpoint.indexOffset);
      assert.equal(await servedCount(again), 210);
      for (const i of [0, 9, 170]) {
        const found = await again.queryMessages(TOPIC, `key-${i}`);
        assert.equal(found.messages.length, 1, `key-${i}`);
      }
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() after a crash cuts index files newer than the checkpoint back to it", async () => {
    // 15 entries a file: the keys after the checkpoint fill the file the
    // checkpoint saw, whose roll makes it durable with an end newer than
    // the checkpoint. Session 9 dropped it and rebuilt its entries from
    // before the checkpoint; since session 10 (helper D) it is cut back to
    // the checkpoint's point and the files after it, left empty, dropped:
    // re-dispatch starts at the checkpoint.
    const env = await openMemoryStore({ ...OPTIONS, maxHashSlotNum: 8, maxIndexNum: 16 });
    await putRange(env.store, 0, 40, (i) => i % 4 === 0);
    const checkpoint = await checkpointAt(env, env.store.maxOffset);
    env.clock.advance(5_000);
    await putRange(env.store, 40, 40, () => true);
    await env.store.whenDispatched(env.store.maxOffset);
    await crash(env);
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal(again.recovery.dispatchedFrom, checkpoint.indexOffset);
      assert.equal(await servedCount(again), 80);
      for (let i = 0; i < 80; i++) {
        if (i < 40 && i % 4 !== 0) continue;
        const found = await again.queryMessages(TOPIC, `key-${i}`);
        assert.equal(found.messages.length, 1, `key-${i}`);
      }
    } finally {
      await again.close();
    }
  });
});

describe("IndexService load report", () => {
  const T0 = 1_700_000_000_000;

  /** Two files under `root`: keys at 0, 100, 200 (ends at T0 + 2 s), then 300, 400. */
  async function twoFiles(port: MemoryPort, root: string) {
    const options = { port, rootDirectory: root, maxHashSlotNum: 8, maxIndexNum: 4 };
    const index = new IndexService(options);
    await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
    for (let i = 0; i < 5; i++) {
      await index.buildIndex({
        topic: TOPIC,
        commitLogOffset: 100 * i,
        storeTimestamp: T0 + 1_000 * i,
        keys: [`k${i}`],
      });
    }
    assert.equal(index.files.length, 2);
    await index.close();
    return options;
  }

  test("IndexService.load() reports the files it dropped as newer than the checkpoint", async () => {
    const port = new MemoryPort(runtimeName());
    const options = await twoFiles(port, "/a");
    const kept = new IndexService(options);
    const keptReport = await kept.load({ lastExitOK: false, indexMsgTimestamp: T0 + 4_000 });
    assert.deepEqual(keptReport, {
      droppedFiles: 0,
      droppedFromOffset: -1,
      cutFiles: 0,
      cutEntries: 0,
    });
    assert.deepEqual(kept.loadReport, keptReport);
    assert.equal(kept.files.length, 2);
    await kept.close();

    const cut = new IndexService(options);
    // The dropped file's entries (300, 400) came after the kept one's end.
    assert.deepEqual(await cut.load({ lastExitOK: false, indexMsgTimestamp: T0 + 2_000 }), {
      droppedFiles: 1,
      droppedFromOffset: 200,
      cutFiles: 0,
      cutEntries: 0,
    });
    assert.equal(cut.files.length, 1);
    assert.equal(cut.files[0]?.endPhyOffset, 200);
    await cut.close();

    // A clean load drops nothing, whatever the timestamp.
    const clean = new IndexService(options);
    assert.deepEqual(await clean.load({ lastExitOK: true, indexMsgTimestamp: 0 }), {
      droppedFiles: 0,
      droppedFromOffset: -1,
      cutFiles: 0,
      cutEntries: 0,
    });
    await clean.close();

    // Both dropped: from the first one's first entry.
    const none = new IndexService(await twoFiles(port, "/b"));
    assert.deepEqual(await none.load({ lastExitOK: false, indexMsgTimestamp: T0 - 1 }), {
      droppedFiles: 2,
      droppedFromOffset: 0,
      cutFiles: 0,
      cutEntries: 0,
    });
    assert.equal(none.files.length, 0);
    await none.close();
  });
});
