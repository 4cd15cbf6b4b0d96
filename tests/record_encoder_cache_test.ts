import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import {
  decodeRecord,
  MessageEncoder,
  type MessageInput,
  type PropertiesInput,
} from "../src/record/mod.ts";
import { prng } from "./_prng.ts";

const body = new Uint8Array([1, 2, 3]);

function message(properties: PropertiesInput | undefined, topic = "TopicTest"): MessageInput {
  return { topic, queueId: 0, body, bornTimestamp: 1, properties };
}

/** What `encode` did: the record bytes, the error, or the thrown error. */
function outcome(encoder: MessageEncoder, input: MessageInput): string {
  const bytes = new Uint8Array(0x10000);
  try {
    const result = encoder.encode(input, bytes, 0);
    if (result instanceof MqStoreError) return `error ${result.code}: ${result.message}`;
    return `record ${Array.from(bytes.subarray(0, result)).join(",")}`;
  } catch (error) {
    return `throw ${(error as Error).name}: ${(error as Error).message}`;
  }
}

function pairsOf(record: Uint8Array): [string, string][] {
  const result = decodeRecord(record, 0);
  assert.equal(result.kind, "message");
  return result.kind === "message" ? result.message.pairs : [];
}

function encoded(encoder: MessageEncoder, input: MessageInput): Uint8Array {
  const bytes = new Uint8Array(0x1000);
  const size = encoder.encode(input, bytes, 0);
  if (typeof size !== "number") throw size;
  return bytes.subarray(0, size);
}

describe("MessageEncoder properties cache", () => {
  test("MessageEncoder.encode() re-encodes a properties object mutated in place", () => {
    const encoder = new MessageEncoder();
    const properties: Record<string, string> = { TAGS: "a", KEYS: "k1" };
    const input = message(properties);
    assert.deepEqual(pairsOf(encoded(encoder, input)), [["TAGS", "a"], ["KEYS", "k1"]]);
    properties.KEYS = "k22";
    assert.deepEqual(pairsOf(encoded(encoder, input)), [["TAGS", "a"], ["KEYS", "k22"]]);
    properties.TAGS = "bb";
    assert.deepEqual(pairsOf(encoded(encoder, input)), [["TAGS", "bb"], ["KEYS", "k22"]]);
    properties.WAIT = "false";
    assert.deepEqual(
      pairsOf(encoded(encoder, input)),
      [["TAGS", "bb"], ["KEYS", "k22"], ["WAIT", "false"]],
    );
    delete properties.KEYS;
    assert.deepEqual(pairsOf(encoded(encoder, input)), [["TAGS", "bb"], ["WAIT", "false"]]);
    delete properties.TAGS;
    properties.TAGS = "bb";
    assert.deepEqual(pairsOf(encoded(encoder, input)), [["WAIT", "false"], ["TAGS", "bb"]]);
    // Same content, another string: compared by content through a re-encode.
    properties.WAIT = ["fal", "se"].join("");
    assert.deepEqual(pairsOf(encoded(encoder, input)), [["WAIT", "false"], ["TAGS", "bb"]]);
    assert.deepEqual(pairsOf(encoded(encoder, message(undefined))), []);
    assert.deepEqual(pairsOf(encoded(encoder, input)), [["WAIT", "false"], ["TAGS", "bb"]]);
  });

  test("MessageEncoder.encode() rewrites only what changed in a batch-like sequence", () => {
    const encoder = new MessageEncoder();
    // Same names, new values: a same-length value leaves the later pairs in
    // place, a longer or shorter one moves them; each record must equal a
    // fresh encoder's.
    const sequence: PropertiesInput[] = [
      { UNIQ_KEY: "AAAA0001", TAGS: "TagA", KEYS: "k1" },
      { UNIQ_KEY: "AAAA0002", TAGS: "TagA", KEYS: "k1" },
      { UNIQ_KEY: "AAAA0003", TAGS: "TagB", KEYS: "k1" },
      { UNIQ_KEY: "AAAA00004", TAGS: "TagB", KEYS: "k1" },
      { UNIQ_KEY: "AAAA0005", TAGS: "TagB", KEYS: "k1" },
      { UNIQ_KEY: "AAAA0006", TAGS: "Tag\u00e9", KEYS: "k1" },
      { UNIQ_KEY: "AAAA0007", TAGS: "TagAB", KEYS: "k1" },
      { UNIQ_KEY: "AAAA0008", TAGS: "TagA" },
      { UNIQ_KEY: "AAAA0009", TAGS: "TagA", KEYS: "k2" },
      { UNIQ_KEY: "AAAA\x02010", TAGS: "TagA", KEYS: "k2" },
      { UNIQ_KEY: "AAAA0011", TAGS: "TagA", KEYS: "k2" },
      { UNIQ_KEY: "AAAA0012", TAGS: 7 as unknown as string, KEYS: "k2" },
      { UNIQ_KEY: "AAAA0013", TAGS: "TagA", KEYS: "k2" },
    ];
    for (const [i, properties] of sequence.entries()) {
      const input = message(properties);
      assert.equal(outcome(encoder, input), outcome(new MessageEncoder(), input), `message ${i}`);
    }
  });

  test("MessageEncoder.encode() gives the same bytes and errors as a fresh encoder", () => {
    const random = prng(0x5EED);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const names = ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "k", "\u540d\u5b57", "bad\x01", ""];
    const values = [
      "a",
      "b",
      "TagA",
      "TagB",
      "order-1 customer-7",
      "order-2 customer-9",
      "\u8ba2\u5355-002 \ud83d\udd11",
      "",
      "\u8ba2\u5355-001 \ud83d\udd11",
      "v".repeat(300),
      "x\x02y",
      "\ud800",
      "z".repeat(20000),
    ];
    const topics = ["TopicTest", "T", "%RETRY%group"];
    const reused: Record<string, string> = { TAGS: "a" };
    const reusedMap = new Map<string, string>([["TAGS", "a"]]);
    const reusedPairs: [string, string][] = [["TAGS", "a"]];
    const cached = new MessageEncoder();
    for (let i = 0; i < 1500; i++) {
      let properties: PropertiesInput | undefined;
      const shape = random();
      if (shape < 0.1) {
        properties = undefined;
      } else if (shape < 0.35) {
        // The same object, mutated: a value changed, a key added or removed.
        const name = pick(names);
        if (random() < 0.2) delete reused[name];
        else reused[name] = pick(values);
        properties = reused;
      } else if (shape < 0.45) {
        const name = pick(names);
        if (random() < 0.2) reusedMap.delete(name);
        else reusedMap.set(name, pick(values));
        properties = reusedMap;
      } else if (shape < 0.55) {
        if (random() < 0.3 && reusedPairs.length > 0) reusedPairs.pop();
        else reusedPairs.push([pick(names), pick(values)]);
        properties = reusedPairs;
      } else if (shape < 0.57) {
        properties = { TAGS: 7 as unknown as string };
      } else {
        // A new object from the same strings, mostly with the same first pairs.
        const fresh: Record<string, string> = {};
        const count = Math.floor(random() * 4);
        // A unique key first, of one width: the later pairs stay in place.
        if (random() < 0.2) fresh.UNIQ_KEY = `${1000 + Math.floor(random() * 9000)}`;
        if (random() < 0.7) fresh.TAGS = "TagA";
        for (let k = 0; k < count; k++) fresh[pick(names)] = pick(values);
        properties = fresh;
      }
      const input = message(properties, random() < 0.9 ? "TopicTest" : pick(topics));
      const expected = outcome(new MessageEncoder(), input);
      // measure() validates (and fills the cache) without writing.
      const wrongType = shape >= 0.55 && shape < 0.57;
      if (random() < 0.2 && !wrongType) cached.measure(input);
      const got = outcome(cached, input);
      assert.equal(got, expected, `message ${i}`);
      if (got.startsWith("record ")) {
        // The tail's pair accessors (the dispatch hints') describe the same pairs.
        const record = new Uint8Array(got.slice(7).split(",").map(Number));
        const pairs = pairsOf(record);
        const tail = cached.lastTail;
        assert.equal(tail.pairCount, pairs.length, `pair count of message ${i}`);
        if (tail.pairsKnown) {
          for (let k = 0; k < pairs.length; k++) {
            assert.deepEqual([tail.pairName(k), tail.pairValue(k)], pairs[k], `pair ${k} of ${i}`);
          }
        }
      }
    }
  });
});
