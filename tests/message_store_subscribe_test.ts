/**
 * MessageStore.subscribe(): messages as they are dispatched, woken by the
 * dispatcher, ended cleanly by close() or an AbortSignal.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { StoredMessage } from "../src/store/get_message_result.ts";
import { body, openMemoryStore } from "./_store_helpers.ts";

/** Collects `count` messages from an iterator. */
async function take(
  iterator: AsyncIterator<StoredMessage>,
  count: number,
): Promise<StoredMessage[]> {
  const taken: StoredMessage[] = [];
  while (taken.length < count) {
    const step = await iterator.next();
    if (step.done === true) break;
    taken.push(step.value);
  }
  return taken;
}

describe("MessageStore.subscribe()", () => {
  for (const flushDiskType of ["SYNC_FLUSH", "ASYNC_FLUSH"] as const) {
    test(`subscribe() yields stored and later messages in queue order (${flushDiskType})`, async () => {
      const { store } = await openMemoryStore({ flushDiskType });
      try {
        for (let i = 0; i < 5; i++) {
          await store.putMessage({ topic: "S", queueId: 1, body: body(20, i), flag: i });
        }
        const iterator = store.subscribe("S", 1, 2)[Symbol.asyncIterator]();
        const first = await take(iterator, 3);
        assert.deepEqual(first.map((m) => m.queueOffset), [2, 3, 4]);
        // The iterator now waits; puts made while it waits wake it.
        const waiting = take(iterator, 40);
        const puts = [];
        for (let i = 5; i < 45; i++) {
          puts.push(store.putMessage({ topic: "S", queueId: 1, body: body(20, i), flag: i }));
          // Other queues do not disturb it.
          puts.push(store.putMessage({ topic: "S", queueId: 0, body: body(20, i) }));
        }
        await Promise.all(puts);
        const later = await waiting;
        assert.deepEqual(
          later.map((m) => m.queueOffset),
          Array.from({ length: 40 }, (_, i) => i + 5),
        );
        assert.deepEqual(later.map((m) => m.flag), Array.from({ length: 40 }, (_, i) => i + 5));
        await iterator.return?.();
      } finally {
        await store.close();
      }
    });
  }

  test("subscribe() ends when the store closes", async () => {
    const { store } = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    await store.putMessage({ topic: "S", queueId: 0, body: body(5) });
    const seen: number[] = [];
    const consumer = (async () => {
      for await (const message of store.subscribe("S", 0, 0)) seen.push(message.queueOffset);
      return "ended";
    })();
    await store.whenDispatched(store.maxOffset);
    // Let the consumer reach its wait, then close under it.
    for (let turn = 0; turn < 10_000 && seen.length < 1; turn++) {
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    await store.close();
    assert.equal(await consumer, "ended");
    assert.deepEqual(seen, [0]);
  });

  test("subscribe() ends without an error when its signal aborts", async () => {
    const { store } = await openMemoryStore({ flushDiskType: "ASYNC_FLUSH" });
    try {
      const controller = new AbortController();
      const seen: number[] = [];
      const consumer = (async () => {
        for await (const message of store.subscribe("S", 0, 0, { signal: controller.signal })) {
          seen.push(message.queueOffset);
          if (seen.length === 3) {
            // Aborted mid-stream: later messages are not yielded.
            controller.abort();
          }
        }
        return "ended";
      })();
      for (let i = 0; i < 6; i++) await store.putMessage({ topic: "S", queueId: 0, body: body(5) });
      assert.equal(await consumer, "ended");
      assert.deepEqual(seen, [0, 1, 2]);
      // A signal aborted while the iterator waits ends it too.
      const idle = new AbortController();
      const waiting = (async () => {
        let count = 0;
        for await (const _ of store.subscribe("S", 0, 6, { signal: idle.signal })) count++;
        return count;
      })();
      await new Promise<void>((resolve) => setImmediate(resolve));
      idle.abort();
      assert.equal(await waiting, 0);
    } finally {
      await store.close();
    }
  });

  test("subscribe() filters by tags and refuses a negative offset", async () => {
    const { store } = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    try {
      for (let i = 0; i < 10; i++) {
        await store.putMessage({
          topic: "S",
          queueId: 0,
          body: body(5),
          properties: { TAGS: i % 2 === 0 ? "even" : "odd" },
        });
      }
      const iterator = store.subscribe("S", 0, 0, { tags: ["odd"] })[Symbol.asyncIterator]();
      const odd = await take(iterator, 5);
      assert.deepEqual(odd.map((m) => m.queueOffset), [1, 3, 5, 7, 9]);
      await iterator.return?.();
      await assert.rejects(async () => {
        for await (const _ of store.subscribe("S", 0, -1)) break;
      }, RangeError);
    } finally {
      await store.close();
    }
  });
});
