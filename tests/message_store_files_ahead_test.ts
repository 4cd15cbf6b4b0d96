/**
 * Consume-queue and index files are made ahead of need, off the dispatch
 * path: the next file is created when the written one is ¾ full and put
 * in use when it fills up. Checked here: queries and reads across many
 * rolls, a crash with prepared files on disk, and (with a port that
 * records file creations) that the creation happened while the previous
 * file was still being filled.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { javaHashCode } from "../src/record/mod.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import { ConsumeQueueAllocator } from "../src/store/_consume_queue_allocator.ts";
import { ConsumeQueueTable } from "../src/store/consume_queue_table.ts";
import { IndexService } from "../src/store/index_service.ts";
import { body, heldCreations, openMemoryStore } from "./_store_helpers.ts";
import { settle } from "./_segment_helpers.ts";

/** 8 units per consume-queue file: the next is prepared at the 6th. */
const CQ_FILE_BYTES = 20 * 8;
/** 8 entries per index file (entry 0 unused): the next is prepared at indexCount 6. */
const INDEX_NUM = 9;
const QUEUES = 2;

/**
 * Wraps `inner` so that every `createFile` (or `createFileSync`) path is
 * recorded in `created` and, with `renamed`, every `rename` (or
 * `renameSync`) target in it.
 */
function recordingPort(inner: RuntimePort, created: string[], renamed?: string[]): RuntimePort {
  return new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      const creates = key === "createFile" || key === "createFileSync";
      const renames = key === "rename" || key === "renameSync";
      if (creates || (renames && renamed !== undefined)) {
        const calls = creates ? created : renamed!;
        const argument = creates ? 0 : 1;
        return (...args: unknown[]) => {
          calls.push(String(args[argument]));
          return value.apply(target, args);
        };
      }
      return value.bind(target);
    },
  });
}

async function putMany(store: MessageStore, from: number, count: number): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const r = await store.putMessage({
      topic: "A",
      queueId: i % QUEUES,
      body: body(40 + (i % 5) * 10, i),
      properties: { KEYS: `key-${i}` },
    });
    assert.equal(r.status, "PUT_OK");
  }
}

/** Every message of topic A, by queue, as the number in its key. */
async function readAll(store: MessageStore): Promise<number[]> {
  const seen: number[] = [];
  for (let queueId = 0; queueId < QUEUES; queueId++) {
    let next = store.getMinQueueOffset("A", queueId);
    for (let round = 0; round < 1000; round++) {
      const page = await store.getMessages("A", queueId, next, 5);
      if (page.status !== "FOUND") break;
      for (const [i, message] of page.messages.entries()) {
        assert.equal(message.queueOffset, next + i);
        seen.push(Number(message.properties.get("KEYS")?.slice("key-".length)));
      }
      next = page.nextQueueOffset;
    }
    assert.equal(next, store.nextQueueOffset("A", queueId));
  }
  return seen.sort((a, b) => a - b);
}

async function checkQueries(store: MessageStore, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const found = await store.queryMessages("A", `key-${i}`);
    assert.equal(found.messages.length, 1, `key-${i} is found once`);
    // And with a time range starting about when it was stored: the walk
    // over newer files must not stop early.
    const at = found.messages[0]!.storeTimestamp;
    // (Index times are kept to the second, from the file's begin.)
    const ranged = await store.queryMessages("A", `key-${i}`, { beginTimestamp: at - 1000 });
    assert.equal(ranged.messages.length, 1, `key-${i} from its own time`);
  }
}

describe("ConsumeQueueAllocator", () => {
  test("prepare() creates two files at once, and a directory's files appear in the order prepared", async () => {
    const memory = new MemoryPort(runtimeName());
    const directory = "/cq/A/0";
    await memory.makeDirectory(directory);
    const names = ["00000000000000000160", "00000000000000000320", "00000000000000000480"];
    const paths = names.map((name) => `${directory}/${name}`);
    const created: string[] = [];
    const renamed: string[] = [];
    // The first file's creation is slow; the second's is not.
    const held = heldCreations(memory, (path) => path.startsWith(paths[0]!));
    const port = recordingPort(held.port, created, renamed);
    const allocator = new ConsumeQueueAllocator({ port, sparse: true });
    const done = paths.map((path) => allocator.prepare(path, CQ_FILE_BYTES));
    await settle();
    // Two at once: the second started while the first is held; the third waits for a slot.
    assert.deepEqual(created.map((path) => path.slice(0, paths[0]!.length)), paths.slice(0, 2));
    assert.deepEqual(renamed, [], "the second file is not renamed before the first");
    held.release();
    await Promise.all(done);
    assert.deepEqual(renamed, paths);
    for (const path of paths) assert.equal(allocator.isReady(path), true);
    await allocator.close();
    for (const path of paths) assert.equal(await memory.stat(path), undefined, "removed at close");
  });
});

describe("MessageStore files made ahead", () => {
  test("MessageStore dispatch rolls consume-queue and index files many times; queries and reads span the rolls", async () => {
    const env = await openMemoryStore({
      mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
      maxIndexNum: INDEX_NUM,
      maxHashSlotNum: 4,
    });
    const count = 120;
    try {
      for (let i = 0; i < count; i += 10) {
        await putMany(env.store, i, 10);
        // Time moves on: index files span different seconds.
        env.clock.advance(1500);
      }
      await env.store.whenDispatched(env.store.maxOffset);
      // One key per message, 8 entries per file.
      assert.ok(env.store.indexFileCount >= count / 8, `${env.store.indexFileCount} files`);
      assert.deepEqual(await readAll(env.store), Array.from({ length: count }, (_, i) => i));
      await checkQueries(env.store, count);
    } finally {
      await env.store.close();
    }
    // A clean close leaves no prepared file: only whole, named files.
    const index = await env.port.list(`${env.directory}/index`);
    assert.deepEqual(index.filter((name) => !/^[0-9]{17}$/.test(name)), []);
    const reopened = await env.reopen();
    try {
      assert.deepEqual(await readAll(reopened), Array.from({ length: count }, (_, i) => i));
      await checkQueries(reopened, count);
    } finally {
      await reopened.close();
    }
  });

  test("MessageStore.open() after a crash with prepared files on disk serves everything", async () => {
    const env = await openMemoryStore({
      flushDiskType: "SYNC_FLUSH",
      mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
      maxIndexNum: INDEX_NUM,
      maxHashSlotNum: 4,
    });
    const { port, directory } = env;
    // 7 messages per queue: each queue's first file is past ¾ (6 of 8
    // units) and 14 messages × 2 keys fill an index file past ¾ too.
    const count = 2 * 7 + 2 * 8;
    await putMany(env.store, 0, count);
    await env.store.whenDispatched(env.store.maxOffset);
    await settle();
    const indexNames = await port.list(`${directory}/index`);
    assert.ok(indexNames.some((name) => name.endsWith(".tmp")), `prepared: ${indexNames}`);
    const cqNames = await port.list(`${directory}/consumequeue/A/0`);
    // 15 units: the second file is being written, the third prepared.
    assert.equal(cqNames.length, 3, `files of A/0: ${cqNames}`);
    port.crash();
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.deepEqual(await readAll(again), Array.from({ length: count }, (_, i) => i));
      await checkQueries(again, count);
      // The old prepared file went (never synced into the directory, or
      // removed on open); re-dispatch may have prepared a new one.
      const after = await port.list(`${directory}/index`);
      assert.ok(after.filter((name) => name.endsWith(".tmp")).length <= 1, `${after}`);
      // More puts roll onto new files after the recovery.
      await putMany(again, count, 20);
      await again.whenDispatched(again.maxOffset);
      await checkQueries(again, count + 20);
    } finally {
      await again.close();
    }
  });

  test("IndexService.load() drops a prepared file a crash left under its real name", async () => {
    const port = new MemoryPort(runtimeName());
    const options = {
      port,
      rootDirectory: "/s",
      maxHashSlotNum: 4,
      maxIndexNum: INDEX_NUM,
      clock: { nowMs: () => 1_700_000_000_000 },
    };
    const index = new IndexService(options);
    await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
    const hashes = Int32Array.of(javaHashCode("A#k"));
    for (let i = 0; i < 6; i++) await index.buildIndexHashes(hashes, 1, i * 100, 1_700_000_000_000);
    const prepared = await index.preparedFile;
    assert.ok(prepared !== undefined && prepared.isPrepared);
    const firstName = index.files[0]!.fileName;
    await index.flush();
    // The crash came between the rename and the flush of the new header.
    await port.rename(`${prepared.path}.tmp`, prepared.path);
    // And a half-made preparation of another file.
    const leftover = `/s/index/${"9".repeat(17)}.tmp`;
    await (await port.createFile(leftover, 100)).close();
    await port.syncDirectory("/s/index");
    port.crash();
    for (const lastExitOK of [true, false]) {
      const again = new IndexService(options);
      await again.load({ lastExitOK: lastExitOK, indexMsgTimestamp: Number.MAX_SAFE_INTEGER });
      try {
        assert.equal(again.files.length, 1);
        assert.deepEqual(
          again.queryOffset("A", "k", 64, 1_700_000_000_000, Number.MAX_SAFE_INTEGER).phyOffsets,
          [500, 400, 300, 200, 100, 0],
        );
      } finally {
        await again.close();
      }
    }
    assert.deepEqual(await port.list("/s/index"), [firstName]);
  });

  test("IndexService.buildIndexHashes() rolls onto files created on load and while the previous one was filling", async () => {
    const created: string[] = [];
    const port = recordingPort(new MemoryPort(runtimeName()), created);
    let nowMs = 1_700_000_000_000;
    const index = new IndexService({
      port,
      rootDirectory: "/s",
      maxHashSlotNum: 4,
      maxIndexNum: INDEX_NUM,
      clock: { nowMs: () => nowMs++ },
    });
    await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
    try {
      // The first file is prepared on load.
      assert.equal((await index.preparedFile)?.isPrepared, true);
      assert.equal(index.files.length, 0);
      const hashes = Int32Array.of(javaHashCode("A#k"));
      for (let i = 0; i < 4; i++) await index.buildIndexHashes(hashes, 1, i * 100, nowMs);
      assert.equal(index.preparedFile === undefined, true);
      await index.buildIndexHashes(hashes, 1, 400, nowMs); // indexCount 6 of 9: ¾
      assert.equal(index.preparedFile === undefined, false);
      const prepared = await index.preparedFile;
      assert.ok(prepared !== undefined);
      const first = index.files[0]!;
      assert.equal(first.isWriteFull, false);
      assert.equal(index.files.length, 1);
      assert.deepEqual(created.map((path) => path.endsWith(".tmp")), [true, true]);
      for (let i = 5; i < 12; i++) await index.buildIndexHashes(hashes, 1, i * 100, nowMs);
      // The roll took the prepared file: no creation on its way.
      assert.equal(created.length, 2);
      assert.equal(index.files.length, 2);
      assert.equal(index.files[1], prepared);
      assert.equal(prepared.isPrepared, false);
      // Its header took the full file's end at activation, then its first entry's.
      assert.equal(first.endPhyOffset, 700);
      assert.equal(prepared.beginPhyOffset, 800);
      assert.equal(prepared.beginTimestamp, first.endTimestamp);
      assert.ok((await port.stat(prepared.path)) !== undefined);
      assert.equal(
        index.queryOffset("A", "k", 64, 0, Number.MAX_SAFE_INTEGER).phyOffsets.length,
        12,
      );
    } finally {
      await index.close();
    }
  });

  test("ConsumeQueue.putUnit() rolls onto a file created while the previous one was filling", async () => {
    const created: string[] = [];
    const port = recordingPort(new MemoryPort(runtimeName()), created);
    const table = new ConsumeQueueTable({
      port,
      rootDirectory: "/s",
      mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
    });
    await table.load();
    await table.recover();
    try {
      const cq = await table.findOrCreate("A", 0);
      assert.equal(await cq.putUnit(0, 100, 0, 0), true);
      // Prepared from the first unit (⅛ of the file).
      assert.equal(table.preparedFileCount, 1);
      for (let i = 1; i < 5; i++) assert.equal(await cq.putUnit(i * 100, 100, 0, i), true);
      await table.whenPrepared();
      assert.equal(cq.putUnitNow(500, 100, 0, 5), true);
      assert.equal(table.preparedFileCount, 1);
      await table.whenPrepared();
      assert.equal(cq.files.length, 1);
      assert.equal(cq.files[0]!.isFull, false);
      const next = "/s/consumequeue/A/0/00000000000000000160";
      assert.equal(created.filter((path) => path.startsWith(next)).length, 1);
      for (let i = 6; i < 12; i++) await cq.putUnit(i * 100, 100, 0, i);
      // The roll took the prepared file (the one after it is prepared now).
      assert.equal(
        created.filter((path) => path.startsWith(next)).length,
        1,
        "the roll created no file",
      );
      assert.equal(cq.files.length, 2);
      assert.equal(cq.files[1]!.path, next);
      for (let i = 0; i < 12; i++) {
        assert.deepEqual(await cq.getUnit(i), { commitLogOffset: i * 100, size: 100, tagsCode: 0 });
      }
    } finally {
      await table.close();
    }
  });

  test("MessageStore dispatch does not wait for the first file of a new consume queue", async () => {
    const memory = new MemoryPort(runtimeName());
    const held = heldCreations(memory, (path) => path.includes("/consumequeue/New/"));
    const env = await openMemoryStore({ port: held.port }, memory);
    const { store, directory } = env;
    try {
      const offsets: number[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await store.putMessage({ topic: "New", queueId: 3, body: body(30, i) });
        assert.equal(r.status, "PUT_OK");
        offsets.push(r.appendResult!.wroteOffset);
        // Dispatched in step with the put, though the file is not there.
        assert.equal(store.dispatchedOffset, store.maxOffset);
      }
      await settle();
      assert.equal(held.waiting, 1);
      const page = await store.getMessages("New", 3, 0, 32);
      assert.equal(page.status, "FOUND");
      assert.deepEqual(page.messages.map((m) => m.physicalOffset), offsets);
      assert.equal(store.getMaxQueueOffset("New", 3), 5);
      held.release();
      // The flush waits for the file, which gets the units in order.
      await store.close();
      const again = await env.reopen({ port: memory });
      try {
        assert.equal(again.recovery.clean, true);
        const reread = await again.getMessages("New", 3, 0, 32);
        assert.deepEqual(reread.messages.map((m) => m.physicalOffset), offsets);
      } finally {
        await again.close();
      }
      assert.deepEqual(await memory.list(`${directory}/consumequeue/New/3`), [
        "00000000000000000000",
      ]);
    } finally {
      held.release();
      await store.close();
    }
  });

  test("MessageStore.open() after a crash before a new queue's first file existed re-dispatches its units", async () => {
    const memory = new MemoryPort(runtimeName());
    const held = heldCreations(memory, (path) => path.includes("/consumequeue/New/"));
    const env = await openMemoryStore({ port: held.port, flushDiskType: "SYNC_FLUSH" }, memory);
    const { store } = env;
    const offsets: number[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        const r = await store.putMessage({ topic: "Old", queueId: 0, body: body(30, i) });
        assert.equal(r.status, "PUT_OK");
      }
      for (let i = 0; i < 3; i++) {
        const r = await store.putMessage({ topic: "New", queueId: 0, body: body(30, i) });
        offsets.push(r.appendResult!.wroteOffset);
      }
      assert.equal(store.dispatchedOffset, store.maxOffset);
      // The flush service's thorough round (checkpoint written) waits for
      // the file: the checkpoint cannot count the units held in memory.
      env.clock.advance(61_000);
      await settle();
      assert.equal(held.waiting, 1);
      assert.ok(store.checkpoint.consumeQueueOffset <= offsets[0]!);
    } finally {
      memory.crash();
      held.release();
      await store.close().catch(() => {});
    }
    const again = await env.reopen({ port: memory });
    try {
      assert.equal(again.recovery.clean, false);
      const page = await again.getMessages("New", 0, 0, 32);
      assert.deepEqual(page.messages.map((m) => m.physicalOffset), offsets);
      assert.equal(again.getMaxQueueOffset("Old", 0), 4);
    } finally {
      await again.close();
    }
  });

  test("ConsumeQueue.putUnitNow() holds a new queue's units in memory, in order, up to its bound", async () => {
    const port = new MemoryPort(runtimeName());
    const held = heldCreations(port, (path) => path.includes("/consumequeue/A/"));
    const table = new ConsumeQueueTable({ port: held.port, rootDirectory: "/s" });
    await table.load();
    await table.recover();
    try {
      const cq = table.findOrCreateNow("A", 0);
      assert.ok(cq !== undefined);
      assert.equal(table.findOrCreateNow("A", 0), cq);
      let taken = 0;
      // Bounded: one put in 4096 declines while the file is created (a turn).
      for (; taken < 10_000; taken++) {
        const put = cq.putUnitNow(taken * 100, 100, taken, taken);
        if (put === undefined) break;
        assert.equal(put, true);
      }
      assert.ok(taken >= 0x100 && taken < 10_000, `${taken} units held`);
      assert.equal(cq.putUnitNow(0, 100, 0, 0), false, "a repeat is skipped");
      assert.equal(cq.maxOffsetInQueue, taken);
      const units = await cq.readUnits(taken - 2, 32);
      assert.deepEqual([units!.unitAt(0), units!.unitAt(1)].map((u) => u.tagsCode), [
        taken - 2,
        taken - 1,
      ]);
      units!.release();
      // The declined one takes a turn of the event loop and is held too
      // (up to a file's worth), without waiting for the file.
      assert.equal(await cq.putUnit(taken * 100, 100, taken, taken), true);
      assert.equal(cq.inMemoryUnitCount, taken + 1);
      held.release();
      await cq.whenFileReady();
      assert.equal(cq.inMemoryUnitCount, 0);
      assert.equal(cq.files[0]!.wrotePosition, (taken + 1) * 20);
      for (const q of [0, taken - 1, taken]) {
        assert.deepEqual(await cq.getUnit(q), { commitLogOffset: q * 100, size: 100, tagsCode: q });
      }
      assert.equal(await table.flush(0), true);
    } finally {
      held.release();
      await table.close();
    }
  });

  test("ConsumeQueueTable.findOrCreateNow() reports a first file that cannot be created", async () => {
    const port = new MemoryPort(runtimeName());
    const errors: unknown[] = [];
    const table = new ConsumeQueueTable({
      port,
      rootDirectory: "/s",
      onError: (error) => errors.push(error),
    });
    await table.load();
    await table.recover();
    port.failNext({ operation: "create", error: "EIO", pathIncludes: "/consumequeue/A/" });
    const cq = table.findOrCreateNow("A", 0)!;
    assert.equal(cq.putUnitNow(0, 100, 0, 0), true);
    await assert.rejects(cq.whenFileReady(), { code: "IO_ERROR" });
    assert.equal(errors.length, 1);
    assert.throws(() => cq.putUnitNow(100, 100, 0, 1), { code: "IO_ERROR" });
    await assert.rejects(table.flush(0), { code: "IO_ERROR" });
    // Readers still see what the queue took.
    assert.equal((await cq.getUnit(0))?.commitLogOffset, 0);
    await table.close();
  });

  test("ConsumeQueue.truncateDirtyLogicFiles() discards the prepared file so the files stay contiguous", async () => {
    const port = new MemoryPort(runtimeName());
    const options = { port, rootDirectory: "/s", mappedFileSizeConsumeQueue: CQ_FILE_BYTES };
    const table = new ConsumeQueueTable(options);
    await table.load();
    await table.recover();
    const cq = await table.findOrCreate("A", 0);
    // 14 units: the second file has 6, the third is prepared.
    for (let i = 0; i < 14; i++) await cq.putUnit(i * 100, 100, 0, i);
    await table.whenPrepared();
    assert.equal((await port.list("/s/consumequeue/A/0")).length, 3);
    await cq.truncateDirtyLogicFiles(300);
    assert.deepEqual(await port.list("/s/consumequeue/A/0"), ["00000000000000000000"]);
    await table.close();
    const again = new ConsumeQueueTable(options);
    await again.load();
    await again.recover();
    try {
      assert.equal(again.find("A", 0)?.maxOffsetInQueue, 3);
    } finally {
      await again.close();
    }
  });
});
