/**
 * Single ASYNC_FLUSH puts may leave their dispatch to a later put (the
 * dispatcher's fixed cost is paid once for several), but nobody sees it:
 * every read, wait and counter dispatches what is owed first, and what the
 * last puts owe is dispatched at the next turn of the event loop.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { MessageStore } from "../src/store/message_store.ts";
import { body, dispatchFiles, openMemoryStore, settle } from "./_store_helpers.ts";

const TOPIC = "Owed";

/** An awaited single put of a message with one key; answers its offset. */
async function putOne(store: MessageStore, queueId: number, key: string): Promise<number> {
  const result = await store.putMessage({
    topic: TOPIC,
    queueId,
    body: body(48, queueId + 1),
    properties: { TAGS: "t", KEYS: key },
  });
  assert.equal(result.status, "PUT_OK");
  return result.appendResult!.wroteOffset;
}

describe("MessageStore owed dispatch", () => {
  test("putMessage() answers are found by every read at once", async () => {
    const env = await openMemoryStore({ flushDiskType: "ASYNC_FLUSH" });
    const store = env.store;
    try {
      // The first put yields a turn of the event loop (see
      // message_store_turns_test.ts), which dispatches what is owed.
      await putOne(store, 2, "warm-up");
      // Before each look, a put the look must see (one look catches up all).
      await putOne(store, 0, "k-0");
      assert.equal(store.getMaxQueueOffset(TOPIC, 0), 1);

      await putOne(store, 1, "k-1");
      const queues = store.queues().map((q) => [q.queueId, q.maxQueueOffset]).sort((a, b) =>
        a[0]! - b[0]!
      );
      assert.deepEqual(queues, [[0, 1], [1, 1], [2, 1]]);

      await putOne(store, 0, "k-2");
      const page = await store.getMessages(TOPIC, 0, 0, 32);
      assert.equal(page.status, "FOUND");
      assert.equal(page.messages.length, 2);

      const offset = await putOne(store, 1, "k-3");
      const found = await store.queryMessages(TOPIC, "k-3");
      assert.deepEqual(found.messages.map((m) => m.physicalOffset), [offset]);

      await putOne(store, 0, "k-4");
      assert.equal(store.dispatchedOffset, store.maxOffset);

      const hinted = store.stats().dispatchHintedCount;
      await putOne(store, 1, "k-5");
      assert.equal(store.stats().dispatchHintedCount, hinted + 1);

      await putOne(store, 0, "k-6");
      const end = store.maxOffset;
      await store.whenDispatched(end);
      assert.equal(store.getMinQueueOffset(TOPIC, 0), 0);
      assert.equal(store.getMaxQueueOffset(TOPIC, 0), 4);
    } finally {
      await env.store.close();
    }
  });

  test("putMessage() dispatch left owed is done by the next turn, with no reader", async () => {
    const env = await openMemoryStore({ flushDiskType: "ASYNC_FLUSH" });
    try {
      const offset = await putOne(env.store, 0, "only");
      await settle();
      const files = await dispatchFiles(env.port, env.directory);
      const unitFile = [...files].find(([path]) => path.startsWith(`/consumequeue/${TOPIC}/0/`));
      assert.ok(unitFile !== undefined, `no consume-queue file among ${[...files.keys()]}`);
      const units = new DataView(unitFile[1].buffer, unitFile[1].byteOffset);
      // The first unit: int64 commit-log offset, int32 size.
      assert.equal(units.getUint32(4), offset);
      assert.ok(units.getInt32(8) > 0, "the unit is there");
    } finally {
      await env.store.close();
    }
  });

  test("putMessage() wakes a subscriber waiting for the next message", async () => {
    const env = await openMemoryStore({ flushDiskType: "ASYNC_FLUSH" });
    const store = env.store;
    const controller = new AbortController();
    try {
      await putOne(store, 0, "first");
      const received: string[] = [];
      const reading = (async () => {
        for await (const message of store.subscribe(TOPIC, 0, 0, { signal: controller.signal })) {
          received.push(message.properties.get("KEYS") ?? "");
          if (received.length === 2) break;
        }
      })();
      await settle();
      assert.deepEqual(received, ["first"]);
      await putOne(store, 0, "second");
      await reading;
      assert.deepEqual(received, ["first", "second"]);
    } finally {
      controller.abort();
      await store.close();
    }
  });
});
