import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { IndexFile, indexFileSizeBytes, indexKeyHash } from "../src/store/index_file.ts";
import { IndexService, type IndexServiceOptions } from "../src/store/index_service.ts";
import { javaHashCode } from "../src/record/mod.ts";
import { adapterCases, type SegmentEnv, withSegmentEnv } from "./_segment_helpers.ts";

const SLOTS = 8;
/** Three entries per file (entry 0 is never used). */
const ENTRIES = 4;
const T0 = 1_795_954_493_497;
const ALL_TIME = Number.MAX_SAFE_INTEGER;

/** A clock for file names that ticks 1 ms per new file. */
function tickingClock(startMs = T0): { nowMs(): number } {
  let now = startMs;
  return { nowMs: () => now++ };
}

/**
 * A sparse index file `name` in `env`'s directory, of {@link SLOTS} slots
 * and `indexNum` entries, that ended 2.5 s before {@link T0}.
 */
function createSparse(
  env: SegmentEnv,
  name: string,
  indexNum: number,
  endPhyOffset?: number,
): Promise<IndexFile> {
  return IndexFile.create({
    port: env.port,
    path: `${env.directory}/${name}`,
    hashSlotNum: SLOTS,
    indexNum,
    endTimestamp: T0 - 2_500,
    ...(endPhyOffset === undefined ? {} : { endPhyOffset }),
    sparse: true,
  });
}

function serviceOf(env: SegmentEnv, extra: Partial<IndexServiceOptions> = {}): IndexService {
  return new IndexService({
    port: env.port,
    rootDirectory: env.directory,
    maxHashSlotNum: SLOTS,
    maxIndexNum: ENTRIES,
    clock: tickingClock(),
    sparse: true,
    ...extra,
  });
}

async function put(index: IndexService, offset: number, timestamp: number, ...keys: string[]) {
  await index.buildIndex({ topic: "T", commitLogOffset: offset, storeTimestamp: timestamp, keys });
}

/** Asserts `a` and `b` count alike, then flushes and closes both and compares their bytes. */
async function assertSameFiles(env: SegmentEnv, a: IndexFile, b: IndexFile): Promise<void> {
  assert.equal(a.indexCount, b.indexCount);
  assert.equal(a.hashSlotCount, b.hashSlotCount);
  await a.flush();
  await b.flush();
  await a.close();
  await b.close();
  assert.deepEqual(await env.port.readFile(a.path), await env.port.readFile(b.path));
}

function offsetsOf(
  index: IndexService,
  key: string,
  begin = 0,
  end = ALL_TIME,
  max = 64,
): number[] {
  return index.queryOffset("T", key, max, begin, end).phyOffsets;
}

/** The offsets one file holds for `key` (`topic#key`), newest first. */
function offsetsIn(file: IndexFile, key: string): number[] {
  const offsets: number[] = [];
  file.selectPhyOffset(offsets, key, 64, 0, ALL_TIME);
  return offsets;
}

describe("indexKeyHash", () => {
  test("indexKeyHash() is abs(String.hashCode), 0 for Integer.MIN_VALUE", () => {
    assert.equal(indexKeyHash("TopicTest#bulk-key"), 842971942);
    // "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java.
    assert.equal(indexKeyHash("polygenelubricants"), 0);
    assert.equal(indexKeyHash("T#Aa"), indexKeyHash("T#BB"));
    assert.equal(indexFileSizeBytes(64, 256), 5416);
  });
});

const cases = await adapterCases();

for (const { adapter, skip } of cases) {
  describe(`IndexService (${adapter})`, { skip }, () => {
    test("buildIndex() rolls to a new file at maxIndexNum, the new file based on the last one", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const index = serviceOf(env);
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        await put(index, 100, T0, "a", "b");
        await put(index, 200, T0 + 2500, "c", "a");
        await put(index, 300, T0 + 7000, "a");
        assert.equal(index.files.length, 2);
        const [first, second] = index.files as [IndexFile, IndexFile];
        assert.equal(first.isWriteFull, true);
        assert.equal(first.indexCount, ENTRIES);
        assert.equal(first.endPhyOffset, 200);
        assert.equal(first.endTimestamp, T0 + 2500);
        // The full file is made durable in the background; flush() waits for it.
        await index.flush();
        assert.equal(index.indexMsgTimestamp, T0 + 2500);
        assert.ok(first.fileName < second.fileName);
        // The second file's first entry: time measured from the first file's end.
        assert.equal(second.indexCount, 3);
        assert.deepEqual(second.entryAt(1).timeDiffSec, 0);
        assert.equal(second.entryAt(2).timeDiffSec, Math.trunc((T0 + 7000 - (T0 + 2500)) / 1000));
        assert.equal(second.beginTimestamp, T0 + 2500);
        assert.equal(second.beginPhyOffset, 200);
        // Newest first, across files.
        assert.deepEqual(offsetsOf(index, "a"), [300, 200, 100]);
        assert.deepEqual(offsetsOf(index, "a", 0, ALL_TIME, 2), [300, 200]);
        assert.deepEqual(offsetsOf(index, "c"), [200]);
        assert.deepEqual(offsetsOf(index, "zz"), []);
        // Below the last file's endPhyOffset: already indexed, skipped.
        await put(index, 150, T0 + 8000, "late");
        assert.deepEqual(offsetsOf(index, "late"), []);
        await index.close();
      });
    });

    test("unflushedEntryBytes counts the entries put since the last flush began, and a roll as Infinity", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const index = serviceOf(env);
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        assert.equal(index.unflushedEntryBytes, 0);
        // The first file, made since the load: its entries.
        await put(index, 100, T0, "a", "b");
        assert.equal(index.unflushedEntryBytes, 2 * 20);
        await index.flush();
        assert.equal(index.unflushedEntryBytes, 0);
        await put(index, 200, T0 + 1000, "c");
        assert.equal(index.unflushedEntryBytes, 20);
        assert.equal(index.files.length, 1);
        // The file is full (ENTRIES - 1 entries): the next key rolls.
        await put(index, 300, T0 + 2000, "d");
        assert.equal(index.files.length, 2);
        assert.equal(index.unflushedEntryBytes, Number.POSITIVE_INFINITY);
        await index.flush();
        assert.equal(index.unflushedEntryBytes, 0);
        await index.close();
      });
    });

    test("queryOffset() keeps to the time range, to the second", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const index = serviceOf(env, { maxIndexNum: 64 });
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        for (let i = 0; i < 5; i++) await put(index, 100 * i, T0 + 5000 * i, "k");
        assert.deepEqual(offsetsOf(index, "k", T0 + 4000, T0 + 11_000), [200, 100]);
        assert.deepEqual(offsetsOf(index, "k", T0 + 20_000, ALL_TIME), [400]);
        assert.deepEqual(offsetsOf(index, "k", 0, T0 - 1), []);
        // Times are kept in whole seconds from the file's begin.
        assert.deepEqual(offsetsOf(index, "k", T0 + 5000, T0 + 5000), [100]);
        await index.close();
      });
    });

    test("queryOffset() returns colliding keys' offsets too (hash match only, as RocketMQ)", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const index = serviceOf(env, { maxIndexNum: 64 });
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        await put(index, 10, T0, "Aa");
        await put(index, 20, T0, "BB");
        await put(index, 30, T0, "other");
        assert.deepEqual(offsetsOf(index, "Aa"), [20, 10]);
        assert.deepEqual(offsetsOf(index, "BB"), [20, 10]);
        await index.close();
      });
    });

    test("load() removes an empty index file left by a crash during its creation", async () => {
      await withSegmentEnv(adapter, async (env) => {
        let index = serviceOf(env);
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        await put(index, 100, T0, "k");
        await index.close();
        const empty = `${index.directory}/29991231235959999`;
        await env.port.writeFileAtomic(empty, new Uint8Array(0));
        index = serviceOf(env);
        await index.load({ lastExitOK: false, indexMsgTimestamp: T0 + 60_000 });
        assert.equal(index.files.length, 1);
        assert.deepEqual(offsetsOf(index, "k"), [100]);
        assert.equal(await env.port.stat(empty), undefined);
        await index.close();
      });
    });

    test("load() keeps every file after a clean exit and drops newer ones after a crash", async () => {
      await withSegmentEnv(adapter, async (env) => {
        let index = serviceOf(env);
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        for (let i = 0; i < 7; i++) await put(index, 100 * i, T0 + 1000 * i, `k${i}`);
        assert.equal(index.files.length, 3);
        const ends = index.files.map((f) => f.endTimestamp);
        await index.close();
        index = serviceOf(env);
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        assert.equal(index.files.length, 3);
        assert.deepEqual(offsetsOf(index, "k6"), [600]);
        await index.close();
        index = serviceOf(env, { clock: tickingClock(T0 + 60_000) });
        await index.load({ lastExitOK: false, indexMsgTimestamp: ends[0]! });
        assert.equal(index.files.length, 1);
        assert.deepEqual((await env.port.list(index.directory)).length, 1);
        // Re-dispatch rebuilds what was dropped.
        for (let i = 0; i < 7; i++) await put(index, 100 * i, T0 + 1000 * i, `k${i}`);
        assert.deepEqual(offsetsOf(index, "k6"), [600]);
        assert.deepEqual(offsetsOf(index, "k1"), [100]);
        await index.close();
      });
    });

    test("deleteExpiredFile() drops old files below the commit log, never the last", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const index = serviceOf(env);
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        for (let i = 0; i < 7; i++) await put(index, 100 * i, T0 + 1000 * i, `k${i}`);
        assert.equal(await index.deleteExpiredFile(250), 1);
        assert.equal(index.files.length, 2);
        assert.equal(await index.deleteExpiredFile(10_000), 1);
        assert.equal(index.files.length, 1);
        assert.deepEqual(offsetsOf(index, "k6"), [600]);
        await index.close();
      });
    });

    test("IndexFile treats slot values past indexCount as empty (a crash before the header)", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const path = `${env.directory}/20261129121453504`;
        const size = indexFileSizeBytes(SLOTS, 16);
        const handle = await env.port.createFile(path, size, { sparse: true });
        const slot = indexKeyHash("T#k") % SLOTS;
        const stale = new Uint8Array(4);
        new DataView(stale.buffer).setInt32(0, 5);
        await handle.write(stale, 40 + slot * 4);
        await handle.datasync();
        await handle.close();
        const file = await IndexFile.open({
          port: env.port,
          path,
          hashSlotNum: SLOTS,
          indexNum: 16,
        });
        assert.equal(file.indexCount, 1);
        const found: number[] = [];
        file.selectPhyOffset(found, "T#k", 64, 0, ALL_TIME);
        assert.deepEqual(found, []);
        assert.equal(file.putKey("T#k", 42, T0), true);
        assert.deepEqual(file.entryAt(1).prevIndex, 0);
        assert.equal(file.hashSlotCount, 1);
        file.selectPhyOffset(found, "T#k", 64, 0, ALL_TIME);
        assert.deepEqual(found, [42]);
        await file.close();
        await assert.rejects(
          IndexFile.open({ port: env.port, path, hashSlotNum: SLOTS, indexNum: 17 }),
          /Index file .* is \d+ bytes/,
        );
      });
    });

    test("putKeyHashes() writes what putKey() writes key by key", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const open = (name: string) => createSparse(env, name, 32);
        const byKey = await open("20261129121453504");
        const byMessage = await open("20261129121453505");
        // Messages of 1 to 3 keys, time going over whole seconds; with 8
        // slots, keys collide and chain.
        const messages = Array.from({ length: 9 }, (_, i) => ({
          offset: 0x1000 + i * 0x180,
          timestamp: T0 + i * 700,
          keys: Array.from({ length: 1 + (i % 3) }, (_, k) => `T#key-${(i * 5 + k) % 11}`),
        }));
        const hashes = new Int32Array(3);
        for (const { offset, timestamp, keys } of messages) {
          for (const key of keys) assert.equal(byKey.putKey(key, offset, timestamp), true);
          keys.forEach((key, k) => hashes[k] = javaHashCode(key));
          assert.equal(byMessage.putKeyHashes(hashes, keys.length, offset, timestamp), true);
        }
        assert.equal(byMessage.indexCount, byKey.indexCount);
        assert.equal(byMessage.hashSlotCount, byKey.hashSlotCount);
        assert.deepEqual(
          [byMessage.beginTimestamp, byMessage.endTimestamp, byMessage.beginPhyOffset],
          [byKey.beginTimestamp, byKey.endTimestamp, byKey.beginPhyOffset],
        );
        assert.equal(byMessage.endPhyOffset, byKey.endPhyOffset);
        for (let slot = 0; slot < SLOTS; slot++) {
          assert.equal(byMessage.slotAt(slot), byKey.slotAt(slot));
        }
        for (let entry = 1; entry < byKey.indexCount; entry++) {
          assert.deepEqual(byMessage.entryAt(entry), byKey.entryAt(entry));
        }
        // The last entry's time difference, from the first message's time.
        assert.equal(byKey.entryAt(byKey.indexCount - 1).timeDiffSec, Math.trunc(8 * 700 / 1000));
        // Byte for byte, the header included.
        await byKey.flush();
        await byMessage.flush();
        assert.deepEqual(
          await env.port.readFile(byMessage.path),
          await env.port.readFile(byKey.path),
        );
        await byKey.close();
        await byMessage.close();
      });
    });

    test("putKeyHashesRun() writes what putKeyHashes() writes member by member", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const open = (name: string) => createSparse(env, name, 20, 0x900);
        const byMember = await open("20261129121453506");
        const byRun = await open("20261129121453507");
        // Members in ring slots (not in order), 0 to 3 keys each (8 slots:
        // chains), one below the file's endPhyOffset (skipped), timestamps
        // shared by some; the last ones do not fit (19 entries of room).
        const stride = 4;
        const count = 12;
        const slots = new Int32Array(Array.from({ length: count }, (_, i) => (i * 5 + 3) % 16));
        const keyCounts = new Int32Array(16);
        const keyHashes = new Int32Array(16 * stride);
        const timestamps = new Float64Array(16);
        const offsets = new Float64Array(count);
        for (let i = 0; i < count; i++) {
          const slot = slots[i]!;
          keyCounts[slot] = i === 4 ? 0 : 1 + (i % 3);
          timestamps[slot] = T0 + Math.floor(i / 2) * 700;
          offsets[i] = i === 0 ? 0x800 : 0x1000 + i * 0x180;
          for (let k = 0; k < stride; k++) {
            keyHashes[slot * stride + k] = javaHashCode(`T#key-${(i * 5 + k) % 11}`);
          }
        }
        let expected = 0;
        for (; expected < count; expected++) {
          const slot = slots[expected]!;
          const keys = keyCounts[slot]!;
          if (keys === 0) continue;
          if (byMember.indexNum - byMember.indexCount < keys) break;
          if (offsets[expected]! < byMember.endPhyOffset) continue;
          const hashes = keyHashes.subarray(slot * stride, slot * stride + keys);
          assert.equal(
            byMember.putKeyHashes(hashes, keys, offsets[expected]!, timestamps[slot]!),
            true,
          );
        }
        assert.equal(expected < count, true, "the run does not fit");
        const done = byRun.putKeyHashesRun(
          count,
          slots,
          keyCounts,
          keyHashes,
          stride,
          offsets,
          timestamps,
        );
        assert.equal(done, expected);
        assert.equal(byRun.indexCount, byMember.indexCount);
        assert.equal(byRun.hashSlotCount, byMember.hashSlotCount);
        assert.deepEqual(
          [byRun.beginTimestamp, byRun.endTimestamp, byRun.beginPhyOffset, byRun.endPhyOffset],
          [
            byMember.beginTimestamp,
            byMember.endTimestamp,
            byMember.beginPhyOffset,
            byMember.endPhyOffset,
          ],
        );
        for (let slot = 0; slot < SLOTS; slot++) {
          assert.equal(byRun.slotAt(slot), byMember.slotAt(slot));
        }
        for (let entry = 1; entry < byMember.indexCount; entry++) {
          assert.deepEqual(byRun.entryAt(entry), byMember.entryAt(entry));
        }
        await assertSameFiles(env, byRun, byMember);
      });
    });

    test("putKeyHashesRun() of more keys than its first scratch writes what putKeyHashes() writes", async () => {
      await withSegmentEnv(adapter, async (env) => {
        // 300 members of 2 keys: 600 keys, past the 256 the run's scratch
        // arrays hold at first (unless a run before grew them), then a
        // second run into the grown arrays.
        const stride = 2;
        const count = 300;
        const open = (name: string) => createSparse(env, name, 2 * 2 * count + 2, 0x100);
        const byMember = await open("20261129121453508");
        const byRun = await open("20261129121453509");
        // A first entry in each, so that the runs take the appending path.
        const first = new Int32Array([javaHashCode("T#first")]);
        for (const file of [byMember, byRun]) {
          assert.equal(file.putKeyHashes(first, 1, 0x100, T0), true);
        }
        const slots = new Int32Array(Array.from({ length: count }, (_, i) => (i * 7) % count));
        const keyCounts = new Int32Array(count).fill(2);
        const keyHashes = new Int32Array(count * stride);
        const timestamps = new Float64Array(count);
        for (let slot = 0; slot < count; slot++) {
          keyHashes[slot * stride] = javaHashCode(`T#order-${slot}`);
          keyHashes[slot * stride + 1] = javaHashCode(`T#customer-${slot % 13}`);
          timestamps[slot] = T0 + slot * 10;
        }
        // The second run is shorter and of other keys: a scratch left from
        // the first would write the first run's hashes.
        for (const [round, members] of [[0, count], [1, 100]] as const) {
          if (round === 1) {
            for (let slot = 0; slot < count; slot++) {
              keyHashes[slot * stride] = javaHashCode(`T#invoice-${slot}`);
              keyHashes[slot * stride + 1] = javaHashCode(`T#region-${slot % 5}`);
            }
          }
          const offsets = new Float64Array(members);
          for (let i = 0; i < members; i++) offsets[i] = 0x200 + (round * count + i) * 0x100;
          for (let i = 0; i < members; i++) {
            const slot = slots[i]!;
            const hashes = keyHashes.subarray(slot * stride, slot * stride + 2);
            assert.equal(byMember.putKeyHashes(hashes, 2, offsets[i]!, timestamps[slot]!), true);
          }
          assert.equal(
            byRun.putKeyHashesRun(
              members,
              slots,
              keyCounts,
              keyHashes,
              stride,
              offsets,
              timestamps,
            ),
            members,
          );
        }
        await assertSameFiles(env, byRun, byMember);
      });
    });

    test("buildIndex() names files in creation order even within one millisecond", async () => {
      await withSegmentEnv(adapter, async (env) => {
        let index = serviceOf(env, { clock: { nowMs: () => T0 } });
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        for (let i = 0; i < 9; i++) await put(index, 100 * i, T0 + 1000 * i, `k${i}`);
        const names = index.files.map((f) => f.fileName);
        assert.equal(names.length, 3);
        assert.deepEqual([...names].sort(), names);
        assert.equal(new Set(names).size, 3);
        await index.close();
        index = serviceOf(env);
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        assert.deepEqual(index.files.map((f) => f.endPhyOffset), [200, 500, 800]);
        await index.close();
      });
    });

    if (adapter === "portable") {
      test("IndexFile.open() without mmap reads the header, the slots and the entries in use, not the rest", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const path = `${env.directory}/${T0}`;
          const options = {
            port: env.port,
            path,
            hashSlotNum: SLOTS,
            indexNum: 1000,
            sparse: true,
          };
          const file = await IndexFile.create(options);
          for (const [i, key] of ["T#a", "T#b", "T#a"].entries()) {
            assert.equal(file.putKey(key, 100 * (i + 1), T0 + i * 1000), true);
          }
          await file.flush();
          await file.close();
          // What a crash can leave past the entries in use: garbage, never read.
          const stale = await env.port.openFile(path);
          const used = 40 + SLOTS * 4 + 5 * 20;
          await stale.write(new Uint8Array(stale.sizeBytes - used).fill(0xff), used);
          await stale.close();
          let readBytes = 0;
          const counting = Object.create(env.port);
          counting.openFile = async (...args: Parameters<typeof env.port.openFile>) => {
            const handle = await env.port.openFile(...args);
            const read = handle.read.bind(handle);
            handle.read = async (target: Uint8Array, position: number) => {
              const n = await read(target, position);
              readBytes += n;
              return n;
            };
            return handle;
          };
          const again = await IndexFile.open({ ...options, port: counting });
          // Header, 8 slots, entries 0..3 and entry 4 (a slot may name indexCount).
          assert.equal(readBytes, used);
          assert.equal(again.indexCount, 4);
          assert.deepEqual(offsetsIn(again, "T#a"), [300, 100]);
          assert.equal(again.putKey("T#b", 400, T0 + 3000), true);
          assert.equal(again.putKey("T#c", 500, T0 + 4000), true);
          await again.flush();
          await again.close();
          const third = await IndexFile.open(options);
          assert.deepEqual(offsetsIn(third, "T#b"), [400, 200]);
          assert.deepEqual(offsetsIn(third, "T#c"), [500]);
          assert.deepEqual(offsetsIn(third, "T#a"), [300, 100]);
          await third.close();
        });
      });
    }

    if (adapter === "memory") {
      test("IndexFile keeps only flushed entries through a crash", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const index = serviceOf(env, { maxIndexNum: 64 });
          await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
          await put(index, 100, T0, "a");
          assert.equal(await index.flush(), T0);
          await put(index, 200, T0 + 1000, "b");
          env.memory!.crash();
          const again = serviceOf(env, { maxIndexNum: 64 });
          await again.load({ lastExitOK: true, indexMsgTimestamp: 0 });
          assert.equal(again.files.length, 1);
          assert.equal(again.files[0]!.indexCount, 2);
          assert.deepEqual(offsetsOf(again, "a"), [100]);
          assert.deepEqual(offsetsOf(again, "b"), []);
          await again.close();
        });
      });
    }
  });
}
