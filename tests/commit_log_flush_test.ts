/**
 * The flush services behind the put path: FlushRealTimeService (timed and
 * woken), CommitRealTimeService (transient store pool), GroupCommitService
 * (SYNC_FLUSH: group commit, WAIT=false, timeout, failure), backpressure,
 * and the checkpoint written on close. Time is a ManualClock; slow disks
 * are flushes held at a gate.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { availableAdapters, createPort, MemoryPort } from "../src/runtime/mod.ts";
import type { AdapterName } from "../src/runtime/port.ts";
import { type MessageStoreOptions, resolveOptions } from "../src/store/options.ts";
import { runtimeName, totalMemoryBytes } from "../src/runtime/info.ts";
import { unflushedBytesMaxDefault } from "../src/commit_log/constants.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { GroupCommitService } from "../src/commit_log/group_commit_service.ts";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { StoreStats } from "../src/commit_log/store_stats.ts";
import {
  body,
  gatedPort,
  openMemoryStore,
  readRecords,
  SEGMENT_BYTES,
  settle,
  waitForSegments,
} from "./_store_helpers.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";

const nativeAdapter = availableAdapters().find((a) => a !== "portable" && a !== "memory");

/**
 * Write-buffer configurations on real files, where commits and flushes end
 * in I/O callbacks (macrotasks): a reader that retried without waiting
 * starved them and the store hung at a segment roll.
 */
const WRITE_BUFFER_CASES: {
  name: string;
  adapter: AdapterName | undefined;
  options: MessageStoreOptions;
}[] = [
  {
    name: "a transient store pool of 2 buffers, commits lagging a segment",
    adapter: nativeAdapter,
    options: {
      transientStorePoolEnable: true,
      transientStorePoolSize: 2,
      // Only whole segments (16 pages) are committed between thorough commits.
      commitCommitLogLeastPages: 16,
      commitIntervalCommitLog: 1_000,
      commitCommitLogThoroughInterval: 100,
    },
  },
  {
    name: "a transient store pool of 3 buffers",
    adapter: nativeAdapter,
    options: { transientStorePoolEnable: true, transientStorePoolSize: 3 },
  },
  {
    name: "the portable adapter's write window",
    adapter: "portable",
    options: { flushIntervalCommitLog: 20 },
  },
];

const put = (store: MessageStore, length = 100, properties?: Record<string, string>) =>
  store.putMessage({ topic: "T", queueId: 0, body: body(length), properties });

describe("flush services", () => {
  test("FlushRealTimeService flushes every flushIntervalCommitLog once leastPages changed", async () => {
    const env = await openMemoryStore({
      flushIntervalCommitLog: 100,
      flushCommitLogLeastPages: 2,
      flushCommitLogThoroughInterval: 10_000,
    });
    try {
      await put(env.store, 1000);
      env.clock.advance(100);
      await settle();
      // Under two pages: not flushed yet.
      assert.equal(env.store.flushedOffset, 0);
      const r = await put(env.store, 8000);
      const end = r.appendResult!.wroteOffset + r.appendResult!.wroteBytes;
      env.clock.advance(100);
      await env.store.whenFlushed(end);
      assert.equal(env.store.flushedOffset, end);
      // A small tail waits for the thorough interval.
      const tail = await put(env.store, 10);
      const tailEnd = tail.appendResult!.wroteOffset + tail.appendResult!.wroteBytes;
      env.clock.advance(100);
      await settle();
      assert.equal(env.store.flushedOffset, end);
      env.clock.advance(10_000);
      env.clock.advance(100);
      await env.store.whenFlushed(tailEnd);
      assert.ok(env.store.stats().flushCount >= 2);
      assert.equal(env.store.checkpoint.physicMsgTimestamp, tail.appendResult!.storeTimestamp);
    } finally {
      await env.store.close();
    }
  });

  test("FlushRealTimeService is woken by puts when flushCommitLogTimed is false", async () => {
    const env = await openMemoryStore({
      flushIntervalCommitLog: 60_000,
      flushCommitLogLeastPages: 0,
      flushCommitLogTimed: false,
    });
    try {
      const r = await put(env.store);
      // No clock movement: the put itself woke the flusher.
      await env.store.whenFlushed(r.appendResult!.wroteBytes);
      assert.equal(env.store.flushedOffset, r.appendResult!.wroteBytes);
    } finally {
      await env.store.close();
    }
  });

  test("close() flushes everything and writes the checkpoint (ASYNC_FLUSH)", async () => {
    const env = await openMemoryStore({ flushIntervalCommitLog: 60_000 });
    let last;
    for (let i = 0; i < 50; i++) last = await put(env.store, 2000);
    await env.store.close();
    assert.equal(
      env.store.flushedOffset,
      0 + last!.appendResult!.wroteOffset + last!.appendResult!.wroteBytes,
    );
    env.port.crash();
    assert.equal((await readRecords(env.port, env.directory)).length, 50);
    const checkpoint = (await env.port.readFile(`${env.directory}/checkpoint`))!;
    assert.equal(checkpoint.length, 4096);
    const view = new DataView(checkpoint.buffer, checkpoint.byteOffset);
    assert.equal(Number(view.getBigInt64(0)), last!.appendResult!.storeTimestamp);
    assert.equal(view.getUint32(0x18), 0x4D515343);
    assert.equal(Number(view.getBigInt64(0x20)), env.store.flushedOffset);
    assert.equal(await env.port.stat(`${env.directory}/abort`), undefined);
  });

  test("CommitRealTimeService commits pool buffers and wakes the flusher", async () => {
    const env = await openMemoryStore({
      transientStorePoolEnable: true,
      transientStorePoolSize: 4,
      commitIntervalCommitLog: 50,
      commitCommitLogLeastPages: 0,
      flushIntervalCommitLog: 60_000,
      flushCommitLogLeastPages: 0,
    });
    try {
      const results = [];
      for (let i = 0; i < 40; i++) results.push(await put(env.store, 3000));
      assert.ok(results.every((r) => r.status === "PUT_OK"));
      const last = results[39]!.appendResult!;
      const end = last.wroteOffset + last.wroteBytes;
      env.clock.advance(50);
      // The committer moved data, then woke the flusher (its own interval is a minute).
      await env.store.whenFlushed(end);
      assert.ok(env.store.stats().commitCount >= 1);
    } finally {
      await env.store.close();
    }
    env.port.crash();
    assert.equal((await readRecords(env.port, env.directory)).length, 40);
  });

  test("close() commits and flushes what the pool still buffers", async () => {
    const env = await openMemoryStore({
      transientStorePoolEnable: true,
      commitIntervalCommitLog: 60_000,
      commitCommitLogThoroughInterval: 60_000,
      flushIntervalCommitLog: 60_000,
    });
    for (let i = 0; i < 30; i++) await put(env.store, 3000);
    await env.store.close();
    env.port.crash();
    assert.equal((await readRecords(env.port, env.directory)).length, 30);
  });

  for (const { name, adapter, options } of WRITE_BUFFER_CASES) {
    test(
      `putMessage() rolls through more segments than write buffers with ${name} (real files)`,
      { skip: adapter === undefined ? "no native adapter here" : undefined },
      async () => {
        const root = makeTempDirectory();
        try {
          const port = await createPort({ adapter: adapter!, onNotice: () => {} });
          const open = () =>
            MessageStore.open(`${root}/store`, {
              port,
              mappedFileSizeCommitLog: SEGMENT_BYTES,
              maxMessageSize: 0x2000,
              mappedFileSizeConsumeQueue: 20 * 1024,
              maxHashSlotNum: 256,
              maxIndexNum: 1024,
              sparseFiles: true,
              onWarning: () => {},
              ...options,
            });
          const store = await open();
          const count = 1_200; // about 20 segments of 64 KiB
          let end = 0;
          try {
            for (let i = 0; i < count; i++) {
              const r = await store.putMessage({
                topic: "T",
                queueId: i & 3,
                body: body(1_000, i),
              });
              assert.equal(r.status, "PUT_OK", r.error?.message);
              end = r.appendResult!.wroteOffset + r.appendResult!.wroteBytes;
            }
            assert.ok(end > 16 * SEGMENT_BYTES, `${end} bytes span more segments than buffers`);
            // No put follows: the commit (or flush) that makes the tail
            // readable must wake the dispatcher by itself.
            await store.whenDispatched(end);
            for (let q = 0; q < 4; q++) {
              let k = 0;
              // Bounded: every page moves on by at least one message.
              while (k < count / 4) {
                const page = await store.getMessages("T", q, k, count);
                assert.ok(page.messages.length > 0, `queue ${q} ends at ${k} of ${count / 4}`);
                for (const m of page.messages) assert.deepEqual(m.body, body(1_000, 4 * k++ + q));
              }
              assert.equal(k, count / 4);
            }
          } finally {
            await store.close();
          }
          const reopened = await open();
          try {
            assert.equal(reopened.maxOffset, end);
            assert.equal(reopened.nextQueueOffset("T", 3), count / 4);
          } finally {
            await reopened.close();
          }
        } finally {
          removeDirectory(root);
        }
      },
    );
  }

  test("MessageStore.open() refuses SYNC_FLUSH with the transient store pool", async () => {
    await assert.rejects(
      MessageStore.open("/s", {
        port: new MemoryPort(runtimeName()),
        flushDiskType: "SYNC_FLUSH",
        transientStorePoolEnable: true,
      }),
      (error) => error instanceof MqStoreError && error.code === "UNSUPPORTED",
    );
  });

  test("GroupCommitService answers a SYNC put only once its bytes are durable", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = gatedPort(memory);
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH", port: gate.port }, memory);
    try {
      await put(env.store); // creates the segment
      gate.hold();
      let answered = false;
      const pending = put(env.store).then((r) => {
        answered = true;
        return r;
      });
      await settle();
      assert.equal(answered, false);
      assert.ok(gate.waiting >= 1);
      gate.release();
      const r = await pending;
      assert.equal(r.status, "PUT_OK");
      assert.ok(
        env.store.flushedOffset >= r.appendResult!.wroteOffset + r.appendResult!.wroteBytes,
      );
    } finally {
      await env.store.close();
    }
  });

  test("GroupCommitService covers every put that arrived during a flush with one flush", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = gatedPort(memory);
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH", port: gate.port }, memory);
    try {
      await put(env.store);
      gate.hold();
      const first = put(env.store);
      await settle();
      assert.equal(gate.waiting, 1);
      const before = env.store.stats().flushCount;
      const group = Array.from({ length: 64 }, () => put(env.store));
      await settle();
      gate.release();
      const results = await Promise.all([first, ...group]);
      assert.ok(results.every((r) => r.status === "PUT_OK"));
      // One flush for the first put, one for the 64 that arrived meanwhile.
      assert.equal(env.store.stats().flushCount - before, 2);
      assert.equal(env.store.stats().groupCommitBatchMax, 64);
    } finally {
      await env.store.close();
    }
  });

  test("GroupCommitService answers FLUSH_DISK_TIMEOUT after syncFlushTimeout; the message stays", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = gatedPort(memory);
    const env = await openMemoryStore(
      { flushDiskType: "SYNC_FLUSH", port: gate.port, syncFlushTimeout: 5_000 },
      memory,
    );
    try {
      await put(env.store);
      gate.hold();
      const pending = put(env.store, 77);
      await settle();
      env.clock.advance(5_000);
      const r = await pending;
      assert.equal(r.status, "FLUSH_DISK_TIMEOUT");
      assert.equal(r.error?.code, "FLUSH_DISK_TIMEOUT");
      assert.ok(r.appendResult !== undefined);
      gate.release();
      await env.store.whenFlushed(r.appendResult.wroteOffset + r.appendResult.wroteBytes);
    } finally {
      await env.store.close();
    }
    env.port.crash();
    assert.equal((await readRecords(env.port, env.directory)).length, 2);
  });

  test("putMessage() with WAIT=false is answered before its flush (SYNC_FLUSH)", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = gatedPort(memory);
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH", port: gate.port }, memory);
    try {
      await put(env.store);
      gate.hold();
      const r = await put(env.store, 10, { WAIT: "false" });
      assert.equal(r.status, "PUT_OK");
      assert.ok(env.store.flushedOffset < r.appendResult!.wroteOffset + r.appendResult!.wroteBytes);
      gate.release();
      await env.store.whenFlushed(r.appendResult!.wroteOffset + r.appendResult!.wroteBytes);
    } finally {
      await env.store.close();
    }
  });

  test("a failed flush answers UNKNOWN_ERROR and makes the store refuse writes until reopened", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    try {
      assert.equal((await put(env.store)).status, "PUT_OK");
      await waitForSegments(env.port, env.directory, 2);
      env.port.failNext({ operation: "flush", error: "EIO", pathIncludes: "/commitlog/" });
      const r = await put(env.store);
      assert.equal(r.status, "UNKNOWN_ERROR");
      assert.equal(r.error?.code, "IO_ERROR");
      const after = await put(env.store);
      assert.equal(after.status, "SERVICE_NOT_AVAILABLE");
      assert.equal(after.error?.code, "SERVICE_NOT_AVAILABLE");
    } finally {
      await env.store.close().catch(() => {});
    }
    // abort stayed: the next open recovers as after a crash, and works.
    assert.notEqual(await env.port.stat(`${env.directory}/abort`), undefined);
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal((await put(again)).status, "PUT_OK");
    } finally {
      await again.close();
    }
  });

  test("a failed async flush makes the store refuse writes", async () => {
    const env = await openMemoryStore({ flushIntervalCommitLog: 10, flushCommitLogLeastPages: 0 });
    try {
      const r = await put(env.store);
      await waitForSegments(env.port, env.directory, 2);
      env.port.failNext({ operation: "flush", error: "EIO", pathIncludes: "/commitlog/" });
      env.clock.advance(10);
      await assert.rejects(
        env.store.whenFlushed(r.appendResult!.wroteBytes),
        (error) => error instanceof MqStoreError && error.code === "IO_ERROR",
      );
      assert.equal((await put(env.store)).status, "SERVICE_NOT_AVAILABLE");
    } finally {
      await env.store.close().catch(() => {});
    }
  });

  test("putMessage() answers CREATE_MAPEDFILE_FAILED when a segment cannot be created, then recovers", async () => {
    // The store creates its first segment (and the one ahead) at open:
    // both creations fail, and the first put, which needs a segment, gets
    // the error of the one ahead when it asks the allocator again.
    const memory = new MemoryPort(runtimeName());
    // Only commit-log creations fail: the index file is prepared at open too.
    memory.failNext({ operation: "create", error: "ENOSPC", pathIncludes: "/commitlog/" });
    memory.failNext({
      operation: "create",
      nth: 2,
      error: "ENOSPC",
      pathIncludes: "/commitlog/",
    });
    const env = await openMemoryStore({}, memory);
    try {
      await settle();
      const r = await put(env.store);
      assert.equal(r.status, "CREATE_MAPEDFILE_FAILED");
      assert.equal(r.error?.code, "NO_SPACE");
      const ok = await put(env.store);
      assert.equal(ok.status, "PUT_OK");
      assert.equal(ok.appendResult!.queueOffset, 0);
    } finally {
      await env.store.close();
    }
  });

  test("checkDiskSpace() refuses puts over diskMaxUsedSpaceRatio and accepts them again below", async () => {
    const env = await openMemoryStore({ diskMaxUsedSpaceRatio: 75 });
    try {
      assert.equal((await put(env.store)).status, "PUT_OK");
      await waitForSegments(env.port, env.directory, 2);
      // Two 64 KiB segments (one ahead) in a 150 KiB disk: over 75 %.
      env.port.capacityBytes = 150 * 1024;
      assert.equal(await env.store.checkDiskSpace(), true);
      const refused = await put(env.store);
      assert.equal(refused.status, "SERVICE_NOT_AVAILABLE");
      assert.match(refused.error!.message, /diskMaxUsedSpaceRatio 75%/);
      env.port.capacityBytes = 2 ** 30;
      // The periodic check notices by itself.
      env.clock.advance(1_000);
      await settle();
      assert.equal((await put(env.store)).status, "PUT_OK");
    } finally {
      await env.store.close();
    }
  });

  test("unflushedBytesMaxDefault() is a tenth of memory in whole MiB, within 64 MiB–2 GiB; 512 MiB when unknown", () => {
    assert.equal(unflushedBytesMaxDefault(24 * 2 ** 30), 2 ** 31);
    assert.equal(unflushedBytesMaxDefault(8 * 2 ** 30), 819 * 2 ** 20);
    assert.equal(unflushedBytesMaxDefault(256 * 2 ** 20), 64 * 2 ** 20);
    assert.equal(unflushedBytesMaxDefault(undefined), 512 * 2 ** 20);
    assert.equal(unflushedBytesMaxDefault(0), 512 * 2 ** 20);
    assert.equal(unflushedBytesMaxDefault(Number.NaN), 512 * 2 ** 20);
    // The store's default follows this machine's memory; a setting wins.
    assert.equal(
      resolveOptions({}).unflushedBytesMax,
      unflushedBytesMaxDefault(totalMemoryBytes()),
    );
    assert.equal(resolveOptions({ unflushedBytesMax: 0x10_0000 }).unflushedBytesMax, 0x10_0000);
  });

  test("putMessage() waits for a lagging flusher, then answers OS_PAGECACHE_BUSY past the timeout", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = gatedPort(memory);
    const env = await openMemoryStore({
      port: gate.port,
      unflushedBytesMax: 0x4000,
      osPageCacheBusyTimeOutMills: 1_000,
      flushIntervalCommitLog: 10,
      flushCommitLogLeastPages: 0,
    }, memory);
    try {
      await put(env.store, 100);
      gate.hold();
      let answered = 0;
      const fill = Array.from({ length: 30 }, () =>
        put(env.store, 1000).then((r) => {
          answered++;
          return r;
        }));
      await settle();
      // The first ~15 KiB went through; the rest waits for the held flusher.
      const through = answered;
      assert.ok(through >= 10 && through < 30, `${through} answered`);
      env.clock.advance(1_000);
      const results = await Promise.all(fill);
      assert.ok(results.slice(0, through).every((r) => r.status === "PUT_OK"));
      const late = results.slice(through);
      assert.ok(
        late.every((r) => r.status === "OS_PAGECACHE_BUSY"),
        late.map((r) => r.status).join(),
      );
      assert.equal(late[0]!.error?.code, "OS_PAGECACHE_BUSY");
      gate.release();
      await settle();
      // Once the flusher catches up puts go through again.
      env.clock.advance(10);
      const again = await put(env.store, 100);
      assert.equal(again.status, "PUT_OK");
    } finally {
      gate.release();
      await env.store.close();
    }
  });

  test("ManualClock-driven flushes make async puts durable up to the flushed offset", async () => {
    const clock = new ManualClock(1);
    const env = await openMemoryStore({
      clock,
      flushIntervalCommitLog: 5,
      flushCommitLogLeastPages: 0,
    });
    try {
      const r = await put(env.store, 5000);
      clock.advance(5);
      await env.store.whenFlushed(r.appendResult!.wroteBytes);
      await put(env.store, 5000); // not flushed
      env.port.crash();
      assert.equal((await readRecords(env.port, env.directory)).length, 1);
      assert.equal(SEGMENT_BYTES, 0x1_0000);
    } finally {
      await env.store.close().catch(() => {});
    }
  });

  test("GroupCommitService starts the next flush as soon as the producers it answered are back", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = gatedPort(memory);
    const queue = new MappedFileQueue({
      port: gate.port,
      directory: "/group/commitlog",
      fileSizeBytes: SEGMENT_BYTES,
    });
    await queue.load();
    const stats = new StoreStats();
    const groupCommit = new GroupCommitService({
      queue,
      clock: new ManualClock(),
      syncFlushTimeoutMs: 5_000,
      checkpoint: await StoreCheckpoint.load(gate.port, "/group/checkpoint"),
      stats,
      onFlushed: () => {},
      onError: (error) => assert.fail(String(error)),
    });
    // Microtasks only: an event-loop turn (setImmediate, I/O) cannot run.
    const drainMicrotasks = async () => {
      for (let i = 0; i < 0x40; i++) await null;
    };
    const file = await queue.getOrCreateLastMappedFile(0);
    const append = () => {
      file.appendBytes(body(100));
      return queue.maxWrotePosition;
    };
    // A group of two: both appended before the first request starts a flush.
    const endA = append();
    const endB = append();
    const first = [
      groupCommit.request(endA, { status: "PUT_OK" }, 0),
      groupCommit.request(endB, { status: "PUT_OK" }, 0),
    ];
    assert.deepEqual((await Promise.all(first)).map((r) => r.status), ["PUT_OK", "PUT_OK"]);
    assert.equal(stats.groupCommitCount, 1);
    gate.hold();
    const c = groupCommit.request(append(), { status: "PUT_OK" }, 0);
    await drainMicrotasks();
    assert.equal(gate.waiting, 0, "one of two producers back: the flush waits for the turn");
    const d = groupCommit.request(append(), { status: "PUT_OK" }, 0);
    await drainMicrotasks();
    assert.equal(gate.waiting, 1, "both back: the flush started in the same turn");
    gate.release();
    assert.deepEqual([(await c).status, (await d).status], ["PUT_OK", "PUT_OK"]);
    assert.equal(stats.groupCommitCount, 2);
    assert.equal(stats.groupCommitRequests, 4, "one flush answered both");
    await groupCommit.close();
    await queue.close();
  });

  test("GroupCommitService.whenQuiet() waits while puts wait for a flush", async () => {
    const memory = new MemoryPort(runtimeName());
    const gate = gatedPort(memory);
    const queue = new MappedFileQueue({
      port: gate.port,
      directory: "/quiet/commitlog",
      fileSizeBytes: SEGMENT_BYTES,
    });
    await queue.load();
    const groupCommit = new GroupCommitService({
      queue,
      clock: new ManualClock(),
      syncFlushTimeoutMs: 5_000,
      checkpoint: await StoreCheckpoint.load(gate.port, "/quiet/checkpoint"),
      stats: new StoreStats(),
      onFlushed: () => {},
      onError: (error) => assert.fail(String(error)),
    });
    assert.equal(groupCommit.isQuiet, true);
    await groupCommit.whenQuiet(); // at once when idle
    (await queue.getOrCreateLastMappedFile(0)).appendBytes(body(100));
    gate.hold();
    const answer = groupCommit.request(100, { status: "PUT_OK" }, 0);
    assert.equal(groupCommit.isQuiet, false);
    let quiet = false;
    const whenQuiet = groupCommit.whenQuiet().then(() => quiet = true);
    await settle();
    assert.equal(quiet, false, "a put waits for its flush");
    gate.release();
    assert.equal((await answer).status, "PUT_OK");
    await whenQuiet;
    assert.equal(groupCommit.isQuiet, true);
    await groupCommit.close();
    await queue.close();
  });
});
