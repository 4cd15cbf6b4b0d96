import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { MessageEncoder, patchRecord } from "../src/record/encoder.ts";
import { MqStoreError } from "../src/errors.ts";
import { MAGIC_POSITION, SYS_FLAG_POSITION } from "../src/record/constants.ts";
import { readInt32 } from "../src/record/_bytes.ts";
import { decodeRecord } from "../src/record/decoder.ts";
import type { MessageInput } from "../src/record/message.ts";

const body = new Uint8Array([1, 2, 3, 4, 5]);
const messages: MessageInput[] = [
  { topic: "Orders", queueId: 3, body, properties: { TAGS: "a", KEYS: "k1 k2" } },
  { topic: "Orders", queueId: 0, body, bornHost: "[::1]:9876", bornTimestamp: 1 },
  { topic: "T", queueId: 7, body: new Uint8Array(), storeHost: "[fe80::2]:10911", flag: -1 },
];

describe("MessageEncoder placed encoding", () => {
  test("encodePlaced(), writeQueueOffset() then writeMagic() write what encode() then patchRecord() write", () => {
    const placedEncoder = new MessageEncoder({ now: () => 1_700_000_000_000 });
    const patchedEncoder = new MessageEncoder({ now: () => 1_700_000_000_000 });
    for (const [i, message] of messages.entries()) {
      const physicalOffset = 0x1_2345_6789 + i;
      const storeTimestamp = 1_700_000_000_123 + i;
      const queueOffset = i === 0 ? 0 : 0x1_0000_0001 * i;
      const placed = new Uint8Array(512).fill(0xEE);
      const patched = new Uint8Array(512).fill(0xEE);
      const size = placedEncoder.encodePlaced(message, placed, 8, physicalOffset, storeTimestamp);
      assert.equal(typeof size, "number");
      // No record until its magic code, written last.
      assert.equal(readInt32(placed, 8 + MAGIC_POSITION), 0);
      assert.equal(decodeRecord(placed, 8).kind, "invalid");
      if (queueOffset !== 0) placedEncoder.writeQueueOffset(placed, 8, queueOffset);
      placedEncoder.writeMagic(placed, 8);
      const decoded = decodeRecord(placed, 8, { expectedOffset: physicalOffset });
      assert.equal(decoded.kind === "message" && decoded.message.queueOffset, queueOffset);
      assert.equal(patchedEncoder.encode(message, patched, 8), size);
      patchRecord(patched, 8, queueOffset, physicalOffset, storeTimestamp);
      assert.deepEqual(placed, patched, `message ${i}`);
      assert.equal(placedEncoder.lastSysFlag, patched[8 + SYS_FLAG_POSITION + 3]!);
    }
  });

  test("encodePlaced() returns the validation error and writes nothing", () => {
    const bytes = new Uint8Array(256).fill(0xEE);
    const result = new MessageEncoder().encodePlaced(
      { topic: "bad topic", queueId: 0, body },
      bytes,
      0,
      0,
      1,
    );
    assert.ok(result instanceof MqStoreError);
    assert.equal(result.code, "MESSAGE_ILLEGAL");
    assert.ok(bytes.every((b) => b === 0xEE));
  });

  test("encodePlaced() throws RangeError for a bad placement or no room", () => {
    const encoder = new MessageEncoder();
    const message: MessageInput = { topic: "T", queueId: 0, body };
    assert.throws(() => encoder.encodePlaced(message, new Uint8Array(256), 0, -1, 1), RangeError);
    assert.throws(() => encoder.encodePlaced(message, new Uint8Array(256), 0, 0, 0.5), RangeError);
    assert.throws(() => encoder.encodePlaced(message, new Uint8Array(64), 0, 0, 1), RangeError);
  });
});
