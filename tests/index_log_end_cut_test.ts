/**
 * The index is cut back to where the recovered commit log ends, whatever
 * the exit: a clean open that cut a damaged log, or the first crashed open
 * of a RocketMQ store (no mqstore offsets in its checkpoint), kept entries
 * past the log's end, and their file's end made the dispatcher skip the
 * keys of the records written next over the lost ones' offsets. The files
 * before the first one that reaches the log's end are left as they are; a
 * file the cut's checks refuse is dropped with every file after it and
 * rebuilt by re-dispatch, as is every file after one dropped by its time.
 * Real files in a temporary directory.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import {
  CHECKPOINT_EXTENSION_END,
  CHECKPOINT_EXTENSION_POSITION,
  CHECKPOINT_INDEX_TIMESTAMP_POSITION,
} from "../src/commit_log/constants.ts";
import { createPort } from "../src/runtime/mod.ts";
import { ManualClock } from "../src/segment/clock.ts";
import {
  HASH_SLOT_SIZE_BYTES,
  HEADER_BEGIN_PHY_OFFSET_POSITION,
  HEADER_END_PHY_OFFSET_POSITION,
  HEADER_END_TIMESTAMP_POSITION,
  INDEX_ENTRY_SIZE_BYTES,
  INDEX_HEADER_SIZE_BYTES,
} from "../src/store/_index_file_constants.ts";
import { IndexFile } from "../src/store/index_file.ts";
import { IndexService } from "../src/store/index_service.ts";
import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import {
  copyCorpusStore,
  CORPUS_OPTIONS,
  CORPUS_SKIP,
  type Json,
  readJsonLines,
} from "./_corpus_helpers.ts";
import { removeDirectory, withTempDirectory } from "./_helpers.ts";
import {
  assertKeysFound as assertKeysIn,
  body,
  putKeyed as putKeyedInto,
} from "./_store_helpers.ts";

const TOPIC = "LogEnd";
const T0 = 1_700_000_000_000;
const SEGMENT_BYTES = 0x1_0000;
const SLOTS = 16;
/** 40 entries a file: 20 messages of two keys each. */
const INDEX_NUM = 41;

/**
 * Options of a store whose index files roll every 20 messages, its clock
 * at `nowMs` (new index files are named after it).
 */
function storeOptions(nowMs = T0): MessageStoreOptions {
  return {
    mappedFileSizeCommitLog: SEGMENT_BYTES,
    mappedFileSizeConsumeQueue: 20 * 1024,
    maxHashSlotNum: SLOTS,
    maxIndexNum: INDEX_NUM,
    clock: new ManualClock(nowMs),
    onWarning: () => {},
  };
}

/** {@link putKeyedInto} into {@link TOPIC}, then waits until they are dispatched. */
async function putKeyed(store: MessageStore, from: number, count: number): Promise<number[]> {
  const offsets = await putKeyedInto(store, TOPIC, from, count);
  await store.whenDispatched(store.maxOffset);
  return offsets;
}

/** {@link assertKeysIn} for {@link TOPIC}. */
function assertKeysFound(store: MessageStore, offsets: readonly number[], from: number) {
  return assertKeysIn(store, TOPIC, offsets, from);
}

/** Checks that no message is found under the keys of messages from … from + count − 1. */
async function assertKeysGone(store: MessageStore, from: number, count: number): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const found = await store.queryMessages(TOPIC, `key-${i}`);
    assert.deepEqual(found.messages, [], `key-${i}`);
  }
}

/**
 * Overwrites 4 body bytes of the record at `offset` in its segment file
 * (a flipped body byte on disk): its CRC no longer matches, so the open
 * ends the log there.
 */
function damageRecord(directory: string, offset: number): void {
  const segmentStart = offset - offset % SEGMENT_BYTES;
  const segment = path.join(directory, "commitlog", String(segmentStart).padStart(20, "0"));
  writeAt(segment, offset % SEGMENT_BYTES + 0x80, new Uint8Array([0xFF, 0xFF, 0xFF, 0xFF]));
}

/** Position of entry number `entryNo` in an index file of {@link SLOTS} slots. */
function entryPosition(entryNo: number): number {
  return INDEX_HEADER_SIZE_BYTES + SLOTS * HASH_SLOT_SIZE_BYTES + entryNo * INDEX_ENTRY_SIZE_BYTES;
}

/** Writes `bytes` at `position` of `file`, durably. */
function writeAt(file: string, position: number, bytes: Uint8Array): void {
  const fd = fs.openSync(file, "r+");
  try {
    fs.writeSync(fd, bytes, 0, bytes.length, position);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** The index files of a store, oldest first, by name. */
function indexFileNames(directory: string): string[] {
  return fs.readdirSync(path.join(directory, "index")).filter((name) => /^\d{17}$/.test(name))
    .sort();
}

/** Every index file's bytes, by name. */
function indexBytes(directory: string): Map<string, Uint8Array> {
  const files = new Map<string, Uint8Array>();
  for (const name of fs.readdirSync(path.join(directory, "index"))) {
    files.set(name, new Uint8Array(fs.readFileSync(path.join(directory, "index", name))));
  }
  return files;
}

/**
 * Zeroes entries 15 … 40 of the second index file (messages 27 … 39), as
 * a page lost on disk: a cut meets a zero entry and gives up.
 */
function loseSecondFileTail(directory: string, names: readonly string[]): void {
  const zeros = new Uint8Array((INDEX_NUM - 15) * INDEX_ENTRY_SIZE_BYTES);
  writeAt(path.join(directory, "index", names[1]!), entryPosition(15), zeros);
}

/** Writes `value` as a big-endian 64-bit field at `position` of `file`, durably. */
function writeInt64At(file: string, position: number, value: bigint): void {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setBigInt64(0, value);
  writeAt(file, position, bytes);
}

/**
 * Runs `body` with every way IndexService indexes a dispatched record
 * throwing: an open that re-dispatches fails there, as one a kill or a
 * power loss stops.
 */
async function withIndexingFailing(body: () => Promise<void>): Promise<void> {
  const prototype = IndexService.prototype as unknown as Record<string, unknown>;
  const names = [
    "buildIndex",
    "buildIndexNow",
    "buildIndexHashes",
    "buildIndexHashesNow",
    "buildIndexRunNow",
  ];
  const saved = names.map((name) => [name, prototype[name]] as const);
  for (const name of names) {
    prototype[name] = () => {
      throw new Error("indexing stopped (a simulated crash)");
    };
  }
  try {
    await body();
  } finally {
    for (const [name, method] of saved) prototype[name] = method;
  }
}

/**
 * Puts 40 messages into a store under `root` whose index is one file (64
 * slots, 4096 entries) and closes it cleanly.
 */
async function singleFileStore(
  root: string,
): Promise<{ directory: string; options: MessageStoreOptions; offsets: number[] }> {
  const directory = path.join(root, "store");
  const options = { ...storeOptions(), maxHashSlotNum: 64, maxIndexNum: 4096 };
  const store = await MessageStore.open(directory, options);
  try {
    const offsets = await putKeyed(store, 0, 40);
    assert.equal(store.indexFileCount, 1);
    return { directory, options, offsets };
  } finally {
    await store.close();
  }
}

/**
 * Puts 100 messages (5 index files of 20 messages each) into a store under
 * `root` and closes it cleanly.
 */
async function fiveFileStore(
  root: string,
): Promise<{ directory: string; offsets: number[]; names: string[] }> {
  const directory = path.join(root, "store");
  const store = await MessageStore.open(directory, storeOptions());
  let offsets: number[];
  try {
    offsets = await putKeyed(store, 0, 100);
  } finally {
    await store.close();
  }
  const names = indexFileNames(directory);
  assert.equal(names.length, 5);
  return { directory, offsets, names };
}

/** The store of the multi-file cases: one damaged record, closed cleanly. */
interface DamagedStore {
  /** The store directory. */
  directory: string;
  /** Offsets of messages 0 … 99. */
  offsets: number[];
  /** The damaged message: the log ends at its offset. */
  damaged: number;
}

/**
 * Puts 100 messages (5 index files of 20 messages each) into a store under
 * `root`, closes it cleanly, and damages message 30, in the second index
 * file's range.
 */
async function damagedMultiFileStore(root: string): Promise<DamagedStore> {
  const directory = path.join(root, "store");
  const store = await MessageStore.open(directory, storeOptions());
  let offsets: number[];
  try {
    offsets = await putKeyed(store, 0, 100);
    assert.equal(store.indexFileCount, 5);
  } finally {
    await store.close();
  }
  const damaged = 30;
  damageRecord(directory, offsets[damaged]!);
  return { directory, offsets, damaged };
}

/**
 * Reopens `damaged` writable, a minute later (the files it makes have new
 * names), and checks that its log was cut at the damaged record.
 */
async function reopenCut(damaged: DamagedStore): Promise<MessageStore> {
  const store = await MessageStore.open(damaged.directory, storeOptions(T0 + 60_000));
  assert.equal(store.recovery.clean, true);
  assert.equal(store.recovery.endKind, "invalid");
  assert.equal(store.maxOffset, damaged.offsets[damaged.damaged]);
  return store;
}

describe("MessageStore.open() after a clean close, of a log cut short", () => {
  // The last record damaged, or one 20 records before the end (the clean
  // recovery drops the valid records after it too).
  for (const damaged of [79, 60]) {
    test(`MessageStore.open() indexes the records put over a damaged tail (record ${damaged} of 80)`, async () => {
      await withTempDirectory(async (root) => {
        const directory = path.join(root, "store");
        const options = { ...storeOptions(), maxHashSlotNum: 64, maxIndexNum: 4096 };
        const store = await MessageStore.open(directory, options);
        let offsets: number[];
        try {
          offsets = await putKeyed(store, 0, 80);
        } finally {
          await store.close();
        }
        damageRecord(directory, offsets[damaged]!);
        const again = await MessageStore.open(directory, options);
        try {
          assert.equal(again.recovery.clean, true);
          assert.equal(again.recovery.endKind, "invalid");
          assert.equal(again.maxOffset, offsets[damaged]);
          await assertKeysFound(again, offsets.slice(0, damaged), 0);
          await assertKeysGone(again, damaged, 80 - damaged);
          // Written over the lost records' offsets: indexed.
          const next = await putKeyed(again, 1000, 15);
          assert.ok(next[0]! <= offsets[offsets.length - 1]!);
          await assertKeysFound(again, next, 1000);
          await assertKeysFound(again, offsets.slice(0, damaged), 0);
        } finally {
          await again.close();
        }
      });
    });
  }

  test("MessageStore.open() cuts the index files from the first that reaches the log's end and leaves those before it", async () => {
    await withTempDirectory(async (root) => {
      const damaged = await damagedMultiFileStore(root);
      const { directory, offsets } = damaged;
      const names = indexFileNames(directory);
      const first = indexBytes(directory).get(names[0]!)!;
      const again = await reopenCut(damaged);
      try {
        // The first file (messages 0 … 19) as it was; the second cut to
        // messages 20 … 29; the three after it, left empty, dropped.
        assert.deepEqual(indexBytes(directory).get(names[0]!), first);
        assert.deepEqual(indexFileNames(directory), names.slice(0, 2));
        assert.equal(again.indexFileCount, 2);
        await assertKeysFound(again, offsets.slice(0, 30), 0);
        await assertKeysGone(again, 30, 70);
        const next = await putKeyed(again, 1000, 100);
        assert.ok(next[0]! < offsets[offsets.length - 1]!);
        await assertKeysFound(again, offsets.slice(0, 30), 0);
        await assertKeysFound(again, next, 1000);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() does not check the files before the first that reaches the log's end", async () => {
    await withTempDirectory(async (root) => {
      const damaged = await damagedMultiFileStore(root);
      const { directory, offsets } = damaged;
      const names = indexFileNames(directory);
      // The first file's last entry (message 19's key shared-4) with a
      // negative key hash, a flipped bit: queries walk past it, but the
      // cut's checks would refuse the file, and nothing would rebuild the
      // keys of messages 0 … 19 after a clean exit.
      const negative = new Uint8Array([0xFF, 0xFF, 0xFF, 0xFF]);
      writeAt(path.join(directory, "index", names[0]!), entryPosition(INDEX_NUM - 1), negative);
      const first = indexBytes(directory).get(names[0]!)!;
      const again = await reopenCut(damaged);
      try {
        assert.deepEqual(indexBytes(directory).get(names[0]!), first);
        await assertKeysFound(again, offsets.slice(0, 30), 0);
        const next = await putKeyed(again, 1000, 30);
        await assertKeysFound(again, next, 1000);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() drops a file the cut cannot check, and every file after it, and rebuilds them", async () => {
    await withTempDirectory(async (root) => {
      const damaged = await damagedMultiFileStore(root);
      const { directory, offsets } = damaged;
      const names = indexFileNames(directory);
      loseSecondFileTail(directory, names);
      const first = indexBytes(directory).get(names[0]!)!;
      const again = await reopenCut(damaged);
      try {
        const kept = indexFileNames(directory);
        assert.equal(kept[0], names[0]);
        assert.deepEqual(indexBytes(directory).get(names[0]!), first);
        // Every other file is new: rebuilt from the second file's begin.
        assert.ok(kept.slice(1).every((name) => !names.includes(name)), `${kept}`);
        await assertKeysFound(again, offsets.slice(0, 30), 0);
        await assertKeysGone(again, 30, 70);
        const next = await putKeyed(again, 1000, 100);
        await assertKeysFound(again, offsets.slice(0, 30), 0);
        await assertKeysFound(again, next, 1000);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() that fails before re-dispatch rebuilt a dropped file's keys leaves them to the next open", async () => {
    await withTempDirectory(async (root) => {
      const damaged = await damagedMultiFileStore(root);
      const { directory, offsets } = damaged;
      const names = indexFileNames(directory);
      // The second file refused, it and every later one dropped.
      loseSecondFileTail(directory, names);
      await withIndexingFailing(async () => {
        await assert.rejects(MessageStore.open(directory, storeOptions(T0 + 60_000)));
      });
      // The files are gone: the checkpoint alone says where to start.
      assert.deepEqual(indexFileNames(directory), names.slice(0, 1));
      const again = await MessageStore.open(directory, storeOptions(T0 + 120_000));
      try {
        assert.equal(again.recovery.clean, false);
        assert.equal(again.maxOffset, offsets[damaged.damaged]);
        await assertKeysFound(again, offsets.slice(0, 30), 0);
        const next = await putKeyed(again, 1000, 30);
        await assertKeysFound(again, next, 1000);
      } finally {
        await again.close();
      }
    });
  });

  for (const deletes of [1, 2]) {
    test(`MessageStore.open() of a RocketMQ checkpoint stopped after ${deletes} of the dropped files' deletes loses no key`, async () => {
      await withTempDirectory(async (root) => {
        const { directory, offsets, names } = await fiveFileStore(root);
        // No mqstore block: the next open starts the index from the last
        // file kept, and beforeDrop has no point to lower.
        writeAt(
          path.join(directory, "checkpoint"),
          CHECKPOINT_EXTENSION_POSITION,
          new Uint8Array(CHECKPOINT_EXTENSION_END - CHECKPOINT_EXTENSION_POSITION),
        );
        // The second file's header end far past the log's: refused, it
        // and the three after it are dropped; the three are healthy.
        writeInt64At(
          path.join(directory, "index", names[1]!),
          HEADER_END_PHY_OFFSET_POSITION,
          1n << 40n,
        );
        const prototype = IndexFile.prototype as unknown as { destroy: () => Promise<void> };
        const destroy = prototype.destroy;
        let calls = 0;
        prototype.destroy = function (this: IndexFile) {
          if (++calls > deletes) return Promise.reject(new Error("stopped (a simulated crash)"));
          return destroy.call(this);
        };
        try {
          await assert.rejects(MessageStore.open(directory, storeOptions(T0 + 60_000)));
        } finally {
          prototype.destroy = destroy;
        }
        const again = await MessageStore.open(directory, storeOptions(T0 + 120_000));
        try {
          assert.equal(again.recovery.clean, false);
          await assertKeysFound(again, offsets, 0);
        } finally {
          await again.close();
        }
      });
    });
  }

  test("MessageStore.open() after a crash with a RocketMQ checkpoint drops every file after one newer than the checkpoint, and rebuilds their keys", async () => {
    await withTempDirectory(async (root) => {
      const { directory, offsets, names } = await fiveFileStore(root);
      const checkpoint = path.join(directory, "checkpoint");
      writeAt(
        checkpoint,
        CHECKPOINT_EXTENSION_POSITION,
        new Uint8Array(CHECKPOINT_EXTENSION_END - CHECKPOINT_EXTENSION_POSITION),
      );
      const indexTime = new DataView(fs.readFileSync(checkpoint).buffer).getBigInt64(
        CHECKPOINT_INDEX_TIMESTAMP_POSITION,
      );
      // The middle file ends after the checkpoint's index time, the two
      // after it before it: the clock was stepped back while they filled.
      const header = (name: string) => path.join(directory, "index", name);
      writeInt64At(header(names[2]!), HEADER_END_TIMESTAMP_POSITION, indexTime + 1000n);
      writeInt64At(header(names[3]!), HEADER_END_TIMESTAMP_POSITION, indexTime - 1000n);
      writeInt64At(header(names[4]!), HEADER_END_TIMESTAMP_POSITION, indexTime - 1000n);
      fs.writeFileSync(path.join(directory, "abort"), "");
      // Read-only, only the file newer than the checkpoint is left out:
      // the later ones' keys are still found, and no file changes.
      const before = indexBytes(directory);
      const reader = await MessageStore.open(directory, { ...storeOptions(), readOnly: true });
      try {
        await assertKeysFound(reader, offsets.slice(60), 60);
        await assertKeysGone(reader, 40, 20);
      } finally {
        await reader.close();
      }
      assert.deepEqual(indexBytes(directory), before);
      const again = await MessageStore.open(directory, storeOptions(T0 + 60_000));
      try {
        assert.equal(again.recovery.clean, false);
        // The two files after the newer one went with it, and were rebuilt.
        const kept = indexFileNames(directory);
        assert.deepEqual(kept.slice(0, 2), names.slice(0, 2));
        for (const name of names.slice(2)) assert.ok(!kept.includes(name), name);
        await assertKeysFound(again, offsets, 0);
        const next = await putKeyed(again, 1000, 30);
        await assertKeysFound(again, next, 1000);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() refuses a file whose header still ends past the log's end once cut", async () => {
    await withTempDirectory(async (root) => {
      const { directory, options, offsets } = await singleFileStore(root);
      // A header end far past the log's (a damaged header): the cut finds
      // no entry to remove, and kept, the file would skip every new key.
      const [name] = indexFileNames(directory);
      writeInt64At(path.join(directory, "index", name!), HEADER_END_PHY_OFFSET_POSITION, 1n << 40n);
      const again = await MessageStore.open(directory, options);
      try {
        assert.equal(again.recovery.clean, true);
        await assertKeysFound(again, offsets, 0);
        const next = await putKeyed(again, 1000, 5);
        await assertKeysFound(again, next, 1000);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() rebuilds a refused first file from the log's start, not from its header's begin", async () => {
    await withTempDirectory(async (root) => {
      const { directory, options, offsets } = await singleFileStore(root);
      damageRecord(directory, offsets[30]!);
      // The only file: entries from message 20 on zeroed (the cut gives
      // up), and a begin in its header past the log's end.
      const file = path.join(directory, "index", indexFileNames(directory)[0]!);
      const entriesAt = INDEX_HEADER_SIZE_BYTES + 64 * HASH_SLOT_SIZE_BYTES;
      writeAt(
        file,
        entriesAt + 41 * INDEX_ENTRY_SIZE_BYTES,
        new Uint8Array(40 * INDEX_ENTRY_SIZE_BYTES),
      );
      writeInt64At(file, HEADER_BEGIN_PHY_OFFSET_POSITION, 1n << 40n);
      const again = await MessageStore.open(directory, {
        ...options,
        clock: new ManualClock(T0 + 60_000),
      });
      try {
        assert.equal(again.maxOffset, offsets[30]);
        await assertKeysFound(again, offsets.slice(0, 30), 0);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() after a clean close of an undamaged log leaves every index file as it was", async () => {
    await withTempDirectory(async (root) => {
      const { directory, offsets, names } = await fiveFileStore(root);
      const before = indexBytes(directory);
      const again = await MessageStore.open(directory, storeOptions(T0 + 60_000));
      try {
        assert.equal(again.recovery.clean, true);
        assert.deepEqual(indexFileNames(directory), names);
        const after = indexBytes(directory);
        for (const name of names) assert.deepEqual(after.get(name), before.get(name), name);
        await assertKeysFound(again, offsets, 0);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() read-only leaves every index file of a log cut short as it was", async () => {
    await withTempDirectory(async (root) => {
      const damaged = await damagedMultiFileStore(root);
      const { directory, offsets } = damaged;
      const before = indexBytes(directory);
      const readOnly = await MessageStore.open(directory, { ...storeOptions(), readOnly: true });
      try {
        assert.equal(readOnly.maxOffset, offsets[damaged.damaged]);
        assert.equal(readOnly.indexFileCount, 5);
        // The entries past the log's end are kept, but name no record.
        await assertKeysFound(readOnly, offsets.slice(0, 30), 0);
        await assertKeysGone(readOnly, 30, 70);
      } finally {
        await readOnly.close();
      }
      assert.deepEqual(indexBytes(directory), before);
    });
  });
});

describe("IndexService.load() with the log's end", () => {
  test("IndexService.load() drops an empty last file whose end is past the log's end", async () => {
    await withTempDirectory(async (root) => {
      const port = await createPort({ onNotice: () => {} });
      const options = { port, rootDirectory: root, maxHashSlotNum: SLOTS, maxIndexNum: INDEX_NUM };
      // An empty file whose end a roll set past where the log now ends.
      await port.makeDirectory(path.join(root, "index"));
      const empty = await IndexFile.create({
        port,
        path: path.join(root, "index", "20231114221320000"),
        hashSlotNum: SLOTS,
        indexNum: INDEX_NUM,
        endPhyOffset: 5000,
        endTimestamp: T0,
      });
      await empty.flush();
      await empty.close();
      const index = new IndexService(options);
      try {
        await index.load({
          lastExitOK: true,
          indexMsgTimestamp: T0,
          indexOffset: -1,
          logEndOffset: 3000,
        });
        assert.equal(index.files.length, 0);
        await index.buildIndex({
          topic: TOPIC,
          commitLogOffset: 3000,
          storeTimestamp: T0 + 1000,
          keys: ["after"],
        });
        const found = index.queryOffset(TOPIC, "after", 64, 0, Number.MAX_SAFE_INTEGER);
        assert.deepEqual(found.phyOffsets, [3000]);
      } finally {
        await index.close();
      }
    });
  });
});

describe("MessageStore.open() of a crashed RocketMQ store whose log lost its tail", () => {
  /** Where the copy's log is cut: a keyed record in the third index file's range. */
  const TEAR = 435661;

  /**
   * A copy of the crashed corpus store whose log ends at {@link TEAR}: the
   * rest of its segment zeroed, the segments after it gone (a power loss
   * after the index file covering it was flushed).
   */
  function tornCorpusStore(): { root: string; directory: string } {
    const copy = copyCorpusStore("crashed");
    const commitLog = path.join(copy.directory, "commitlog");
    const segmentStart = TEAR - TEAR % SEGMENT_BYTES;
    const fd = fs.openSync(path.join(commitLog, String(segmentStart).padStart(20, "0")), "r+");
    try {
      const zeros = new Uint8Array(SEGMENT_BYTES - TEAR % SEGMENT_BYTES);
      fs.writeSync(fd, zeros, 0, zeros.length, TEAR % SEGMENT_BYTES);
    } finally {
      fs.closeSync(fd);
    }
    for (const name of fs.readdirSync(commitLog)) {
      if (Number(name) > segmentStart) fs.rmSync(path.join(commitLog, name));
    }
    return copy;
  }

  /** The corpus's messages before {@link TEAR}, with keys shared by few records. */
  function keptKeyedRecords(): { topic: string; key: string; offset: number }[] {
    const rows = readJsonLines<Json>("crashed", "manifest.jsonl").filter((row) =>
      row.kind === "message" && row.physicalOffset < TEAR
    );
    const all = rows.flatMap((row) =>
      (row.indexKeys as string[]).map((key) => ({
        topic: row.topic as string,
        key,
        offset: row.physicalOffset as number,
      }))
    );
    // A query returns at most 64 offsets: keys shared by more are left out.
    const counts = new Map<string, number>();
    for (const { topic, key } of all) {
      counts.set(`${topic}#${key}`, (counts.get(`${topic}#${key}`) ?? 0) + 1);
    }
    return all.filter(({ topic, key }) => counts.get(`${topic}#${key}`)! <= 32);
  }

  test(
    "MessageStore.open() cuts the kept index files to the log's end and indexes the records put next",
    {
      skip: CORPUS_SKIP,
    },
    async () => {
      const { root, directory } = tornCorpusStore();
      try {
        const store = await MessageStore.open(directory, {
          ...CORPUS_OPTIONS,
          onWarning: () => {},
        });
        try {
          assert.equal(store.recovery.clean, false);
          assert.equal(store.maxOffset, TEAR);
          const records = keptKeyedRecords();
          assert.ok(records.length > 400, `${records.length} keys`);
          for (const { topic, key, offset } of records) {
            const found = await store.queryMessages(topic, key);
            assert.ok(
              found.messages.some((m) => m.physicalOffset === offset),
              `${topic}#${key} at ${offset}`,
            );
          }
          // Over the lost records' offsets, below the third index file's
          // end (442781).
          const next: number[] = [];
          for (let i = 0; i < 20; i++) {
            const r = await store.putMessage({
              topic: "TopicTest",
              queueId: i % 4,
              body: body(300, i),
              properties: { KEYS: `fresh-${i}` },
            });
            assert.equal(r.status, "PUT_OK");
            next.push(r.appendResult!.wroteOffset);
          }
          assert.ok(next[0]! < 442781 && next[next.length - 1]! > 442781);
          await store.whenDispatched(store.maxOffset);
          for (const [i, offset] of next.entries()) {
            const found = await store.queryMessages("TopicTest", `fresh-${i}`);
            assert.deepEqual(found.messages.map((m) => m.physicalOffset), [offset], `fresh-${i}`);
          }
        } finally {
          await store.close();
        }
      } finally {
        removeDirectory(root);
      }
    },
  );

  test(
    "MessageStore.open() read-only leaves the index files of a crashed RocketMQ store as they were",
    {
      skip: CORPUS_SKIP,
    },
    async () => {
      const { root, directory } = tornCorpusStore();
      try {
        const before = indexBytes(directory);
        const store = await MessageStore.open(directory, {
          ...CORPUS_OPTIONS,
          readOnly: true,
          onWarning: () => {},
        });
        try {
          assert.equal(store.maxOffset, TEAR);
          // k-59-0 named the record at 436094, past the log's end now.
          assert.deepEqual((await store.queryMessages("TopicTest", "k-59-0")).messages, []);
          const found = await store.queryMessages("TopicTest", "k-38-0");
          assert.deepEqual(found.messages.map((m) => m.physicalOffset), [434192]);
        } finally {
          await store.close();
        }
        assert.deepEqual(indexBytes(directory), before);
      } finally {
        removeDirectory(root);
      }
    },
  );
});
