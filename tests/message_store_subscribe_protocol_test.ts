/**
 * The async-generator protocol of `MessageStore.subscribe()` over pages of
 * lazily decoded messages: `next()` calls made together are answered in
 * order across pages, `throw()` ends it, an argument error rejects the
 * first `next()` rather than the call, an abort mid-page stops it, and an
 * ended subscription answers `done`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { body, openMemoryStore } from "./_store_helpers.ts";

describe("MessageStore.subscribe() protocol", () => {
  test("subscribe() answers next() calls made together in order, across pages", async () => {
    const { store } = await openMemoryStore();
    try {
      for (let i = 0; i < 70; i++) {
        await store.putMessage({ topic: "S", queueId: 0, body: body(16, i), flag: i });
      }
      await store.whenDispatched(store.maxOffset);
      const iterator = store.subscribe("S", 0, 0);
      // 70 messages: three pages of 32; none awaited before the next call.
      const steps = await Promise.all(Array.from({ length: 70 }, () => iterator.next()));
      assert.deepEqual(steps.map((s) => s.done), new Array(70).fill(false));
      assert.deepEqual(steps.map((s) => s.value?.flag), Array.from({ length: 70 }, (_, i) => i));
      assert.deepEqual(await iterator.return(), { done: true, value: undefined });
      assert.deepEqual(await iterator.next(), { done: true, value: undefined });
    } finally {
      await store.close();
    }
  });

  test("subscribe() throw() ends the subscription and rejects with the error", async () => {
    const { store } = await openMemoryStore();
    try {
      for (let i = 0; i < 3; i++) await store.putMessage({ topic: "S", queueId: 0, body: body(8) });
      await store.whenDispatched(store.maxOffset);
      const iterator = store.subscribe("S", 0, 0);
      assert.equal((await iterator.next()).done, false);
      const error = new Error("consumer failed");
      await assert.rejects(iterator.throw(error), (thrown) => thrown === error);
      // The rest of the buffered page is dropped.
      assert.deepEqual(await iterator.next(), { done: true, value: undefined });
    } finally {
      await store.close();
    }
  });

  test("subscribe() rejects its first next() for a bad offset, then answers done", async () => {
    const { store } = await openMemoryStore();
    try {
      const iterator = store.subscribe("S", 0, -1);
      await assert.rejects(iterator.next(), RangeError);
      assert.deepEqual(await iterator.next(), { done: true, value: undefined });
    } finally {
      await store.close();
    }
  });

  test("subscribe() hands out nothing more once its signal aborts mid-page", async () => {
    const { store } = await openMemoryStore();
    try {
      for (let i = 0; i < 10; i++) {
        await store.putMessage({ topic: "S", queueId: 0, body: body(8) });
      }
      await store.whenDispatched(store.maxOffset);
      const controller = new AbortController();
      const iterator = store.subscribe("S", 0, 0, { signal: controller.signal });
      assert.equal((await iterator.next()).value?.queueOffset, 0);
      assert.equal((await iterator.next()).value?.queueOffset, 1);
      controller.abort();
      assert.deepEqual(await iterator.next(), { done: true, value: undefined });
    } finally {
      await store.close();
    }
  });
});
