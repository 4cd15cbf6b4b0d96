/**
 * The dispatcher's lean decode agrees with the full one: on every record of
 * the RocketMQ 4.9.8 corpus, on random messages (non-ASCII values, empty
 * values, duplicates, the schedule topic, pre-4.9.1 trailing separators),
 * and on every single-bit flip of them.
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import {
  decodeMessageView,
  dispatchTagsCode,
  DispatchView,
  encodeMessage,
  indexKeysOf,
  javaHashCode,
  type MessageInput,
  RecordChecker,
  SCHEDULE_TOPIC,
} from "../src/record/mod.ts";
import { CORPUS, CORPUS_SKIP } from "./_corpus_helpers.ts";
import { prng } from "./_prng.ts";

const DELAY_LEVELS_MS = [1_000, 5_000, 10_000];
const checker = new RecordChecker({ checkCrc: false });

/**
 * Checks that the lean decode of `bytes[position]` takes exactly the
 * records the checker calls messages, with the fields, tagsCode and key
 * hashes the full decode gives.
 *
 * @returns Whether the record is a message.
 */
function assertAgrees(
  lean: DispatchView,
  bytes: Uint8Array,
  position: number,
  offset: number,
  what: string,
): boolean {
  const view = checker.check(bytes, position, offset);
  const loaded = lean.load(bytes, position, offset, true);
  assert.equal(loaded, view.kind === "message", `${what}: ${view.kind} ${view.reason ?? ""}`);
  if (!loaded) return false;
  const message = decodeMessageView(bytes, view);
  assert.deepEqual(
    {
      size: lean.size,
      queueId: lean.queueId,
      sysFlag: lean.sysFlag,
      queueOffset: lean.queueOffset,
      physicalOffset: lean.physicalOffset,
      storeTimestamp: lean.storeTimestamp,
      topic: lean.topic,
      tagsCode: lean.tagsCode,
      keyHashes: [...lean.keyHashes.subarray(0, lean.keyCount)],
    },
    {
      size: message.storeSize,
      queueId: message.queueId,
      sysFlag: message.sysFlag,
      queueOffset: message.queueOffset,
      physicalOffset: message.physicalOffset,
      storeTimestamp: message.storeTimestamp,
      topic: message.topic,
      tagsCode: dispatchTagsCode(
        message.topic,
        message.properties,
        message.storeTimestamp,
        DELAY_LEVELS_MS,
      ),
      keyHashes: indexKeysOf(message.sysFlag, message.properties)
        .map((key) => javaHashCode(`${message.topic}#${key}`)),
    },
    what,
  );
  // Without keys asked, none are given.
  assert.equal(lean.load(bytes, position, offset, false), true);
  assert.equal(lean.keyCount, 0);
  return true;
}

const NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TAG", "KEYSX", "a"];
const PIECES = ["k", "Tag", " ", "  ", "order-1", "\u57ce\u5e02", "\u{1F600}", "é", "7", "-2", ""];
const TOPICS = ["T", "TopicTest", "%RETRY%cg|x", SCHEDULE_TOPIC, "a_b-C9"];

function randomValue(random: () => number): string {
  let value = "";
  const pieces = Math.floor(random() * 5);
  for (let i = 0; i < pieces; i++) value += PIECES[Math.floor(random() * PIECES.length)]!;
  return value;
}

/** A random message whose properties exercise every rule of the scan. */
function randomMessage(random: () => number): MessageInput {
  const pairs: [string, string][] = [];
  const count = Math.floor(random() * 6);
  for (let i = 0; i < count; i++) {
    const name = NAMES[Math.floor(random() * NAMES.length)]!;
    pairs.push([
      name,
      name === "DELAY" && random() < 0.7 ? `${Math.floor(random() * 6) - 1}` : randomValue(random),
    ]);
  }
  return {
    topic: TOPICS[Math.floor(random() * TOPICS.length)]!,
    queueId: Math.floor(random() * 8),
    body: new Uint8Array(Math.floor(random() * 16)),
    properties: pairs,
    sysFlag: Math.floor(random() * 4) << 2,
    bornHost: random() < 0.2 ? "[::1]:50000" : undefined,
    storeHost: random() < 0.2 ? "[fe80::1]:10911" : undefined,
  };
}

/**
 * `record` in the pre-4.9.1 form: one more `0x02` after the last pair
 * (`record` itself when it has no properties).
 */
function withTrailingSeparator(record: Uint8Array): Uint8Array {
  const view = checker.check(record, 0);
  assert.equal(view.kind, "message");
  if (view.propertiesLength === 0) return record;
  const longer = new Uint8Array(record.length + 1);
  longer.set(record);
  longer[record.length] = 0x02;
  const d = new DataView(longer.buffer);
  d.setInt32(0, record.length + 1);
  d.setInt16(view.propertiesPosition - 2, view.propertiesLength + 1);
  return longer;
}

describe("DispatchView", () => {
  test(
    "DispatchView.load() agrees with decodeMessageView() on every record of the RocketMQ corpus",
    {
      skip: CORPUS_SKIP,
    },
    () => {
      const lean = new DispatchView({ delayLevelsMs: DELAY_LEVELS_MS });
      let messages = 0;
      for (const profile of ["public", "crashed"]) {
        const directory = path.join(CORPUS, profile, "store", "commitlog");
        for (const file of fs.readdirSync(directory).sort()) {
          const bytes = new Uint8Array(fs.readFileSync(path.join(directory, file)));
          const base = Number(file);
          // Bounded by the segment: each round moves past a record.
          for (let position = 0; position < bytes.length;) {
            const what = `${profile}/${file} @${position}`;
            if (!assertAgrees(lean, bytes, position, base + position, what)) break;
            messages++;
            position += lean.size;
          }
        }
      }
      assert.ok(messages > 100, `${messages} messages in the corpus`);
    },
  );

  test("DispatchView.load() agrees with decodeMessageView() on random messages and their bit flips", () => {
    const random = prng(0xD15A7C);
    const lean = new DispatchView({ delayLevelsMs: DELAY_LEVELS_MS });
    let flipsTaken = 0;
    for (let round = 0; round < 300; round++) {
      const offset = Math.floor(random() * 0x1_0000_0000) * 8;
      let record = encodeMessage(randomMessage(random), {
        physicalOffset: offset,
        queueOffset: Math.floor(random() * 0x1_0000_0000) * 3,
        storeTimestamp: 1_795_954_493_785 + round,
      });
      if (round % 4 === 3) record = withTrailingSeparator(record);
      assert.equal(assertAgrees(lean, record, 0, offset, `round ${round}`), true);
      // Rounds also at a position inside a larger buffer.
      const padded = new Uint8Array(record.length + 16);
      padded.set(record, 8);
      assert.equal(assertAgrees(lean, padded, 8, offset, `round ${round} padded`), true);
      if (round % 10 !== 0) continue;
      for (let bit = 0; bit < record.length * 8; bit++) {
        const flipped = record.slice();
        flipped[bit >>> 3]! ^= 1 << (bit & 7);
        if (assertAgrees(lean, flipped, 0, offset, `round ${round} bit ${bit}`)) flipsTaken++;
      }
    }
    // Flips in the body, properties and plain fields leave a valid message.
    assert.ok(flipsTaken > 0);
  });

  test("DispatchView.load() hashes topic#key as javaHashCode() on random non-ASCII strings", () => {
    const random = prng(0xC0FFEE);
    const lean = new DispatchView();
    const alphabet = ["a", "Z", "0", "#", "-", "\u00e9", "\u4e0a", "\u{1F680}", "\u0101", "~"];
    for (let round = 0; round < 500; round++) {
      let key = "";
      const length = 1 + Math.floor(random() * 12);
      for (let i = 0; i < length; i++) key += alphabet[Math.floor(random() * alphabet.length)]!;
      const topic = TOPICS[round % TOPICS.length]!;
      const record = encodeMessage(
        { topic, queueId: 0, body: new Uint8Array(0), properties: { UNIQ_KEY: key, TAGS: key } },
        { physicalOffset: 0 },
      );
      assert.equal(lean.load(record, 0, 0, true), true);
      assert.equal(lean.keyCount, 1);
      assert.equal(lean.keyHashes[0], javaHashCode(`${topic}#${key}`), key);
      if (topic !== SCHEDULE_TOPIC) assert.equal(lean.tagsCode, javaHashCode(key), key);
    }
  });

  test("DispatchView.load() refuses a record at another offset, a BLANK and zeros", () => {
    const lean = new DispatchView();
    const record = encodeMessage({ topic: "T", queueId: 0, body: new Uint8Array(1) }, {
      physicalOffset: 64,
    });
    assert.equal(lean.load(record, 0, 64, true), true);
    assert.equal(lean.load(record, 0, 65, true), false);
    const blank = new Uint8Array(16);
    new DataView(blank.buffer).setInt32(0, 16);
    new DataView(blank.buffer).setUint32(4, 0xCBD43194);
    assert.equal(lean.load(blank, 0, 0, true), false);
    assert.equal(lean.load(new Uint8Array(200), 0, 0, true), false);
    assert.equal(lean.load(record.subarray(0, record.length - 1), 0, 64, true), false);
  });
});
