/**
 * The commit log's pre-fault lead: under ASYNC_FLUSH, segments are
 * pre-faulted only up to a lead past the write offset (the writer's recent
 * rate times PREFAULT_LEAD_MS, at least `prefaultLeadBytesMin` for the
 * large folios of a fast writer or one not measured yet, and
 * PREFAULT_SMALL_BYTES_MIN for the small folios of a slow one, advised
 * random and nohugepage once, from its first small chunk to the end of the
 * segment), so the
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
import {
  PREFAULT_LEAD_MS,
  PREFAULT_RATE_WINDOW_MS_MIN,
  PREFAULT_SMALL_BYTES_MIN,
} from "../src/commit_log/constants.ts";
import { body, commitLogHandlesPort, settle } from "./_store_helpers.ts";
import { smallFolioChunkBytes } from "../src/commit_log/_folio_rule.ts";

const MIB = 0x10_0000;
/** Four pre-fault chunks (PREPARE_POPULATE_CHUNK_BYTES, 4 MiB) a segment. */
const SEGMENT_BYTES = 16 * MIB;
const LEAD_BYTES = 4 * MIB;
const DIRECTORY = "/store";

/**
 * A populate or advise call on a commit-log mapping: the segment's start
 * offset, the range, and the advice (undefined: a populate).
 */
interface Populated {
  fileFromOffset: number;
  position: number;
  length: number;
  advice?: string;
}

/** Records every `populate` and `advise` of a commit-log mapping (advice in `advised`). */
function recordingPort(
  inner: RuntimePort,
  calls: Populated[],
  advised: Populated[] = [],
): RuntimePort {
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
        if (key === "advise") {
          return (position: number, length: number, advice: string) => {
            advised.push({ fileFromOffset, position, length, advice });
            return value.apply(target, [position, length, advice]);
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
  advised: Populated[] = [],
): Promise<CommitLog> {
  const memory = new MemoryPort(runtimeName());
  const port = recordingPort(memory, calls, advised);
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

/** The calls of `segment` whose ranges start at or past `from`. */
function callsFrom(calls: readonly Populated[], segment: number, from = 0): Populated[] {
  return calls.filter((call) => call.fileFromOffset === segment && call.position >= from);
}

/**
 * Whether every populate of `populated` lies in a range advised random
 * and nohugepage to the end of its segment, by one call of each for the
 * segment: one advised region from the first small chunk on, whatever
 * the writer overtook between chunks.
 */
function advisedSmall(populated: readonly Populated[], advised: readonly Populated[]): boolean {
  const has = (call: Populated, advice: string) => {
    const calls = advised.filter((a) =>
      a.fileFromOffset === call.fileFromOffset && a.advice === advice
    );
    return calls.length === 1 && calls[0]!.position <= call.position &&
      calls[0]!.position + calls[0]!.length === SEGMENT_BYTES;
  };
  return populated.every((call) => has(call, "random") && has(call, "nohugepage"));
}

/**
 * Writes as a slow writer past the first lead of a log just opened on
 * `clock`, then `seconds` more seconds at 60 KiB a second, into the small
 * chunks. The first lead, pre-faulted at open, is large folios; the chunk
 * asked once the writer came within the lead starts the first window (no
 * rate before the first put), and the one after it measures LEAD_BYTES in
 * 10 s: far below one large folio per flush interval.
 *
 * @returns Where the first lead's pre-fault ended.
 */
async function writeSlowly(
  commitLog: CommitLog,
  clock: ManualClock,
  calls: readonly Populated[],
  seconds: number,
): Promise<number> {
  await settle();
  await putUpTo(commitLog, LEAD_BYTES);
  await settle();
  clock.advance(10_000);
  await putUpTo(commitLog, 2 * LEAD_BYTES);
  await settle();
  const opened = populatedEnd(calls, 0);
  clock.advance(10_000);
  await putUpTo(commitLog, opened - 2 * PREFAULT_SMALL_BYTES_MIN);
  await settle();
  for (let i = 0; i < seconds; i++) {
    clock.advance(1_000);
    await putUpTo(commitLog, commitLog.maxOffset + 1);
    await settle();
  }
  return opened;
}

describe("CommitLog pre-fault lead", () => {
  test("putMessage() under ASYNC_FLUSH: a writer not measured yet gets large chunks up to the least lead, and the segment ahead waits for it", async () => {
    const calls: Populated[] = [];
    const advised: Populated[] = [];
    const commitLog = await openLog({ flushDiskType: "ASYNC_FLUSH" }, calls, undefined, advised);
    try {
      await settle();
      // The active segment: the first two chunks (each starts within the
      // lead of the writer at 0), then it waits.
      assert.equal(populatedEnd(calls, 0), 2 * LEAD_BYTES);
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "the segment ahead waits");
      // The clock stands still: no rate is measured, the chunks stay large.
      await putUpTo(commitLog, 2 * LEAD_BYTES);
      await settle();
      assert.equal(populatedEnd(calls, 0), SEGMENT_BYTES, "the rest follows the writer");
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "the segment ahead still waits");
      await putUpTo(commitLog, SEGMENT_BYTES - LEAD_BYTES);
      await settle();
      assert.ok(populatedEnd(calls, SEGMENT_BYTES) > 0, "the writer came within the lead");
      assert.ok(populatedEnd(calls, SEGMENT_BYTES) <= LEAD_BYTES);
      assert.ok(!advised.some((call) => call.advice === "random"), "no chunk advised random");
    } finally {
      await commitLog.close();
    }
  });

  test("putMessage() under ASYNC_FLUSH: a slow writer's chunks are small, advised random, within the small lead of it", async () => {
    const calls: Populated[] = [];
    const advised: Populated[] = [];
    const clock = new ManualClock(1_700_000_000_000);
    const commitLog = await openLog({ flushDiskType: "ASYNC_FLUSH" }, calls, clock, advised);
    try {
      const opened = await writeSlowly(commitLog, clock, calls, 16);
      const small = callsFrom(calls, 0, opened);
      assert.ok(small.length > 0, "chunks past the first lead");
      // Chunks of PREFAULT_LEAD_MS of the fastest rate measured (4 MiB in 10 s).
      const chunkMax = smallFolioChunkBytes(LEAD_BYTES / 10_000);
      assert.ok(chunkMax < LEAD_BYTES);
      assert.ok(small.every((call) => call.length <= chunkMax));
      assert.ok(advisedSmall(small, advised), "advised random and nohugepage once, to the end");
      assert.ok(populatedEnd(calls, 0) <= commitLog.maxOffset + 2 * chunkMax);
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "the segment ahead waits");
    } finally {
      await commitLog.close();
    }
  });

  test("putMessage() under ASYNC_FLUSH: a slow writer that speeds up gets the segment's own advice back from its next chunk on, by one call of each", async () => {
    const calls: Populated[] = [];
    const advised: Populated[] = [];
    const clock = new ManualClock(1_700_000_000_000);
    const commitLog = await openLog({ flushDiskType: "ASYNC_FLUSH" }, calls, clock, advised);
    try {
      // Slow, as in the test above: small chunks past the first lead.
      await writeSlowly(commitLog, clock, calls, 4);
      const smallFrom = advised.find((a) => a.fileFromOffset === 0 && a.advice === "nohugepage");
      assert.ok(smallFrom !== undefined, "small folios were advised");
      // Fast: 1 MiB while the clock stands still (no window ends), then a
      // window of PREFAULT_RATE_WINDOW_MS_MIN ends at the next chunk's
      // ask: far past two large folios per flush interval.
      await putUpTo(commitLog, commitLog.maxOffset + MIB);
      await settle();
      clock.advance(PREFAULT_RATE_WINDOW_MS_MIN);
      await putUpTo(commitLog, commitLog.maxOffset + 2 * PREFAULT_SMALL_BYTES_MIN);
      await settle();
      const sequence = advised
        .filter((a) => a.fileFromOffset === 0 && a.position >= smallFrom.position)
        .map((a) =>
          `${a.advice} ${a.position + a.length === SEGMENT_BYTES ? "to the end" : "a range"}`
        );
      assert.deepEqual(sequence, [
        "random to the end",
        "nohugepage to the end",
        "normal to the end",
        "hugepage to the end",
      ]);
      const back = advised.find((a) =>
        a.fileFromOffset === 0 && a.advice === "hugepage" && a.position > 0
      )!;
      assert.ok(back.position > smallFrom.position);
      // The large lead (at least LEAD_BYTES) again.
      assert.ok(
        populatedEnd(calls, 0) >= Math.min(SEGMENT_BYTES, commitLog.maxOffset + LEAD_BYTES),
        "pre-faulted a large lead ahead of the writer",
      );
    } finally {
      await commitLog.close();
    }
  });

  test("putMessage() under ASYNC_FLUSH: a fast writer gets large chunks, not advised random, and the lead of its rate times PREFAULT_LEAD_MS", async () => {
    const calls: Populated[] = [];
    const advised: Populated[] = [];
    const clock = new ManualClock(1_700_000_000_000);
    const commitLog = await openLog({ flushDiskType: "ASYNC_FLUSH" }, calls, clock, advised);
    try {
      await settle();
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0, "the segment ahead waits");
      // The writer reaches where the active segment's next chunk asks
      // again, at LEAD_BYTES per PREFAULT_RATE_WINDOW_MS_MIN: a lead of
      // LEAD_BYTES * PREFAULT_LEAD_MS / PREFAULT_RATE_WINDOW_MS_MIN, past
      // the segment ahead's start.
      assert.ok(LEAD_BYTES * PREFAULT_LEAD_MS / PREFAULT_RATE_WINDOW_MS_MIN > 2 * SEGMENT_BYTES);
      // The chunk asked at LEAD_BYTES starts the first window.
      await putUpTo(commitLog, LEAD_BYTES);
      await settle();
      clock.advance(PREFAULT_RATE_WINDOW_MS_MIN);
      await putUpTo(commitLog, 2 * LEAD_BYTES);
      await settle();
      assert.equal(populatedEnd(calls, 0), SEGMENT_BYTES);
      assert.ok(populatedEnd(calls, SEGMENT_BYTES) > 0, "the segment ahead is pre-faulted");
      assert.ok(!advised.some((call) => call.advice === "random"), "no chunk advised random");
    } finally {
      await commitLog.close();
    }
  });

  test("putMessage() under ASYNC_FLUSH with warmMapedFileEnable: the active segment is pre-faulted in full in large folios, the next one waits", async () => {
    const calls: Populated[] = [];
    const advised: Populated[] = [];
    const commitLog = await openLog(
      { flushDiskType: "ASYNC_FLUSH", warmMapedFileEnable: true },
      calls,
      undefined,
      advised,
    );
    try {
      // The first put waits for the warm-up.
      await putUpTo(commitLog, 1);
      await settle();
      assert.equal(populatedEnd(calls, 0), SEGMENT_BYTES);
      assert.equal(populatedEnd(calls, SEGMENT_BYTES), 0);
      // Large folios, as warmed: no chunk advised random.
      assert.ok(!advised.some((call) => call.advice === "random"));
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
