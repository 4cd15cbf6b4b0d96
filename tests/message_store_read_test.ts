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
import { createPort, MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import { removeDirectory } from "./_helpers.ts";
import {
  copyCorpusStore,
  CORPUS_OPTIONS,
  CORPUS_SKIP,
  type Json,
  readJson,
  readJsonLines,
} from "./_corpus_helpers.ts";
import { body, openMemoryStore, SEGMENT_BYTES } from "./_store_helpers.ts";

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

/** Fills queue T/0 with `count` messages of a `bodyBytes`-byte body; returns the record size. */
async function fillQueue(store: MessageStore, count: number, bodyBytes = 1000): Promise<number> {
  let size = 0;
  for (let i = 0; i < count; i++) {
    const r = await store.putMessage({ topic: "T", queueId: 0, body: body(bodyBytes, i) });
    assert.equal(r.status, "PUT_OK");
    size = r.appendResult!.wroteBytes;
  }
  await store.whenDispatched(store.maxOffset);
  return size;
}

describe("MessageStore pull limits", () => {
  // accessMessageInMemoryMaxRatio 100: every message is "in memory" (RAM is
  // larger than the test's log); 0: every message is "on disk".
  const cases: Array<{
    name: string;
    options: MessageStoreOptions;
    maxCount: number;
    expected: (recordBytes: number) => number;
  }> = [
    {
      name: "in memory: maxTransferCountOnMessageInMemory (32)",
      options: { accessMessageInMemoryMaxRatio: 100 },
      maxCount: 100,
      expected: () => 32,
    },
    {
      name: "in memory: maxTransferBytesOnMessageInMemory",
      options: { accessMessageInMemoryMaxRatio: 100, maxTransferBytesOnMessageInMemory: 5000 },
      maxCount: 100,
      expected: (size) => Math.floor(5000 / size),
    },
    {
      name: "on disk: maxTransferCountOnMessageInDisk (8)",
      options: { accessMessageInMemoryMaxRatio: 0 },
      maxCount: 100,
      expected: () => 8,
    },
    {
      name: "on disk: maxTransferBytesOnMessageInDisk",
      options: { accessMessageInMemoryMaxRatio: 0, maxTransferBytesOnMessageInDisk: 3000 },
      maxCount: 100,
      expected: (size) => Math.floor(3000 / size),
    },
    {
      name: "maxCount below the tier's limits",
      options: { accessMessageInMemoryMaxRatio: 0 },
      maxCount: 3,
      expected: () => 3,
    },
    {
      name: "one message larger than the byte limit still goes",
      options: { accessMessageInMemoryMaxRatio: 100, maxTransferBytesOnMessageInMemory: 100 },
      maxCount: 100,
      expected: () => 1,
    },
  ];
  for (const c of cases) {
    test(`getMessages() bounds a pull, ${c.name}`, async () => {
      const { store } = await openMemoryStore(c.options);
      try {
        const size = await fillQueue(store, 40);
        const want = c.expected(size);
        let next = 0;
        // Pages are bounded the same way all along the queue.
        while (next < 40) {
          const page = await store.getMessages("T", 0, next, c.maxCount);
          assert.equal(page.status, "FOUND");
          assert.equal(page.messages.length, Math.min(want, 40 - next));
          assert.deepEqual(
            page.messages.map((m) => m.queueOffset),
            page.messages.map((_, i) => next + i),
          );
          assert.equal(page.nextQueueOffset, next + page.messages.length);
          next = page.nextQueueOffset;
        }
      } finally {
        await store.close();
      }
    });
  }

  test("getMessages() with maxBytes is bounded by maxCount and maxBytes only", async () => {
    const { store } = await openMemoryStore({ accessMessageInMemoryMaxRatio: 0 });
    try {
      const size = await fillQueue(store, 40);
      const small = await store.getMessages("T", 0, 0, 100, { maxBytes: 2 * size + 1 });
      assert.equal(small.messages.length, 2);
      assert.equal(small.nextQueueOffset, 2);
      // Exactly at the limit: included.
      assert.equal(
        (await store.getMessages("T", 0, 0, 100, { maxBytes: 3 * size })).messages.length,
        3,
      );
      // Past the on-disk tier's 8 messages and 64 KiB.
      const large = await store.getMessages("T", 0, 0, 100, { maxBytes: 0x10_0000 });
      assert.equal(large.messages.length, 40);
      assert.equal(
        (await store.getMessages("T", 0, 5, 10, { maxBytes: 0x10_0000 })).messages.length,
        10,
      );
      // One message, however large.
      const one = await store.getMessages("T", 0, 7, 100, { maxBytes: 1 });
      assert.deepEqual(one.messages.map((m) => m.queueOffset), [7]);
      for (const maxBytes of [0, -1, 1.5, Number.NaN]) {
        await assert.rejects(store.getMessages("T", 0, 0, 1, { maxBytes }), RangeError);
      }
    } finally {
      await store.close();
    }
  });

  test("getMessages() counts the limits over served messages only, checking before the tags filter", async () => {
    const { store } = await openMemoryStore({
      accessMessageInMemoryMaxRatio: 100,
      maxTransferCountOnMessageInMemory: 2,
    });
    try {
      for (let i = 0; i < 10; i++) {
        const properties = { TAGS: i % 3 === 0 ? "red" : "blue" };
        await store.putMessage({ topic: "T", queueId: 0, body: body(50, i), properties });
      }
      await store.whenDispatched(store.maxOffset);
      // red: 0, 3, 6, 9. Two served; the batch is full at unit 4 (RocketMQ
      // checks before filtering), so the next pull starts there.
      const page = await store.getMessages("T", 0, 0, 32, { tags: ["red"] });
      assert.deepEqual(page.messages.map((m) => m.queueOffset), [0, 3]);
      assert.equal(page.nextQueueOffset, 4);
    } finally {
      await store.close();
    }
  });

  test("MessageStore.open() rejects transfer limits out of range", async () => {
    for (
      const options of [
        { maxTransferCountOnMessageInDisk: 0 },
        { maxTransferBytesOnMessageInMemory: -1 },
        { accessMessageInMemoryMaxRatio: 101 },
      ]
    ) {
      await assert.rejects(openMemoryStore(options), RangeError);
    }
  });
});

/** One `adviseCache` call seen by {@link advicePort}. */
interface AdviceCall {
  path: string;
  position: number;
  length: number;
  advice: string;
}

/**
 * Wraps `inner` so `FileHandle.adviseCache` calls are recorded and
 * `pageCacheState` answers "nothing cached" while `cold.value` is true.
 */
function advicePort(
  inner: RuntimePort,
  calls: AdviceCall[],
  cold: { value: boolean },
): RuntimePort {
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "adviseCache") {
          return (position: number, length: number, advice: string) => {
            calls.push({ path: target.path, position, length, advice });
            return value.call(target, position, length, advice);
          };
        }
        if (key === "pageCacheState") {
          return (position: number, length: number) =>
            cold.value
              ? { cachedPages: 0, dirtyPages: 0, writebackPages: 0 }
              : value.call(target, position, length);
        }
        return value.bind(target);
      },
    });
  return new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "createFile" || key === "openFile") {
        return async (...args: unknown[]) => wrapHandle(await value.apply(target, args));
      }
      return value.bind(target);
    },
  });
}

describe("MessageStore read-ahead", () => {
  // 64 KiB segments: 16 KiB windows, four per segment.
  const windowBytes = SEGMENT_BYTES / 4;

  test("getMessages() advises WILLNEED once per window ahead of a sequential reader, never past the readable end", async () => {
    const calls: AdviceCall[] = [];
    const cold = { value: true };
    const memory = new MemoryPort(runtimeName());
    const { store } = await openMemoryStore({ port: advicePort(memory, calls, cold) }, memory);
    try {
      await fillQueue(store, 200);
      const ends: number[] = [];
      let next = 0;
      for (let round = 0; round < 1000 && next < 200; round++) {
        const before = calls.length;
        const page = await store.getMessages("T", 0, next, 4);
        assert.equal(page.status, "FOUND");
        const last = page.messages.at(-1)!;
        const readEnd = last.physicalOffset + last.storeSize;
        ends.push(readEnd);
        for (const call of calls.slice(before)) {
          const start = Number(call.path.slice(-20));
          // Ahead of (or at the page of) where this read ended.
          assert.ok(
            start + call.position + call.length > readEnd,
            `${call.path}@${call.position} is ahead of ${readEnd}`,
          );
          assert.ok(start + call.position >= readEnd - windowBytes);
        }
        next = page.nextQueueOffset;
      }
      assert.equal(next, 200);
      const commitLog = calls.filter((call) => call.path.includes("/commitlog/"));
      assert.equal(commitLog.length, calls.length);
      const seen = new Set<string>();
      for (const call of commitLog) {
        assert.equal(call.advice, "willneed");
        const start = Number(call.path.slice(-20));
        assert.ok(call.length > 0);
        assert.ok(call.position + call.length <= SEGMENT_BYTES, "inside the segment");
        assert.ok(
          start + call.position + call.length <= store.maxOffset,
          "inside the readable log",
        );
        const window = `${start}/${Math.floor(call.position / windowBytes)}`;
        assert.ok(!seen.has(window), `window ${window} advised once`);
        seen.add(window);
      }
      // Every window of every segment the reader crossed, after the first one.
      const segments = Math.ceil(store.maxOffset / SEGMENT_BYTES);
      for (let s = 0; s < segments; s++) {
        const segmentEnd = Math.min(SEGMENT_BYTES, store.maxOffset - s * SEGMENT_BYTES);
        for (let w = 1; w * windowBytes < segmentEnd; w++) {
          assert.ok(seen.has(`${s * SEGMENT_BYTES}/${w}`), `window ${w} of segment ${s}`);
        }
      }

      // A second pass of the same reader advises again (an offset reset).
      const before = calls.length;
      await store.getMessages("T", 0, 0, 4);
      assert.ok(calls.length > before);
      // Data in the page cache is never advised.
      cold.value = false;
      const warm = calls.length;
      for (let q = 0; q < 200;) q = (await store.getMessages("T", 0, q, 4)).nextQueueOffset;
      assert.equal(calls.length, warm);
    } finally {
      await store.close();
    }
  });
});
