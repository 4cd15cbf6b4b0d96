/**
 * The commit log's pre-fault lead: under ASYNC_FLUSH, segments are
 * pre-faulted only up to a lead past the write offset (the writer's recent
 * rate times PREFAULT_LEAD_MS, at least `prefaultLeadBytesMin`), so the
 * segment allocated ahead waits until the writer comes near it, and a
 * segment's own pre-fault stops that far ahead of its writer; the active
 * segment a store warms at start (warmMapedFileEnable) is pre-faulted in
 * full. Under SYNC_FLUSH nothing waits for the writer.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CommitLog } from "../src/commit_log/commit_log.ts";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { StoreStats } from "../src/commit_log/store_stats.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { FileHandle, Mapping, RuntimePort } from "../src/runtime/port.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { type MessageStoreOptions, resolveOptions } from "../src/store/options.ts";
import { PREFAULT_LEAD_MS, PREFAULT_RATE_WINDOW_MS_MIN } from "../src/commit_log/constants.ts";
import { body, commitLogHandlesPort, settle } from "./_store_helpers.ts";

const MIB = 0x10_0000;
/** Four pre-fault chunks (PREPARE_POPULATE_CHUNK_BYTES, 4 MiB) a segment. */
const SEGMENT_BYTES = 16 * MIB;
const LEAD_BYTES = 4 * MIB;
const DIRECTORY = "/store";

/** A populate call on a commit-log mapping: the segment's start offset and the range. */
interface Populated {
  fileFromOffset: number;
  position: number;
  length: number;
}

/** Records every `populate` of a commit-log mapping. */
function recordingPort(inner: RuntimePort, calls: Populated[]): RuntimePort {
  const wrapMapping = (mapping: Mapping, fileFromOffset: number): Mapping =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "populate") {
          return (position: number, length: number) => {
            calls.push({ fileFromOffset, position, length });
            return value.apply(target, [position, length]);
          };
        }
        return value.bind(target);
      },
    });
  return commitLogHandlesPort(inner, (handle: FileHandle) => {
    // A new segment is created as <name>.tmp and renamed: the offset is
    // the name's 20 digits either way.
    const fileFromOffset = Number(/(\d{20})/.exec(handle.path)![1]);
    return new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "map") {
          return async (...args: unknown[]) =>
            wrapMapping(await value.apply(target, args), fileFromOffset);
        }
        return value.bind(target);
      },
    });
  });
}

/** The end of the highest range populated in the segment starting at `fileFromOffset` (0: none). */
function populatedEnd(calls: readonly Populated[], fileFromOffset: number): number {
  let end = 0;
  for (const call of calls) {
    if (call.fileFromOffset === fileFromOffset) end = Math.max(end, call.position + call.length);
  }
  return end;
}

async function openLog(
  options: MessageStoreOptions,
  calls: Populated[],
  clock = new ManualClock(1_700_000_000_000),
): Promise<CommitLog> {
  const memory = new MemoryPort(runtimeName());
  const port = recordingPort(memory, calls);
  const resolved = resolveOptions({
    mappedFileSizeCommitLog: SEGMENT_BYTES,
    onWarning: () => {},
    clock,
    ...options,
  });
  await port.makeDirectory(DIRECTORY);
  const checkpoint = await StoreCheckpoint.load(port, `${DIRECTORY}/checkpoint`);
  const commitLog = new CommitLog({
    ...resolved,
    port,
    directory: `${DIRECTORY}/commitlog`,
    delayLevelCount: resolved.delayLevelsMs.length,
    checkpoint,
    stats: new StoreStats(),
    prefaultLeadBytesMin: LEAD_BYTES,
  });
  await commitLog.loadAndRecover(true);
  commitLog.start();
  await commitLog.whenActiveSegmentReady();
  return commitLog;
}

/** Puts 60 KiB messages until the write offset reaches `offset`. */
async function putUpTo(commitLog: CommitLog, offset: number): Promise<void> {
  const message = { topic: "T", queueId: 0, body: body(60 * 1024) };
  while (commitLog.maxOffset < offset) {
    assert.equal((await commitLog.putMessage(message)).status, "PUT_OK");
  }
}

describe("CommitLog pre-fault lead", () => {
  test("putMessage() under ASYNC_FLUSH: the segment ahead is pre-faulted only once the writer comes within the lead", async () => {
    const calls: Populated[] = [];
    const commitLog = await openLog({ flushDiskType: "ASYNC_FLUSH" }, calls);
    try {
      await settle();
      // The active segment: the first two chunks (each starts within the
      // lead of the writer at 0), then it waits.
      assert.equal(populatedEnd(calls, 0), 2 * LEAD_BYTES);
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "the segment ahead waits");
      await putUpTo(commitLog, 2 * LEAD_BYTES);
      await settle();
      assert.equal(populatedEnd(calls, 0), SEGMENT_BYTES, "the rest follows the writer");
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "the segment ahead still waits");
      await putUpTo(commitLog, SEGMENT_BYTES - LEAD_BYTES);
      await settle();
      assert.ok(populatedEnd(calls, SEGMENT_BYTES) > 0, "the writer came within the lead");
      assert.ok(populatedEnd(calls, SEGMENT_BYTES) <= LEAD_BYTES);
    } finally {
      await commitLog.close();
    }
  });

  test("putMessage() under ASYNC_FLUSH: a fast writer widens the lead to its rate times PREFAULT_LEAD_MS", async () => {
    const calls: Populated[] = [];
    const clock = new ManualClock(1_700_000_000_000);
    const commitLog = await openLog({ flushDiskType: "ASYNC_FLUSH" }, calls, clock);
    try {
      await settle();
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "the segment ahead waits");
      // The writer reaches where the active segment's next chunk asks
      // again, at LEAD_BYTES per PREFAULT_RATE_WINDOW_MS_MIN: a lead of
      // LEAD_BYTES * PREFAULT_LEAD_MS / PREFAULT_RATE_WINDOW_MS_MIN, past
      // the segment ahead's start.
      assert.ok(LEAD_BYTES * PREFAULT_LEAD_MS / PREFAULT_RATE_WINDOW_MS_MIN > 2 * SEGMENT_BYTES);
      clock.advance(PREFAULT_RATE_WINDOW_MS_MIN);
      await putUpTo(commitLog, LEAD_BYTES);
      await settle();
      assert.equal(populatedEnd(calls, 0), SEGMENT_BYTES);
      assert.ok(populatedEnd(calls, SEGMENT_BYTES) > 0, "the segment ahead is pre-faulted");
    } finally {
      await commitLog.close();
    }
  });

  test("putMessage() under ASYNC_FLUSH with warmMapedFileEnable: the active segment is pre-faulted in full, the next one waits", async () => {
    const calls: Populated[] = [];
    const commitLog = await openLog(
      { flushDiskType: "ASYNC_FLUSH", warmMapedFileEnable: true },
      calls,
    );
    try {
      // The first put waits for the warm-up.
      await putUpTo(commitLog, 1);
      await settle();
      assert.equal(populatedEnd(calls, 0), SEGMENT_BYTES);
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0);
    } finally {
      await commitLog.close();
    }
  });

  test("close() under ASYNC_FLUSH ends a pre-fault that waits for the writer", async () => {
    const calls: Populated[] = [];
    const commitLog = await openLog({ flushDiskType: "ASYNC_FLUSH" }, calls);
    await settle();
    assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0);
    await commitLog.close();
    assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "nothing pre-faulted after the close");
  });

  test("putMessage() under SYNC_FLUSH: segments are pre-faulted without waiting for the writer", async () => {
    const calls: Populated[] = [];
    const commitLog = await openLog({ flushDiskType: "SYNC_FLUSH" }, calls);
    try {
      await settle();
      await commitLog.queue.lastFile!.whenPrepared();
      assert.equal(populatedEnd(calls, 0), SEGMENT_BYTES);
    } finally {
      await commitLog.close();
    }
  });
});
