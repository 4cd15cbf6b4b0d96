/**
 * A dispatch failure (a consume-queue or index file that cannot be
 * created or written) stops puts: the log must not grow past what
 * consumers can find. Reads of what was dispatched go on, `abort` stays,
 * and a reopen re-dispatches what was missed. Faults come from the memory
 * adapter's `failNext`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { body, openMemoryStore, withStoreDirectory } from "./_store_helpers.ts";

describe("MessageStore dispatch failure", () => {
  const cases = [
    { name: "a consume-queue file", pathIncludes: "/consumequeue/T/1/" },
    // The index's first file is prepared as the store opens: its failure
    // is armed before, and met by the first key's dispatch.
    { name: "an index file", pathIncludes: "/index/", beforeOpen: true },
  ];
  for (const c of cases) {
    test(`putMessage() answers SERVICE_NOT_AVAILABLE once dispatch fails on ${c.name}; reopen re-dispatches`, async () => {
      const memory = new MemoryPort(runtimeName());
      const fault = { operation: "create", error: "ENOSPC", pathIncludes: c.pathIncludes } as const;
      if (c.beforeOpen === true) memory.failNext(fault);
      const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" }, memory);
      const { store, port, directory } = env;
      let failedOffset: number;
      try {
        // Queue T/0 and its consume-queue file exist; no key yet, so no index file.
        for (let i = 0; i < 3; i++) {
          assert.equal(
            (await store.putMessage({ topic: "T", queueId: 0, body: body(50, i) })).status,
            "PUT_OK",
          );
        }
        await store.whenDispatched(store.maxOffset);
        if (c.beforeOpen !== true) port.failNext(fault);
        // Stored (the commit log is fine), but its dispatch fails.
        const r = await store.putMessage({
          topic: "T",
          queueId: 1,
          body: body(60, 9),
          properties: { KEYS: "lost-key" },
        });
        assert.equal(r.status, "PUT_OK");
        failedOffset = r.appendResult!.wroteOffset;
        // Past the log end: resolves only at the failure. A new consume
        // queue takes its first unit in memory while its file is made, so
        // that failure comes after the unit was dispatched.
        const failure = await store.whenDispatched(store.maxOffset + 1).then(
          () => assert.fail("dispatch should fail"),
          (error: unknown) => error,
        );
        assert.ok(failure instanceof MqStoreError);
        assert.equal(failure.code, "NO_SPACE");
        if (c.beforeOpen === true) assert.ok(store.dispatchedOffset <= failedOffset);

        for (
          const put of [
            store.putMessage({ topic: "T", queueId: 0, body: body(10) }),
            store.putMessages([{ topic: "T", queueId: 0, body: body(10) }]),
          ]
        ) {
          const refused = await put;
          assert.equal(refused.status, "SERVICE_NOT_AVAILABLE");
          assert.equal(refused.error?.code, "SERVICE_NOT_AVAILABLE");
          assert.equal(refused.error?.cause, failure);
          assert.match(refused.error!.message, /dispatch/);
          assert.ok(refused.error!.message.includes(failure.message));
        }
        const maxOffset = store.maxOffset;
        // Reads of what is consistent go on.
        const page = await store.getMessages("T", 0, 0, 32);
        assert.equal(page.status, "FOUND");
        assert.deepEqual(page.messages.map((m) => m.queueOffset), [0, 1, 2]);
        assert.equal((await store.getMessage(failedOffset))?.queueOffset, 0);
        assert.equal(store.maxOffset, maxOffset);
      } finally {
        await store.close().catch(() => {});
      }
      // The store was not closed cleanly.
      assert.notEqual(await port.stat(`${directory}/abort`), undefined);

      const again = await env.reopen();
      try {
        assert.equal(again.recovery.clean, false);
        assert.equal(again.dispatchedOffset, again.maxOffset);
        const page = await again.getMessages("T", 1, 0, 32);
        assert.equal(page.status, "FOUND");
        assert.deepEqual(page.messages.map((m) => m.physicalOffset), [failedOffset]);
        const found = await again.queryMessages("T", "lost-key");
        assert.deepEqual(found.messages.map((m) => m.physicalOffset), [failedOffset]);
        assert.equal(again.getMaxQueueOffset("T", 0), 3);
        const r = await again.putMessage({ topic: "T", queueId: 1, body: body(10) });
        assert.equal(r.status, "PUT_OK");
        assert.equal(r.appendResult!.queueOffset, 1);
        await again.whenDispatched(again.maxOffset);
        assert.equal((await again.getMessages("T", 1, 1, 1)).status, "FOUND");
      } finally {
        await again.close();
      }
      assert.equal(await port.stat(`${directory}/abort`), undefined);
    });
  }
});

describe("MessageStore dispatch lag", () => {
  test("putMessage() answers wait for the dispatcher once it lags 4 MiB behind a producer that never yields", async () => {
    await withStoreDirectory(async (directory) => {
      // Consume-queue files of 64 units: dispatch needs a file (I/O) every
      // 64 puts, and I/O completes only when the event loop gets a turn,
      // which a loop of awaited puts answered at once never gives it.
      const store = await MessageStore.open(directory, {
        flushDiskType: "ASYNC_FLUSH",
        mappedFileSizeCommitLog: 0x100_0000,
        mappedFileSizeConsumeQueue: 64 * 20,
        messageIndexEnable: false,
      });
      try {
        const payload = body(1024, 3);
        let lagMaxBytes = 0;
        for (let i = 0; i < 8_000; i++) {
          const r = await store.putMessage({ topic: "T", queueId: 0, body: payload });
          assert.equal(r.status, "PUT_OK");
          lagMaxBytes = Math.max(lagMaxBytes, store.maxOffset - store.dispatchedOffset);
        }
        // 8,000 puts are 9 MiB of log; the answers held the lag to 4 MiB
        // plus the record that crossed it.
        assert.ok(store.maxOffset > 0x80_0000);
        assert.ok(lagMaxBytes <= 0x40_0000 + 0x800, `lag reached ${lagMaxBytes} bytes`);
        await store.whenDispatched(store.maxOffset);
        const page = await store.getMessages("T", 0, 7_999, 1);
        assert.equal(page.status, "FOUND");
      } finally {
        await store.close();
      }
    });
  });
});
