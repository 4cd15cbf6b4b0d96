import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  BLANK_MAGIC_CODE,
  bodyCrc,
  checkPropertiesBytes,
  checkRecord,
  crc32,
  crc32Table,
  crc32Zlib,
  decodeRecord,
  dispatchTagsCode,
  encodeMessage,
  encodeProperties,
  formatHostAddress,
  hasConsumeQueueEntry,
  indexKeysOf,
  javaHashCode,
  MESSAGE_MAGIC_CODE,
  MessageEncoder,
  type MessageInput,
  offsetMsgIdOf,
  parseHostAddress,
  parseOffsetMsgId,
  parsePropertyPairs,
  patchRecord,
  PHYSICAL_OFFSET_POSITION,
  QUEUE_OFFSET_POSITION,
  RECORD_FIXED_SIZE_BYTES,
  RecordChecker,
  recordSizeOf,
  STORE_TIMESTAMP_POSITION_V4,
  STORE_TIMESTAMP_POSITION_V6,
  storeTimestampPositionOf,
  SYS_FLAG_BORN_HOST_V6,
  SYS_FLAG_POSITION,
  SYS_FLAG_STORE_HOST_V6,
  tagsCodeOf,
  transactionTypeOf,
  writeBlankRecord,
} from "../src/record/mod.ts";

const text = new TextEncoder();

function bytesOf(value: string): Uint8Array {
  return text.encode(value);
}

function readInt64(bytes: Uint8Array, position: number): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  return view.getInt32(position) * 0x1_0000_0000 + view.getUint32(position + 4);
}

function decodeMessage(record: Uint8Array, expectedOffset?: number) {
  const result = decodeRecord(
    record,
    0,
    expectedOffset === undefined ? {} : { expectedOffset },
  );
  assert.equal(result.kind, "message", JSON.stringify(result));
  if (result.kind !== "message") throw new Error("unreachable");
  return result.message;
}

describe("crc32", () => {
  test("crc32() gives the IEEE check value of '123456789'", () => {
    const data = bytesOf("123456789");
    assert.equal(crc32(data), 0xCBF43926);
    assert.equal(crc32Table(data, 0, data.length), 0xCBF43926);
    assert.equal(crc32Zlib(data, 0, data.length), 0xCBF43926);
  });

  test("crc32() agrees with zlib and the table for every size and alignment", () => {
    const data = new Uint8Array(3000);
    for (let i = 0; i < data.length; i++) data[i] = (i * 131 + 17) & 0xFF;
    for (const length of [0, 1, 7, 8, 9, 63, 64, 127, 128, 129, 255, 256, 511, 512, 1024, 2900]) {
      for (const start of [0, 1, 3, 8, 13]) {
        const end = start + length;
        const expected = crc32Zlib(data, start, end);
        assert.equal(crc32Table(data, start, end), expected, `table ${start}+${length}`);
        assert.equal(crc32(data, start, end), expected, `selected ${start}+${length}`);
        assert.equal(crc32(data.slice(start, end)), expected, `whole ${length}`);
      }
    }
  });

  test("crc32Table() chains like zlib's running CRC", () => {
    const data = bytesOf("hello, commit log");
    const first = crc32Table(data, 0, 5);
    assert.equal(crc32Table(data, 5, data.length, first), crc32Zlib(data, 0, data.length));
  });

  test("bodyCrc() is the CRC with the sign bit cleared, as RocketMQ stores it", () => {
    assert.equal(bodyCrc(new Uint8Array([0x5D])), 1205387972);
    assert.equal(bodyCrc(new Uint8Array(0)), 0);
    const data = bytesOf("123456789");
    assert.equal(bodyCrc(data), 0xCBF43926 & 0x7FFFFFFF);
  });
});

describe("hash codes", () => {
  test("javaHashCode() matches Java's String.hashCode()", () => {
    const cases: [string, number][] = [
      ["", 0],
      ["*", 42],
      ["TagA", 2598919],
      ["tag with space", -1742848654],
      ["\u6807\u7b7e", 857175],
      ["\u8ba2\u5355", 1129459],
      ["Legacy", -2022711319],
      ["A||B", 2059489],
    ];
    for (const [value, hash] of cases) assert.equal(javaHashCode(value), hash, value);
  });

  test("tagsCodeOf() is 0 without tags and the hash otherwise", () => {
    assert.equal(tagsCodeOf(undefined), 0);
    assert.equal(tagsCodeOf(""), 0);
    assert.equal(tagsCodeOf("TagA"), 2598919);
  });
});

describe("host addresses and offsetMsgId", () => {
  test("parseHostAddress() reads IPv4, IPv6 and IPv4-mapped addresses", () => {
    const cases: [string, number[], number][] = [
      ["127.0.0.1:10911", [127, 0, 0, 1], 10911],
      ["0.0.0.0:0", [0, 0, 0, 0], 0],
      ["255.255.255.255:65535", [255, 255, 255, 255], 65535],
      ["[::1]:50000", [...new Array(15).fill(0), 1], 50000],
      ["[0:0:0:0:0:0:0:1]:50000", [...new Array(15).fill(0), 1], 50000],
      ["[fe80::1:2]:1", [0xFE, 0x80, ...new Array(10).fill(0), 0, 1, 0, 2], 1],
      ["[::ffff:10.1.2.3]:80", [10, 1, 2, 3], 80],
      [
        "[64:ff9b::192.0.2.33]:80",
        [0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 33],
        80,
      ],
    ];
    for (const [input, ip, port] of cases) {
      const parsed = parseHostAddress(input);
      assert.ok(parsed, input);
      assert.deepEqual([...parsed.ip], ip, input);
      assert.equal(parsed.port, port, input);
    }
  });

  test("parseHostAddress() refuses malformed addresses", () => {
    for (
      const input of [
        "",
        "localhost:80",
        "1.2.3.4",
        "1.2.3:80",
        "1.2.3.4.5:80",
        "256.1.1.1:80",
        "01.2.3.4:80",
        "1.2.3.4:65536",
        "1.2.3.4:-1",
        "1.2.3.4:08",
        ":80",
        "::1:80",
        "[::1]",
        "[::1:80",
        "[1::2::3]:80",
        "[1:2:3:4:5:6:7:8:9]:80",
        "[12345::]:80",
        "[fe80::1%eth0]:80",
      ]
    ) {
      assert.equal(parseHostAddress(input), undefined, input);
    }
  });

  test("formatHostAddress() prints IPv6 the way Java does", () => {
    assert.equal(formatHostAddress(parseHostAddress("[::1]:50000")!), "[0:0:0:0:0:0:0:1]:50000");
    assert.equal(formatHostAddress(parseHostAddress("[FE80::A]:1")!), "[fe80:0:0:0:0:0:0:a]:1");
    assert.equal(formatHostAddress(parseHostAddress("10.0.0.7:9876")!), "10.0.0.7:9876");
  });

  test("offsetMsgIdOf() and parseOffsetMsgId() round-trip IPv4 and IPv6 hosts", () => {
    const v4 = new Uint8Array([0x7F, 0, 0, 1, 0, 0, 0x2A, 0x9F]);
    assert.equal(offsetMsgIdOf(v4, 0, 8, 176), "7F00000100002A9F00000000000000B0");
    assert.deepEqual(parseOffsetMsgId("7F00000100002A9F00000000000000B0"), {
      storeHost: "127.0.0.1:10911",
      ip: new Uint8Array([0x7F, 0, 0, 1]),
      port: 10911,
      physicalOffset: 176,
    });
    const id = "0000000000000000000000000000000100002A9F00000000000000B0";
    const parsed = parseOffsetMsgId(id);
    assert.equal(parsed.storeHost, "[0:0:0:0:0:0:0:1]:10911");
    assert.equal(parsed.physicalOffset, 176);
    const v6 = new Uint8Array(20);
    v6[15] = 1;
    v6[18] = 0x2A;
    v6[19] = 0x9F;
    assert.equal(offsetMsgIdOf(v6, 0, 20, 176), id);
    assert.equal(parseOffsetMsgId("7f00000100002a9f0000010000000000").physicalOffset, 2 ** 40);
  });

  test("parseOffsetMsgId() refuses what is not an offsetMsgId", () => {
    for (
      const id of ["", "7F00", "Z".repeat(32), "7F00000100002A9F00000000000000B", "0".repeat(40)]
    ) {
      assert.throws(() => parseOffsetMsgId(id), RangeError, id);
    }
    assert.throws(() => parseOffsetMsgId("7F00000100002A9FFFFFFFFFFFFFFFFF"), RangeError);
  });
});

describe("properties", () => {
  test("encodeProperties() writes pairs in the caller's order, with no trailing 0x02", () => {
    const expected = "b\x012\x02a\x011";
    const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
    assert.equal(decode(encodeProperties(new Map([["b", "2"], ["a", "1"]]))), expected);
    assert.equal(decode(encodeProperties([["b", "2"], ["a", "1"]])), expected);
    assert.equal(decode(encodeProperties({ b: "2", a: "1" })), expected);
    // A plain object lists integer-like keys first, as JS orders them.
    assert.equal(decode(encodeProperties({ b: "2", 7: "x" })), "7\x01x\x02b\x012");
    assert.equal(encodeProperties({}).length, 0);
    assert.equal(encodeProperties(undefined).length, 0);
    assert.equal(decode(encodeProperties({ k: "\u6807\ud83d\ude00" })), "k\x01\u6807\ud83d\ude00");
  });

  test("checkPropertiesBytes() accepts both forms and refuses malformed fields", () => {
    const cases: [string, boolean][] = [
      ["", true],
      ["a\x01b", true],
      ["a\x01b\x02c\x01d", true],
      ["a\x01b\x02", true],
      ["a\x01\x02b\x01c", true],
      ["a\x01", true],
      ["\x02", false],
      ["a\x01b\x02\x02", false],
      ["a\x01b\x02\x02c\x01d", false],
      ["ab", false],
      ["\x01b", false],
      ["a\x01b\x01c", false],
      ["a\x01b\x02c", false],
      ["\0\0\0\0", false],
    ];
    for (const [value, expected] of cases) {
      const bytes = bytesOf(value);
      assert.equal(checkPropertiesBytes(bytes, 0, bytes.length), expected, JSON.stringify(value));
    }
  });

  test("parsePropertyPairs() keeps empty values and ignores a trailing 0x02", () => {
    const bytes = bytesOf("emptyVal\x01\x02TAGS\x01EV\x02");
    assert.deepEqual(parsePropertyPairs(bytes, 0, bytes.length), [["emptyVal", ""], [
      "TAGS",
      "EV",
    ]]);
  });
});

describe("encode and decode", () => {
  const base: MessageInput = {
    topic: "TopicTest",
    queueId: 3,
    body: bytesOf("hello"),
    bornTimestamp: 1_700_000_000_107,
    bornHost: "127.0.0.1:50000",
    storeHost: "127.0.0.1:10911",
  };

  const hostCases: [string, string, string, number, number][] = [
    ["IPv4/IPv4", "127.0.0.1:50000", "127.0.0.1:10911", 0, RECORD_FIXED_SIZE_BYTES],
    ["IPv6/IPv4", "[::1]:50000", "127.0.0.1:10911", SYS_FLAG_BORN_HOST_V6, 103],
    ["IPv4/IPv6", "127.0.0.1:50000", "[::1]:10911", SYS_FLAG_STORE_HOST_V6, 103],
    [
      "IPv6/IPv6",
      "[::1]:50000",
      "[::1]:10911",
      SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6,
      115,
    ],
  ];
  for (const [name, bornHost, storeHost, hostBits, fixed] of hostCases) {
    test(`MessageEncoder.encode() round-trips every field with ${name} hosts`, () => {
      const input: MessageInput = {
        topic: "%RETRY%cg_pay-v2|east",
        queueId: 0x7FFFFFFF,
        body: new Uint8Array([0, 1, 2, 0xFF]),
        properties: [["TAGS", "TagA"], ["KEYS", "k1 k2"], ["emptyVal", ""], ["note", "na\u00efve"]],
        flag: -1,
        sysFlag: 0x30 ^ hostBits | 0x8,
        bornTimestamp: 1_700_000_000_107,
        bornHost,
        storeHost,
        reconsumeTimes: 3,
        preparedTransactionOffset: 242872,
      };
      const encoder = new MessageEncoder();
      const buffer = new Uint8Array(1024).fill(0xAA);
      const size = encoder.encode(input, buffer, 100);
      const propertiesBytes = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02emptyVal\x01\x02note\x01na\u00efve";
      assert.equal(size, fixed + 4 + 21 + bytesOf(propertiesBytes).length);
      assert.equal(buffer[99], 0xAA);
      assert.equal(buffer[100 + (size as number)], 0xAA);
      patchRecord(buffer, 100, 2 ** 40 + 5, 123_456_789_012, 1_795_954_493_497);
      const record = buffer.subarray(100, 100 + (size as number));
      const message = decodeMessage(record, 123_456_789_012);
      assert.equal(message.storeSize, size);
      assert.equal(message.topic, input.topic);
      assert.equal(message.queueId, 0x7FFFFFFF);
      assert.equal(message.flag, -1);
      assert.equal(message.sysFlag, 0x8 | hostBits);
      assert.equal(message.queueOffset, 2 ** 40 + 5);
      assert.equal(message.physicalOffset, 123_456_789_012);
      assert.equal(message.bornTimestamp, 1_700_000_000_107);
      assert.equal(message.storeTimestamp, 1_795_954_493_497);
      assert.equal(message.bornHost, formatHostAddress(parseHostAddress(bornHost)!));
      assert.equal(message.storeHost, formatHostAddress(parseHostAddress(storeHost)!));
      assert.equal(message.reconsumeTimes, 3);
      assert.equal(message.preparedTransactionOffset, 242872);
      assert.deepEqual([...message.body], [0, 1, 2, 0xFF]);
      assert.equal(message.bodyCRC, bodyCrc(input.body));
      assert.deepEqual(message.pairs, input.properties);
      assert.deepEqual(
        message.properties,
        new Map([["TAGS", "TagA"], ["KEYS", "k1 k2"], ["note", "na\u00efve"]]),
      );
      assert.equal(new TextDecoder().decode(message.propertiesRaw), propertiesBytes);
      assert.equal(message.tagsCode, 2598919);
      assert.equal(message.msgId.length, storeHost.startsWith("[") ? 56 : 32);
      assert.equal(parseOffsetMsgId(message.msgId).physicalOffset, 123_456_789_012);
    });
  }

  test("encodeMessage() sizes a record as 91 + body + topic + properties", () => {
    const record = encodeMessage({ topic: "T", queueId: 0, body: new Uint8Array(0) });
    assert.equal(record.length, RECORD_FIXED_SIZE_BYTES + 1);
    assert.equal(recordSizeOf(0, 0, 1, 0), record.length);
    assert.equal(recordSizeOf(0x30, 5, 9, 20), 91 + 24 + 5 + 9 + 20);
    const message = decodeMessage(record, 0);
    assert.equal(message.body.length, 0);
    assert.equal(message.propertiesRaw.length, 0);
    assert.deepEqual(message.pairs, []);
    assert.equal(message.tagsCode, 0);
  });

  test("MessageEncoder.encode() defaults hosts, flags and the born timestamp", () => {
    const encoder = new MessageEncoder({ now: () => 42, defaultStoreHost: "10.0.0.1:10911" });
    const buffer = new Uint8Array(256);
    encoder.encode({ topic: "T", queueId: 1, body: new Uint8Array(1) }, buffer, 0);
    const message = decodeMessage(buffer);
    assert.equal(message.bornTimestamp, 42);
    assert.equal(message.bornHost, "127.0.0.1:10911");
    assert.equal(message.storeHost, "10.0.0.1:10911");
    assert.equal(message.flag, 0);
    assert.equal(message.sysFlag, 0);
    assert.equal(message.reconsumeTimes, 0);
    assert.equal(message.preparedTransactionOffset, 0);
    assert.equal(message.queueOffset, 0);
    assert.equal(message.storeTimestamp, 0);
  });

  test("MessageEncoder.encode() writes nothing for an invalid message", () => {
    const encoder = new MessageEncoder();
    const buffer = new Uint8Array(512).fill(0x5A);
    const result = encoder.encode(
      { ...base, properties: { ok: "1", "bad\x01name": "x" } },
      buffer,
      0,
    );
    assert.equal(typeof result, "object");
    assert.ok(buffer.every((b) => b === 0x5A));
  });

  test("MessageEncoder.encode() throws RangeError when the record does not fit, writing nothing", () => {
    const encoder = new MessageEncoder();
    const size = encoder.measure(base) as number;
    const buffer = new Uint8Array(size + 9).fill(0x5A);
    assert.throws(() => encoder.encode(base, buffer, 10), RangeError);
    assert.ok(buffer.every((b) => b === 0x5A));
    assert.equal(encoder.encode(base, buffer, 9), size);
  });

  test("MessageEncoder.measure() gives the size encode() writes", () => {
    const encoder = new MessageEncoder();
    const input = { ...base, properties: { KEYS: "\u8ba2\u5355-001 \ud83d\udd11key" } };
    const size = encoder.measure(input);
    assert.equal(size, encoder.encode(input, new Uint8Array(512), 0));
  });

  test("patchRecord() writes queueOffset, physicalOffset and storeTimestamp in place", () => {
    for (const bornHost of ["127.0.0.1:1", "[::1]:1"]) {
      const record = encodeMessage({ ...base, bornHost });
      const before = record.slice();
      patchRecord(record, 0, 7, 2 ** 52, 1_795_954_493_818);
      const storeTimestampAt = storeTimestampPositionOf(record[SYS_FLAG_POSITION + 3]!);
      assert.equal(
        storeTimestampAt,
        bornHost.startsWith("[") ? STORE_TIMESTAMP_POSITION_V6 : STORE_TIMESTAMP_POSITION_V4,
      );
      assert.equal(readInt64(record, QUEUE_OFFSET_POSITION), 7);
      assert.equal(readInt64(record, PHYSICAL_OFFSET_POSITION), 2 ** 52);
      assert.equal(readInt64(record, storeTimestampAt), 1_795_954_493_818);
      for (let i = 0; i < record.length; i++) {
        const patched = (i >= QUEUE_OFFSET_POSITION && i < PHYSICAL_OFFSET_POSITION + 8) ||
          (i >= storeTimestampAt && i < storeTimestampAt + 8);
        if (!patched) assert.equal(record[i], before[i], `byte ${i} with born host ${bornHost}`);
      }
    }
  });

  test("writeBlankRecord() writes a BLANK that decodeRecord() reads back", () => {
    const segment = new Uint8Array(64);
    writeBlankRecord(segment, 40, 24);
    assert.deepEqual(decodeRecord(segment, 40), { kind: "blank", size: 24 });
    assert.throws(() => writeBlankRecord(segment, 0, 7), RangeError);
    assert.throws(() => writeBlankRecord(segment, 60, 8), RangeError);
  });
});

describe("decoder", () => {
  const record = encodeMessage(
    {
      topic: "TopicTest",
      queueId: 1,
      body: bytesOf("body bytes"),
      properties: { TAGS: "t", KEYS: "k" },
      bornHost: "127.0.0.1:1",
      storeHost: "127.0.0.1:2",
      bornTimestamp: 1,
    },
    { physicalOffset: 4096, queueOffset: 3, storeTimestamp: 5 },
  );
  const bodyAt = 88;
  const topicAt = bodyAt + 10 + 1;
  const propertiesAt = topicAt + 9 + 2;

  function corrupt(edit: (bytes: Uint8Array, view: DataView) => void): Uint8Array {
    const copy = record.slice();
    edit(copy, new DataView(copy.buffer));
    return copy;
  }

  const cases: [string, Uint8Array, number, string][] = [
    ["an unknown magic code", corrupt((b) => b[4] = 0), 4096, "UNKNOWN_MAGIC"],
    [
      "a size below the smallest record",
      corrupt((_, v) => v.setInt32(0, 91)),
      4096,
      "SIZE_OUT_OF_RANGE",
    ],
    ["a negative size", corrupt((_, v) => v.setInt32(0, -5)), 4096, "SIZE_OUT_OF_RANGE"],
    [
      "a size past the buffer",
      corrupt((_, v) => v.setInt32(0, record.length + 1)),
      4096,
      "TRUNCATED",
    ],
    [
      "a size that disagrees with the fields",
      corrupt((_, v) => v.setInt32(0, record.length - 1)),
      4096,
      "SIZE_MISMATCH",
    ],
    [
      "a bodyLength past the record",
      corrupt((_, v) => v.setInt32(bodyAt - 4, 5000)),
      4096,
      "SIZE_MISMATCH",
    ],
    ["a negative bodyLength", corrupt((_, v) => v.setInt32(bodyAt - 4, -1)), 4096, "SIZE_MISMATCH"],
    ["a topicLength past the record", corrupt((b) => b[topicAt - 1] = 200), 4096, "SIZE_MISMATCH"],
    [
      "a negative propertiesLength",
      corrupt((_, v) => v.setInt16(propertiesAt - 2, -1)),
      4096,
      "SIZE_MISMATCH",
    ],
    ["a physicalOffset that is not the record's offset", record, 4097, "OFFSET_MISMATCH"],
    [
      "a topic byte outside the charset",
      corrupt((b) => b[topicAt + 2] = 0x23),
      4096,
      "TOPIC_MALFORMED",
    ],
    ["a zeroed topic byte", corrupt((b) => b[topicAt] = 0), 4096, "TOPIC_MALFORMED"],
    [
      "properties without a name separator",
      corrupt((b) => b[propertiesAt + 4] = 0x41),
      4096,
      "PROPERTIES_MALFORMED",
    ],
    ["a flipped body bit", corrupt((b) => b[bodyAt + 3]! ^= 0x10), 4096, "CRC_MISMATCH"],
    ["a wrong stored CRC", corrupt((b) => b[11]! ^= 1), 4096, "CRC_MISMATCH"],
  ];
  for (const [name, bytes, offset, reason] of cases) {
    test(`checkRecord() reports ${name} as ${reason}`, () => {
      const result = decodeRecord(bytes, 0, { expectedOffset: offset });
      assert.equal(result.kind, "invalid");
      assert.equal(result.kind === "invalid" && result.reason, reason);
      assert.ok(result.kind === "invalid" && result.detail.length > 0);
    });
  }

  test("checkRecord() skips the CRC when asked to", () => {
    const bytes = corrupt((b) => b[bodyAt]! ^= 1);
    assert.equal(checkRecord(bytes, 0, { checkCrc: false }).kind, "message");
  });

  test("checkRecord() reads 8 zero bytes as the end of the data", () => {
    assert.equal(checkRecord(new Uint8Array(8), 0).kind, "end");
    assert.equal(checkRecord(new Uint8Array(7), 0).reason, "TRUNCATED");
    assert.equal(checkRecord(new Uint8Array(0), 0).reason, "TRUNCATED");
    assert.equal(checkRecord(record, record.length + 5).reason, "TRUNCATED");
  });

  test("checkRecord() refuses a BLANK whose size does not fit the buffer", () => {
    const segment = new Uint8Array(32);
    const view = new DataView(segment.buffer);
    view.setInt32(4, BLANK_MAGIC_CODE);
    for (const size of [0, 7, 33, -1]) {
      view.setInt32(0, size);
      assert.equal(checkRecord(segment, 0).reason, "SIZE_OUT_OF_RANGE", `size ${size}`);
    }
    view.setInt32(0, 32);
    assert.equal(checkRecord(segment, 0).kind, "blank");
  });

  test("checkRecord() throws RangeError for a position that is not an index", () => {
    assert.throws(() => checkRecord(record, -1), RangeError);
    assert.throws(() => checkRecord(record, 1.5), RangeError);
  });

  test("RecordChecker.check() reuses one view and finds records back to back", () => {
    const segment = new Uint8Array(record.length * 2 + 16);
    segment.set(record, 0);
    const second = encodeMessage(
      { topic: "Other", queueId: 2, body: new Uint8Array(3), bornTimestamp: 1 },
      { physicalOffset: 4096 + record.length },
    );
    segment.set(second, record.length);
    const checker = new RecordChecker();
    const first = checker.check(segment, 0, 4096);
    assert.equal(first.kind, "message");
    assert.equal(first.size, record.length);
    const next = checker.check(segment, record.length, 4096 + record.length);
    assert.equal(next, first);
    assert.equal(next.queueId, 2);
    assert.equal(checker.check(segment, record.length + second.length, 0).kind, "end");
    assert.equal(segment.length - record.length - second.length >= 8, true);
    const magic = new DataView(segment.buffer).getInt32(4);
    assert.equal(magic, MESSAGE_MAGIC_CODE);
  });

  test("decodeRecord() reads the pre-4.9.1 trailing 0x02", () => {
    const withTrailing = encodeMessage({
      topic: "T",
      queueId: 0,
      body: new Uint8Array(0),
      properties: [["KEYS", "legacy-1"], ["TAGS", "Legacy"]],
    });
    // Rebuild the record by hand with one more properties byte.
    const longer = new Uint8Array(withTrailing.length + 1);
    longer.set(withTrailing);
    longer[longer.length - 1] = 0x02;
    const view = new DataView(longer.buffer);
    view.setInt32(0, longer.length);
    const propertiesLengthAt = 88 + 0 + 1 + 1;
    view.setInt16(propertiesLengthAt, view.getInt16(propertiesLengthAt) + 1);
    const message = decodeMessage(longer);
    assert.deepEqual(message.pairs, [["KEYS", "legacy-1"], ["TAGS", "Legacy"]]);
    assert.equal(message.tagsCode, -2022711319);
  });
});

describe("dispatch", () => {
  test("transactionTypeOf() and hasConsumeQueueEntry() read sysFlag bits 2-3", () => {
    assert.deepEqual([0, 4, 8, 12].map(transactionTypeOf), [
      "NOT_TYPE",
      "PREPARED",
      "COMMIT",
      "ROLLBACK",
    ]);
    assert.deepEqual([0, 4, 8, 12].map(hasConsumeQueueEntry), [true, false, true, false]);
    assert.equal(transactionTypeOf(0x10 | 0x8 | 0x1), "COMMIT");
  });

  test("dispatchTagsCode() is the delivery time under the schedule topic", () => {
    const at = 1_795_954_493_785;
    const props = (delay: string, tags?: string) =>
      new Map(tags === undefined ? [["DELAY", delay]] : [["DELAY", delay], ["TAGS", tags]]);
    assert.equal(dispatchTagsCode("SCHEDULE_TOPIC_XXXX", props("3"), at), at + 10_000);
    assert.equal(dispatchTagsCode("SCHEDULE_TOPIC_XXXX", props("1"), at), at + 1_000);
    assert.equal(dispatchTagsCode("SCHEDULE_TOPIC_XXXX", props("18"), at), at + 7_200_000);
    assert.equal(dispatchTagsCode("SCHEDULE_TOPIC_XXXX", props("20"), at), at + 7_200_000);
    assert.equal(dispatchTagsCode("SCHEDULE_TOPIC_XXXX", props("0", "TagA"), at), 2598919);
    assert.equal(dispatchTagsCode("SCHEDULE_TOPIC_XXXX", props("x", "TagA"), at), 2598919);
    assert.equal(dispatchTagsCode("TopicTest", props("3", "TagA"), at), 2598919);
    assert.equal(dispatchTagsCode("SCHEDULE_TOPIC_XXXX", props("2"), at, [5, 6]), at + 6);
  });

  test("indexKeysOf() lists UNIQ_KEY then KEYS tokens, and nothing for ROLLBACK", () => {
    const properties = new Map([["KEYS", "  a b  a "], ["UNIQ_KEY", "U"]]);
    assert.deepEqual(indexKeysOf(0, properties), ["U", "a", "b", "a"]);
    assert.deepEqual(indexKeysOf(0x4, properties), ["U", "a", "b", "a"]);
    assert.deepEqual(indexKeysOf(0xC, properties), []);
    assert.deepEqual(indexKeysOf(0, new Map()), []);
  });
});
