/**
 * The recovery scan of the commit log on a port that cannot map (the
 * portable adapter): a sliding read window of a few KiB must find what a
 * whole-segment read finds — records, BLANKs, the cut, stale bytes past it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { TopicQueueTable } from "../src/commit_log/topic_queue_table.ts";
import { scanCommitLog } from "../src/commit_log/_recovery.ts";
import { createPort } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";
import { body, SEGMENT_BYTES } from "./_store_helpers.ts";

async function writeStore(port: RuntimePort, directory: string): Promise<number[]> {
  const store = await MessageStore.open(directory, {
    port,
    mappedFileSizeCommitLog: SEGMENT_BYTES,
    maxMessageSize: 0x2000,
    flushDiskType: "SYNC_FLUSH",
    sparseFiles: true,
    onWarning: () => {},
  });
  const offsets: number[] = [];
  try {
    for (let i = 0; i < 120; i++) {
      const r = await store.putMessage({
        topic: i % 2 === 0 ? "A" : "B",
        queueId: i % 3,
        body: body(100 + (i * 733) % 7000, i),
      });
      assert.equal(r.status, "PUT_OK");
      offsets.push(r.appendResult!.wroteOffset);
    }
  } finally {
    await store.close();
  }
  return offsets;
}

async function scan(port: RuntimePort, directory: string, windowBytes: number, clean: boolean) {
  const queue = new MappedFileQueue({
    port,
    directory: `${directory}/commitlog`,
    fileSizeBytes: SEGMENT_BYTES,
    readOnly: true,
  });
  await queue.load();
  try {
    const table = new TopicQueueTable();
    const result = await scanCommitLog(queue.files, {
      verifyFromIndex: 0,
      checkCrc: true,
      table,
      staleSearch: clean ? "after-invalid" : "always",
      windowBytes,
    });
    return { result, table: [...table.entries()] };
  } finally {
    await queue.close();
  }
}

describe("commit-log recovery scan", () => {
  test("scanCommitLog() through a small read window finds what a whole-segment read finds", async () => {
    const port = await createPort({ adapter: "portable", onNotice: () => {} });
    assert.equal(port.canMap, false);
    const root = makeTempDirectory();
    try {
      const directory = `${root}/store`;
      const offsets = await writeStore(port, directory);
      const whole = await scan(port, directory, SEGMENT_BYTES, false);
      const windowed = await scan(port, directory, 0x3000, false);
      assert.equal(whole.result.messageCount, 120);
      assert.deepEqual(windowed.result, whole.result);
      assert.deepEqual(windowed.table, whole.table);
      assert.equal(windowed.result.endKind, "end");

      // A flipped body byte in record 100 and a stale page far past the end.
      const victim = offsets[100]!;
      const segmentStart = victim - victim % SEGMENT_BYTES;
      const path = `${directory}/commitlog/${String(segmentStart).padStart(20, "0")}`;
      const handle = await port.openFile(path);
      const byte = new Uint8Array(1);
      await handle.read(byte, victim - segmentStart + 150);
      byte[0]! ^= 0x55;
      await handle.write(byte, victim - segmentStart + 150);
      await handle.write(new Uint8Array([7, 7, 7]), SEGMENT_BYTES - 10);
      await handle.close();
      const cut = await scan(port, directory, 0x3000, false);
      assert.equal(cut.result.endKind, "invalid");
      assert.match(cut.result.detail, new RegExp(`CRC_MISMATCH at offset ${victim}`));
      assert.equal(cut.result.cutOffset, victim);
      assert.equal(cut.result.dirtyEndPosition, SEGMENT_BYTES - 7);
      assert.equal(cut.result.messageCount, 100);
      const wholeCut = await scan(port, directory, SEGMENT_BYTES, false);
      assert.deepEqual(
        { ...cut.result, detail: "" },
        { ...wholeCut.result, detail: "" },
      );
      assert.deepEqual(cut.table, wholeCut.table);
    } finally {
      removeDirectory(root);
    }
  });
});
