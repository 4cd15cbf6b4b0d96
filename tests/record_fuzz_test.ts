import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  BLANK_MAGIC_CODE,
  BODY_CRC_POSITION,
  checkRecord,
  decodeRecord,
  type DecodeResult,
  encodeMessage,
  MAGIC_POSITION,
  MESSAGE_MAGIC_CODE,
  type MessageInput,
  PHYSICAL_OFFSET_POSITION,
  type RecordInvalidReason,
  TOTAL_SIZE_POSITION,
  writeBlankRecord,
} from "../src/record/mod.ts";
import { prng } from "./_prng.ts";

const REASONS: ReadonlySet<RecordInvalidReason> = new Set([
  "TRUNCATED",
  "UNKNOWN_MAGIC",
  "SIZE_OUT_OF_RANGE",
  "SIZE_MISMATCH",
  "OFFSET_MISMATCH",
  "TOPIC_MALFORMED",
  "PROPERTIES_MALFORMED",
  "CRC_MISMATCH",
]);

/** Decodes without throwing and checks the result is one of the four kinds. */
function classify(bytes: Uint8Array, position: number, expectedOffset?: number): DecodeResult {
  const result = decodeRecord(
    bytes,
    position,
    expectedOffset === undefined ? {} : { expectedOffset },
  );
  switch (result.kind) {
    case "message":
      assert.ok(result.size > 0 && position + result.size <= bytes.length);
      assert.equal(result.message.storeSize, result.size);
      break;
    case "blank":
      assert.ok(result.size >= 8 && position + result.size <= bytes.length);
      break;
    case "end":
      break;
    case "invalid":
      assert.ok(REASONS.has(result.reason), result.reason);
      assert.ok(result.detail.length > 0);
      break;
  }
  return result;
}

const samples: MessageInput[] = [
  { topic: "T", queueId: 0, body: new Uint8Array(0), bornTimestamp: 1 },
  {
    topic: "TopicTest",
    queueId: 3,
    body: new Uint8Array([0, 1, 2, 0xFE]),
    properties: { TAGS: "TagA", KEYS: "k1 k2", UNIQ_KEY: "7F0000011A2B00C0FFEE1F2E54320006" },
    bornTimestamp: 1_700_000_000_107,
  },
  {
    topic: "%RETRY%cg|x",
    queueId: 7,
    body: new TextEncoder().encode("a body of some length, to flip"),
    properties: [["emptyVal", ""], ["\u57ce\u5e02", "\u4e0a\u6d77"]],
    bornHost: "[::1]:50000",
    storeHost: "[fe80::1]:10911",
    sysFlag: 0x8,
    bornTimestamp: 1_700_000_000_107,
    preparedTransactionOffset: 4096,
  },
];

const records = samples.map((message, i) =>
  encodeMessage(message, { physicalOffset: 1000 * i, queueOffset: i, storeTimestamp: 5 })
);

describe("decoder fuzzing", () => {
  test("decodeRecord() classifies random bytes without throwing", () => {
    const random = prng(0x5EED0001);
    const kinds = new Map<string, number>();
    for (let round = 0; round < 3000; round++) {
      const bytes = new Uint8Array(Math.floor(random() * 400));
      for (let i = 0; i < bytes.length; i++) bytes[i] = random() * 256;
      // Make some headers plausible so the deeper checks are reached too.
      if (bytes.length >= 8 && round % 3 !== 0) {
        const view = new DataView(bytes.buffer);
        view.setInt32(
          TOTAL_SIZE_POSITION,
          round % 3 === 1 ? Math.floor(random() * bytes.length) : bytes.length,
        );
        view.setInt32(MAGIC_POSITION, round % 7 === 0 ? BLANK_MAGIC_CODE : MESSAGE_MAGIC_CODE);
      }
      const position = bytes.length > 0 && round % 5 === 0
        ? Math.floor(random() * bytes.length)
        : 0;
      const result = classify(bytes, position, round % 2 === 0 ? position : undefined);
      const key = result.kind === "invalid" ? result.reason : result.kind;
      kinds.set(key, (kinds.get(key) ?? 0) + 1);
    }
    // The generator reaches the structural checks, not only the header ones.
    for (const reason of ["TRUNCATED", "UNKNOWN_MAGIC", "SIZE_OUT_OF_RANGE", "SIZE_MISMATCH"]) {
      assert.ok((kinds.get(reason) ?? 0) > 0, `${reason} in ${JSON.stringify([...kinds])}`);
    }
  });

  test("decodeRecord() catches every single-bit flip in a length field, the body or its CRC", () => {
    for (const [index, record] of records.entries()) {
      const valid = classify(record, 0, 1000 * index);
      assert.equal(valid.kind, "message");
      if (valid.kind !== "message") continue;
      const bodyLength = valid.message.body.length;
      const bodyEnd = record.length - valid.message.topic.length - 1 - 2 -
        valid.message.propertiesRaw.length;
      const bodyStart = bodyEnd - bodyLength;
      const lengthFields = new Set<number>();
      const add = (from: number, count: number) => {
        for (let i = from; i < from + count; i++) lengthFields.add(i);
      };
      add(TOTAL_SIZE_POSITION, 8); // totalSize and magic
      add(PHYSICAL_OFFSET_POSITION, 8);
      add(bodyStart - 4, 4); // bodyLength
      add(bodyEnd, 1); // topicLength
      add(bodyEnd + 1 + valid.message.topic.length, 2); // propertiesLength
      for (let bit = 0; bit < record.length * 8; bit++) {
        const flipped = record.slice();
        const byte = bit >>> 3;
        flipped[byte]! ^= 1 << (bit & 7);
        const result = classify(flipped, 0, 1000 * index);
        if (byte >= bodyStart && byte < bodyEnd) {
          assert.equal(result.kind === "invalid" && result.reason, "CRC_MISMATCH", `bit ${bit}`);
        } else if (byte >= BODY_CRC_POSITION && byte < BODY_CRC_POSITION + 4) {
          assert.equal(result.kind === "invalid" && result.reason, "CRC_MISMATCH", `bit ${bit}`);
        } else if (lengthFields.has(byte)) {
          assert.equal(result.kind, "invalid", `bit ${bit} of record ${index}`);
        }
      }
    }
  });

  test("decodeRecord() reports every truncation of a record as TRUNCATED", () => {
    for (const record of records) {
      for (let length = 0; length < record.length; length++) {
        const result = classify(record.subarray(0, length), 0);
        assert.equal(result.kind === "invalid" && result.reason, "TRUNCATED", `length ${length}`);
      }
    }
  });

  test("decodeRecord() never accepts a record whose zeroed tail reaches its topic", () => {
    for (const [index, record] of records.entries()) {
      const valid = decodeRecord(record, 0);
      assert.equal(valid.kind, "message");
      if (valid.kind !== "message") continue;
      // Zeros confined to the properties may read as well-formed values (a
      // torn page the body CRC cannot see); zeros reaching the topic cannot.
      const topicEnd = record.length - 2 - valid.message.propertiesRaw.length;
      for (let keep = 0; keep < record.length; keep++) {
        const torn = record.slice();
        torn.fill(0, keep);
        const result = classify(torn, 0, 1000 * index);
        if (keep < topicEnd) assert.notEqual(result.kind, "message", `kept ${keep}`);
      }
    }
  });

  test("decodeRecord() classifies flipped and truncated BLANK records", () => {
    const segment = new Uint8Array(64);
    writeBlankRecord(segment, 16, 48);
    for (let bit = 0; bit < 64; bit++) {
      const flipped = segment.slice();
      flipped[16 + (bit >>> 3)]! ^= 1 << (bit & 7);
      classify(flipped, 16);
    }
    for (let length = 16; length < 24; length++) {
      assert.equal(checkRecord(segment.subarray(0, length), 16).reason, "TRUNCATED");
    }
  });
});
