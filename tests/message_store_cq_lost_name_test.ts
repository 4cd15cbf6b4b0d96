/**
 * A crash that loses one consume-queue file's name while a later file's
 * name survives (session 10, helper D). Since session 9 a new file's name
 * is made durable by the queue's flush before the checkpoint counts a unit
 * in it, so a lost name is of a file made after the checkpoint, and so are
 * those after it: load removes the file after the gap and every later one
 * (`ConsumeQueue` `#removeUnfinishedFiles`, RocketMQ would refuse to map on
 * past the gap in `checkSelf`), and re-dispatch rebuilds their units from
 * the commit log. Should the checkpoint count units past the gap (a disk
 * that lost a durable name), re-dispatch from it finds the queue short and
 * replays the whole log instead. Planted here on real files.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { createPort } from "../src/runtime/mod.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { withTempDirectory } from "./_helpers.ts";
import { body, queueKeyNumbers, settle } from "./_store_helpers.ts";

const TOPIC = "Gap";
const UNITS_PER_FILE = 64;
const MESSAGES = 5 * UNITS_PER_FILE + 17;

async function put(store: MessageStore, from: number, count: number): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const r = await store.putMessage({
      topic: TOPIC,
      queueId: 0,
      body: body(40 + (i % 9) * 10, i),
      properties: { KEYS: String(i) },
    });
    assert.equal(r.status, "PUT_OK");
  }
}

/**
 * Puts {@link MESSAGES} messages (checkpointed after `checkpointAfter`),
 * copies the store as a kill leaves it, removes consume-queue file
 * `lostFile` from the copy, and opens the copy.
 */
async function openWithLostName(
  root: string,
  checkpointAfter: number,
  lostFile: number,
): Promise<{ again: MessageStore; checkpoint: StoreCheckpoint; warnings: string[] }> {
  const directory = path.join(root, "store");
  const copy = path.join(root, "killed");
  const clock = new ManualClock(1_700_000_000_000);
  const warnings: string[] = [];
  const options = {
    mappedFileSizeCommitLog: 0x1_0000,
    mappedFileSizeConsumeQueue: 20 * UNITS_PER_FILE,
    flushConsumeQueueThoroughInterval: 0,
    clock,
    onWarning: (message: string) => warnings.push(message),
  };
  const port = await createPort({ adapter: "portable" });
  const store = await MessageStore.open(directory, options);
  let checkpoint: StoreCheckpoint;
  try {
    await put(store, 0, checkpointAfter);
    await store.whenDispatched(store.maxOffset);
    const target = store.maxOffset;
    clock.advance(1_000);
    // Bounded: the flush the timer fired writes the checkpoint.
    for (let turn = 0;; turn++) {
      checkpoint = await StoreCheckpoint.load(port, `${directory}/checkpoint`);
      if (checkpoint.consumeQueueOffset >= target) break;
      assert.ok(turn < 100_000, `the checkpoint never reached ${target}`);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    await put(store, checkpointAfter, MESSAGES - checkpointAfter);
    await store.whenDispatched(store.maxOffset);
    await settle();
    fs.cpSync(directory, copy, { recursive: true });
  } finally {
    await store.close();
  }
  const queueDirectory = path.join(copy, "consumequeue", TOPIC, "0");
  const names = fs.readdirSync(queueDirectory).filter((n) => /^[0-9]{20}$/.test(n)).sort();
  assert.ok(names.length > lostFile + 1, `${names.length} files`);
  fs.rmSync(path.join(queueDirectory, names[lostFile]!));
  // A read-only open (a tool beside no writer) changes nothing and serves
  // the queue up to the gap, not INVALID_FILE.
  const readOnly = await MessageStore.open(copy, { ...options, readOnly: true });
  try {
    assert.deepEqual(
      await queueKeyNumbers(readOnly, TOPIC, 0),
      Array.from({ length: lostFile * UNITS_PER_FILE }, (_, i) => i),
    );
  } finally {
    await readOnly.close();
  }
  assert.equal(fs.readdirSync(queueDirectory).length, names.length - 1);
  const again = await MessageStore.open(copy, {
    ...options,
    clock: new ManualClock(1_700_000_100_000),
  });
  return { again, checkpoint: checkpoint!, warnings };
}

/** Queue 0 serves every message put before the crash, in order, then 10 put after it. */
async function assertServesAllThenMore(store: MessageStore): Promise<void> {
  const expected = Array.from({ length: MESSAGES }, (_, i) => i);
  assert.deepEqual(await queueKeyNumbers(store, TOPIC, 0), expected);
  await put(store, MESSAGES, 10);
  expected.push(...Array.from({ length: 10 }, (_, i) => MESSAGES + i));
  assert.deepEqual(await queueKeyNumbers(store, TOPIC, 0), expected);
}

describe("MessageStore.open() with a consume-queue file name lost", () => {
  test("MessageStore.open() rebuilds a queue whose file after the checkpoint lost its name", async () => {
    await withTempDirectory(async (root) => {
      // The checkpoint inside file 1; file 3 lost, file 4 and 5 kept.
      const { again, checkpoint } = await openWithLostName(root, UNITS_PER_FILE + 5, 3);
      try {
        assert.equal(again.recovery.clean, false);
        assert.equal(again.recovery.dispatchedFrom, checkpoint.consumeQueueOffset);
        await assertServesAllThenMore(again);
      } finally {
        await again.close();
      }
    });
  });

  test("MessageStore.open() replays the log when the checkpoint counts units past a lost name", async () => {
    await withTempDirectory(async (root) => {
      // The checkpoint in file 4: file 2's name lost all the same.
      const { again, warnings } = await openWithLostName(root, 4 * UNITS_PER_FILE + 3, 2);
      try {
        assert.equal(again.recovery.clean, false);
        assert.ok(warnings.some((w) => w.includes("replaying")), warnings.join("\n"));
        await assertServesAllThenMore(again);
      } finally {
        await again.close();
      }
    });
  });
});
