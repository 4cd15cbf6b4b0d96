/**
 * Opening store directories written by the real RocketMQ 4.9.8 store
 * (`../shared/testdata/rocketmq-4.9.8`, copied to a temp directory):
 * a clean one keeps every record and queue offset; a crashed one with a
 * torn tail record is cut exactly before it, the empty segment after it is
 * deleted, and new puts continue from there.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import type { MessageInput } from "../src/record/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { createPort, MemoryPort } from "../src/runtime/mod.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { MessageStore } from "../src/store/message_store.ts";
import {
  copyCorpusStore,
  CORPUS,
  CORPUS_OPTIONS,
  CORPUS_SKIP,
  type Json,
  manifestMessageInput,
  manifestPropertyPairs,
  readJson,
  readJsonLines,
} from "./_corpus_helpers.ts";
import { removeDirectory } from "./_helpers.ts";
import { body, readRecords, segmentNames } from "./_store_helpers.ts";

interface Summary {
  messages: number;
  "endOffset(maxPhyOffset)": number;
  consumeQueueUnitsPerQueue: Record<string, number>;
}

/** A writable copy of a corpus store, and its summary. */
function copyStore(profile: string): { root: string; directory: string; summary: Summary } {
  return { ...copyCorpusStore(profile), summary: readJson<Summary>(profile, "summary.json") };
}

const skip = CORPUS_SKIP;

describe("RocketMQ 4.9.8 store directories", () => {
  test("MessageStore.open() keeps every record and queue offset of a clean RocketMQ store", {
    skip,
  }, async () => {
    const { root, directory, summary } = copyStore("public");
    try {
      const port = await createPort({ onNotice: () => {} });
      const store = await MessageStore.open(directory, {
        port,
        ...CORPUS_OPTIONS,
        onWarning: () => {},
      });
      try {
        assert.equal(store.recovery.clean, true);
        assert.equal(store.recovery.maxOffset, summary["endOffset(maxPhyOffset)"]);
        assert.equal(store.recovery.messageCount, summary.messages);
        const table = store.topicQueueTable();
        for (const [queue, units] of Object.entries(summary.consumeQueueUnitsPerQueue)) {
          const slash = queue.lastIndexOf("/");
          assert.equal(
            table.get(`${queue.slice(0, slash)}-${queue.slice(slash + 1)}`),
            units,
            `next queue offset of ${queue}`,
          );
        }
        const r = await store.putMessage({ topic: "TopicTest", queueId: 1, body: body(10) });
        assert.equal(r.status, "PUT_OK");
        assert.equal(r.appendResult!.wroteOffset, summary["endOffset(maxPhyOffset)"]);
        assert.equal(
          r.appendResult!.queueOffset,
          summary.consumeQueueUnitsPerQueue["TopicTest/1"],
        );
      } finally {
        await store.close();
      }
      assert.equal((await readRecords(port, directory)).length, summary.messages + 1);
    } finally {
      removeDirectory(root);
    }
  });

  test("MessageStore.open() cuts a crashed RocketMQ store before its torn record", {
    skip,
  }, async () => {
    const { root, directory, summary } = copyStore("crashed");
    try {
      const port = await createPort({ onNotice: () => {} });
      const store = await MessageStore.open(directory, {
        port,
        ...CORPUS_OPTIONS,
        onWarning: () => {},
      });
      const torn = summary["endOffset(maxPhyOffset)"];
      try {
        assert.equal(store.recovery.clean, false);
        assert.equal(store.recovery.maxOffset, torn);
        assert.equal(store.recovery.messageCount, summary.messages);
        assert.equal(store.recovery.endKind, "invalid");
        // The empty segment RocketMQ had allocated ahead is gone.
        assert.equal((await segmentNames(port, directory)).at(-1), "00000000000000458752");
        assert.equal(store.nextQueueOffset("TopicTest", 1), 36);
        const r = await store.putMessage({ topic: "TopicTest", queueId: 1, body: body(10) });
        assert.equal(r.appendResult!.wroteOffset, torn);
        assert.equal(r.appendResult!.queueOffset, 36);
      } finally {
        await store.close();
      }
      const records = await readRecords(port, directory);
      assert.equal(records.length, summary.messages + 1);
    } finally {
      removeDirectory(root);
    }
  });

  test("MessageStore.putMessage() replays the public corpus into RocketMQ's bytes", {
    skip,
  }, async () => {
    const lines = (name: string) => readJsonLines("public", name);
    const records = new Map<number, Json>();
    for (const entry of lines("manifest.jsonl")) {
      if (entry.kind === "message") records.set(entry.physicalOffset, entry);
    }
    /** Offsets of records compared as maps, not bytes (see below). */
    const notExact = new Set<number>();
    const inputOf = (entry: Json): MessageInput => {
      let pairs = manifestPropertyPairs(entry);
      let topic: string = entry.topic;
      let queueId: number = entry.queueId;
      const realTopic = pairs.find(([name]) => name === "REAL_TOPIC");
      if (realTopic !== undefined && (entry.sysFlag & 0xC) !== 0x4) {
        // Stored under the schedule topic: put it as the producer did; the
        // store appends REAL_TOPIC and REAL_QID itself (RocketMQ's HashMap
        // order differs, the length does not).
        topic = realTopic[1];
        queueId = Number(pairs.find(([name]) => name === "REAL_QID")![1]);
        pairs = pairs.filter(([name]) => name !== "REAL_TOPIC" && name !== "REAL_QID");
        notExact.add(entry.physicalOffset);
      }
      if (entry.genCases.includes("props-legacy-trailing-0x02")) {
        // A pre-4.9.1 client's trailing 0x02, which mqstore does not write:
        // a trailing space in KEYS (an empty token, not indexed) keeps the
        // length, so every later offset still lines up.
        pairs = pairs.map(([name, value]) => [name, name === "KEYS" ? `${value} ` : value]);
        notExact.add(entry.physicalOffset);
      }
      return manifestMessageInput(entry, { topic, queueId, properties: pairs });
    };
    const puts = lines("puts.jsonl");
    const port = new MemoryPort(runtimeName());
    const clock = new ManualClock(puts[0]!.storeTimestamp);
    const store = await MessageStore.open("/replay", {
      ...CORPUS_OPTIONS,
      port,
      clock,
      onWarning: () => {},
    });
    try {
      for (const put of puts) {
        clock.advance(put.storeTimestamp - clock.nowMs());
        const batch: Json[] = [];
        let offset: number = put.wroteOffset;
        for (let i = 0; i < put.msgNum; i++) {
          const entry = records.get(offset)!;
          batch.push(entry);
          offset += entry.storeSize;
        }
        const r = put.msgNum === 1
          ? await store.putMessage(inputOf(batch[0]!))
          : await store.putMessages(batch.map(inputOf));
        assert.equal(r.status, "PUT_OK", `put ${put.op}: ${r.error?.message}`);
        assert.equal(r.appendResult!.wroteOffset, put.wroteOffset, `put ${put.op}`);
        assert.equal(r.appendResult!.wroteBytes, put.wroteBytes, `put ${put.op}`);
        assert.equal(r.appendResult!.queueOffset, put.logicsOffset, `put ${put.op}`);
      }
    } finally {
      await store.close();
    }
    const theirs = (relative: string) =>
      new Uint8Array(fs.readFileSync(path.join(CORPUS, "public", "store", relative)));
    const ours = async (relative: string) => (await port.readFile(`/replay/${relative}`))!;
    // Commit log: byte for byte, except inside the records listed above.
    const segments = fs.readdirSync(path.join(CORPUS, "public", "store", "commitlog")).sort();
    for (const name of segments) {
      const expected = theirs(`commitlog/${name}`);
      const actual = await ours(`commitlog/${name}`);
      assert.equal(actual.length, expected.length, name);
      const start = Number(name);
      for (let position = 0; position < expected.length;) {
        const entry = records.get(start + position);
        const end = entry === undefined ? position + 1 : position + entry.storeSize;
        if (entry !== undefined && notExact.has(entry.physicalOffset)) {
          // The header and the body are the same; the properties are equal as maps.
          assert.deepEqual(
            actual.subarray(position, position + 20),
            expected.subarray(position, position + 20),
          );
        } else if (entry !== undefined) {
          assert.deepEqual(
            actual.subarray(position, end),
            expected.subarray(position, end),
            `record at ${start + position}`,
          );
        } else if (actual[position] !== expected[position]) {
          assert.fail(`${name} differs at position ${position}`);
        }
        position = end;
      }
    }
    // A segment allocated ahead holds nothing.
    for (
      const name of (await port.list("/replay/commitlog")).filter((n) => !segments.includes(n))
    ) {
      assert.ok((await ours(`commitlog/${name}`)).every((b) => b === 0), name);
    }
    // Consume queues: every file, byte for byte.
    const cqRoot = path.join(CORPUS, "public", "store", "consumequeue");
    let cqFiles = 0;
    for (const topic of fs.readdirSync(cqRoot)) {
      for (const queueId of fs.readdirSync(path.join(cqRoot, topic))) {
        for (const name of fs.readdirSync(path.join(cqRoot, topic, queueId))) {
          const relative = `consumequeue/${topic}/${queueId}/${name}`;
          assert.deepEqual(await ours(relative), theirs(relative), relative);
          cqFiles++;
        }
      }
    }
    assert.ok(cqFiles >= 25);
    // Index files: the same contents (names are creation times).
    const theirIndex = fs.readdirSync(path.join(CORPUS, "public", "store", "index")).sort();
    const ourIndex = (await port.list("/replay/index")).sort();
    assert.equal(ourIndex.length, theirIndex.length);
    for (const [i, name] of theirIndex.entries()) {
      assert.deepEqual(await ours(`index/${ourIndex[i]}`), theirs(`index/${name}`), name);
    }
    assert.equal((await ours("checkpoint")).length, 4096);
    assert.equal(await port.stat("/replay/abort"), undefined);
  });
});
