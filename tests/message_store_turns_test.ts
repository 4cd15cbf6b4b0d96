/**
 * ASYNC_FLUSH puts answered in the caller's turn still let the event loop
 * turn now and then: a producer that awaits puts in a loop gives it no turn
 * of its own, and without one the store's timers (the flush interval), the
 * completions of its off-thread flushes and pre-faults, and the rest of the
 * process (a server's sockets, a consumer's long poll) would wait until the
 * loop ends.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MessageStore } from "../src/store/message_store.ts";
import { body, withStoreDirectory } from "./_store_helpers.ts";

/**
 * Puts awaited one after the other until `done()` or `limit` puts; answers
 * how many. Far more than the store's turn interval's worth of puts on any
 * machine (10 ms is a few thousand puts here).
 */
async function putUntil(
  put: () => Promise<{ status: string }>,
  done: () => boolean,
  limit: number,
): Promise<number> {
  let count = 0;
  while (!done() && count < limit) {
    const result = await put();
    assert.equal(result.status, "PUT_OK");
    count++;
  }
  return count;
}

describe("MessageStore turns", () => {
  test("putMessage() in a loop that never yields lets a timer fire", async () => {
    await withStoreDirectory(async (directory) => {
      const store = await MessageStore.open(directory, { flushDiskType: "ASYNC_FLUSH" });
      try {
        const payload = body(64);
        let fired = false;
        const timer = setTimeout(() => fired = true, 0);
        const limit = 200_000;
        const count = await putUntil(
          () => store.putMessage({ topic: "Turns", queueId: 0, body: payload }),
          () => fired,
          limit,
        );
        clearTimeout(timer);
        assert.ok(fired, `the timer did not fire during ${count} puts`);
        assert.ok(count < limit);
      } finally {
        await store.close();
      }
    });
  });

  test("putMessages() in a loop that never yields lets the flusher flush", async () => {
    await withStoreDirectory(async (directory) => {
      const store = await MessageStore.open(directory, {
        flushDiskType: "ASYNC_FLUSH",
        flushIntervalCommitLog: 1,
        flushCommitLogLeastPages: 0,
      });
      try {
        const batch = Array.from({ length: 100 }, (_, i) => ({
          topic: "Turns",
          queueId: 0,
          body: body(64, i + 1),
        }));
        const limit = 20_000;
        const count = await putUntil(
          () => store.putMessages(batch),
          () => store.flushedOffset > 0,
          limit,
        );
        assert.ok(count < limit, `no flush ended during ${count} batches`);
      } finally {
        await store.close();
      }
    });
  });
});
