/**
 * What the record tail works out while it encodes the properties (the
 * KEYS tokens' hashes, the kinds of the names, a batch member's DELAY and
 * WAIT) must be what the dispatch hints and the batch checks would find
 * from the pairs themselves: the same key hashes, tagsCode and delay for
 * every message of a sequence that changes values, names, order and
 * count, and the same DELAY / WAIT verdicts as `propertyOf`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { propertyOf } from "../src/commit_log/_delay.ts";
import { DispatchHints, HINT_KEYS_MAX } from "../src/commit_log/dispatch_hints.ts";
import { SCHEDULE_TOPIC } from "../src/record/constants.ts";
import { javaHashCode } from "../src/record/hash_code.ts";
import {
  KEYS_NOT_PLAIN,
  type PropertiesInput,
  propertyEntries,
  writeKeysValue,
  writePairValue,
} from "../src/record/properties.ts";
import { createLayout, TAIL_HAS_DELAY, TAIL_HAS_WAIT } from "../src/record/validate.ts";
import { prng } from "./_prng.ts";

/** The pairs of `input` as the decode sees them (no tail, no kinds, no token hashes). */
function plainPairsOf(input: PropertiesInput) {
  const pairs = propertyEntries(input);
  return {
    pairCount: pairs.length,
    pairsKnown: true,
    pairName: (i: number) => pairs[i]![0],
    pairValue: (i: number) => pairs[i]![1],
  };
}

/** Slot 0's key hashes, tagsCode and delay after staging `pairs` alone. */
function staged(hints: DispatchHints, topic: string, pairs: Parameters<DispatchHints["stage"]>[2]) {
  hints.beginStage();
  hints.stage(topic, 0, pairs);
  const count = hints.keyCounts[0]!;
  return {
    keyCount: count,
    keyHashes: count > 0 ? [...hints.keyHashes.subarray(0, count)] : [],
    tagsCode: hints.tagsCodes[0],
    delayMs: hints.delaysMs[0],
  };
}

describe("RecordTail pairs", () => {
  test("writeKeysValue() writes what writePairValue() writes, with each token's hash and power", () => {
    const values = [
      "a",
      "key-1",
      "a b",
      "  a  b ",
      "",
      "   ",
      "order-1 order-2 order-3",
      Array.from({ length: HINT_KEYS_MAX }, (_, i) => `k${i}`).join(" "),
      Array.from({ length: HINT_KEYS_MAX + 1 }, (_, i) => `k${i}`).join(" "),
      "x".repeat(300),
      "tab\tand ~DEL\x7F",
    ];
    for (const value of values) {
      const into = new Uint8Array(512);
      const expected = new Uint8Array(512);
      const tokens = new Int32Array(1 + 2 * HINT_KEYS_MAX);
      const end = writeKeysValue(value, into, 3, tokens, HINT_KEYS_MAX);
      assert.equal(end, writePairValue("KEYS", value, expected, 3), value);
      assert.deepEqual(into, expected, value);
      const words = value.split(" ").filter((token) => token !== "");
      if (words.length > HINT_KEYS_MAX) {
        assert.equal(tokens[0], -1, value);
        continue;
      }
      assert.equal(tokens[0], words.length, value);
      const prefix = javaHashCode("Topic#");
      for (let t = 0; t < words.length; t++) {
        assert.equal(
          (Math.imul(prefix, tokens[2 + 2 * t]!) + tokens[1 + 2 * t]!) | 0,
          javaHashCode(`Topic#${words[t]}`),
          `${value} token ${t}`,
        );
      }
    }
  });

  test("writeKeysValue() leaves to writePairValue() what is not plain ASCII or may not fit", () => {
    const tokens = new Int32Array(1 + 2 * HINT_KEYS_MAX);
    for (const value of ["é", "a\x01b", "a\x02", "nul\x00", "k \u{1F600}"]) {
      assert.equal(
        writeKeysValue(value, new Uint8Array(64), 0, tokens, HINT_KEYS_MAX),
        KEYS_NOT_PLAIN,
      );
    }
    assert.equal(
      writeKeysValue("abcd", new Uint8Array(8), 1, tokens, HINT_KEYS_MAX),
      KEYS_NOT_PLAIN,
    );
    assert.equal(writeKeysValue("abcd", new Uint8Array(8), 0, tokens, HINT_KEYS_MAX), 4);
  });

  test("DispatchHints.stage() gives from a RecordTail the hints it gives from the plain pairs", () => {
    const many = Array.from({ length: HINT_KEYS_MAX }, (_, i) => `k${i}`).join(" ");
    const sequence: PropertiesInput[] = [
      { TAGS: "TagA", KEYS: "key-1" },
      { TAGS: "TagA", KEYS: "key-2" },
      { TAGS: "TagA", KEYS: "key-10" },
      { TAGS: "TagB", KEYS: "key-10" },
      { KEYS: "a b", TAGS: "TagB" },
      { KEYS: "a bc", TAGS: "TagB" },
      { KEYS: " é  x ", TAGS: "TagB" },
      { KEYS: "plain", TAGS: "TagB" },
      { UNIQ_KEY: "U1", KEYS: "p q" },
      { UNIQ_KEY: "U2", KEYS: many },
      { KEYS: many },
      { KEYS: `${many} one-more` },
      { KEYS: "" },
      { TAGS: "" },
      [["KEYS", "first"], ["KEYS", "second"]],
      [["KEYS", "first"], ["KEYS", ""]],
      [["KEYS", "first"], ["KEYS", "third"]],
      [["KEYS", "x"], ["TAGS", "t"], ["KEYS", "y"]],
      new Map([["TAGS", "m"], ["KEYS", "map-key"], ["DELAY", "3"]]),
      { OTHER: "KEYS", KEYS: "k", WAIT: "false" },
      {},
      { TAGS: "TagA", KEYS: "key-1" },
      { TAGS: "TagA", KEYS: "key-1", DELAY: "2" },
      { DELAY: "2", TAGS: "TagA", KEYS: "key-1" },
    ];
    const tail = createLayout().tail;
    const fromTail = new DispatchHints({ withKeys: true });
    const fromPairs = new DispatchHints({ withKeys: true });
    // Twice through, and over two topics: the tail then skips pairs it holds.
    for (let round = 0; round < 2; round++) {
      for (const topic of ["Orders", SCHEDULE_TOPIC]) {
        for (let i = 0; i < sequence.length; i++) {
          const input = sequence[i]!;
          assert.equal(tail.setProperties(input) >= 0, true);
          const got = staged(fromTail, topic, tail);
          const want = staged(fromPairs, topic, plainPairsOf(input));
          assert.deepEqual(got, want, `round ${round} ${topic} message ${i}`);
        }
      }
    }
  });

  test("DispatchHints.stage() agrees from a RecordTail over random sequences of changing values", () => {
    const random = prng(0xC0DE);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const keys = ["k1", "k22", "a b", " x  y ", "", "é k", "order-1 customer-7", "x\x02y", "  "];
    const names = ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "other"];
    const tail = createLayout().tail;
    const fromTail = new DispatchHints({ withKeys: true });
    const fromPairs = new DispatchHints({ withKeys: true });
    const reused: Record<string, string> = { TAGS: "a", KEYS: "k1" };
    for (let i = 0; i < 3000; i++) {
      let input: Record<string, string>;
      if (random() < 0.3) {
        reused[pick(names)] = random() < 0.5 ? pick(keys) : `key-${i}`;
        input = reused;
      } else {
        input = {};
        if (random() < 0.5) input.UNIQ_KEY = `U${1000 + (i % 9000)}`;
        if (random() < 0.7) input.TAGS = pick(["TagA", "TagB", ""]);
        input.KEYS = random() < 0.6 ? `key-${i % 300} o-${i % 7}` : pick(keys);
        if (random() < 0.1) input[pick(names)] = pick(keys);
      }
      if (tail.setProperties(input) < 0) continue;
      const topic = random() < 0.9 ? "Orders" : "T";
      assert.deepEqual(
        staged(fromTail, topic, tail),
        staged(fromPairs, topic, plainPairsOf(input)),
        `message ${i}`,
      );
    }
  });

  test("RecordTail.batchFlags() says whether propertyOf() finds DELAY and WAIT", () => {
    const inputs: PropertiesInput[] = [
      { TAGS: "a" },
      { DELAY: "1" },
      { DELAY: "" },
      { WAIT: "false" },
      { WAIT: "true" },
      { WAIT: "False" },
      [["WAIT", "false"], ["WAIT", "true"]],
      [["WAIT", "true"], ["WAIT", "false"]],
      [["WAIT", "false"], ["DELAY", "3"], ["KEYS", "k"]],
      new Map([["WAIT", "false"]]),
      { KEYS: "WAIT", TAGS: "DELAY" },
    ];
    const tail = createLayout().tail;
    for (const input of inputs) {
      assert.equal(tail.setProperties(input) >= 0, true);
      assert.equal(tail.pairsKnown, true);
      const flags = tail.batchFlags();
      assert.equal((flags & TAIL_HAS_DELAY) !== 0, propertyOf(input, "DELAY") !== undefined);
      assert.equal((flags & TAIL_HAS_WAIT) !== 0, propertyOf(input, "WAIT") !== undefined);
    }
  });
});
