/**
 * Re-dispatch on open in steps (issue 6): the steps that checkpoint
 * recovery's progress end where they end, not on record boundaries, so a
 * record cut by a step waits for the next one. Real files, in a fresh
 * temporary directory per test, and a step of a few records so a few
 * hundred KiB cross many steps.
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
/** Small bodies, so a step (the smallest: maxMessageSize + 64 KiB) holds a few hundred records. */
const MAX_MESSAGE_BYTES = 0x400;
const OPTIONS: MessageStoreOptions = {
  mappedFileSizeCommitLog: 0x4_0000,
  maxMessageSize: MAX_MESSAGE_BYTES,
  // The smallest the store allows: each step is maxMessageSize + 64 KiB.
  recoveryCheckpointIntervalBytes: 0x1000,
  mappedFileSizeConsumeQueue: 20 * 512,
  maxHashSlotNum: 512,
  maxIndexNum: 2048,
  sparseFiles: true,
  onWarning: () => {},
};
/** The step the store takes with {@link OPTIONS} (see message_store.ts). */
const STEP_BYTES = MAX_MESSAGE_BYTES + 0x1_0000;

function bodyOf(i: number): Uint8Array {
  const bytes = new Uint8Array(100 + (i * 37) % 500);
  for (let j = 0; j < bytes.length; j++) bytes[j] = (i + j * 7) & 0xFF;
  return bytes;
}

/** Puts messages round-robin over the queues of topic D until the log passes `bytes`. */
async function fill(store: MessageStore, bytes: number): Promise<number> {
  let count = 0;
  while (store.maxOffset < bytes) {
    const r = await store.putMessage({
      topic: "D",
      queueId: count % QUEUES,
      body: bodyOf(count),
      properties: { KEYS: `key-${count}`, TAGS: `t${count % 2}` },
    });
    assert.equal(r.status, "PUT_OK");
    count++;
  }
  return count;
}

/** Every message served once, queue offsets contiguous from 0, bodies as put. */
async function assertServed(store: MessageStore, count: number): Promise<void> {
  let served = 0;
  for (let queueId = 0; queueId < QUEUES; queueId++) {
    let next = 0;
    for (let round = 0; round < count; round++) {
      const page = await store.getMessages("D", queueId, next, 32);
      if (page.status !== "FOUND") break;
      for (const [i, message] of page.messages.entries()) {
        assert.equal(message.queueOffset, next + i);
        const index = (next + i) * QUEUES + queueId;
        assert.deepEqual(message.body, bodyOf(index));
        served++;
      }
      next = page.nextQueueOffset;
    }
    assert.equal(next, store.getMaxQueueOffset("D", queueId));
    assert.equal(next, store.nextQueueOffset("D", queueId));
  }
  assert.equal(served, count);
  const last = count - 1;
  const found = await store.queryMessages("D", `key-${last}`);
  assert.deepEqual(found.messages.map((m) => m.queueOffset), [Math.floor(last / QUEUES)]);
}

function removeDerivedState(directory: string): void {
  for (const name of ["consumequeue", "index", "checkpoint"]) {
    fs.rmSync(path.join(directory, name), { recursive: true, force: true });
  }
}

describe("MessageStore re-dispatch in steps", () => {
  for (const clean of [true, false]) {
    test(
      `MessageStore.open() re-dispatches across steps that cut records (${
        clean ? "clean" : "unclean"
      } open)`,
      async () => {
        await withStoreDirectory(async (directory) => {
          let store = await MessageStore.open(directory, OPTIONS);
          // Across segments too, and many steps.
          const count = await fill(store, 12 * STEP_BYTES);
          const endOffset = store.maxOffset;
          await store.close();
          removeDerivedState(directory);
          if (!clean) fs.writeFileSync(path.join(directory, "abort"), "");
          store = await MessageStore.open(directory, OPTIONS);
          try {
            assert.equal(store.recovery.clean, clean);
            assert.equal(store.recovery.dispatchedFrom, 0);
            assert.equal(store.maxOffset, endOffset);
            assert.equal(store.dispatchedOffset, endOffset);
            // Progress went to the checkpoint at the last step.
            assert.equal(store.checkpoint.consumeQueueOffset, endOffset);
            await assertServed(store, count);
            // And the store goes on: the next put gets the next queue offset.
            const r = await store.putMessage({ topic: "D", queueId: 0, body: bodyOf(count) });
            assert.equal(r.appendResult?.queueOffset, Math.ceil(count / QUEUES));
          } finally {
            await store.close();
          }
        });
      },
    );
  }
});
