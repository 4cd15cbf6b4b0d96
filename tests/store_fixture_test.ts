/**
 * The consume queues and index files of the RocketMQ 4.9.8 golden corpora
 * (`../shared/testdata/rocketmq-4.9.8/{public,crashed}`): read exactly what
 * RocketMQ wrote, and write the same bytes for the same inputs. The
 * corpora are copied to a temporary directory first; the shared copy is
 * never opened for writing.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { createPort } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { ConsumeQueueTable } from "../src/store/consume_queue_table.ts";
import { IndexService } from "../src/store/index_service.ts";
import { IndexFile } from "../src/store/index_file.ts";
import { copyCorpusStore, CORPUS, readJson, readJsonLines } from "./_corpus_helpers.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";

const CQ_FILE_SIZE_BYTES = 600;
const HASH_SLOT_NUM = 64;
const INDEX_NUM = 256;
const INDEX_FILE_SIZE_BYTES = 5416;

interface CqRow {
  topic: string;
  queueId: number;
  cqIndex: number;
  commitLogOffset: number;
  size: number;
  tagsCode: string;
  file: string;
  filePosition: number;
}

interface IndexHeaderJson {
  beginTimestamp: number;
  endTimestamp: number;
  beginPhyOffset: number;
  endPhyOffset: number;
  hashSlotCount: number;
  indexCount: number;
}

interface IndexFileJson {
  file: string;
  fileSize: number;
  header: IndexHeaderJson;
  slots: number[];
}

interface IndexQueryJson {
  topic: string;
  key: string;
  phyOffsets: number[];
}

interface IndexJson {
  files: IndexFileJson[];
  queries: IndexQueryJson[];
}

interface IndexEntryRow {
  file: string;
  entryNo: number;
  keyHash: number;
  slot: number;
  phyOffset: number;
  timeDiffSec: number;
  prevIndex: number;
}

interface ManifestRow {
  kind: string;
  physicalOffset: number;
  topic?: string;
  storeTimestamp?: number;
  indexKeys?: string[];
}

function corpus(name: "public" | "crashed") {
  return {
    dir: path.join(CORPUS, name),
    cq: () => readJsonLines<CqRow>(name, "consumequeue.jsonl"),
    index: () => readJson<IndexJson>(name, "index.json"),
    entries: () => readJsonLines<IndexEntryRow>(name, "index_entries.jsonl"),
    manifest: () => readJsonLines<ManifestRow>(name, "manifest.jsonl"),
    json: <T>(file: string) => readJson<T>(name, file),
  };
}

/** Copies a corpus store to a fresh writable temp directory (`root` is the store). */
function copyStore(name: "public" | "crashed"): { root: string; cleanup(): void } {
  const { root, directory } = copyCorpusStore(name);
  return { root: directory, cleanup: () => removeDirectory(root) };
}

function groupByQueue(rows: CqRow[]): Map<string, CqRow[]> {
  const queues = new Map<string, CqRow[]>();
  for (const row of rows) {
    const key = `${row.topic}/${row.queueId}`;
    const list = queues.get(key) ?? [];
    list.push(row);
    queues.set(key, list);
  }
  return queues;
}

const adapters: Array<"auto" | "portable"> = ["auto", "portable"];

async function portFor(adapter: "auto" | "portable"): Promise<RuntimePort> {
  return await createPort({ adapter, onNotice: () => {} });
}

describe("ConsumeQueueTable on the RocketMQ 4.9.8 corpora", () => {
  for (const adapter of adapters) {
    test(`ConsumeQueueTable.load() reads every unit RocketMQ wrote (${adapter})`, async () => {
      const port = await portFor(adapter);
      const store = copyStore("public");
      const table = new ConsumeQueueTable({
        port,
        rootDirectory: store.root,
        mappedFileSizeConsumeQueue: CQ_FILE_SIZE_BYTES,
      });
      try {
        await table.load();
        const maxPhysicOffset = await table.recover();
        await table.correctMinOffset(0);
        const expected = groupByQueue(corpus("public").cq());
        assert.equal(table.size, expected.size);
        let ends = -1;
        for (const [key, rows] of expected) {
          const first = rows[0]!;
          const cq = table.find(first.topic, first.queueId);
          assert.ok(cq !== undefined, `queue ${key} loaded`);
          assert.equal(cq.maxOffsetInQueue, rows.length, `${key} max offset`);
          assert.equal(cq.minOffsetInQueue, 0, `${key} min offset`);
          for (let q = 0; q < rows.length;) {
            const units = await cq.readUnits(q, 1000);
            assert.ok(units !== undefined, `${key} units from ${q}`);
            for (let i = 0; i < units.count; i++) {
              const row = rows[q + i]!;
              assert.equal(row.cqIndex, q + i);
              assert.equal(units.commitLogOffsetAt(i), row.commitLogOffset, `${key}#${q + i}`);
              assert.equal(units.sizeAt(i), row.size, `${key}#${q + i} size`);
              assert.equal(String(units.tagsCodeAt(i)), row.tagsCode, `${key}#${q + i} tagsCode`);
              ends = Math.max(ends, row.commitLogOffset + row.size);
            }
            q += units.count;
            units.release();
          }
          assert.equal(await cq.getUnit(rows.length), undefined);
        }
        assert.equal(maxPhysicOffset, ends);
      } finally {
        await table.close();
        store.cleanup();
      }
    });
  }

  test("ConsumeQueue.putUnit() replays the corpus into byte-identical files", async () => {
    const port = await portFor("auto");
    const temp = makeTempDirectory();
    const table = new ConsumeQueueTable({
      port,
      rootDirectory: temp,
      mappedFileSizeConsumeQueue: CQ_FILE_SIZE_BYTES,
    });
    try {
      await table.load();
      const rows = corpus("public").cq();
      for (const row of rows) {
        const cq = await table.findOrCreate(row.topic, row.queueId);
        const wrote = await cq.putUnit(
          row.commitLogOffset,
          row.size,
          Number(row.tagsCode),
          row.cqIndex,
        );
        assert.ok(wrote);
      }
      await table.flush(0);
      await table.close();
      const fixtureCq = path.join(CORPUS, "public", "store", "consumequeue");
      const ourCq = path.join(temp, "consumequeue");
      assert.deepEqual(fs.readdirSync(ourCq).sort(), fs.readdirSync(fixtureCq).sort());
      let files = 0;
      for (const topic of fs.readdirSync(fixtureCq)) {
        const queues = fs.readdirSync(path.join(fixtureCq, topic)).sort();
        assert.deepEqual(fs.readdirSync(path.join(ourCq, topic)).sort(), queues, topic);
        for (const queueId of queues) {
          const names = fs.readdirSync(path.join(fixtureCq, topic, queueId)).sort();
          assert.deepEqual(fs.readdirSync(path.join(ourCq, topic, queueId)).sort(), names);
          for (const name of names) {
            const theirs = fs.readFileSync(path.join(fixtureCq, topic, queueId, name));
            const ours = fs.readFileSync(path.join(ourCq, topic, queueId, name));
            assert.ok(theirs.equals(ours), `${topic}/${queueId}/${name} is byte-identical`);
            files++;
          }
        }
      }
      assert.equal(files, 31);
    } finally {
      await table.close();
      removeDirectory(temp);
    }
  });

  test("ConsumeQueueTable.truncateDirtyLogicFiles() cuts the unit of the torn record", async () => {
    const port = await portFor("auto");
    const store = copyStore("crashed");
    const recovery = corpus("crashed").json<{
      maxPhyOffset: number;
      consumeQueues: Record<string, { minOffsetAfter: number; maxOffsetAfter: number }>;
    }>("recovery.json");
    let table = new ConsumeQueueTable({
      port,
      rootDirectory: store.root,
      mappedFileSizeConsumeQueue: CQ_FILE_SIZE_BYTES,
    });
    try {
      await table.load();
      await table.recover();
      assert.equal(table.find("TopicTest", 1)?.maxOffsetInQueue, 37);
      await table.truncateDirtyLogicFiles(recovery.maxPhyOffset);
      await table.correctMinOffset(0);
      for (const [key, expected] of Object.entries(recovery.consumeQueues)) {
        const slash = key.lastIndexOf("/");
        const cq = table.find(key.slice(0, slash), Number(key.slice(slash + 1)));
        assert.ok(cq !== undefined, key);
        assert.equal(cq.maxOffsetInQueue, expected.maxOffsetAfter, `${key} max`);
        assert.equal(cq.minOffsetInQueue, expected.minOffsetAfter, `${key} min`);
      }
      const kept = corpus("crashed").cq().find((row) =>
        row.topic === "TopicTest" && row.queueId === 1 && row.cqIndex === 35
      )!;
      assert.equal(table.find("TopicTest", 1)?.maxPhysicOffset, kept.commitLogOffset + kept.size);
      await table.flush(0);
      await table.close();
      // Unlike RocketMQ, the cut unit is zeroed: a reopen does not see it again.
      table = new ConsumeQueueTable({
        port,
        rootDirectory: store.root,
        mappedFileSizeConsumeQueue: CQ_FILE_SIZE_BYTES,
      });
      await table.load();
      await table.recover();
      assert.equal(table.find("TopicTest", 1)?.maxOffsetInQueue, 36);
    } finally {
      await table.close();
      store.cleanup();
    }
  });
});

/** Milliseconds of a `yyyyMMddHHmmssSSS` name read as UTC (the corpora's host ran in UTC). */
function utcMsOfName(name: string): number {
  const n = (from: number, to: number) => Number(name.slice(from, to));
  return Date.UTC(n(0, 4), n(4, 6) - 1, n(6, 8), n(8, 10), n(10, 12), n(12, 14), n(14, 17));
}

/** A clock answering each new file's creation time from a list. */
function creationClock(times: number[]): { nowMs(): number } {
  let next = 0;
  return {
    nowMs: () => {
      const time = times[next++];
      assert.ok(time !== undefined, "no more index files expected");
      return time;
    },
  };
}

const LONG_MAX_MS = Number.MAX_SAFE_INTEGER;
const QUERY_MAX_NUM = 1000;

function checkIndexFile(file: IndexFile, expected: IndexFileJson, entries: IndexEntryRow[]): void {
  assert.equal(file.fileSizeBytes, expected.fileSize);
  assert.deepEqual(
    {
      beginTimestamp: file.beginTimestamp,
      endTimestamp: file.endTimestamp,
      beginPhyOffset: file.beginPhyOffset,
      endPhyOffset: file.endPhyOffset,
      hashSlotCount: file.hashSlotCount,
      indexCount: file.indexCount,
    },
    expected.header,
  );
  assert.deepEqual(expected.slots.map((_, slot) => file.slotAt(slot)), expected.slots);
  assert.equal(entries.length, file.indexCount - 1);
  for (const row of entries) {
    assert.deepEqual(file.entryAt(row.entryNo), {
      keyHash: row.keyHash,
      phyOffset: row.phyOffset,
      timeDiffSec: row.timeDiffSec,
      prevIndex: row.prevIndex,
    }, `${row.file} entry ${row.entryNo}`);
  }
}

function replayIndex(index: IndexService, manifest: ManifestRow[]): Promise<void> {
  return manifest.reduce(async (previous, row) => {
    await previous;
    if (row.kind !== "message") return;
    await index.buildIndex({
      topic: row.topic!,
      commitLogOffset: row.physicalOffset,
      storeTimestamp: row.storeTimestamp!,
      keys: row.indexKeys!,
    });
  }, Promise.resolve());
}

describe("IndexService on the RocketMQ 4.9.8 corpora", () => {
  for (const adapter of adapters) {
    test(`IndexService.load() reads RocketMQ's headers, slots, entries and queries (${adapter})`, async () => {
      const port = await portFor(adapter);
      const store = copyStore("public");
      const index = new IndexService({
        port,
        rootDirectory: store.root,
        maxHashSlotNum: HASH_SLOT_NUM,
        maxIndexNum: INDEX_NUM,
      });
      try {
        await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
        const expected = corpus("public").index();
        const entries = corpus("public").entries();
        assert.deepEqual(index.files.map((f) => f.fileName), expected.files.map((f) => f.file));
        expected.files.forEach((json, i) => {
          checkIndexFile(index.files[i]!, json, entries.filter((e) => e.file === json.file));
        });
        assert.ok(expected.queries.length > 20);
        for (const query of expected.queries) {
          const result = index.queryOffset(query.topic, query.key, QUERY_MAX_NUM, 0, LONG_MAX_MS);
          assert.deepEqual(result.phyOffsets, query.phyOffsets, `${query.topic}#${query.key}`);
          assert.equal(result.indexLastUpdatePhyoffset, 515149);
        }
      } finally {
        await index.close();
        store.cleanup();
      }
    });
  }

  test("IndexService.buildIndex() replays the corpus into RocketMQ's index bytes", async () => {
    const port = await portFor("auto");
    const expected = corpus("public").index();
    const temp = makeTempDirectory();
    const index = new IndexService({
      port,
      rootDirectory: temp,
      maxHashSlotNum: HASH_SLOT_NUM,
      maxIndexNum: INDEX_NUM,
      clock: creationClock(expected.files.map((f) => utcMsOfName(f.file))),
    });
    try {
      await index.load({ lastExitOK: true, indexMsgTimestamp: 0 });
      await replayIndex(index, corpus("public").manifest());
      assert.equal(index.files.length, expected.files.length);
      // The third file is the last full one: its end goes to the checkpoint
      // once it is durable (flushed in the background; flush() waits).
      await index.flush();
      assert.equal(index.indexMsgTimestamp, 1795954493793);
      const entries = corpus("public").entries();
      expected.files.forEach((json, i) => {
        checkIndexFile(index.files[i]!, json, entries.filter((e) => e.file === json.file));
      });
      const ours = index.files.map((f) => f.path);
      await index.close();
      ours.forEach((ourPath, i) => {
        const theirs = fs.readFileSync(
          path.join(CORPUS, "public", "store", "index", expected.files[i]!.file),
        );
        assert.equal(theirs.length, INDEX_FILE_SIZE_BYTES);
        assert.ok(fs.readFileSync(ourPath).equals(theirs), `${ourPath} is byte-identical`);
      });
    } finally {
      await index.close();
      removeDirectory(temp);
    }
  });

  test("IndexService.load() drops files newer than the checkpoint after a crash, as RocketMQ", async () => {
    const port = await portFor("auto");
    const store = copyStore("crashed");
    const checkpoint = corpus("crashed").json<{ indexMsgTimestamp: number }>("checkpoint.json");
    const recovery = corpus("crashed").json<{
      indexFilesAfterOpen: string[];
      indexQueriesAfterRecovery: Array<
        { topic: string; key: string; phyOffsetsAfterRecovery: number[] }
      >;
    }>("recovery.json");
    const rebuiltAt = utcMsOfName(recovery.indexFilesAfterOpen[3]!);
    const index = new IndexService({
      port,
      rootDirectory: store.root,
      maxHashSlotNum: HASH_SLOT_NUM,
      maxIndexNum: INDEX_NUM,
      clock: creationClock([rebuiltAt]),
    });
    try {
      await index.load({ lastExitOK: false, indexMsgTimestamp: checkpoint.indexMsgTimestamp });
      assert.deepEqual(
        index.files.map((f) => f.fileName),
        recovery.indexFilesAfterOpen.slice(0, 3),
      );
      assert.equal(fs.readdirSync(path.join(store.root, "index")).length, 3);
      await replayIndex(index, corpus("crashed").manifest());
      assert.equal(index.files.length, 4);
      assert.ok(recovery.indexQueriesAfterRecovery.length > 20);
      for (const query of recovery.indexQueriesAfterRecovery) {
        const result = index.queryOffset(query.topic, query.key, QUERY_MAX_NUM, 0, LONG_MAX_MS);
        assert.deepEqual(
          result.phyOffsets,
          query.phyOffsetsAfterRecovery,
          `${query.topic}#${query.key}`,
        );
      }
    } finally {
      await index.close();
      store.cleanup();
    }
  });
});
