/**
 * What a clean open reads (issue 6): after a clean close of an mqstore
 * store, the queue offsets come from the consume queues and only the last
 * three segments are verified, so open cost does not grow with the
 * message count; without consume queues every record is walked (and
 * re-dispatched). Real files, a fresh temporary directory per test.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import { withStoreDirectory } from "./_store_helpers.ts";

const QUEUES = 3;
const SEGMENT_BYTES = 0x1_0000;
const OPTIONS: MessageStoreOptions = {
  mappedFileSizeCommitLog: SEGMENT_BYTES,
  maxMessageSize: 0x400,
  mappedFileSizeConsumeQueue: 20 * 512,
  maxHashSlotNum: 512,
  maxIndexNum: 2048,
  sparseFiles: true,
  onWarning: () => {},
};

/** Puts 300-byte messages round-robin over topic O's queues until the log passes `bytes`. */
async function fill(store: MessageStore, bytes: number): Promise<number> {
  let count = 0;
  while (store.maxOffset < bytes) {
    const r = await store.putMessage({
      topic: "O",
      queueId: count % QUEUES,
      body: new Uint8Array(300).fill(count & 0xFF),
      properties: { KEYS: `key-${count}` },
    });
    assert.equal(r.status, "PUT_OK");
    count++;
  }
  return count;
}

/** Queue offsets continue where they were, and every queue is served whole. */
async function assertQueues(store: MessageStore, count: number): Promise<void> {
  for (let queueId = 0; queueId < QUEUES; queueId++) {
    const expected = Math.floor(count / QUEUES) + (queueId < count % QUEUES ? 1 : 0);
    assert.equal(store.nextQueueOffset("O", queueId), expected);
    assert.equal(store.getMaxQueueOffset("O", queueId), expected);
    const page = await store.getMessages("O", queueId, expected - 1, 1);
    assert.equal(page.status, "FOUND");
    assert.equal(page.messages[0]?.queueOffset, expected - 1);
  }
  const r = await store.putMessage({ topic: "O", queueId: 0, body: new Uint8Array(1) });
  assert.equal(r.appendResult?.queueOffset, Math.ceil(count / QUEUES));
}

describe("MessageStore clean open cost", () => {
  test("MessageStore.open() after a clean close reads only the last three segments", async () => {
    await withStoreDirectory(async (directory) => {
      let store = await MessageStore.open(directory, OPTIONS);
      const count = await fill(store, 8.5 * SEGMENT_BYTES);
      await store.close();
      store = await MessageStore.open(directory, OPTIONS);
      try {
        assert.equal(store.recovery.clean, true);
        const perSegment = Math.floor(SEGMENT_BYTES / 400);
        assert.ok(
          store.recovery.messageCount < 3 * perSegment,
          `walked ${store.recovery.messageCount} of ${count} records`,
        );
        await assertQueues(store, count);
      } finally {
        await store.close();
      }
      // A read-only open (the CLI's) still walks every record.
      const readOnly = await MessageStore.open(directory, { ...OPTIONS, readOnly: true });
      try {
        assert.equal(readOnly.recovery.messageCount, count + 1);
      } finally {
        await readOnly.close();
      }
    });
  });

  test("MessageStore.open() re-dispatches everything when the consume queues were deleted", async () => {
    await withStoreDirectory(async (directory) => {
      let store = await MessageStore.open(directory, OPTIONS);
      const count = await fill(store, 6.5 * SEGMENT_BYTES);
      await store.close();
      // The checkpoint stays: it claims the queues cover the whole log.
      fs.rmSync(path.join(directory, "consumequeue"), { recursive: true });
      store = await MessageStore.open(directory, OPTIONS);
      try {
        assert.equal(store.recovery.messageCount, count);
        assert.equal(store.recovery.dispatchedFrom, 0);
        await assertQueues(store, count);
      } finally {
        await store.close();
      }
    });
  });
});
