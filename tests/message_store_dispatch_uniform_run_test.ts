/**
 * Uniform runs: the members of a batch without properties are staged a
 * range at a time (`DispatchHints.stageBare`), published with range fills
 * and marked as one run (`runCounts`), and the dispatcher writes their
 * consume-queue units from the run's first hint
 * (`ConsumeQueue.putUniformRunNow`). What it writes must be what the
 * decode writes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DispatchHints, HINT_KEYS_MAX } from "../src/commit_log/dispatch_hints.ts";
import type { QueueCounter } from "../src/commit_log/topic_queue_table.ts";
import type { MessageInput } from "../src/record/mod.ts";
import { ConsumeQueue } from "../src/store/consume_queue.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import { prng } from "./_prng.ts";
import { adapterCases, withSegmentEnv } from "./_segment_helpers.ts";
import { body, dispatchFiles, openMemoryStore, removeFiles } from "./_store_helpers.ts";

const noPairs = { pairCount: 0, pairsKnown: true, pairName: () => "", pairValue: () => "" };
const tagsPairs = {
  pairCount: 1,
  pairsKnown: true,
  pairName: () => "TAGS",
  pairValue: () => "TagA",
};

/** Every field of the `count` hints from the oldest, slot by slot. */
function hintFields(hints: DispatchHints, count: number): unknown[] {
  const fields: unknown[] = [];
  for (let k = 0; k < count; k++) {
    const s = hints.slotAt(k);
    fields.push([
      hints.offsets[s],
      hints.sizes[s],
      hints.queueOffsets[s],
      hints.storeTimestamps[s],
      hints.tagsCodes[s],
      hints.transactionTypes[s],
      hints.queueIds[s],
      hints.topics[s],
      hints.keyCounts[s],
      hints.counters[s],
      [...hints.keyHashes.subarray(s * HINT_KEYS_MAX, s * HINT_KEYS_MAX + hints.keyCounts[s]!)],
    ]);
  }
  return fields;
}

describe("DispatchHints uniform runs", () => {
  test("DispatchHints.stageBare() and a uniform publishRun() give the hints stage() and publish() give", () => {
    const counter: QueueCounter = { next: 0, dispatchCache: undefined };
    // A small ring that grows while staging, then wraps around its end.
    const byRange = new DispatchHints({ withKeys: true });
    const byRecord = new DispatchHints({ withKeys: true });
    let offset = 1000;
    let queueOffset = 5;
    for (const count of [3, 200, 700, 1, 2, 513]) {
      byRange.beginStage();
      byRecord.beginStage();
      byRange.stage("T", 2, noPairs);
      byRange.stageBare("T", 2, count - 1);
      for (let i = 0; i < count; i++) byRecord.stage("T", 2, noPairs);
      assert.equal(byRange.stagedCount, count);
      const sizes = new Int32Array(count).fill(90);
      byRange.publishRun(count, offset, sizes, queueOffset, 77, 0, counter, 90);
      byRecord.publishRun(count, offset, sizes, queueOffset, 77, 0, counter);
      byRange.commit(count);
      byRecord.commit(count);
      assert.deepEqual(hintFields(byRange, count), hintFields(byRecord, count));
      assert.equal(byRange.runCounts[byRange.slotAt(0)], count);
      // Half dispatched: the rest is still one run.
      const half = count >> 1;
      if (half > 0 && count > 1) {
        byRange.consumeRun(half);
        assert.equal(byRange.runCounts[byRange.slotAt(0)], count - half);
        byRange.consumeRun(count - half);
      } else {
        byRange.consumeRun(count);
      }
      byRecord.consumeRun(count);
      assert.equal(byRange.length, 0);
      offset += 90 * count;
      queueOffset += count;
    }
  });

  test("DispatchHints.publishRun() marks no run when a member has properties or the sizes differ", () => {
    const hints = new DispatchHints({ withKeys: false });
    hints.beginStage();
    hints.stage("T", 0, noPairs);
    hints.stageBare("T", 0, 2);
    hints.stage("T", 0, tagsPairs);
    hints.publishRun(4, 0, new Int32Array([50, 50, 50, 50]), 0, 1, 0, undefined, 50);
    hints.commit(4);
    assert.equal(hints.runCounts[hints.slotAt(0)], 0);
    assert.equal(hints.tagsCodes[hints.slotAt(3)], 2598919);
    hints.consumeRun(4);
    hints.beginStage();
    hints.stage("T", 0, noPairs);
    hints.stageBare("T", 0, 1);
    hints.publishRun(2, 200, new Int32Array([50, 60]), 4, 1, 0, undefined, -1);
    hints.commit(2);
    assert.equal(hints.runCounts[hints.slotAt(0)], 0);
    assert.deepEqual([hints.offsets[hints.slotAt(1)], hints.sizes[hints.slotAt(1)]], [250, 60]);
  });

  test("DispatchHints.stageBare() past a full ring commits none of the put's records", () => {
    const hints = new DispatchHints({ withKeys: false, capacity: 8 });
    hints.beginStage();
    hints.stage("T", 0, noPairs);
    hints.stageBare("T", 0, 8);
    hints.publishRun(9, 0, new Int32Array(9).fill(40), 0, 1, 0, undefined, 40);
    hints.commit(9);
    assert.equal(hints.length, 0);
    hints.beginStage();
    hints.stageBare("T", 0, 8);
    hints.publishRun(8, 0, new Int32Array(8).fill(40), 0, 1, 0, undefined, 40);
    hints.commit(8);
    assert.equal(hints.length, 8);
  });
});

const cases = await adapterCases();

describe("ConsumeQueue uniform runs", () => {
  for (const { adapter, skip } of cases) {
    test(
      `ConsumeQueue.putUniformRunNow() writes the bytes putUnitNow() writes unit by unit (${adapter})`,
      {
        skip,
      },
      async () => {
        await withSegmentEnv(adapter, async (env) => {
          const queueOf = (topic: string) =>
            new ConsumeQueue({
              port: env.port,
              rootDirectory: env.directory,
              topic,
              queueId: 0,
              mappedFileSizeConsumeQueue: 200,
              sparse: true,
            });
          const byRun = queueOf("ByRun");
          const byUnit = queueOf("ByUnit");
          for (const cq of [byRun, byUnit]) {
            await cq.load();
            await cq.recover();
            assert.equal(await cq.putUnit(0x1_0000_0000 - 100, 50, 7, 0), true);
          }
          if (byRun.files[0]!.writeMode === "mapping") {
            // A unit before the last one's end, a tagsCode not an integer:
            // refused, nothing written.
            assert.throws(
              () => byRun.putUniformRunNow(2, 1, 0x1_0000_0000 - 55, 10, 0),
              RangeError,
            );
            assert.throws(
              () => byRun.putUniformRunNow(2, 1, 0x1_0000_0000 - 50, 10, 0.5),
              RangeError,
            );
            assert.equal(byRun.maxOffsetInQueue, 1);
          }
          // Offsets across 2^32, a negative tagsCode; 9 units fill the file.
          const from = 0x1_0000_0000 - 20;
          const put = byRun.putUniformRunNow(12, 1, from, 10, -3);
          if (put === 0) {
            // Not written through a mapping: it declines.
            assert.equal(byRun.files[0]!.writeMode !== "mapping", true);
          } else {
            assert.equal(put, 9);
            for (let i = 0; i < 9; i++) {
              assert.equal(byUnit.putUnitNow(from + 10 * i, 10, -3, 1 + i), true);
            }
            for (let q = 0; q < 10; q++) {
              assert.deepEqual(await byRun.getUnit(q), await byUnit.getUnit(q));
            }
            assert.deepEqual(await byRun.getUnit(3), {
              commitLogOffset: 0x1_0000_0000 + 0,
              size: 10,
              tagsCode: -3,
            });
            // A repeat: nothing written.
            assert.equal(byRun.putUniformRunNow(2, 1, from, 10, -3), 0);
            assert.equal(byRun.maxOffsetInQueue, 10);
          }
          await byRun.close();
          await byUnit.close();
        });
      },
    );
  }
});

/** Puts `count` records: bare batches of one size mostly, some mixed ones, some single puts. */
async function putBareMix(store: MessageStore, seed: number, count: number): Promise<void> {
  const next = prng(seed);
  for (let i = 0; i < count;) {
    const queueId = Math.floor(next() * 3);
    const shape = next();
    if (shape < 0.1) {
      const r = await store.putMessage({
        topic: "Bare",
        queueId,
        body: body(30, i),
        properties: { KEYS: `k${i}`, TAGS: "TagA" },
      });
      assert.equal(r.status, "PUT_OK");
      i++;
      continue;
    }
    // Within maxMessageSize (8 KiB a batch).
    const length = 1 + Math.floor(next() * 50);
    const size = 1 + Math.floor(next() * 40);
    const batch: MessageInput[] = Array.from({ length }, (_, k) => {
      if (shape < 0.25 && next() < 0.1) {
        // A member with properties amid bare ones: no uniform run.
        return { topic: "Bare", queueId, body: body(size, i + k), properties: { TAGS: "x" } };
      }
      if (shape < 0.35 && next() < 0.1) {
        return { topic: "Bare", queueId, body: body(size + 1, i + k) };
      }
      return { topic: "Bare", queueId, body: body(size, i + k) };
    });
    assert.equal((await store.putMessages(batch)).status, "PUT_OK");
    i += length;
  }
}

describe("MessageStore uniform runs", () => {
  test("putMessages() of a bare batch larger than a dispatch slice writes its units as one run", async () => {
    // A slice of dispatchNow takes 64 records; a batch's uniform run is
    // taken whole (cut there, its first 64 units went in by stores into
    // the mapping and the rest by a positional write).
    const { runs, restore } = spyUniformRuns();
    const { store } = await openMemoryStore({
      mappedFileSizeCommitLog: 0x10_0000,
      maxMessageSize: 0x4_0000,
      mappedFileSizeConsumeQueue: 20 * 0x1000,
    });
    try {
      for (let b = 0; b < 4; b++) {
        const batch: MessageInput[] = Array.from(
          { length: 1000 },
          (_, k) => ({ topic: "Bare", queueId: 1, body: body(20, b * 1000 + k) }),
        );
        assert.equal((await store.putMessages(batch)).status, "PUT_OK");
      }
      await store.whenDispatched(store.maxOffset);
      // The first record of the first batch went in on its own (its
      // queue was created by it), the rest as runs of whole batches.
      assert.deepEqual(runs, [999, 1000, 1000, 1000]);
      const page = await store.getMessages("Bare", 1, 3990, 32);
      assert.deepEqual(
        page.messages.map((m) => m.queueOffset),
        [...Array(10).keys()].map((i) => 3990 + i),
      );
    } finally {
      restore();
      await store.close();
    }
  });

  test("putMessages() of bare batches dispatched as uniform runs writes the files a decoding re-dispatch writes", async () => {
    // Counts the units written as uniform runs (the path under test).
    const { runs, restore } = spyUniformRuns();
    const env = await openMemoryStore();
    const { store } = env;
    let reopened: MessageStore | undefined;
    try {
      // 64 KiB segments and 1024-unit consume-queue files: both roll.
      await putBareMix(store, 5, 6_000);
      assert.ok(store.maxOffset > 4 * 0x1_0000, "segments rolled");
      await store.whenDispatched(store.maxOffset);
      const uniformUnits = runs.reduce((a, b) => a + b, 0);
      assert.ok(uniformUnits > 0.5 * 6_000, `${uniformUnits} units from uniform runs`);
      const stats = store.stats();
      assert.ok(
        stats.dispatchHintedCount > 0.8 * 6_000,
        `${stats.dispatchHintedCount} records from hints`,
      );
      await store.close();
      reopened = await assertSameAsRedispatch(env, 6);
    } finally {
      restore();
      await store.close();
      await reopened?.close();
    }
  });

  test("a dispatch slice's uniform run stops at one positional write's units and crosses consume-queue file rolls", async () => {
    const { runs, restore } = spyUniformRuns();
    // 10000-unit consume-queue files: the 6000-record batch fits in the
    // first, a run of 150 reaches its end.
    const env = await openMemoryStore({
      mappedFileSizeCommitLog: 0x40_0000,
      maxMessageSize: 0x10_0000,
      mappedFileSizeConsumeQueue: 20 * 10_000,
    });
    const { store } = env;
    let reopened: MessageStore | undefined;
    try {
      const batch = (length: number, from: number): MessageInput[] =>
        Array.from({ length }, (_, k) => ({ topic: "Bare", queueId: 2, body: body(20, from + k) }));
      assert.equal((await store.putMessages(batch(6000, 0))).status, "PUT_OK");
      for (let b = 0; b < 30; b++) {
        assert.equal((await store.putMessages(batch(150, 6000 + b * 150))).status, "PUT_OK");
      }
      await store.whenDispatched(store.maxOffset);
      // The queue's first record went alone (it created the queue); then
      // one write's worth (4096 units), the rest of the batch, and runs of
      // 150, the one across unit 10000 cut at the file's end.
      assert.deepEqual(runs.slice(0, 2), [4096, 1903]);
      assert.deepEqual(runs.slice(2).filter((n) => n !== 150), [100, 50]);
      assert.equal(runs.reduce((a, b) => a + b, 0), 10_499);
      const page = await store.getMessages("Bare", 2, 6995, 10);
      assert.deepEqual(
        page.messages.map((m) => m.queueOffset),
        [...Array(10).keys()].map((i) => 6995 + i),
      );
      await store.close();
      reopened = await assertSameAsRedispatch(env, 2);
    } finally {
      restore();
      await store.close();
      await reopened?.close();
    }
  });
});

/**
 * Records the units of every uniform run written into a consume queue
 * (`ConsumeQueue.putUniformRunNow` calls that wrote some), until `restore`.
 */
function spyUniformRuns(): { runs: number[]; restore: () => void } {
  const original = ConsumeQueue.prototype.putUniformRunNow;
  const runs: number[] = [];
  ConsumeQueue.prototype.putUniformRunNow = function (this: ConsumeQueue, ...args) {
    const put = original.apply(this, args);
    if (put > 0) runs.push(put);
    return put;
  };
  return { runs, restore: () => (ConsumeQueue.prototype.putUniformRunNow = original) };
}

/**
 * Asserts that the consume-queue and index files `env`'s closed store
 * wrote (at least `filesMin` of them) are the ones a decoding re-dispatch
 * of its commit log writes; returns the reopened store, closed.
 */
async function assertSameAsRedispatch(
  env: Awaited<ReturnType<typeof openMemoryStore>>,
  filesMin: number,
): Promise<MessageStore> {
  const { port, directory } = env;
  const hinted = await dispatchFiles(port, directory);
  assert.ok(hinted.size >= filesMin, `${hinted.size} files`);
  await removeFiles(port, `${directory}/consumequeue`);
  await removeFiles(port, `${directory}/index`);
  const reopened = await env.reopen();
  await reopened.whenDispatched(reopened.maxOffset);
  await reopened.close();
  const decoded = await dispatchFiles(port, directory);
  assert.deepEqual([...decoded.keys()].sort(), [...hinted.keys()].sort());
  for (const [path, bytes] of hinted) {
    const other = decoded.get(path)!;
    const differs = bytes.findIndex((b, i) => b !== other[i]);
    assert.equal(differs, -1, `${path} differs at byte ${differs}`);
  }
  return reopened;
}
