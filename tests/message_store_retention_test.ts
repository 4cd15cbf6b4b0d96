/**
 * Retention: commit-log segments older than fileReservedTime go at the
 * deleteWhen hours (or sooner when the disk fills up), then the
 * consume-queue and index files wholly below the new min offset; readers
 * see OFFSET_TOO_SMALL below it. A manual clock and 64 KiB segments.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { parseDeleteWhen } from "../src/store/options.ts";
import { body, openMemoryStore, SEGMENT_BYTES, segmentNames, settle } from "./_store_helpers.ts";

const HOUR_MS = 3_600_000;
const START_MS = 1_700_000_000_000;

function hourOf(ms: number): string {
  return String(new Date(ms).getHours()).padStart(2, "0");
}

/** A port whose reported disk use the test sets (percent). */
function diskUsePort(inner: RuntimePort, used: { percent: number }): RuntimePort {
  return new Proxy(inner, {
    get(target, key) {
      if (key === "diskSpace") {
        return () =>
          Promise.resolve({ totalBytes: 1000, availableBytes: 1000 - used.percent * 10 });
      }
      const value = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** Which reads {@link heldReadPort} holds back. */
interface ReadGate {
  /** Reads of paths ending with this wait (none when undefined). */
  held: string | undefined;
  /** The reads waiting. */
  waiting: Array<() => void>;
}

/**
 * A port that cannot map (reads are positional, as on the portable
 * adapter) and whose reads of the `gate.held` file wait: a read in flight
 * holds its segment, as any reader does.
 */
function heldReadPort(inner: RuntimePort, gate: ReadGate): RuntimePort {
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "read") {
          return async (...args: unknown[]) => {
            if (gate.held !== undefined && target.path.endsWith(gate.held)) {
              await new Promise<void>((resolve) => gate.waiting.push(resolve));
            }
            return value.apply(target, args);
          };
        }
        return value.bind(target);
      },
    });
  return new Proxy(inner, {
    get(target, key) {
      if (key === "canMap") return false;
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "createFile" || key === "openFile") {
        return async (...args: unknown[]) => wrapHandle(await value.apply(target, args));
      }
      return value.bind(target);
    },
  });
}

/** Fills `count` segments of queue T/0 with 1 KiB messages carrying a key each. */
async function fillSegments(store: MessageStore, count: number): Promise<number> {
  let puts = 0;
  while (store.maxOffset < count * SEGMENT_BYTES - 0x800) {
    const r = await store.putMessage({
      topic: "T",
      queueId: 0,
      body: body(1000, puts),
      properties: { KEYS: `k${puts}` },
    });
    assert.equal(r.status, "PUT_OK");
    puts++;
  }
  return puts;
}

describe("retention", () => {
  test("parseDeleteWhen() reads RocketMQ's hour lists", () => {
    assert.deepEqual(parseDeleteWhen("04"), [4]);
    assert.deepEqual(parseDeleteWhen("04;10"), [4, 10]);
    assert.throws(() => parseDeleteWhen("25"), RangeError);
    assert.throws(() => parseDeleteWhen(";"), RangeError);
  });

  test("deleteExpiredFiles() deletes expired segments at the deleteWhen hour, then queue and index files", async () => {
    const clock = new ManualClock(START_MS);
    const { store, port, directory } = await openMemoryStore({
      clock,
      flushDiskType: "SYNC_FLUSH",
      fileReservedTime: 1,
      deleteWhen: hourOf(START_MS + 3 * HOUR_MS),
      cleanResourceInterval: 86_400_000,
      mappedFileSizeConsumeQueue: 20 * 16,
      maxHashSlotNum: 8,
      maxIndexNum: 32,
    });
    try {
      const early = await fillSegments(store, 3);
      clock.advance(2 * HOUR_MS);
      await fillSegments(store, 4);
      await store.whenDispatched(store.maxOffset);
      // Four segments written (and maybe one allocated ahead).
      assert.ok((await segmentNames(port, directory)).length >= 4);
      const cqBefore = (await port.list(`${directory}/consumequeue/T/0`)).length;
      const indexBefore = (await port.list(`${directory}/index`)).length;

      // Not the deleteWhen hour, disk not full: nothing goes.
      let report = await store.deleteExpiredFiles();
      assert.equal(report.segments, 0);

      clock.advance(HOUR_MS);
      report = await store.deleteExpiredFiles();
      // Segments 0-2 were left behind at least 1 h ago; the last one stays.
      assert.equal(report.segments, 3);
      assert.equal((await segmentNames(port, directory))[0], "00000000000000196608");
      assert.equal(store.minOffset, 3 * SEGMENT_BYTES);
      assert.ok(report.consumeQueueFiles > 0);
      assert.ok(report.indexFiles > 0);
      assert.equal(
        (await port.list(`${directory}/consumequeue/T/0`)).length,
        cqBefore - report.consumeQueueFiles,
      );
      assert.equal((await port.list(`${directory}/index`)).length, indexBefore - report.indexFiles);

      const min = store.getMinQueueOffset("T", 0);
      assert.ok(min > early, `min queue offset ${min} is past the deleted messages`);
      const first = await store.getMessages("T", 0, min, 1);
      assert.equal(first.status, "FOUND");
      assert.ok(first.messages[0]!.physicalOffset >= 3 * SEGMENT_BYTES);
      const tooSmall = await store.getMessages("T", 0, 0, 1);
      assert.equal(tooSmall.status, "OFFSET_TOO_SMALL");
      assert.equal(tooSmall.nextQueueOffset, min);
      assert.equal(await store.getMessage(0), undefined);
      assert.deepEqual((await store.queryMessages("T", "k0")).messages, []);
      // A subscription from 0 moves up to the min offset.
      const iterator = store.subscribe("T", 0, 0)[Symbol.asyncIterator]();
      assert.equal((await iterator.next()).value?.queueOffset, min);
      await iterator.return?.();
      // Puts go on; the queue keeps counting.
      const next = store.nextQueueOffset("T", 0);
      const r = await store.putMessage({ topic: "T", queueId: 0, body: body(10) });
      assert.equal(r.appendResult!.queueOffset, next);
    } finally {
      await store.close();
    }
  });

  test("MessageStore.open() after retention keeps queue offsets and min offsets", async () => {
    const clock = new ManualClock(START_MS);
    const env = await openMemoryStore({
      clock,
      flushDiskType: "SYNC_FLUSH",
      fileReservedTime: 1,
      cleanResourceInterval: 86_400_000,
      mappedFileSizeConsumeQueue: 20 * 16,
    });
    await fillSegments(env.store, 3);
    clock.advance(2 * HOUR_MS);
    await fillSegments(env.store, 4);
    // Now, whatever the hour: segments 0 and 1 (left 2 h ago), not 2 (left just now).
    const report = await env.store.deleteExpiredFiles({ now: true });
    assert.equal(report.segments, 2);
    const next = env.store.nextQueueOffset("T", 0);
    const min = env.store.getMinQueueOffset("T", 0);
    await env.store.close();
    const again = await env.reopen();
    try {
      assert.equal(again.nextQueueOffset("T", 0), next);
      assert.equal(again.getMinQueueOffset("T", 0), min);
      assert.equal(again.minOffset, 2 * SEGMENT_BYTES);
      assert.equal((await again.getMessages("T", 0, min, 1)).status, "FOUND");
    } finally {
      await again.close();
    }
  });

  test("the retention service deletes sooner when the disk passes its ratios", async () => {
    const used = { percent: 10 };
    const clock = new ManualClock(START_MS);
    const memory = new MemoryPort(runtimeName());
    const store = await MessageStore.open("/retention", {
      port: diskUsePort(memory, used),
      clock,
      mappedFileSizeCommitLog: SEGMENT_BYTES,
      maxMessageSize: 0x2000,
      flushDiskType: "SYNC_FLUSH",
      fileReservedTime: 1,
      // Never the hour: only disk use triggers deletion.
      deleteWhen: hourOf(START_MS - 6 * HOUR_MS),
      cleanResourceInterval: 1_000,
      diskSpaceCheckIntervalMs: 86_400_000,
      onWarning: () => {},
    });
    try {
      await fillSegments(store, 2);
      clock.advance(2 * HOUR_MS);
      await fillSegments(store, 4);
      // Over diskMaxUsedSpaceRatio (75): expired segments go (0, whose
      // successor started 2 h ago), not the young ones.
      used.percent = 80;
      let report = await store.deleteExpiredFiles();
      assert.equal(report.segments, 1);
      // Over diskSpaceCleanForciblyRatio (85): whatever their age, but never the last.
      used.percent = 90;
      report = await store.deleteExpiredFiles();
      assert.equal(report.segments, 2);
      assert.equal((await segmentNames(memory, "/retention"))[0], "00000000000000196608");
      assert.equal(store.minOffset, 3 * SEGMENT_BYTES);
    } finally {
      await store.close();
    }
  });

  test("deleteExpiredFiles() waits for a reader holding a segment, then deletes it after the release or the forcible interval", async () => {
    const clock = new ManualClock(START_MS);
    const gate: ReadGate = { held: undefined, waiting: [] };
    const release = () => {
      gate.held = undefined;
      for (const wake of gate.waiting.splice(0)) wake();
    };
    const memory = new MemoryPort(runtimeName());
    const forceAfterMs = 120_000;
    const { store, directory } = await openMemoryStore({
      port: heldReadPort(memory, gate),
      clock,
      flushDiskType: "SYNC_FLUSH",
      fileReservedTime: 1,
      // Never the hour: deletion runs when asked with `now`, or retries a held segment.
      deleteWhen: hourOf(START_MS - 6 * HOUR_MS),
      cleanResourceInterval: 86_400_000,
      destroyMapedFileIntervalForcibly: forceAfterMs,
    }, memory);
    try {
      await fillSegments(store, 3);
      clock.advance(2 * HOUR_MS);
      await fillSegments(store, 4);
      await store.whenDispatched(store.maxOffset);
      const first = await store.getMessage(0);
      assert.ok(first !== undefined);
      // The first message of segment 1.
      let second = 0;
      while (
        (await store.getMessages("T", 0, second, 1)).messages[0]!.physicalOffset < SEGMENT_BYTES
      ) {
        second++;
      }

      // A read of segment 0 in flight holds it: retention must not delete it.
      gate.held = "/commitlog/00000000000000000000";
      const reading = store.getMessages("T", 0, 0, 1);
      await settle();
      assert.equal(gate.waiting.length, 1);
      let report = await store.deleteExpiredFiles({ now: true });
      assert.equal(report.segments, 0);
      assert.equal(store.minOffset, 0);
      assert.equal((await segmentNames(memory, directory))[0], "00000000000000000000");
      // The retry (no `now`, not the hour) still waits for the reader.
      assert.equal((await store.deleteExpiredFiles()).segments, 0);
      assert.equal((await segmentNames(memory, directory))[0], "00000000000000000000");

      // Released: the reader got its message, and the next run deletes the segment.
      release();
      assert.deepEqual((await reading).messages.map((m) => m.body), [first.body]);
      report = await store.deleteExpiredFiles();
      assert.equal(report.segments, 1);
      assert.equal(store.minOffset, SEGMENT_BYTES);
      assert.equal((await segmentNames(memory, directory))[0], "00000000000000065536");

      // A reader that outstays destroyMapedFileIntervalForcibly is overridden.
      gate.held = "/commitlog/00000000000000065536";
      const stuck = store.getMessages("T", 0, second, 1);
      await settle();
      assert.equal(gate.waiting.length, 1);
      assert.equal((await store.deleteExpiredFiles({ now: true })).segments, 0);
      clock.advance(forceAfterMs - 1);
      assert.equal((await store.deleteExpiredFiles()).segments, 0);
      clock.advance(1);
      const forced = store.deleteExpiredFiles();
      await settle();
      // Retired under the reader: new reads of the segment find nothing.
      assert.equal(await store.getMessage(SEGMENT_BYTES), undefined);
      // The descriptor is closed once the read in flight returns.
      release();
      assert.equal((await forced).segments, 1);
      // The read in flight finished with its bytes before the descriptor closed.
      assert.deepEqual((await stuck).messages.map((m) => m.physicalOffset), [SEGMENT_BYTES]);
      assert.equal(store.minOffset, 2 * SEGMENT_BYTES);
      assert.equal((await segmentNames(memory, directory))[0], "00000000000000131072");
      const min = store.getMinQueueOffset("T", 0);
      assert.equal((await store.getMessages("T", 0, min, 1)).status, "FOUND");
    } finally {
      release();
      await store.close();
    }
  });
});
