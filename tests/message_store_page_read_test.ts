/**
 * How getMessages and getMessage hand records out (src/store/_page_reader.ts):
 * one copy per page that outlives the store, pages that cross segments,
 * ports that map and ports that read with positional reads, the TAGS text
 * check after a tagsCode match, and offsets where no record starts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createPort } from "../src/runtime/mod.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";
import { body, openMemoryStore, SEGMENT_BYTES } from "./_store_helpers.ts";

/** Bodies of this size put about 21 messages in a 64 KiB segment. */
const BODY_BYTES = 3000;
const MESSAGE_COUNT = 70;

describe("MessageStore page reads", () => {
  test("getMessages() hands out one copy per page, which outlives the store", async () => {
    const { store } = await openMemoryStore();
    for (let i = 0; i < MESSAGE_COUNT; i++) {
      const r = await store.putMessage({ topic: "T", queueId: 0, body: body(BODY_BYTES, i) });
      assert.equal(r.status, "PUT_OK");
    }
    await store.whenDispatched(store.maxOffset);
    const page = await store.getMessages("T", 0, 0, 32);
    assert.equal(page.messages.length, 32);
    // The page spans segments, and still is one buffer.
    const last = page.messages[31]!;
    assert.ok(last.physicalOffset >= SEGMENT_BYTES, `ends at ${last.physicalOffset}`);
    assert.equal(new Set(page.messages.map((m) => m.body.buffer)).size, 1);
    assert.equal(
      page.messages[0]!.body.buffer.byteLength,
      page.messages.reduce((sum, m) => sum + m.storeSize, 0),
    );
    // A changed copy changes nothing stored.
    page.messages[0]!.body.fill(0);
    const again = await store.getMessages("T", 0, 0, 1);
    assert.deepEqual(again.messages[0]!.body, body(BODY_BYTES, 0));
    await store.close();
    for (const [i, message] of page.messages.entries()) {
      if (i > 0) assert.deepEqual(message.body, body(BODY_BYTES, i));
      assert.equal(message.topic, "T");
      assert.equal(message.queueOffset, i);
    }
  });

  for (const adapter of ["auto", "portable"] as const) {
    test(`getMessages() and getMessage() read across segments (${adapter} adapter)`, async () => {
      const directory = makeTempDirectory();
      try {
        const port = await createPort({ adapter, onNotice: () => {} });
        // The portable adapter reads with positional reads (copies).
        if (adapter === "portable") assert.equal(port.canMap, false);
        const store = await MessageStore.open(directory, {
          port,
          mappedFileSizeCommitLog: SEGMENT_BYTES,
          mappedFileSizeConsumeQueue: 20 * 1024,
          maxHashSlotNum: 256,
          maxIndexNum: 1024,
          onWarning: () => {},
        });
        try {
          const offsets: number[] = [];
          for (let i = 0; i < MESSAGE_COUNT; i++) {
            const r = await store.putMessage({
              topic: "T",
              queueId: i % 2,
              flag: i,
              body: body(BODY_BYTES, i),
              // "Aa" and "BB" share a Java hashCode, so a tagsCode match
              // must be confirmed on the text.
              properties: { TAGS: i % 3 === 0 ? "Aa" : "BB" },
            });
            assert.equal(r.status, "PUT_OK");
            offsets.push(r.appendResult!.wroteOffset);
          }
          await store.whenDispatched(store.maxOffset);
          for (const queueId of [0, 1]) {
            const flags: number[] = [];
            let next = 0;
            // Bounded: each page moves on, or the queue ends.
            for (let round = 0; round < MESSAGE_COUNT; round++) {
              const page = await store.getMessages("T", queueId, next, 8);
              if (page.status !== "FOUND") break;
              for (const message of page.messages) {
                assert.deepEqual(message.body, body(BODY_BYTES, message.flag));
                assert.equal(message.physicalOffset, offsets[message.flag]);
                flags.push(message.flag);
              }
              next = page.nextQueueOffset;
            }
            const expected = Array.from({ length: MESSAGE_COUNT / 2 }, (_, k) => 2 * k + queueId);
            assert.deepEqual(flags, expected);
            const aa = await store.getMessages("T", queueId, 0, 100, { tags: ["Aa"] });
            assert.deepEqual(
              aa.messages.map((m) => m.flag),
              expected.filter((i) => i % 3 === 0),
            );
            assert.ok(aa.messages.every((m) => m.properties.get("TAGS") === "Aa"));
          }
          for (const [i, offset] of offsets.entries()) {
            const message = await store.getMessage(offset);
            assert.equal(message?.flag, i);
            assert.deepEqual(message?.body, body(BODY_BYTES, i));
            assert.equal(message?.body.buffer.byteLength, message?.storeSize);
          }
        } finally {
          await store.close();
        }
      } finally {
        removeDirectory(directory);
      }
    });
  }

  test("getMessage() answers undefined where no record starts", async () => {
    const { store } = await openMemoryStore();
    try {
      const r = await store.putMessage({ topic: "T", queueId: 0, body: body(64) });
      const offset = r.appendResult!.wroteOffset;
      await store.whenDispatched(store.maxOffset);
      assert.equal((await store.getMessage(offset))?.queueOffset, 0);
      assert.equal(await store.getMessage(offset + 1), undefined);
      assert.equal(await store.getMessage(offset + 4), undefined);
      assert.equal(await store.getMessage(store.maxOffset), undefined);
      assert.equal(await store.getMessage(store.maxOffset - 2), undefined);
      assert.equal(await store.getMessage(SEGMENT_BYTES * 3), undefined);
    } finally {
      await store.close();
    }
  });
});
