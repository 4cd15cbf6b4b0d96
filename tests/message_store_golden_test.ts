/**
 * Opening store directories written by the real RocketMQ 4.9.8 store
 * (`/work/shared/testdata/rocketmq-4.9.8`, copied to a temp directory):
 * a clean one keeps every record and queue offset; a crashed one with a
 * torn tail record is cut exactly before it, the empty segment after it is
 * deleted, and new puts continue from there.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { createPort } from "../src/runtime/mod.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";
import { body, readRecords, segmentNames } from "./_store_helpers.ts";

const CORPUS = "/work/shared/testdata/rocketmq-4.9.8";
const present = fs.existsSync(CORPUS);

interface Summary {
  messages: number;
  "endOffset(maxPhyOffset)": number;
  consumeQueueUnitsPerQueue: Record<string, number>;
}

/** Copies a corpus store into a fresh, writable temp directory. */
function copyStore(profile: string): { root: string; directory: string; summary: Summary } {
  const root = makeTempDirectory();
  const directory = path.join(root, "store");
  fs.cpSync(path.join(CORPUS, profile, "store"), directory, { recursive: true });
  const makeWritable = (at: string) => {
    fs.chmodSync(at, fs.statSync(at).isDirectory() ? 0o755 : 0o644);
    if (fs.statSync(at).isDirectory()) {
      for (const name of fs.readdirSync(at)) makeWritable(path.join(at, name));
    }
  };
  makeWritable(directory);
  const summary = JSON.parse(
    fs.readFileSync(path.join(CORPUS, profile, "summary.json"), "utf8"),
  ) as Summary;
  return { root, directory, summary };
}

const skip = present ? undefined : `${CORPUS} is not here`;

describe("RocketMQ 4.9.8 store directories", () => {
  test("MessageStore.open() keeps every record and queue offset of a clean RocketMQ store", {
    skip,
  }, async () => {
    const { root, directory, summary } = copyStore("public");
    try {
      const port = await createPort({ onNotice: () => {} });
      const store = await MessageStore.open(directory, {
        port,
        mappedFileSizeCommitLog: 0x1_0000,
        flushDiskType: "SYNC_FLUSH",
        onWarning: () => {},
      });
      try {
        assert.equal(store.recovery.clean, true);
        assert.equal(store.recovery.maxOffset, summary["endOffset(maxPhyOffset)"]);
        assert.equal(store.recovery.messageCount, summary.messages);
        const table = store.topicQueueTable();
        for (const [queue, units] of Object.entries(summary.consumeQueueUnitsPerQueue)) {
          const slash = queue.lastIndexOf("/");
          assert.equal(
            table.get(`${queue.slice(0, slash)}-${queue.slice(slash + 1)}`),
            units,
            `next queue offset of ${queue}`,
          );
        }
        const r = await store.putMessage({ topic: "TopicTest", queueId: 1, body: body(10) });
        assert.equal(r.status, "PUT_OK");
        assert.equal(r.appendResult!.wroteOffset, summary["endOffset(maxPhyOffset)"]);
        assert.equal(
          r.appendResult!.queueOffset,
          summary.consumeQueueUnitsPerQueue["TopicTest/1"],
        );
      } finally {
        await store.close();
      }
      assert.equal((await readRecords(port, directory)).length, summary.messages + 1);
    } finally {
      removeDirectory(root);
    }
  });

  test("MessageStore.open() cuts a crashed RocketMQ store before its torn record", {
    skip,
  }, async () => {
    const { root, directory, summary } = copyStore("crashed");
    try {
      const port = await createPort({ onNotice: () => {} });
      const store = await MessageStore.open(directory, {
        port,
        mappedFileSizeCommitLog: 0x1_0000,
        flushDiskType: "SYNC_FLUSH",
        onWarning: () => {},
      });
      const torn = summary["endOffset(maxPhyOffset)"];
      try {
        assert.equal(store.recovery.clean, false);
        assert.equal(store.recovery.maxOffset, torn);
        assert.equal(store.recovery.messageCount, summary.messages);
        assert.equal(store.recovery.endKind, "invalid");
        // The empty segment RocketMQ had allocated ahead is gone.
        assert.equal((await segmentNames(port, directory)).at(-1), "00000000000000458752");
        assert.equal(store.nextQueueOffset("TopicTest", 1), 36);
        const r = await store.putMessage({ topic: "TopicTest", queueId: 1, body: body(10) });
        assert.equal(r.appendResult!.wroteOffset, torn);
        assert.equal(r.appendResult!.queueOffset, 36);
      } finally {
        await store.close();
      }
      const records = await readRecords(port, directory);
      assert.equal(records.length, summary.messages + 1);
    } finally {
      removeDirectory(root);
    }
  });
});
