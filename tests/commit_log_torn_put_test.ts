/**
 * A put becomes a record with its last write: a process killed at any
 * moment before it leaves bytes that recovery cuts, never a whole-looking
 * record whose queue offset, physical offset or store time were not yet
 * written (a real SIGKILL chain once found a record with queueOffset 0 at
 * the log's end after 359 of its queue).
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MessageEncoder } from "../src/record/encoder.ts";
import { decodeRecord } from "../src/record/decoder.ts";
import type { MessageInput } from "../src/record/message.ts";
import { body, openMemoryStore } from "./_store_helpers.ts";

interface MagicWrite {
  /** What the bytes were just before the magic code was written. */
  before: string;
  topic: string;
  queueId: number;
  queueOffset: number;
  physicalOffset: number;
}

/**
 * Runs `run` with every `MessageEncoder.writeMagic` call recorded: how the
 * bytes decoded before it, and the record after it.
 */
async function recordingMagicWrites(run: () => Promise<void>): Promise<MagicWrite[]> {
  const writes: MagicWrite[] = [];
  const original = MessageEncoder.prototype.writeMagic;
  MessageEncoder.prototype.writeMagic = function (bytes: Uint8Array, position: number) {
    const before = decodeRecord(bytes, position, { checkCrc: true }).kind;
    original.call(this, bytes, position);
    const after = decodeRecord(bytes, position, { checkCrc: true });
    assert.equal(after.kind, "message", "the magic code completes a record");
    if (after.kind === "message") {
      const { topic, queueId, queueOffset, physicalOffset } = after.message;
      writes.push({ before, topic, queueId, queueOffset, physicalOffset });
    }
  };
  try {
    await run();
  } finally {
    MessageEncoder.prototype.writeMagic = original;
  }
  return writes;
}

describe("CommitLog puts and a process killed mid-put", () => {
  test("putMessage() and a copied putMessages() write the first record's magic code last, after every placement field", async () => {
    const env = await openMemoryStore({
      // Small segments: batches that do not fit a segment's end are encoded
      // aside and copied into the next one (the copy path).
      mappedFileSizeCommitLog: 0x4000,
      // The first puts wait for the segment's warm-up: queued, then copied.
      warmMapedFileEnable: true,
    });
    const singles = 300;
    let batches = 0;
    const writes = await recordingMagicWrites(async () => {
      const puts: Promise<unknown>[] = [];
      for (let i = 0; i < singles; i++) {
        puts.push(
          env.store.putMessage({ topic: "T", queueId: i % 3, body: body(40 + (i * 37) % 500, i) }),
        );
        if (i % 3 === 2) {
          const batch: MessageInput[] = Array.from({ length: 2 + i % 4 }, (_, k) => ({
            topic: "B",
            queueId: 0,
            body: body(100 + k * 50, i + k),
          }));
          puts.push(env.store.putMessages(batch));
          batches++;
        }
      }
      const results = await Promise.all(puts);
      assert.ok(results.every((r) => (r as { status: string }).status === "PUT_OK"));
    });
    try {
      // Every single put, placed or copied, ends with its magic code; so does
      // every batch that was copied (one encoded in place writes its own).
      const singleWrites = writes.filter((w) => w.topic === "T");
      const batchWrites = writes.filter((w) => w.topic === "B");
      assert.equal(singleWrites.length, singles);
      assert.ok(batchWrites.length > 0, `of ${batches} batches some were copied`);
      for (const write of writes) {
        assert.equal(
          write.before,
          "invalid",
          `${write.topic}-${write.queueId} before its magic code`,
        );
      }
      // When the magic code went in, the queue offsets were already the right ones.
      for (let queueId = 0; queueId < 3; queueId++) {
        const offsets = singleWrites.filter((w) => w.queueId === queueId).map((w) => w.queueOffset);
        assert.deepEqual(offsets, offsets.map((_, i) => i), `queue T-${queueId}`);
      }
      const batchOffsets = batchWrites.map((w) => w.queueOffset);
      assert.deepEqual(batchOffsets, [...batchOffsets].sort((a, b) => a - b));
      // And their physical offsets.
      for (const write of writes) {
        const found = await env.store.getMessage(write.physicalOffset);
        assert.equal(found?.queueOffset, write.queueOffset);
      }
    } finally {
      await env.store.close();
    }
  });
});
