/**
 * The read path's record codec: {@link LazyMessage} (decoded on access)
 * must give exactly what the eager `decodeMessageView()` gives, for
 * synthetic records and for every record of the RocketMQ 4.9.8 public
 * corpus; `isMessageRecordAt()` must accept a record only at its own
 * offset, with its own size, and refuse bytes corrupted at chosen offsets.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import {
  checkRecord,
  decodeMessageView,
  encodeMessage,
  type MessageInput,
  RecordChecker,
} from "../src/record/mod.ts";
import { isMessageRecordAt } from "../src/record/decoder.ts";
import {
  parsePropertiesMap,
  parsePropertyPairs,
  propertiesMapOf,
} from "../src/record/properties.ts";
import { LazyMessage } from "../src/record/lazy_message.ts";
import { AssertionError } from "../src/assert.ts";
import { CORPUS, CORPUS_SKIP } from "./_corpus_helpers.ts";

const text = new TextEncoder();

/** Records that exercise every layout: hosts of both families, properties of every shape. */
const CASES: Array<{ name: string; message: MessageInput; placement: { physicalOffset: number } }> =
  [
    {
      name: "IPv4 hosts, TAGS and KEYS",
      message: {
        topic: "Orders",
        queueId: 3,
        flag: -7,
        body: text.encode("hello"),
        properties: { TAGS: "created", KEYS: "order-1 customer-7" },
        bornHost: "10.0.0.1:4000",
        storeHost: "192.168.1.2:10911",
        reconsumeTimes: 2,
        preparedTransactionOffset: 0x1_2345_6789,
      },
      placement: { physicalOffset: 0x7_0000_0010 },
    },
    {
      name: "IPv6 born host, IPv4 store host, empty body, no properties",
      message: {
        topic: "T",
        queueId: 0,
        body: new Uint8Array(0),
        bornHost: "[2001:db8::1]:9876",
        storeHost: "127.0.0.1:10911",
      },
      placement: { physicalOffset: 0 },
    },
    {
      name: "IPv4 born host, IPv6 store host, an empty value, non-ASCII text",
      message: {
        topic: "%RETRY%group_1",
        queueId: 7,
        body: new Uint8Array([0, 1, 2, 0xFF]),
        properties: [["emptyVal", ""], ["TAGS", "été"], ["note", "日本語 ✓"]],
        bornHost: "1.2.3.4:1",
        storeHost: "[::1]:10911",
      },
      placement: { physicalOffset: 4096 },
    },
  ];

/** `record` placed at `position` of a larger buffer (as in a segment). */
function placed(record: Uint8Array, position: number): Uint8Array {
  const bytes = new Uint8Array(position + record.length + 16);
  bytes.set(record, position);
  return bytes;
}

describe("LazyMessage", () => {
  test("LazyMessage gives every field decodeMessageView() gives", () => {
    for (const { name, message, placement } of CASES) {
      const record = encodeMessage(message, { ...placement, queueOffset: 5 });
      const bytes = placed(record, 100);
      const view = checkRecord(bytes, 100, { expectedOffset: placement.physicalOffset });
      assert.equal(view.kind, "message", name);
      const eager = { ...decodeMessageView(bytes, view) };
      const lazy = new LazyMessage(bytes, 100);
      assert.deepEqual(lazy.toJSON(), eager, name);
      // Each field read alone, in another order, from a fresh message.
      const fresh = new LazyMessage(bytes, 100);
      for (const field of Object.keys(eager).reverse() as Array<keyof typeof eager>) {
        assert.deepEqual(fresh[field], eager[field], `${name}: ${field}`);
      }
      assert.equal(JSON.stringify(lazy), JSON.stringify(eager), name);
    }
  });

  test("LazyMessage gives every field decodeMessageView() gives for every public corpus record", {
    skip: CORPUS_SKIP,
  }, () => {
    const directory = path.join(CORPUS, "public", "store", "commitlog");
    const checker = new RecordChecker({ checkCrc: true });
    let count = 0;
    for (const name of fs.readdirSync(directory).sort()) {
      const bytes = new Uint8Array(fs.readFileSync(path.join(directory, name)));
      const fileFromOffset = Number(name);
      // Bounded by the segment: every message moves the position on.
      for (let position = 0; position < bytes.length;) {
        const view = checker.check(bytes, position, fileFromOffset + position);
        if (view.kind !== "message") break;
        const offset = fileFromOffset + position;
        const eager = { ...decodeMessageView(bytes, view) };
        // What the read path does: a copy of the record, decoded on access.
        const lazy = new LazyMessage(bytes.slice(position, position + view.size), 0);
        assert.deepEqual(lazy.toJSON(), eager, `record at ${offset}`);
        // The map made straight from the bytes, before any pairs.
        const mapFirst = new LazyMessage(bytes.slice(position, position + view.size), 0);
        assert.deepEqual(mapFirst.properties, eager.properties, `record at ${offset}`);
        assert.equal(isMessageRecordAt(bytes, position, offset, view.size), true);
        assert.equal(isMessageRecordAt(bytes, position, offset + 1, view.size), false);
        assert.equal(isMessageRecordAt(bytes, position, offset, view.size - 1), false);
        position += view.size;
        count++;
      }
    }
    assert.ok(count > 100, `${count} records walked`);
  });

  test("LazyMessage setters replace a field and the numeric fields are plain properties", () => {
    const record = encodeMessage(CASES[0]!.message, CASES[0]!.placement);
    const message = new LazyMessage(record, 0);
    const before = message.body;
    const copy = before.slice();
    message.body = copy;
    assert.equal(message.body, copy);
    message.topic = "Other";
    message.properties = new Map([["TAGS", "x"]]);
    message.msgId = "ID";
    assert.equal(message.topic, "Other");
    assert.equal(message.properties.get("TAGS"), "x");
    assert.equal(message.msgId, "ID");
    // The raw fields still read the record.
    assert.equal(message.pairs.length, 2);
    assert.ok(Object.keys(message).includes("queueOffset"));
    assert.equal({ ...message }.physicalOffset, CASES[0]!.placement.physicalOffset);
  });

  test("LazyMessage() asserts that it is given a MESSAGE record that fits", () => {
    const record = encodeMessage(CASES[1]!.message, CASES[1]!.placement);
    assert.throws(() => new LazyMessage(record.subarray(0, record.length - 1), 0), AssertionError);
    const blank = new Uint8Array(16);
    new DataView(blank.buffer).setInt32(0, 16);
    new DataView(blank.buffer).setInt32(4, 0xCBD43194 | 0);
    assert.throws(() => new LazyMessage(blank, 0), AssertionError);
  });
});

describe("parsePropertiesMap()", () => {
  test("parsePropertiesMap() gives what propertiesMapOf(parsePropertyPairs()) gives", () => {
    const fields = [
      "",
      "TAGS\x01a",
      "TAGS\x01a\x02",
      "a\x01",
      "\x01b",
      "a\x01\x02b\x01c",
      "a\x01x\x02a\x01y",
      "a\x01b\x01c\x02d\x01e",
      "noSeparator\x02k\x01v",
      "k\x01v\x02\x02k2\x01v2",
      "été\x01日本\x02✓\x01ok",
    ];
    for (const field of fields) {
      // Two bytes before and after: the range, not the whole buffer, is read.
      const bytes = new Uint8Array([0x41, 0x01, ...text.encode(field), 0x02, 0x42]);
      const end = bytes.length - 2;
      const map = parsePropertiesMap(bytes, 2, end);
      assert.deepEqual(
        map,
        propertiesMapOf(parsePropertyPairs(bytes, 2, end)),
        JSON.stringify(field),
      );
      assert.deepEqual([...map.keys()], [
        ...propertiesMapOf(parsePropertyPairs(bytes, 2, end)).keys(),
      ]);
    }
  });
});

describe("isMessageRecordAt()", () => {
  const physicalOffset = 0x1_0000;
  const record = encodeMessage(
    { topic: "Orders", queueId: 1, body: text.encode("body"), properties: { TAGS: "a" } },
    { physicalOffset },
  );
  const view = new DataView(record.buffer);
  // Field positions of this IPv4 record.
  const bodyLengthPosition = 84;
  const topicLengthPosition = 88 + 4;
  const topicPosition = topicLengthPosition + 1;
  const propertiesLengthPosition = topicPosition + "Orders".length;

  test("isMessageRecordAt() accepts the record at its offset with its size, anywhere in a buffer", () => {
    assert.equal(view.getInt32(bodyLengthPosition), 4);
    assert.equal(record[topicLengthPosition], "Orders".length);
    assert.equal(view.getInt16(propertiesLengthPosition), "TAGS\x01a".length);
    assert.equal(isMessageRecordAt(record, 0, physicalOffset, record.length), true);
    assert.equal(isMessageRecordAt(placed(record, 33), 33, physicalOffset, record.length), true);
  });

  const corruptions: Array<{ name: string; at: number; value: number; size?: number }> = [
    { name: "a flipped magic byte", at: 4, value: 0x00 },
    { name: "another totalSize", at: 3, value: record.length + 1 },
    { name: "another physicalOffset", at: 35, value: 1 },
    { name: "a bodyLength past the record", at: bodyLengthPosition + 3, value: 0xFF },
    { name: "an empty topic", at: topicLengthPosition, value: 0 },
    { name: "a topic byte outside [%|a-zA-Z0-9_-]", at: topicPosition, value: 0x21 },
    { name: "a propertiesLength that disagrees", at: propertiesLengthPosition + 1, value: 0x7F },
  ];
  for (const c of corruptions) {
    test(`isMessageRecordAt() refuses ${c.name}`, () => {
      const bytes = record.slice();
      bytes[c.at] = c.value;
      assert.equal(isMessageRecordAt(bytes, 0, physicalOffset, record.length), false);
    });
  }

  test("isMessageRecordAt() refuses a truncated buffer, a short size and a negative position", () => {
    assert.equal(
      isMessageRecordAt(record.subarray(0, 60), 0, physicalOffset, record.length),
      false,
    );
    assert.equal(isMessageRecordAt(record, 0, physicalOffset, 8), false);
    assert.equal(isMessageRecordAt(record, -1, physicalOffset, record.length), false);
    assert.equal(isMessageRecordAt(new Uint8Array(0), 0, 0, 0), false);
  });
});
