/**
 * GroupCommitService overlapping the JavaScript work with the device: a
 * settled flush is reported to `onFlushed` (which drives dispatch) only
 * once the next flush has begun, or on the next turn when none does, and
 * never past what is durable; the store's reads by queue and key catch a
 * deferred dispatch up, so a put answered PUT_OK is readable there at
 * once. Each `fdatasync` of the commit log is held until the test
 * releases it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { GroupCommitService } from "../src/commit_log/group_commit_service.ts";
import type { PutMessageResult } from "../src/commit_log/put_message_result.ts";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { StoreStats } from "../src/commit_log/store_stats.ts";
import {
  GROUP_COMMIT_SPLIT_MIN_BYTES,
  GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
  GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES,
} from "../src/commit_log/constants.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { body, commitLogHandlesPort, SEGMENT_BYTES } from "./_store_helpers.ts";

/**
 * Wraps `inner` so that every `fdatasync` of a path containing
 * `/commitlog/` waits in `held` until released once `holding.on` is set;
 * `datasyncSync` is hidden (a lone put then takes the same path as a
 * group).
 */
function holdingPort(inner: RuntimePort): {
  port: RuntimePort;
  held: Array<() => void>;
  holding: { on: boolean };
} {
  const held: Array<() => void> = [];
  const holding = { on: false };
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "datasyncSync") return undefined;
        if (key === "datasync" && holding.on) {
          return () =>
            new Promise<void>((resolve, reject) => {
              held.push(() =>
                (value as () => Promise<void>).apply(target, []).then(resolve, reject)
              );
            });
        }
        return value.bind(target);
      },
    });
  const port = commitLogHandlesPort(inner, wrapHandle);
  return { port, held, holding };
}

/** Lets microtasks and a few event-loop turns run. */
async function turns(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** One call of `onFlushed`, with what was true when it came. */
interface Report {
  offset: number;
  flushedWhere: number;
  /** Flushes begun so far (held or released). */
  flushesBegun: number;
}

describe("GroupCommitService, overlap", () => {
  test("GroupCommitService reports a flush once the next flush has begun, else on the next turn", async () => {
    const { port, held, holding } = holdingPort(new MemoryPort(runtimeName()));
    const clock = new ManualClock(1_000);
    const queue = new MappedFileQueue({
      port,
      directory: "/overlap/commitlog",
      fileSizeBytes: SEGMENT_BYTES,
      positionalWrites: true,
    });
    await queue.load();
    const reports: Report[] = [];
    let flushesBegun = 0;
    const groupCommit = new GroupCommitService({
      queue,
      clock,
      syncFlushTimeoutMs: 5_000,
      checkpoint: await StoreCheckpoint.load(port, "/overlap/checkpoint"),
      stats: new StoreStats(),
      onFlushed: (offset) =>
        reports.push({ offset, flushedWhere: queue.flushedWhere, flushesBegun }),
      onError: (error) => assert.fail(`no flush fails here: ${String(error)}`),
      // One flush at a time.
      splitMinBytes: 0x1000_0000,
    });
    const file = await queue.getOrCreateLastMappedFile(0);
    holding.on = true;
    const put = (): { end: number; answer: Promise<PutMessageResult> } => {
      file.appendBytes(body(100));
      const end = queue.maxWrotePosition;
      return { end, answer: groupCommit.request(end, { status: "PUT_OK" }, clock.nowMs()) };
    };
    const release = () => {
      flushesBegun = Math.max(flushesBegun, held.length);
      held.shift()!();
    };
    try {
      // Two producers: one group.
      const a = put();
      const b = put();
      await turns();
      assert.equal(held.length, 1);
      flushesBegun = 1;
      assert.deepEqual(reports, [], "nothing is reported before its flush returned");
      release();
      const answers = await Promise.all([a.answer, b.answer]);
      assert.deepEqual(answers.map((r) => r.status), ["PUT_OK", "PUT_OK"]);
      assert.equal(queue.flushedWhere, b.end);
      assert.deepEqual(reports, [], "the producers put again before the flush is reported");
      // Both come back: their puts begin the next flush, then the report comes.
      const c = put();
      const d = put();
      assert.equal(groupCommit.flushesInFlight, 1, "the second put of two began the next flush");
      flushesBegun = 2;
      await turns();
      assert.deepEqual(reports, [{ offset: b.end, flushedWhere: b.end, flushesBegun: 2 }]);
      // Nobody comes back: the report comes on the next turn.
      release();
      await Promise.all([c.answer, d.answer]);
      await turns();
      assert.equal(held.length, 0);
      assert.deepEqual(reports.at(-1), { offset: d.end, flushedWhere: d.end, flushesBegun: 2 });
    } finally {
      holding.on = false;
      const closing = groupCommit.close();
      let closed = false;
      closing.then(() => closed = true, () => closed = true);
      while (!closed) {
        for (const flush of held.splice(0)) flush();
        await turns();
      }
      await closing;
      await queue.close();
    }
  });

  test("GroupCommitService tunes its split threshold, from where overlapFlushes says, unless splitMinBytes is given", async () => {
    const port = new MemoryPort(runtimeName());
    const queue = new MappedFileQueue({
      port,
      directory: "/tuned/commitlog",
      fileSizeBytes: SEGMENT_BYTES,
      positionalWrites: true,
    });
    await queue.load();
    const checkpoint = await StoreCheckpoint.load(port, "/tuned/checkpoint");
    const make = (splitMinBytes?: number, overlapFlushes?: boolean) =>
      new GroupCommitService({
        queue,
        clock: new ManualClock(0),
        syncFlushTimeoutMs: 5_000,
        checkpoint,
        stats: new StoreStats(),
        onFlushed: () => {},
        onError: () => {},
        splitMinBytes,
        overlapFlushes,
      });
    // Tuned: starts at the default, within the tuned bounds.
    assert.equal(make().splitMinBytes, GROUP_COMMIT_SPLIT_MIN_BYTES);
    assert.equal(make(undefined, true).splitMinBytes, GROUP_COMMIT_SPLIT_MIN_BYTES);
    // Where the port expects one flush at a time to win (Deno): from the
    // upper bound, one flush at every load the tuner measures.
    assert.equal(make(undefined, false).splitMinBytes, GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES);
    assert.equal(make(0x2_0000, false).splitMinBytes, 0x2_0000, "a given threshold wins");
    // Given: kept as given, even outside the tuned bounds.
    assert.equal(make(0).splitMinBytes, 0);
    assert.equal(make(0x1000_0000).splitMinBytes, 0x1000_0000);
    assert.ok(GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES <= GROUP_COMMIT_SPLIT_MIN_BYTES);
    assert.ok(GROUP_COMMIT_SPLIT_MIN_BYTES <= GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES);
    await queue.close();
  });

  test("MessageStore.getMessages() and queryMessages() find a SYNC_FLUSH put at once when its dispatch is deferred", async () => {
    const { port } = holdingPort(new MemoryPort(runtimeName()));
    const store = await MessageStore.open("/overlap-store", {
      port,
      flushDiskType: "SYNC_FLUSH",
      mappedFileSizeCommitLog: SEGMENT_BYTES,
      onWarning: () => {},
    });
    try {
      const first = await store.putMessage({ topic: "T", queueId: 0, body: body(100) });
      assert.equal(first.status, "PUT_OK");
      await store.whenDispatched(store.flushedOffset);
      const payload = body(200, 7);
      const r = await store.putMessage({
        topic: "T",
        queueId: 0,
        body: payload,
        properties: { KEYS: "order-7" },
      });
      assert.equal(r.status, "PUT_OK");
      const end = r.appendResult!.wroteOffset + r.appendResult!.wroteBytes;
      assert.ok(store.flushedOffset >= end, "durable once PUT_OK");
      assert.ok(store.dispatchedOffset < end, "dispatch waits for the next flush or turn");
      const page = await store.getMessages("T", 0, r.appendResult!.queueOffset, 1);
      assert.equal(page.status, "FOUND");
      assert.deepEqual(page.messages[0]?.body, payload);
      assert.ok(store.dispatchedOffset >= end);
      const found = await store.queryMessages("T", "order-7");
      assert.deepEqual(found.messages.map((m) => m.physicalOffset), [r.appendResult!.wroteOffset]);
      // Without a read, the next turn dispatches it all the same.
      const last = await store.putMessage({ topic: "T", queueId: 1, body: body(50) });
      await turns();
      assert.ok(
        store.dispatchedOffset >= last.appendResult!.wroteOffset + last.appendResult!.wroteBytes,
      );
      assert.ok(store.dispatchedOffset <= store.flushedOffset, "never past what is durable");
    } finally {
      await store.close();
    }
  });
});
