/**
 * The put path of the commit log, through the MessageStore facade on the
 * memory adapter: record fields, segment boundaries, BLANKs, batches,
 * delay rewrite, transactions, ordering under concurrency, and rejected
 * puts that must leave every file untouched.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  BLANK_MAGIC_CODE,
  type MessageInput,
  SCHEDULE_TOPIC,
  TRANSACTION_COMMIT_TYPE,
  TRANSACTION_PREPARED_TYPE,
  TRANSACTION_ROLLBACK_TYPE,
} from "../src/record/mod.ts";
import { AppendMessageResult } from "../src/commit_log/put_message_result.ts";
import {
  assertFilesUnchanged,
  body,
  openMemoryStore,
  readRecords,
  SEGMENT_BYTES,
  snapshotFiles,
} from "./_store_helpers.ts";

/** Record size of a message to topic "T" with no properties: 91 + 1 + body. */
const OVERHEAD_T = 92;

describe("CommitLog put path", () => {
  test("putMessage() writes every field and patches offsets and the store timestamp", async () => {
    const env = await openMemoryStore();
    try {
      env.clock.advance(5);
      const r1 = await env.store.putMessage({
        topic: "Orders",
        queueId: 3,
        body: body(10),
        properties: { TAGS: "created", KEYS: "k1 k2" },
        flag: 7,
        bornTimestamp: 123,
        bornHost: "10.0.0.1:5000",
        storeHost: "10.0.0.2:10911",
        reconsumeTimes: 2,
      });
      env.clock.advance(1);
      const r2 = await env.store.putMessage({ topic: "Orders", queueId: 3, body: body(20) });
      assert.equal(r1.status, "PUT_OK");
      assert.equal(r2.status, "PUT_OK");
      const a1 = r1.appendResult!;
      const a2 = r2.appendResult!;
      assert.equal(a1.wroteOffset, 0);
      assert.equal(a2.wroteOffset, a1.wroteBytes);
      assert.equal(a1.queueOffset, 0);
      assert.equal(a2.queueOffset, 1);
      assert.equal(a1.storeTimestamp, 1_700_000_000_005);
      assert.equal(a2.storeTimestamp, 1_700_000_000_006);
      assert.equal(a1.msgId, "0A00000200002A9F0000000000000000");
      await env.store.close();
      const records = await readRecords(env.port, env.directory);
      assert.equal(records.length, 2);
      const m = records[0]!.message;
      assert.equal(m.topic, "Orders");
      assert.equal(m.queueId, 3);
      assert.equal(m.flag, 7);
      assert.equal(m.bornTimestamp, 123);
      assert.equal(m.bornHost, "10.0.0.1:5000");
      assert.equal(m.storeHost, "10.0.0.2:10911");
      assert.equal(m.reconsumeTimes, 2);
      assert.equal(m.storeTimestamp, 1_700_000_000_005);
      assert.equal(m.physicalOffset, 0);
      assert.equal(m.storeSize, a1.wroteBytes);
      assert.deepEqual(m.pairs, [["TAGS", "created"], ["KEYS", "k1 k2"]]);
      assert.deepEqual(m.body, body(10));
      assert.equal(records[1]!.message.queueOffset, 1);
      assert.equal(records[1]!.message.physicalOffset, a2.wroteOffset);
    } finally {
      await env.store.close();
    }
  });

  for (
    const [label, delta, expected] of [
      ["segment size - 8", 8, "PUT_OK"],
      ["segment size - 7", 7, "MESSAGE_ILLEGAL"],
    ] as const
  ) {
    test(`putMessage() of a record of ${label} bytes answers ${expected}`, async () => {
      const env = await openMemoryStore({ maxMessageSize: SEGMENT_BYTES * 2 });
      try {
        await env.store.whenDispatched(env.store.maxOffset);
        const before = await snapshotFiles(env.port, env.directory);
        const size = SEGMENT_BYTES - delta;
        const r = await env.store.putMessage({
          topic: "T",
          queueId: 0,
          body: body(size - OVERHEAD_T),
        });
        assert.equal(r.status, expected);
        if (expected === "PUT_OK") {
          assert.equal(r.appendResult!.wroteBytes, size);
          // The next record goes to the next segment, after an 8-byte BLANK.
          const next = await env.store.putMessage({ topic: "T", queueId: 0, body: body(1) });
          assert.equal(next.appendResult!.wroteOffset, SEGMENT_BYTES);
          assert.equal(next.appendResult!.queueOffset, 1);
          await env.store.close();
          const bytes = (await env.port.readFile(`${env.directory}/commitlog/${"0".repeat(20)}`))!;
          const view = new DataView(bytes.buffer, bytes.byteOffset);
          assert.equal(view.getInt32(size), 8);
          assert.equal(view.getInt32(size + 4), BLANK_MAGIC_CODE);
          assert.equal((await readRecords(env.port, env.directory)).length, 2);
        } else {
          assert.equal(r.error?.code, "MESSAGE_ILLEGAL");
          assert.match(r.error!.message, /65529 bytes.*65536/);
          assertFilesUnchanged(before, await snapshotFiles(env.port, env.directory));
          assert.equal(env.store.nextQueueOffset("T", 0), 0);
        }
      } finally {
        await env.store.close();
      }
    });
  }

  test("putMessage() ends a segment with a BLANK and moves the record whole to the next", async () => {
    const env = await openMemoryStore();
    try {
      // 8 records of 8000 bytes: 64000, leaving 1536 bytes.
      for (let i = 0; i < 8; i++) {
        const r = await env.store.putMessage({
          topic: "T",
          queueId: 0,
          body: body(8000 - OVERHEAD_T, i),
        });
        assert.equal(r.appendResult!.wroteOffset, i * 8000);
      }
      // 1528 + 8 = 1536 fits exactly: stored in this segment.
      const exact = await env.store.putMessage({
        topic: "T",
        queueId: 0,
        body: body(1528 - OVERHEAD_T),
      });
      assert.equal(exact.appendResult!.wroteOffset, 64000);
      // Nothing but the BLANK fits now.
      const moved = await env.store.putMessage({ topic: "T", queueId: 0, body: body(1) });
      assert.equal(moved.appendResult!.wroteOffset, SEGMENT_BYTES);
      assert.equal(moved.appendResult!.queueOffset, 9);
      await env.store.close();
      const bytes = (await env.port.readFile(`${env.directory}/commitlog/${"0".repeat(20)}`))!;
      const view = new DataView(bytes.buffer, bytes.byteOffset);
      assert.equal(view.getInt32(65528), 8);
      assert.equal(view.getInt32(65532), BLANK_MAGIC_CODE);
      const records = await readRecords(env.port, env.directory);
      assert.deepEqual(records.map((r) => r.message.queueOffset), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    } finally {
      await env.store.close();
    }
  });

  test("putMessage() leaves the bytes after a BLANK untouched (zeros)", async () => {
    const env = await openMemoryStore({ maxMessageSize: SEGMENT_BYTES });
    try {
      await env.store.putMessage({ topic: "T", queueId: 0, body: body(60000) });
      await env.store.putMessage({ topic: "T", queueId: 0, body: body(6000) });
      await env.store.close();
      const bytes = (await env.port.readFile(`${env.directory}/commitlog/${"0".repeat(20)}`))!;
      const blankAt = 60000 + OVERHEAD_T;
      const view = new DataView(bytes.buffer, bytes.byteOffset);
      assert.equal(view.getInt32(blankAt), SEGMENT_BYTES - blankAt);
      assert.equal(view.getInt32(blankAt + 4), BLANK_MAGIC_CODE);
      assert.ok(bytes.subarray(blankAt + 8).every((b) => b === 0));
    } finally {
      await env.store.close();
    }
  });

  for (const pool of [false, true]) {
    test(`putMessage() leaves zeros after every BLANK when write buffers are reused (pool ${pool})`, async () => {
      const env = await openMemoryStore({
        maxMessageSize: SEGMENT_BYTES,
        transientStorePoolEnable: pool,
        transientStorePoolSize: 3,
        commitIntervalCommitLog: 1,
        flushIntervalCommitLog: 1,
      });
      try {
        // Segments full of non-zero bytes, each ended by a BLANK of a different size.
        for (let i = 0; i < 12; i++) {
          const r = await env.store.putMessage({
            topic: "T",
            queueId: 0,
            body: body(52_000 - i * 997, i + 1),
          });
          assert.equal(r.status, "PUT_OK");
          env.clock.advance(1);
        }
      } finally {
        await env.store.close();
      }
      const records = await readRecords(env.port, env.directory);
      assert.equal(records.length, 12);
      for (const record of records) {
        const start = record.offset - record.offset % SEGMENT_BYTES;
        const bytes = (await env.port.readFile(
          `${env.directory}/commitlog/${String(start).padStart(20, "0")}`,
        ))!;
        const blankAt = record.offset - start + record.message.storeSize;
        if (blankAt + 8 > SEGMENT_BYTES) continue;
        const view = new DataView(bytes.buffer, bytes.byteOffset);
        if (view.getInt32(blankAt + 4) !== BLANK_MAGIC_CODE) continue;
        assert.ok(
          bytes.subarray(blankAt + 8).every((b) => b === 0),
          `zeros after the BLANK at ${start + blankAt}`,
        );
      }
    });
  }

  test("AppendMessageResult.msgId joins each record's id, from the batch's sizes or their one size", () => {
    const host = "10.0.0.2:10911";
    const single = (offset: number) => new AppendMessageResult(offset, 1, 0, 0, 1, host).msgId;
    const sizes = new Int32Array([120, 95, 4000, 96]);
    const mixed = new AppendMessageResult(2 ** 33 + 7, 4311, 0, 5, 4, host, sizes);
    assert.equal(
      mixed.msgId,
      [2 ** 33 + 7, 2 ** 33 + 127, 2 ** 33 + 222, 2 ** 33 + 4222].map(single).join(","),
    );
    const uniform = new AppendMessageResult(300, 3 * 150, 0, 0, 3, host, 150);
    assert.equal(uniform.msgId, [300, 450, 600].map(single).join(","));
    assert.equal(uniform.toJSON().msgId, uniform.msgId);
  });

  test("putMessages() answers every member's msgId, in place, near a segment end and queued", async () => {
    const env = await openMemoryStore();
    try {
      // Unawaited batches of members of varied sizes, over several segments:
      // encoded in place, into the scratch near a segment end, and queued
      // behind a segment change.
      const puts: Promise<Awaited<ReturnType<typeof env.store.putMessages>>>[] = [];
      for (let b = 0; b < 150; b++) {
        const batch: MessageInput[] = [];
        for (let i = 0; i < 1 + (b % 12); i++) {
          // Every fourth batch of records of one size (its result keeps just that).
          const bytes = b % 4 === 0 ? 50 + b : 1 + ((b * 37 + i * 101) % 400);
          batch.push({ topic: "Ids", queueId: b % 3, body: body(bytes, i) });
        }
        const put = env.store.putMessages(batch);
        puts.push(put);
        // Mostly one at a time (in place, or through the scratch near a
        // segment end), every fifth batch along with the next ones (queued).
        if (b % 5 !== 0) await put;
      }
      const results = await Promise.all(puts);
      await env.store.close();
      const records = await readRecords(env.port, env.directory);
      const idAt = new Map(records.map((x) => [x.offset, x.message.msgId]));
      const segments = new Set(records.map((x) => Math.floor(x.offset / SEGMENT_BYTES)));
      assert.ok(segments.size >= 3, `${segments.size} segments`);
      for (const [b, r] of results.entries()) {
        assert.equal(r.status, "PUT_OK");
        const append = r.appendResult!;
        const expected: string[] = [];
        let offset = append.wroteOffset;
        for (let i = 0; i < append.messageCount; i++) {
          const id = idAt.get(offset);
          assert.ok(id !== undefined, `batch ${b}: a record at ${offset}`);
          expected.push(id);
          offset = records.find((x) => x.offset === offset)!.message.storeSize + offset;
        }
        assert.equal(offset - append.wroteOffset, append.wroteBytes, `batch ${b}: sizes`);
        assert.equal(append.msgId, expected.join(","), `batch ${b}`);
      }
    } finally {
      await env.store.close();
    }
  });

  test("putMessages() stores a batch with consecutive queue offsets and shared fields", async () => {
    const env = await openMemoryStore();
    try {
      await env.store.putMessage({ topic: "B", queueId: 1, body: body(5) });
      env.clock.advance(3);
      const r = await env.store.putMessages([
        {
          topic: "B",
          queueId: 1,
          body: body(10, 1),
          flag: 1,
          bornTimestamp: 55,
          properties: { KEYS: "a" },
        },
        { topic: "B", queueId: 1, body: body(20, 2), flag: 2, bornTimestamp: 99 },
        { topic: "B", queueId: 1, body: body(30, 3), flag: 3 },
      ]);
      assert.equal(r.status, "PUT_OK");
      assert.equal(r.appendResult!.messageCount, 3);
      assert.equal(r.appendResult!.queueOffset, 1);
      assert.equal(r.appendResult!.msgId.split(",").length, 3);
      assert.equal(env.store.nextQueueOffset("B", 1), 4);
      await env.store.close();
      const records = (await readRecords(env.port, env.directory)).slice(1);
      assert.equal(r.appendResult!.msgId, records.map((x) => x.message.msgId).join(","));
      assert.deepEqual(records.map((x) => x.message.queueOffset), [1, 2, 3]);
      assert.deepEqual(records.map((x) => x.message.flag), [1, 2, 3]);
      assert.deepEqual(records.map((x) => x.message.bornTimestamp), [55, 55, 55]);
      assert.deepEqual(records.map((x) => x.message.storeTimestamp), [
        1_700_000_000_003,
        1_700_000_000_003,
        1_700_000_000_003,
      ]);
      assert.equal(records[0]!.offset, r.appendResult!.wroteOffset);
      assert.equal(
        records[2]!.offset + records[2]!.message.storeSize - records[0]!.offset,
        r.appendResult!.wroteBytes,
      );
      assert.deepEqual(records[1]!.message.body, body(20, 2));
    } finally {
      await env.store.close();
    }
  });

  test("putMessages() takes sysFlag, hosts, reconsumeTimes and bornTimestamp from the first message", async () => {
    const env = await openMemoryStore();
    try {
      env.clock.advance(5);
      const r = await env.store.putMessages([
        {
          topic: "H",
          queueId: 0,
          body: body(4, 1),
          bornHost: "10.0.0.1:1",
          storeHost: "10.0.0.2:2",
          reconsumeTimes: 3,
        },
        {
          topic: "H",
          queueId: 0,
          body: body(4, 2),
          // An IPv6 store host of its own would make this record 12 bytes longer.
          bornHost: "10.9.9.9:9",
          storeHost: "[::1]:7",
          reconsumeTimes: 8,
          bornTimestamp: 42,
          sysFlag: 0x1,
        },
      ]);
      assert.equal(r.status, "PUT_OK");
      await env.store.close();
      const records = await readRecords(env.port, env.directory);
      assert.equal(records.length, 2);
      assert.equal(r.appendResult!.wroteBytes, 2 * (91 + 4 + 1));
      for (const record of records) {
        assert.equal(record.message.bornHost, "10.0.0.1:1");
        assert.equal(record.message.storeHost, "10.0.0.2:2");
        assert.equal(record.message.reconsumeTimes, 3);
        assert.equal(record.message.sysFlag, 0);
        // The first has none: the put's start time, as the records' storeTimestamp.
        assert.equal(record.message.bornTimestamp, 1_700_000_000_005);
        assert.equal(record.message.storeTimestamp, 1_700_000_000_005);
      }
    } finally {
      await env.store.close();
    }
  });

  test("putMessages() moves a whole batch to the next segment", async () => {
    const env = await openMemoryStore({ maxMessageSize: SEGMENT_BYTES });
    try {
      await env.store.putMessage({ topic: "T", queueId: 0, body: body(60000) });
      const r = await env.store.putMessages([
        { topic: "T", queueId: 0, body: body(3000, 1) },
        { topic: "T", queueId: 0, body: body(3000, 2) },
      ]);
      assert.equal(r.status, "PUT_OK");
      assert.equal(r.appendResult!.wroteOffset, SEGMENT_BYTES);
      assert.equal(r.appendResult!.queueOffset, 1);
    } finally {
      await env.store.close();
    }
  });

  for (
    const [label, batch] of [
      ["two queues", [{ topic: "T", queueId: 0 }, { topic: "T", queueId: 1 }]],
      ["two topics", [{ topic: "T", queueId: 0 }, { topic: "U", queueId: 0 }]],
      ["a PREPARED message", [{ topic: "T", queueId: 0, sysFlag: TRANSACTION_PREPARED_TYPE }]],
      ["a DELAY", [{ topic: "T", queueId: 0, properties: { DELAY: "2" } }]],
      ["no message", []],
      ["more than maxMessageSize", [
        { topic: "T", queueId: 0, bodyLength: 5000 },
        { topic: "T", queueId: 0, bodyLength: 5000 },
      ]],
    ] as const
  ) {
    test(`putMessages() refuses a batch with ${label} and writes nothing`, async () => {
      const env = await openMemoryStore();
      try {
        await env.store.putMessage({ topic: "T", queueId: 0, body: body(5) });
        await env.store.whenDispatched(env.store.maxOffset);
        const before = await snapshotFiles(env.port, env.directory);
        const messages = (batch as readonly Record<string, unknown>[]).map((m) => ({
          ...m,
          body: body((m.bodyLength as number | undefined) ?? 4),
        })) as unknown as MessageInput[];
        const r = await env.store.putMessages(messages);
        assert.equal(r.status, "MESSAGE_ILLEGAL");
        assert.equal(r.error?.code, "MESSAGE_ILLEGAL");
        assertFilesUnchanged(before, await snapshotFiles(env.port, env.directory));
        assert.equal(env.store.nextQueueOffset("T", 0), 1);
        assert.equal(env.store.maxOffset, 97);
      } finally {
        await env.store.close();
      }
    });
  }

  test("putMessage() rewrites a delayed message to SCHEDULE_TOPIC_XXXX", async () => {
    const env = await openMemoryStore();
    try {
      const cases: [MessageInput, string, number, [string, string][]][] = [
        [
          {
            topic: "Orders",
            queueId: 5,
            body: body(3),
            properties: [["TAGS", "t"], ["DELAY", "3"]],
          },
          SCHEDULE_TOPIC,
          2,
          [["TAGS", "t"], ["DELAY", "3"], ["REAL_TOPIC", "Orders"], ["REAL_QID", "5"]],
        ],
        [
          { topic: "Orders", queueId: 1, body: body(3), properties: { DELAY: "99" } },
          SCHEDULE_TOPIC,
          17,
          [["DELAY", "18"], ["REAL_TOPIC", "Orders"], ["REAL_QID", "1"]],
        ],
        [
          { topic: "Orders", queueId: 1, body: body(3), properties: { DELAY: "0" } },
          "Orders",
          1,
          [["DELAY", "0"]],
        ],
        [
          {
            topic: "Orders",
            queueId: 1,
            body: body(3),
            sysFlag: TRANSACTION_PREPARED_TYPE,
            properties: { DELAY: "3" },
          },
          "Orders",
          1,
          [["DELAY", "3"]],
        ],
        [
          {
            topic: "Orders",
            queueId: 2,
            body: body(3),
            sysFlag: TRANSACTION_COMMIT_TYPE,
            properties: new Map([["DELAY", "1"]]),
          },
          SCHEDULE_TOPIC,
          0,
          [["DELAY", "1"], ["REAL_TOPIC", "Orders"], ["REAL_QID", "2"]],
        ],
      ];
      for (const [message] of cases) {
        assert.equal((await env.store.putMessage(message)).status, "PUT_OK");
      }
      assert.equal(env.store.nextQueueOffset(SCHEDULE_TOPIC, 2), 1);
      assert.equal(env.store.nextQueueOffset(SCHEDULE_TOPIC, 17), 1);
      await env.store.close();
      const records = await readRecords(env.port, env.directory);
      cases.forEach(([, topic, queueId, pairs], i) => {
        const m = records[i]!.message;
        assert.equal(m.topic, topic, `case ${i}`);
        assert.equal(m.queueId, queueId, `case ${i}`);
        assert.deepEqual(m.pairs, pairs, `case ${i}`);
      });
    } finally {
      await env.store.close();
    }
  });

  test("putMessage() refuses a DELAY that is not a level, and a delayed message with a bad topic", async () => {
    const env = await openMemoryStore();
    try {
      await env.store.whenDispatched(env.store.maxOffset);
      const before = await snapshotFiles(env.port, env.directory);
      const bad = await env.store.putMessage({
        topic: "T",
        queueId: 0,
        body: body(1),
        properties: { DELAY: "soon" },
      });
      assert.equal(bad.status, "MESSAGE_ILLEGAL");
      const badTopic = await env.store.putMessage({
        topic: "bad topic",
        queueId: 0,
        body: body(1),
        properties: { DELAY: "1" },
      });
      assert.equal(badTopic.status, "MESSAGE_ILLEGAL");
      assertFilesUnchanged(before, await snapshotFiles(env.port, env.directory));
    } finally {
      await env.store.close();
    }
  });

  test("putMessage() gives PREPARED and ROLLBACK queue offset 0 without advancing the queue", async () => {
    const env = await openMemoryStore();
    try {
      const put = (sysFlag: number) =>
        env.store.putMessage({ topic: "Tx", queueId: 0, body: body(4), sysFlag });
      const results = [
        await put(0),
        await put(TRANSACTION_PREPARED_TYPE),
        await put(TRANSACTION_COMMIT_TYPE),
        await put(TRANSACTION_ROLLBACK_TYPE),
        await put(0),
      ];
      assert.deepEqual(results.map((r) => r.appendResult!.queueOffset), [0, 0, 1, 0, 2]);
      assert.equal(env.store.nextQueueOffset("Tx", 0), 3);
      await env.store.close();
      const records = await readRecords(env.port, env.directory);
      assert.deepEqual(records.map((r) => r.message.queueOffset), [0, 0, 1, 0, 2]);
    } finally {
      await env.store.close();
    }
  });

  for (const mode of ["ASYNC_FLUSH", "SYNC_FLUSH"] as const) {
    test(`putMessage() keeps offsets gap-free under 100 concurrent producers (${mode})`, async () => {
      const env = await openMemoryStore({ flushDiskType: mode });
      try {
        const producer = async (p: number) => {
          const results = [];
          for (let i = 0; i < 20; i++) {
            const r = await env.store.putMessage({
              topic: "C",
              queueId: p % 4,
              body: body(50 + ((p * 31 + i * 17) % 700), p * 100 + i),
              properties: { KEYS: `p${p}-${i}` },
            });
            results.push(r);
          }
          return results;
        };
        const all = (await Promise.all(Array.from({ length: 100 }, (_, p) => producer(p)))).flat();
        assert.ok(all.every((r) => r.status === "PUT_OK"));
        const appended = all.map((r) => r.appendResult!).sort((a, b) =>
          a.wroteOffset - b.wroteOffset
        );
        let expected = 0;
        for (const a of appended) {
          // A record starts where the last ended, or at the next segment (BLANK).
          if (a.wroteOffset !== expected) {
            assert.equal(a.wroteOffset, Math.ceil(expected / SEGMENT_BYTES) * SEGMENT_BYTES);
          }
          expected = a.wroteOffset + a.wroteBytes;
        }
        await env.store.close();
        const records = await readRecords(env.port, env.directory);
        assert.equal(records.length, 2000);
        for (let q = 0; q < 4; q++) {
          const queueOffsets = records.filter((r) => r.message.queueId === q).map((r) =>
            r.message.queueOffset
          );
          assert.deepEqual(queueOffsets, queueOffsets.map((_, i) => i));
        }
        // Each producer's puts are in its call order.
        for (let p = 0; p < 100; p++) {
          const mine = records.filter((r) =>
            r.message.properties.get("KEYS")?.startsWith(`p${p}-`)
          );
          assert.deepEqual(
            mine.map((r) => r.message.properties.get("KEYS")),
            mine.map((_, i) => `p${p}-${i}`),
          );
        }
      } finally {
        await env.store.close();
      }
    });
  }

  test("putMessage() rejects only wrong argument types, with a TypeError", async () => {
    const env = await openMemoryStore();
    try {
      await assert.rejects(env.store.putMessage(null as unknown as MessageInput), TypeError);
      await assert.rejects(
        env.store.putMessage({ topic: "T", queueId: 0, body: "x" } as unknown as MessageInput),
        TypeError,
      );
      await assert.rejects(env.store.putMessages("x" as unknown as MessageInput[]), TypeError);
      // The store still works.
      assert.equal(
        (await env.store.putMessage({ topic: "T", queueId: 0, body: body(1) })).status,
        "PUT_OK",
      );
    } finally {
      await env.store.close();
    }
  });

  test("putMessage() leaves files and queue offsets unchanged for every rejected put", async () => {
    const env = await openMemoryStore();
    try {
      await env.store.putMessage({ topic: "T", queueId: 0, body: body(100) });
      await env.store.whenDispatched(env.store.maxOffset);
      const before = await snapshotFiles(env.port, env.directory);
      const rejected: [MessageInput, string][] = [
        [{ topic: "T", queueId: 0, body: body(0x2001) }, "MESSAGE_ILLEGAL"],
        [{ topic: "bad topic", queueId: 0, body: body(1) }, "MESSAGE_ILLEGAL"],
        [{ topic: "x".repeat(128), queueId: 0, body: body(1) }, "MESSAGE_ILLEGAL"],
        [{ topic: "T", queueId: -1, body: body(1) }, "MESSAGE_ILLEGAL"],
        [
          { topic: "T", queueId: 0, body: body(1), properties: { A: "a\u0001b" } },
          "MESSAGE_ILLEGAL",
        ],
        [
          { topic: "T", queueId: 0, body: body(1), properties: { A: "x".repeat(40000) } },
          "PROPERTIES_SIZE_EXCEEDED",
        ],
        [{ topic: "T", queueId: 0, body: body(1), bornHost: "nohost" }, "MESSAGE_ILLEGAL"],
      ];
      for (const [message, status] of rejected) {
        const r = await env.store.putMessage(message);
        assert.equal(r.status, status, JSON.stringify(message.topic));
        assert.equal(r.error?.code, status);
        assert.equal(r.appendResult, undefined);
      }
      assertFilesUnchanged(before, await snapshotFiles(env.port, env.directory));
      assert.equal(env.store.nextQueueOffset("T", 0), 1);
      assert.equal(env.store.stats().putFailures.MESSAGE_ILLEGAL, 6);
      // A good put right after lands where the log ended.
      const ok = await env.store.putMessage({ topic: "T", queueId: 0, body: body(1) });
      assert.equal(ok.appendResult!.wroteOffset, 192);
      assert.equal(ok.appendResult!.queueOffset, 1);
      await env.store.close();
      const afterClose = await snapshotFiles(env.port, env.directory);
      const closed = await env.store.putMessage({ topic: "T", queueId: 0, body: body(1) });
      assert.equal(closed.status, "SERVICE_NOT_AVAILABLE");
      assertFilesUnchanged(afterClose, await snapshotFiles(env.port, env.directory));
    } finally {
      await env.store.close();
    }
  });

  test("putMessages() leaves files and queue offsets unchanged for every rejected batch", async () => {
    const env = await openMemoryStore();
    try {
      await env.store.putMessage({ topic: "T", queueId: 0, body: body(100) });
      await env.store.whenDispatched(env.store.maxOffset);
      const before = await snapshotFiles(env.port, env.directory);
      const good = (i: number): MessageInput => ({
        topic: "T",
        queueId: 0,
        body: body(50, i),
        properties: { TAGS: "a", KEYS: `k${i}` },
      });
      // Two good members first: they are encoded into the segment before
      // the third is found bad, and must be undone.
      const rejected: [MessageInput, string, RegExp][] = [
        [{ topic: "U", queueId: 0, body: body(1) }, "MESSAGE_ILLEGAL", /goes to U\/0/],
        [
          { topic: "T", queueId: 0, body: body(1), properties: { A: "a\u0002b" } },
          "MESSAGE_ILLEGAL",
          /^Message 2 of the batch: Property "A"/,
        ],
        [
          { topic: "T", queueId: 0, body: body(1), properties: { A: "x".repeat(40000) } },
          "PROPERTIES_SIZE_EXCEEDED",
          /^Message 2 of the batch/,
        ],
        [
          { topic: "T", queueId: 0, body: body(1), properties: { DELAY: "3" } },
          "MESSAGE_ILLEGAL",
          /DELAY/,
        ],
        // 2 × 2.5 KiB fit maxMessageSize (8 KiB); a third 4 KiB record does not.
        [
          { topic: "T", queueId: 0, body: body(0x1000) },
          "MESSAGE_ILLEGAL",
          /^The batch is over \d+ bytes at message 2, maxMessageSize is 8192 bytes$/,
        ],
      ];
      for (const [third, status, why] of rejected) {
        const big = third.body.length === 0x1000;
        const first = big ? { ...good(0), body: body(0xA00, 0) } : good(0);
        const second = big ? { ...good(1), body: body(0xA00, 1) } : good(1);
        const r = await env.store.putMessages([first, second, third, good(3)]);
        assert.equal(r.status, status, why.source);
        assert.equal(r.error?.code, status);
        assert.match(r.error!.message, why);
        assert.equal(r.appendResult, undefined);
        assertFilesUnchanged(before, await snapshotFiles(env.port, env.directory));
      }
      // A member of the wrong type throws, and leaves nothing either.
      await assert.rejects(
        env.store.putMessages([good(0), good(1), {
          topic: "T",
          queueId: 0,
          body: "text" as unknown as Uint8Array,
        }]),
        TypeError,
      );
      assertFilesUnchanged(before, await snapshotFiles(env.port, env.directory));
      assert.equal(env.store.nextQueueOffset("T", 0), 1);
      // A good batch right after lands where the log ended.
      const ok = await env.store.putMessages([good(0), good(1)]);
      assert.equal(ok.status, "PUT_OK");
      assert.equal(ok.appendResult!.wroteOffset, 192);
      assert.equal(ok.appendResult!.queueOffset, 1);
      await env.store.close();
      const records = (await readRecords(env.port, env.directory)).slice(1);
      assert.deepEqual(records.map((x) => x.message.queueOffset), [1, 2]);
      assert.deepEqual(records.map((x) => x.message.pairs), [
        [["TAGS", "a"], ["KEYS", "k0"]],
        [["TAGS", "a"], ["KEYS", "k1"]],
      ]);
    } finally {
      await env.store.close();
    }
  });

  test("stats() counts puts per topic and latency buckets", async () => {
    const env = await openMemoryStore();
    try {
      await env.store.putMessage({ topic: "A", queueId: 0, body: body(8) });
      await env.store.putMessage({ topic: "A", queueId: 0, body: body(8) });
      await env.store.putMessage({ topic: "B", queueId: 0, body: body(8) });
      const stats = env.store.stats();
      assert.equal(stats.putCount, 3);
      assert.deepEqual(stats.topics.A, { putCount: 2, putBytes: 200 });
      assert.equal(stats.putLatency["<=0ms"], 3);
    } finally {
      await env.store.close();
    }
  });
});
