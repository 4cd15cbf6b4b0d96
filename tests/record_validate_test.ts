import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { MessageEncoder, type MessageInput, validateMessage } from "../src/record/mod.ts";

const valid: MessageInput = {
  topic: "TopicTest",
  queueId: 0,
  body: new Uint8Array(10),
  properties: { TAGS: "a" },
};

function withFields(fields: Record<string, unknown>): MessageInput {
  return { ...valid, ...fields } as MessageInput;
}

describe("validateMessage()", () => {
  test("validateMessage() accepts a valid message and the limits themselves", () => {
    assert.equal(validateMessage(valid), undefined);
    assert.equal(validateMessage(withFields({ topic: "a".repeat(127) })), undefined);
    assert.equal(validateMessage(withFields({ topic: "%RETRY%cg_pay-v2|east" })), undefined);
    assert.equal(
      validateMessage(withFields({ queueId: 0x7FFFFFFF, flag: -0x80000000 })),
      undefined,
    );
    assert.equal(
      validateMessage(
        withFields({ bornTimestamp: Number.MAX_SAFE_INTEGER, preparedTransactionOffset: 0 }),
      ),
      undefined,
    );
    // name (1) + 0x01 + value (32765) = 32767 bytes, the limit.
    assert.equal(validateMessage(withFields({ properties: { k: "v".repeat(32765) } })), undefined);
    assert.equal(validateMessage(withFields({ properties: { emptyVal: "" } })), undefined);
    assert.equal(
      validateMessage(withFields({ bornHost: "[::1]:1", storeHost: "10.0.0.1:65535" })),
      undefined,
    );
  });

  const illegal: [string, Record<string, unknown>, string, RegExp][] = [
    ["an empty topic", { topic: "" }, "MESSAGE_ILLEGAL", /Topic is empty/],
    [
      "a 128-character topic",
      { topic: "a".repeat(128) },
      "MESSAGE_ILLEGAL",
      /128 characters, the limit is 127/,
    ],
    [
      "a topic with a space",
      { topic: "my topic" },
      "MESSAGE_ILLEGAL",
      /"my topic" has characters outside/,
    ],
    ["a topic with a slash", { topic: "a/b" }, "MESSAGE_ILLEGAL", /outside \[%\|a-zA-Z0-9_-\]/],
    ["a non-ASCII topic", { topic: "t\u00e9" }, "MESSAGE_ILLEGAL", /outside/],
    [
      "a negative queueId",
      { queueId: -1 },
      "MESSAGE_ILLEGAL",
      /queueId is -1, it must be a non-negative int32/,
    ],
    ["a queueId past int32", { queueId: 2 ** 31 }, "MESSAGE_ILLEGAL", /queueId is 2147483648/],
    ["a fractional queueId", { queueId: 1.5 }, "MESSAGE_ILLEGAL", /queueId is 1.5/],
    [
      "a flag past int32",
      { flag: 2 ** 31 },
      "MESSAGE_ILLEGAL",
      /flag is 2147483648, it must be an int32/,
    ],
    [
      "a sysFlag below int32",
      { sysFlag: -(2 ** 31) - 1 },
      "MESSAGE_ILLEGAL",
      /sysFlag is -2147483649/,
    ],
    [
      "a reconsumeTimes of NaN",
      { reconsumeTimes: NaN },
      "MESSAGE_ILLEGAL",
      /reconsumeTimes is NaN/,
    ],
    [
      "a bornTimestamp past 2^53",
      { bornTimestamp: 2 ** 53 },
      "MESSAGE_ILLEGAL",
      /bornTimestamp is 9007199254740992/,
    ],
    [
      "an infinite preparedTransactionOffset",
      { preparedTransactionOffset: Infinity },
      "MESSAGE_ILLEGAL",
      /preparedTransactionOffset is Infinity/,
    ],
    [
      "a born host without a port",
      { bornHost: "1.2.3.4" },
      "MESSAGE_ILLEGAL",
      /bornHost "1.2.3.4" is not/,
    ],
    [
      "a store host by name",
      { storeHost: "localhost:10911" },
      "MESSAGE_ILLEGAL",
      /storeHost "localhost:10911"/,
    ],
    ["a port past 65535", { storeHost: "1.2.3.4:65536" }, "MESSAGE_ILLEGAL", /storeHost/],
    [
      "0x01 in a property name",
      { properties: { "a\x01b": "v" } },
      "MESSAGE_ILLEGAL",
      /Property "a.b" cannot be stored: its name contains the separator/,
    ],
    [
      "0x02 in a property value",
      { properties: { k: "a\x02b" } },
      "MESSAGE_ILLEGAL",
      /Property "k" cannot be stored: its value contains/,
    ],
    [
      "0x01 in a property value",
      { properties: [["k", "\x01"]] },
      "MESSAGE_ILLEGAL",
      /its value contains/,
    ],
    [
      "an empty property name",
      { properties: new Map([["", "v"]]) },
      "MESSAGE_ILLEGAL",
      /its name is empty/,
    ],
    [
      "a lone surrogate",
      { properties: { k: "\ud800x" } },
      "MESSAGE_ILLEGAL",
      /lone UTF-16 surrogate/,
    ],
    [
      "properties of 32768 bytes",
      { properties: { k: "v".repeat(32766) } },
      "PROPERTIES_SIZE_EXCEEDED",
      /Properties are 32768 bytes, the limit is 32767 bytes/,
    ],
    [
      "multi-byte properties over the limit",
      { properties: { k: "\u00e9".repeat(16383) } },
      "PROPERTIES_SIZE_EXCEEDED",
      /32768 bytes/,
    ],
  ];
  for (const [name, fields, code, message] of illegal) {
    test(`validateMessage() refuses ${name} with ${code}`, () => {
      const error = validateMessage(withFields(fields));
      assert.ok(error instanceof MqStoreError, name);
      assert.equal(error.code, code);
      assert.match(error.message, message);
    });
  }

  test("validateMessage() refuses a body over maxMessageSize with MESSAGE_ILLEGAL", () => {
    const error = validateMessage(withFields({ body: new Uint8Array(101) }), {
      maxMessageSizeBytes: 100,
    });
    assert.equal(error?.code, "MESSAGE_ILLEGAL");
    assert.match(error!.message, /Body is 101 bytes, maxMessageSize is 100 bytes/);
    assert.equal(
      validateMessage(withFields({ body: new Uint8Array(4 * 1024 * 1024 + 1) }))?.code,
      "MESSAGE_ILLEGAL",
    );
  });

  test("validateMessage() refuses a record over maxMessageSize, as RocketMQ 4.9.8 does", () => {
    const error = validateMessage(withFields({ body: new Uint8Array(100) }), {
      maxMessageSizeBytes: 150,
    });
    assert.equal(error?.code, "MESSAGE_ILLEGAL");
    assert.match(error!.message, /Record is 206 bytes, maxMessageSize is 150 bytes/);
  });

  const wrongTypes: [string, unknown][] = [
    ["null", null],
    ["a string", "message"],
    ["a message whose body is a string", withFields({ body: "hi" })],
    ["a message whose body is an array", withFields({ body: [1, 2] })],
    ["a message without a topic", withFields({ topic: undefined })],
    ["a message whose queueId is a string", withFields({ queueId: "1" })],
    ["a message whose flag is a bigint", withFields({ flag: 1n })],
    ["a message whose bornHost is a number", withFields({ bornHost: 1 })],
    ["a message whose properties are a string", withFields({ properties: "TAGS=a" })],
    ["a message whose property value is a number", withFields({ properties: { n: 1 } })],
    [
      "a message whose property pair is not an array",
      withFields({ properties: [["a", "b"], "c"] }),
    ],
  ];
  for (const [name, message] of wrongTypes) {
    test(`validateMessage() throws TypeError for ${name}`, () => {
      assert.throws(() => validateMessage(message as MessageInput), TypeError);
    });
  }

  test("validateMessage() writes nothing to the message", () => {
    const properties = Object.freeze({ TAGS: "a", KEYS: "k1 k2" });
    const body = new Uint8Array([1, 2, 3]);
    const message = Object.freeze({ topic: "T", queueId: 1, body, properties });
    assert.equal(validateMessage(message), undefined);
    assert.deepEqual([...body], [1, 2, 3]);
    assert.deepEqual(Object.keys(message), ["topic", "queueId", "body", "properties"]);
  });

  test("validateMessage() does not let a cached topic hide an invalid one", () => {
    assert.equal(validateMessage(withFields({ topic: "Good" })), undefined);
    assert.equal(validateMessage(withFields({ topic: "" }))?.code, "MESSAGE_ILLEGAL");
    assert.equal(validateMessage(withFields({ topic: "Good" })), undefined);
    assert.equal(validateMessage(withFields({ topic: "Bad!" }))?.code, "MESSAGE_ILLEGAL");
  });

  test("MessageEncoder() refuses malformed default hosts and sizes with RangeError", () => {
    assert.throws(() => new MessageEncoder({ defaultStoreHost: "nowhere" }), RangeError);
    assert.throws(() => new MessageEncoder({ maxMessageSizeBytes: 0 }), RangeError);
  });
});
