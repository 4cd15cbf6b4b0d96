/**
 * After an unclean exit the index files are cut back to the checkpoint's
 * index point instead of being dropped (session 10, helper D): a SIGKILL
 * keeps the page cache, so the last file's header is always newer than the
 * checkpoint, and dropping it replayed up to 20 M messages on every
 * restart. A file whose entries or chains are not what in-order appends
 * leave (pages a power loss kept unwritten) is still dropped and rebuilt.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { createPort, MemoryPort } from "../src/runtime/mod.ts";
import type { Mapping, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import {
  HASH_SLOT_SIZE_BYTES,
  INDEX_ENTRY_SIZE_BYTES,
  INDEX_HEADER_SIZE_BYTES,
} from "../src/store/_index_file_constants.ts";
import { IndexFile } from "../src/store/index_file.ts";
import { IndexService } from "../src/store/index_service.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { withTempDirectory } from "./_helpers.ts";
import { prng } from "./_prng.ts";
import { mappingsPort } from "./_segment_helpers.ts";
import {
  assertKeysFound,
  type MemoryStoreEnv,
  openMemoryStore,
  putKeyed,
  settle,
} from "./_store_helpers.ts";

const TOPIC = "Cut";
const T0 = 1_700_000_000_000;
const SLOTS = 16;

/** Keys of message `i`: one or two, from a small set so that slots collide. */
function keysOf(i: number): string[] {
  return i % 3 === 0 ? [`k${i % 40}`, `u${i}`] : [`u${i}`];
}

/**
 * Indexes messages `from` … `count − 1` into `index` as re-dispatch does
 * (as {@link buildIndex} first did), then checks that each key of messages
 * 0 … count − 1 finds its message exactly once.
 */
async function redispatchFrom(index: IndexService, from: number, count: number): Promise<void> {
  for (let i = from; i < count; i++) {
    await index.buildIndex({
      topic: TOPIC,
      commitLogOffset: 100 * i,
      storeTimestamp: T0 + 300 * i,
      keys: keysOf(i),
    });
  }
  for (let i = 0; i < count; i++) {
    for (const key of keysOf(i)) {
      const found = index.queryOffset(TOPIC, key, 64, 0, Number.MAX_SAFE_INTEGER).phyOffsets;
      assert.equal(found.filter((offset) => offset === 100 * i).length, 1, `${key} of ${i}`);
    }
  }
}

/** An index under `root` holding messages 0 … count − 1 (offset 100·i, 300 ms apart). */
async function buildIndex(
  port: MemoryPort,
  root: string,
  count: number,
  indexNum: number,
): Promise<IndexService> {
  const index = new IndexService({
    port,
    rootDirectory: root,
    maxHashSlotNum: SLOTS,
    maxIndexNum: indexNum,
  });
  await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
  for (let i = 0; i < count; i++) {
    await index.buildIndex({
      topic: TOPIC,
      commitLogOffset: 100 * i,
      storeTimestamp: T0 + 300 * i,
      keys: keysOf(i),
    });
  }
  return index;
}

/** Header fields, slots and entries of a file, to compare two files. */
function contentOf(file: IndexFile) {
  const slots: number[] = [];
  for (let s = 0; s < file.hashSlotNum; s++) slots.push(file.slotAt(s));
  const entries = [];
  for (let e = 1; e < file.indexCount; e++) entries.push(file.entryAt(e));
  return {
    beginPhyOffset: file.beginPhyOffset,
    beginTimestamp: file.beginTimestamp,
    endPhyOffset: file.endPhyOffset,
    hashSlotCount: file.hashSlotCount,
    indexCount: file.indexCount,
    slots,
    entries,
  };
}

/** Writes `bytes` at `position` of a memory-port file, durably. */
async function patch(port: MemoryPort, file: string, position: number, bytes: Uint8Array) {
  const handle = await port.openFile(file);
  await handle.write(bytes, position);
  await handle.datasync();
  await handle.close();
}

function entryPosition(entryNo: number): number {
  return INDEX_HEADER_SIZE_BYTES + SLOTS * HASH_SLOT_SIZE_BYTES + entryNo * INDEX_ENTRY_SIZE_BYTES;
}

/**
 * Loads the index under `root` after a crash, with the checkpoint at
 * record 29 (offset 3000), and asserts that it dropped its one file whole
 * instead of cutting it.
 */
async function loadDroppingTheFile(port: MemoryPort, root: string): Promise<IndexService> {
  const options = { port, rootDirectory: root, maxHashSlotNum: SLOTS, maxIndexNum: 1024 };
  const index = new IndexService(options);
  assert.deepEqual(
    await index.load({ lastExitOK: false, indexMsgTimestamp: T0 + 300 * 29, indexOffset: 3000 }),
    {
      droppedFiles: 1,
      droppedFromOffset: 0,
      cutFiles: 0,
      cutEntries: 0,
    },
  );
  return index;
}

/**
 * An index of messages 0 … 59 under `root` (80 entries), closed, whose
 * entry 70 (past a cut at record 30) a power loss left zero.
 *
 * @returns The index file's path.
 */
async function indexWithEntry70Lost(port: MemoryPort, root: string): Promise<string> {
  const index = await buildIndex(port, root, 60, 1024);
  const path = index.files[0]!.path;
  await index.close();
  await patch(port, path, entryPosition(70), new Uint8Array(INDEX_ENTRY_SIZE_BYTES));
  return path;
}

describe("IndexFile.cutBefore()", () => {
  test("IndexFile.cutBefore() leaves the file an index of the records before the cut builds", async () => {
    const port = new MemoryPort(runtimeName());
    for (const cutAt of [1, 2, 57, 60, 61, 119, 120]) {
      const full = await buildIndex(port, `/full-${cutAt}`, 120, 1024);
      const part = await buildIndex(port, `/part-${cutAt}`, cutAt, 1024);
      const fullFile = full.files[0]!;
      const removed = fullFile.cutBefore(100 * cutAt, T0 + 300 * (cutAt - 1));
      assert.equal(
        removed,
        120 - cutAt + Math.floor(119 / 3) + 1 - Math.ceil(cutAt / 3),
        `cut ${cutAt}`,
      );
      assert.deepEqual(contentOf(fullFile), contentOf(part.files[0]!), `cut ${cutAt}`);
      // The end time: the last kept record's, to the second, not past the checkpoint's.
      assert.equal(fullFile.endTimestamp, part.files[0]!.endTimestamp, `cut ${cutAt}`);
      // Cutting again at the same point removes nothing.
      assert.equal(fullFile.cutBefore(100 * cutAt, 0), 0);
      await full.close();
      await part.close();
    }
  });

  test("IndexFile.cutBefore() gives up without a change on an entry a power loss left zero", async () => {
    const port = new MemoryPort(runtimeName());
    const path = await indexWithEntry70Lost(port, "/z");
    const file = await IndexFile.open({ port, path, hashSlotNum: SLOTS, indexNum: 1024 });
    const before = contentOf(file);
    assert.equal(file.cutBefore(3000, 0), -1);
    assert.deepEqual(contentOf(file), before);
    await file.close();
  });

  test("IndexFile.cutBefore() gives up on a chain that does not go back or meets another slot's entry", async () => {
    const port = new MemoryPort(runtimeName());
    const index = await buildIndex(port, "/c", 60, 1024);
    const path = index.files[0]!.path;
    const last = index.files[0]!.indexCount - 1;
    await index.close();
    const view = new DataView(new ArrayBuffer(4));
    // The last entry links to itself.
    view.setInt32(0, last);
    await patch(port, path, entryPosition(last) + 0x10, new Uint8Array(view.buffer));
    const self = await IndexFile.open({ port, path, hashSlotNum: SLOTS, indexNum: 1024 });
    assert.equal(self.cutBefore(3000, 0), -1);
    await self.close();
    // Its key hash changed: no longer the hash of the slot that leads to it.
    view.setInt32(0, last - 1);
    await patch(port, path, entryPosition(last) + 0x10, new Uint8Array(view.buffer));
    const hashed = await IndexFile.open({ port, path, hashSlotNum: SLOTS, indexNum: 1024 });
    const keyHash = hashed.entryAt(last).keyHash;
    view.setInt32(0, keyHash + 1);
    await hashed.close();
    await patch(port, path, entryPosition(last), new Uint8Array(view.buffer));
    const other = await IndexFile.open({ port, path, hashSlotNum: SLOTS, indexNum: 1024 });
    assert.equal(other.cutBefore(3000, 0), -1);
    await other.close();
  });
});

describe("IndexService.load() cut", () => {
  test("IndexService.load() cuts files back to the checkpoint's index offset and drops those left empty", async () => {
    const port = new MemoryPort(runtimeName());
    // 40 entries a file: 120 records with 160 keys make 4 files, the
    // checkpoint inside the second.
    const index = await buildIndex(port, "/s", 120, 41);
    assert.equal(index.files.length, 4);
    await index.close();
    const options = { port, rootDirectory: "/s", maxHashSlotNum: SLOTS, maxIndexNum: 41 };
    const cut = new IndexService(options);
    const report = await cut.load({
      lastExitOK: false,
      indexMsgTimestamp: T0 + 300 * 39,
      indexOffset: 100 * 40,
    });
    assert.equal(report.droppedFromOffset, -1);
    assert.equal(report.droppedFiles, 2);
    assert.equal(report.cutFiles, 1);
    assert.equal(report.cutEntries, 160 - 40 - 14);
    assert.equal(cut.files.length, 2);
    assert.equal(cut.files[1]!.endPhyOffset, 3900);
    for (let i = 0; i < 120; i++) {
      for (const key of keysOf(i)) {
        const found = cut.queryOffset(TOPIC, key, 64, 0, Number.MAX_SAFE_INTEGER).phyOffsets;
        assert.equal(found.includes(100 * i), i < 40, `${key} of ${i}`);
      }
    }
    // Re-dispatch from the point puts the rest back, as first built.
    await redispatchFrom(cut, 40, 120);
    await cut.close();
  });

  test("IndexService.load() drops a file it cannot cut, from its beginning", async () => {
    const port = new MemoryPort(runtimeName());
    await indexWithEntry70Lost(port, "/d");
    const dropped = await loadDroppingTheFile(port, "/d");
    assert.equal(dropped.files.length, 0);
    await dropped.close();
  });

  test("IndexService.load() drops a file whose slot a power loss left ahead of its header's count", async () => {
    const port = new MemoryPort(runtimeName());
    const index = await buildIndex(port, "/h", 30, 1024);
    const file = index.files[0]!;
    const path = file.path;
    const count = file.indexCount;
    await index.close();
    // Nothing past the point (the header as the checkpoint saw it), but
    // one slot names an entry the header does not count.
    await putSlotAheadOfCount(port, path, count);
    const dropped = await loadDroppingTheFile(port, "/h");
    await dropped.close();
  });

  test("IndexService.load() closes each file it drops at once, so their views do not pile up before the deletes", async () => {
    const port = new MemoryPort(runtimeName());
    // 4 files of 40 entries; the log's end at message 10, inside the first.
    const built = await buildIndex(port, "/v", 120, 41);
    assert.equal(built.files.length, 4);
    await built.close();
    // Views read and not yet given back (a portable port's are file-sized).
    const live = new Set<Mapping>();
    let most = 0;
    const counting = mappingsPort(port, (mapping) =>
      new Proxy(mapping, {
        get(target, key) {
          if (key === "bytes") {
            live.add(mapping);
            most = Math.max(most, live.size);
          }
          if (key === "unmap") {
            return () => {
              live.delete(mapping);
              target.unmap();
            };
          }
          const value = Reflect.get(target, key);
          return typeof value === "function" ? value.bind(target) : value;
        },
      }));
    const index = new IndexService({
      port: counting,
      rootDirectory: "/v",
      maxHashSlotNum: SLOTS,
      maxIndexNum: 41,
    });
    const report = await index.load({
      lastExitOK: true,
      indexMsgTimestamp: T0 + 300 * 119,
      logEndOffset: 1000,
    });
    // The first file cut and kept; the three after it cut to empty and
    // deleted, each closed before the next was cut.
    assert.equal(report.droppedFiles, 3);
    assert.equal(index.files.length, 1);
    assert.ok(most <= 2, `${most} views at once`);
    await index.close();
  });

  test("IndexService.load() drops every file after one it cannot cut, so re-dispatch can rebuild them all", async () => {
    const port = new MemoryPort(runtimeName());
    // 4 files of 40 entries, the checkpoint inside the second: the first
    // (the last ending before the point) is checked too.
    const index = await buildIndex(port, "/a", 120, 41);
    const first = index.files[0]!;
    const firstPath = first.path;
    const firstCount = first.indexCount;
    await index.close();
    // A slot of the first file ahead of its count: the cut refuses it.
    await putSlotAheadOfCount(port, firstPath, firstCount);
    const options = { port, rootDirectory: "/a", maxHashSlotNum: SLOTS, maxIndexNum: 41 };
    const cut = new IndexService(options);
    const report = await cut.load({
      lastExitOK: false,
      indexMsgTimestamp: T0 + 300 * 39,
      indexOffset: 100 * 40,
    });
    // The second file, cut, would have kept the first's keys out of the
    // index: a key goes in only past the last file's end.
    assert.equal(report.droppedFiles, 4);
    assert.equal(report.droppedFromOffset, 0);
    assert.equal(cut.files.length, 0);
    // Re-dispatch from there puts every key back, once.
    await redispatchFrom(cut, 0, 120);
    await cut.close();
  });

  test("IndexService.load() cuts nothing without the checkpoint's offset or read-only", async () => {
    const port = new MemoryPort(runtimeName());
    const index = await buildIndex(port, "/r", 60, 1024);
    await index.close();
    const options = { port, rootDirectory: "/r", maxHashSlotNum: SLOTS, maxIndexNum: 1024 };
    const readOnly = new IndexService({ ...options, readOnly: true });
    assert.deepEqual(
      await readOnly.load({
        lastExitOK: false,
        indexMsgTimestamp: T0 + 300 * 29,
        indexOffset: 3000,
      }),
      {
        droppedFiles: 1,
        droppedFromOffset: 0,
        cutFiles: 0,
        cutEntries: 0,
      },
    );
    await readOnly.close();
    // A RocketMQ checkpoint (no offsets): dropped by its time, as RocketMQ.
    const rocketmq = new IndexService(options);
    const report = await rocketmq.load({ lastExitOK: false, indexMsgTimestamp: T0 + 300 * 29 });
    assert.equal(report.droppedFiles, 1);
    assert.equal(report.cutFiles, 0);
    await rocketmq.close();
  });
});

/** Makes slot 5 of the index file at `path` name entry `count + 2`, past the header's `count`. */
async function putSlotAheadOfCount(port: MemoryPort, path: string, count: number): Promise<void> {
  const view = new DataView(new ArrayBuffer(4));
  view.setInt32(0, count + 2);
  await patch(
    port,
    path,
    INDEX_HEADER_SIZE_BYTES + 5 * HASH_SLOT_SIZE_BYTES,
    new Uint8Array(view.buffer),
  );
}

/** Fires a thorough consume-queue flush and waits (bounded) until the checkpoint file covers `offset`. */
async function checkpointAt(
  port: RuntimePort,
  directory: string,
  clock: ManualClock,
  store: MessageStore,
  offset: number,
): Promise<StoreCheckpoint> {
  await store.whenDispatched(offset);
  clock.advance(1_000);
  for (let turn = 0; turn < 100_000; turn++) {
    const checkpoint = await StoreCheckpoint.load(port, `${directory}/checkpoint`);
    if (checkpoint.indexOffset >= offset) return checkpoint;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`the checkpoint never reached ${offset}`);
}

describe("MessageStore.open() after a crash with keys", () => {
  test("MessageStore.open() after a kill cuts the index back and re-dispatches from the checkpoint's index point", async () => {
    await withTempDirectory(async (root) => {
      const directory = path.join(root, "store");
      const copy = path.join(root, "killed");
      const clock = new ManualClock(T0);
      const options = {
        mappedFileSizeCommitLog: 0x1_0000,
        mappedFileSizeConsumeQueue: 20 * 1024,
        maxHashSlotNum: 64,
        maxIndexNum: 4096,
        flushConsumeQueueThoroughInterval: 0,
        clock,
        onWarning: () => {},
      };
      const store = await MessageStore.open(directory, options);
      let checkpoint: StoreCheckpoint;
      const offsets: number[] = [];
      try {
        offsets.push(...await putKeyed(store, TOPIC, 0, 150));
        const port = await createPort({ adapter: "portable" });
        checkpoint = await checkpointAt(port, directory, clock, store, store.maxOffset);
        offsets.push(...await putKeyed(store, TOPIC, 150, 150));
        await store.whenDispatched(store.maxOffset);
        await settle();
        // What a SIGKILL leaves: every file as the page cache holds it,
        // `abort` included.
        fs.cpSync(directory, copy, { recursive: true });
      } finally {
        await store.close();
      }
      assert.ok(fs.existsSync(path.join(copy, "abort")));
      const again = await MessageStore.open(copy, {
        ...options,
        clock: new ManualClock(T0 + 60_000),
      });
      try {
        assert.equal(again.recovery.clean, false);
        assert.equal(again.recovery.dispatchedFrom, checkpoint.indexOffset);
        assert.equal(again.indexFileCount, 1);
        await assertKeysFound(again, TOPIC, offsets);
        offsets.push(...await putKeyed(again, TOPIC, 300, 10));
        await assertKeysFound(again, TOPIC, offsets);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() after torn crashes finds every acknowledged key once", async () => {
    const random = prng(0x1d5eed);
    for (let round = 0; round < 12; round++) {
      const env: MemoryStoreEnv = await openMemoryStore({
        flushDiskType: "SYNC_FLUSH",
        flushConsumeQueueThoroughInterval: 0,
        maxHashSlotNum: 256,
        maxIndexNum: 2048,
      });
      const offsets = await putKeyed(env.store, TOPIC, 0, 60 + Math.floor(random() * 60));
      await checkpointAt(env.port, env.directory, env.clock, env.store, env.store.maxOffset);
      offsets.push(
        ...await putKeyed(env.store, TOPIC, offsets.length, 20 + Math.floor(random() * 400)),
      );
      await env.store.whenDispatched(env.store.maxOffset);
      await settle();
      // Some rounds keep few pages: chains the cut must refuse (dropped and rebuilt).
      const keepProbability = round % 3 === 2 ? 0.2 : round % 3 === 1 ? 0.6 : undefined;
      env.port.crash({ seed: Math.floor(random() * 0xFFFF_FFFF), keepProbability });
      const again = await env.reopen();
      try {
        assert.equal(again.recovery.clean, false);
        // SYNC_FLUSH: every put was acknowledged durable.
        await assertKeysFound(again, TOPIC, offsets);
      } finally {
        await again.close();
      }
    }
  });
});

describe("MessageStore.open() after a power loss under ASYNC_FLUSH", () => {
  test("MessageStore.open() cuts the index back to the log a power loss left when the checkpoint's index point is past it", async () => {
    // The commit log is never flushed by its timer; the consume-queue
    // flush checkpoints what was dispatched, past the durable log.
    const env = await openMemoryStore({
      flushDiskType: "ASYNC_FLUSH",
      flushIntervalCommitLog: 3_600_000,
      flushCommitLogThoroughInterval: 3_600_000,
      flushConsumeQueueThoroughInterval: 0,
    });
    const lost = await putKeyed(env.store, TOPIC, 0, 80);
    const checkpoint = await checkpointAt(
      env.port,
      env.directory,
      env.clock,
      env.store,
      env.store.maxOffset,
    );
    await settle();
    env.port.crash();
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.ok(
        again.maxOffset < checkpoint.indexOffset,
        `log end ${again.maxOffset}, index point ${checkpoint.indexOffset}`,
      );
      // The records written over the lost ones' offsets are indexed.
      const offsets = await putKeyed(again, TOPIC, 1000, 80);
      assert.ok(offsets[0]! < lost[lost.length - 1]!);
      await again.whenDispatched(again.maxOffset);
      await assertKeysFound(again, TOPIC, offsets, 1000);
    } finally {
      await again.close();
    }
  });
});
