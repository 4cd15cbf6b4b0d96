/**
 * The read API of MessageStore (SPEC §10): getMessage, getMessages with
 * RocketMQ's statuses and nextBeginOffset rules, queryMessages, msgId
 * lookups and queue offsets — on stores written by mqstore and on copies
 * of the RocketMQ 4.9.8 corpus stores, which must serve exactly the queue
 * offsets of `consumequeue.jsonl` and the key queries of `index.json`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { describe, test } from "node:test";
import { createPort } from "../src/runtime/mod.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { removeDirectory } from "./_helpers.ts";
import {
  copyCorpusStore,
  CORPUS_OPTIONS,
  CORPUS_SKIP,
  type Json,
  readJson,
  readJsonLines,
} from "./_corpus_helpers.ts";
import { body, openMemoryStore } from "./_store_helpers.ts";

const text = new TextEncoder();

/** Reads a whole queue through getMessages, `pageCount` at a time. */
async function readQueue(
  store: MessageStore,
  topic: string,
  queueId: number,
  pageCount = 7,
): Promise<Array<{ queueOffset: number; physicalOffset: number; storeSize: number }>> {
  const read: Array<{ queueOffset: number; physicalOffset: number; storeSize: number }> = [];
  let next = store.getMinQueueOffset(topic, queueId);
  for (let round = 0; round < 10_000; round++) {
    const page = await store.getMessages(topic, queueId, next, pageCount);
    if (page.status !== "FOUND") {
      assert.equal(page.status, "OFFSET_OVERFLOW_ONE", `${topic}/${queueId} at ${next}`);
      return read;
    }
    for (const [i, message] of page.messages.entries()) {
      read.push({
        queueOffset: next + i,
        physicalOffset: message.physicalOffset,
        storeSize: message.storeSize,
      });
      assert.equal(message.queueOffset, next + i);
    }
    assert.equal(page.nextQueueOffset, next + page.messages.length);
    next = page.nextQueueOffset;
  }
  throw new Error("queue never ended");
}

function unitsByQueue(units: Json[]): Map<string, Json[]> {
  const queues = new Map<string, Json[]>();
  for (const unit of units) {
    const key = `${unit.topic}\u0000${unit.queueId}`;
    let list = queues.get(key);
    if (list === undefined) queues.set(key, list = []);
    list.push(unit);
  }
  return queues;
}

describe("MessageStore reads", () => {
  test("getMessages() serves what putMessage() stored, in queue order, with every field", async () => {
    for (const flushDiskType of ["SYNC_FLUSH", "ASYNC_FLUSH"] as const) {
      const { store } = await openMemoryStore({ flushDiskType });
      try {
        const offsets: number[] = [];
        for (let i = 0; i < 30; i++) {
          const r = await store.putMessage({
            topic: "Orders",
            queueId: i % 2,
            body: body(100 + i, i),
            properties: { TAGS: i % 3 === 0 ? "red" : "blue", KEYS: `order-${i} all` },
            flag: i,
            bornHost: "10.0.0.1:4000",
          });
          assert.equal(r.status, "PUT_OK");
          offsets.push(r.appendResult!.wroteOffset);
        }
        await store.whenDispatched(store.maxOffset);
        assert.equal(store.getMaxQueueOffset("Orders", 0), 15);
        assert.equal(store.getMinQueueOffset("Orders", 0), 0);
        const page = await store.getMessages("Orders", 0, 0, 100);
        assert.equal(page.status, "FOUND");
        assert.equal(page.messages.length, 15);
        assert.equal(page.nextQueueOffset, 15);
        assert.equal(page.maxQueueOffset, 15);
        for (const [k, message] of page.messages.entries()) {
          const i = 2 * k;
          assert.equal(message.topic, "Orders");
          assert.equal(message.queueId, 0);
          assert.equal(message.queueOffset, k);
          assert.equal(message.physicalOffset, offsets[i]);
          assert.equal(message.flag, i);
          assert.equal(message.bornHost, "10.0.0.1:4000");
          assert.deepEqual(message.body, body(100 + i, i));
          assert.equal(message.properties.get("KEYS"), `order-${i} all`);
          assert.equal(message.msgId.length, 32);
        }
        const red = await store.getMessages("Orders", 1, 0, 100, { tags: ["red"] });
        assert.deepEqual(red.messages.map((m) => m.flag), [3, 9, 15, 21, 27]);
        assert.equal(red.nextQueueOffset, 15);
        const none = await store.getMessages("Orders", 1, 0, 100, { tags: ["green"] });
        assert.equal(none.status, "NO_MATCHED_MESSAGE");
        assert.equal(none.nextQueueOffset, 15);
      } finally {
        await store.close();
      }
    }
  });

  test("getMessages() answers RocketMQ's statuses and next offsets", async () => {
    const { store } = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    try {
      for (let i = 0; i < 3; i++) {
        await store.putMessage({ topic: "T", queueId: 0, body: body(10, i) });
      }
      await store.whenDispatched(store.maxOffset);
      const cases: Array<[string, number, number, string, number]> = [
        ["T", 0, 0, "FOUND", 2],
        ["T", 0, 3, "OFFSET_OVERFLOW_ONE", 3],
        ["T", 0, 9, "OFFSET_OVERFLOW_BADLY", 0],
        ["T", 5, 0, "NO_MATCHED_LOGIC_QUEUE", 0],
        ["U", 0, 0, "NO_MATCHED_LOGIC_QUEUE", 0],
      ];
      for (const [topic, queueId, offset, status, next] of cases) {
        const page = await store.getMessages(topic, queueId, offset, 2);
        assert.equal(page.status, status, `${topic}/${queueId}@${offset}`);
        assert.equal(page.nextQueueOffset, next, `${topic}/${queueId}@${offset}`);
      }
      await assert.rejects(store.getMessages("T", 0, -1, 1), RangeError);
      await assert.rejects(store.getMessages("T", 0, 0, 0), RangeError);
    } finally {
      await store.close();
    }
  });

  test("getMessage(), getMessageByMsgId() and queryMessages() find a message; PREPARED gets no unit", async () => {
    const { store } = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    try {
      const a = await store.putMessage({
        topic: "Pay",
        queueId: 2,
        body: text.encode("a"),
        properties: { KEYS: "k1 k2", UNIQ_KEY: "U-1" },
      });
      const prepared = await store.putMessage({
        topic: "Pay",
        queueId: 2,
        body: text.encode("p"),
        sysFlag: 0x4,
        properties: { KEYS: "k1" },
      });
      const rollback = await store.putMessage({
        topic: "Pay",
        queueId: 2,
        body: text.encode("r"),
        sysFlag: 0xC,
        properties: { KEYS: "k1" },
      });
      await store.whenDispatched(store.maxOffset);
      const offset = a.appendResult!.wroteOffset;
      const message = await store.getMessage(offset);
      assert.equal(message?.physicalOffset, offset);
      assert.equal(message?.storeSize, a.appendResult!.wroteBytes);
      assert.equal(await store.getMessage(offset + 1), undefined);
      assert.equal(await store.getMessage(store.maxOffset + 100), undefined);
      const byId = await store.getMessageByMsgId(a.appendResult!.msgId);
      assert.equal(byId?.physicalOffset, offset);
      assert.deepEqual(
        (await store.queryMessages("Pay", "k1")).messages.map((m) => m.physicalOffset),
        // Newest first; ROLLBACK is not indexed.
        [prepared.appendResult!.wroteOffset, offset],
      );
      assert.equal(rollback.status, "PUT_OK");
      assert.deepEqual(
        (await store.queryMessages("Pay", "U-1")).messages.map((m) => m.physicalOffset),
        [offset],
      );
      assert.deepEqual((await store.queryMessages("Other", "k1")).messages, []);
      assert.equal(store.getMaxQueueOffset("Pay", 2), 1);
    } finally {
      await store.close();
    }
  });

  test("getMessage() hands out copies that outlive the store", async () => {
    const { store } = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    const r = await store.putMessage({ topic: "T", queueId: 0, body: body(64, 9) });
    const message = await store.getMessage(r.appendResult!.wroteOffset);
    await store.close();
    assert.deepEqual(message?.body, body(64, 9));
    assert.notEqual(message?.body.buffer.byteLength, 0x1_0000);
  });

  test("getMessages() under SYNC_FLUSH serves nothing a crash could take back", async () => {
    const { store, port } = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    try {
      await store.putMessage({ topic: "T", queueId: 0, body: body(10) });
      // WAIT=false: answered before its flush.
      const r = await store.putMessage({
        topic: "T",
        queueId: 0,
        body: body(10),
        properties: { WAIT: "false" },
      });
      assert.equal(r.status, "PUT_OK");
      const page = await store.getMessages("T", 0, 0, 10);
      for (const message of page.messages) {
        assert.ok(message.physicalOffset + message.storeSize <= store.flushedOffset);
      }
      await store.whenDispatched(r.appendResult!.wroteOffset + r.appendResult!.wroteBytes);
      assert.equal((await store.getMessages("T", 0, 0, 10)).messages.length, 2);
      assert.ok(port);
    } finally {
      await store.close();
    }
  });
});

describe("MessageStore reads of RocketMQ 4.9.8 stores", () => {
  test(
    "getMessages() serves the public store with consumequeue.jsonl's offsets; queryMessages() answers index.json",
    {
      skip: CORPUS_SKIP,
    },
    async () => {
      const { root, directory } = copyCorpusStore("public");
      try {
        const port = await createPort({ onNotice: () => {} });
        const store = await MessageStore.open(directory, {
          ...CORPUS_OPTIONS,
          port,
          onWarning: () => {},
        });
        try {
          const manifest = new Map(
            readJsonLines("public", "manifest.jsonl").filter((e) => e.kind === "message").map((
              e,
            ) => [e.physicalOffset as number, e]),
          );
          for (const [key, units] of unitsByQueue(readJsonLines("public", "consumequeue.jsonl"))) {
            const [topic, queueId] = key.split("\u0000") as [string, string];
            const served = await readQueue(store, topic, Number(queueId));
            assert.deepEqual(
              served,
              units.map((u) => ({
                queueOffset: u.cqIndex,
                physicalOffset: u.commitLogOffset,
                storeSize: u.size,
              })),
              key,
            );
          }
          for (const entry of manifest.values()) {
            const message = await store.getMessage(entry.physicalOffset);
            assert.ok(message !== undefined, `message at ${entry.physicalOffset}`);
            assert.equal(message.msgId, entry.offsetMsgId);
            assert.equal(Buffer.from(message.body).toString("base64"), entry.body);
            assert.equal(
              Buffer.from(message.propertiesRaw).toString("base64"),
              entry.propertiesRaw,
            );
            assert.equal(message.storeTimestamp, entry.storeTimestamp);
            assert.equal(message.bornHost, entry.bornHost);
            assert.equal(message.storeHost, entry.storeHost);
            assert.equal(message.sysFlag, entry.sysFlag);
            assert.equal(message.queueOffset, entry.queueOffset);
            const byId = await store.getMessageByMsgId(entry.offsetMsgId);
            assert.equal(byId?.physicalOffset, entry.physicalOffset);
          }
          for (const query of readJson("public", "index.json").queries as Json[]) {
            const result = await store.queryMessages(query.topic, query.key, { maxCount: 1000 });
            assert.deepEqual(
              result.messages.map((m) => m.physicalOffset),
              query.phyOffsets,
              `${query.topic}#${query.key}`,
            );
          }
        } finally {
          await store.close();
        }
      } finally {
        removeDirectory(root);
      }
    },
  );

  test("MessageStore.open() recovers the crashed store where RocketMQ did and rebuilds its index", {
    skip: CORPUS_SKIP,
  }, async () => {
    const { root, directory } = copyCorpusStore("crashed");
    try {
      const port = await createPort({ onNotice: () => {} });
      const recovery = readJson("crashed", "recovery.json");
      for (let open = 0; open < 2; open++) {
        const store = await MessageStore.open(directory, {
          ...CORPUS_OPTIONS,
          port,
          onWarning: () => {},
        });
        try {
          assert.equal(store.maxOffset, recovery.maxPhyOffset);
          assert.equal(store.minOffset, recovery.minPhyOffset);
          for (const [queue, expected] of Object.entries(recovery.consumeQueues as Json)) {
            const slash = queue.lastIndexOf("/");
            const topic = queue.slice(0, slash);
            const queueId = Number(queue.slice(slash + 1));
            assert.equal(store.getMaxQueueOffset(topic, queueId), expected.maxOffsetAfter, queue);
            assert.equal(store.getMinQueueOffset(topic, queueId), expected.minOffsetAfter, queue);
          }
          assert.equal(store.getMaxQueueOffset("TopicTest", 1), open === 0 ? 36 : 38);
          const units = readJsonLines("crashed", "consumequeue.jsonl")
            .filter((u) => u.commitLogOffset !== 515149);
          for (const [key, list] of unitsByQueue(units)) {
            const [topic, queueId] = key.split("\u0000") as [string, string];
            const served = await readQueue(store, topic, Number(queueId), 50);
            // The second open also serves the two puts made after the first.
            assert.deepEqual(
              served.slice(0, list.length).map((s) => s.physicalOffset),
              list.map((u) => u.commitLogOffset),
            );
            if (key !== "TopicTest\u00001") assert.equal(served.length, list.length);
          }
          for (const query of recovery.indexQueriesAfterRecovery as Json[]) {
            const result = await store.queryMessages(query.topic, query.key, { maxCount: 1000 });
            assert.deepEqual(
              result.messages.map((m) => m.physicalOffset),
              query.phyOffsetsAfterRecovery,
              `${query.topic}#${query.key}`,
            );
          }
          assert.deepEqual((await store.queryMessages("TopicTest", "tail-key")).messages, []);
          if (open === 0) {
            const r = await store.putMessage({
              topic: "TopicTest",
              queueId: 1,
              body: body(10),
              properties: { KEYS: "after-crash" },
            });
            assert.equal(r.appendResult!.queueOffset, 36);
            assert.equal(r.appendResult!.wroteOffset, 515149);
            await store.putMessage({ topic: "TopicTest", queueId: 1, body: body(10) });
            // Reopened below: the two new puts are kept, the torn record is not.
            recovery.maxPhyOffset = store.maxOffset;
            recovery.consumeQueues["TopicTest/1"].maxOffsetAfter = 38;
          }
        } finally {
          await store.close();
        }
      }
    } finally {
      removeDirectory(root);
    }
  });
});
