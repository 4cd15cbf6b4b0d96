/**
 * A consume queue rolling to a file whose creation is held back: dispatch
 * goes on (the units past the roll are held in memory), reads see them,
 * they are written once the file exists, and a crash before that loses
 * none of them (recovery re-dispatches them from the commit log).
 *
 * @module
 */

import assert from "node:assert/strict";
import { setImmediate } from "node:timers";
import { describe, test } from "node:test";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ConsumeQueueTable } from "../src/store/consume_queue_table.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import {
  body,
  type HeldCreations,
  heldCreations,
  type KillablePort,
  killablePort,
  type MemoryStoreEnv,
  openMemoryStore,
} from "./_store_helpers.ts";

const TOPIC = "Roll";
/** Ten units a consume-queue file. */
const UNITS_PER_FILE = 10;
const CQ_FILE_BYTES = 20 * UNITS_PER_FILE;
/** The first file, then one file's worth held in memory at the roll. */
const MESSAGES = 2 * UNITS_PER_FILE;
const FIRST_FILE = "00000000000000000000";

/** Holds the creation of consume-queue files past the first: the roll is what is tested. */
function heldConsumeQueueRolls(inner: RuntimePort): HeldCreations {
  return heldCreations(
    inner,
    (path) => path.includes("/consumequeue/") && !path.includes(FIRST_FILE),
  );
}
const SECOND_FILE = "00000000000000000200";
/** The consume-queue flush's interval, ms: every flush thorough (checkpoint file written). */
const FLUSH_INTERVAL_MS = 1_000;

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/** Turns of the event loop until `done()` holds, at most `turns`; whether it did. */
async function turnsUntil(done: () => boolean | Promise<boolean>, turns = 2000): Promise<boolean> {
  for (let turn = 0; turn < turns; turn++) {
    if (await done()) return true;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return await done();
}

/** Whether `promise` settles within a bounded number of turns. */
async function settlesSoon(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(() => settled = true, () => settled = true);
  return await turnsUntil(() => settled);
}

const OPTIONS: MessageStoreOptions = {
  flushDiskType: "SYNC_FLUSH",
  mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
  flushConsumeQueueLeastPages: 0,
};

async function putAll(store: MessageStore, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) {
    const r = await store.putMessage({ topic: TOPIC, queueId: 0, body: body(40, i) });
    assert.equal(r.status, "PUT_OK");
    assert.equal(r.appendResult?.queueOffset, i);
  }
}

/** Reads queue offsets `[from, to)` page by page (a page ends at a file end) and checks each. */
async function assertServed(store: MessageStore, from: number, to: number): Promise<void> {
  const served: number[] = [];
  // Bounded: each page moves on, or the loop ends.
  for (let next = from; next < to;) {
    const page = await store.getMessages(TOPIC, 0, next, 64);
    assert.equal(page.status, "FOUND", `queue offset ${next}`);
    for (const m of page.messages) {
      served.push(m.queueOffset);
      assert.deepEqual(m.body, body(40, m.queueOffset));
    }
    assert.ok(page.nextQueueOffset > next);
    next = page.nextQueueOffset;
  }
  assert.deepEqual(served, Array.from({ length: to - from }, (_, i) => from + i));
}

/**
 * Opens a store whose second consume-queue file is held, puts a file's
 * worth past the roll, and checks dispatch and reads went on.
 */
async function rollWhileHeld(
  memory: MemoryPort,
  port: RuntimePort,
  held: HeldCreations,
  extra: MessageStoreOptions = {},
) {
  const env = await openMemoryStore({ ...OPTIONS, ...extra, port }, memory);
  const store = env.store;
  const directory = `${env.directory}/consumequeue/${TOPIC}/0`;
  await putAll(store, 0, 1);
  assert.ok(
    await turnsUntil(async () => (await memory.stat(`${directory}/${FIRST_FILE}`)) !== undefined),
    "the first file is created",
  );
  await putAll(store, 1, MESSAGES);
  assert.ok(held.waiting > 0, "the second file's creation waits");
  assert.ok(
    await settlesSoon(store.whenDispatched(store.maxOffset)),
    "dispatch went past the roll without the next file",
  );
  assert.equal(store.getMaxQueueOffset(TOPIC, 0), MESSAGES);
  const page = store.getMessages(TOPIC, 0, UNITS_PER_FILE, 64);
  assert.ok(await settlesSoon(page), "a read past the roll does not wait for the file");
  await assertServed(store, 0, MESSAGES);
  assert.equal(await memory.stat(`${directory}/${SECOND_FILE}`), undefined);
  return { env, store, directory };
}

/**
 * A crash while the roll is held: the process dies, every unflushed byte
 * is lost, the creation is let go (too late) and the store is opened again.
 */
async function crashAndReopen(
  env: MemoryStoreEnv,
  memory: MemoryPort,
  killable: KillablePort,
  held: HeldCreations,
  store: MessageStore,
): Promise<MessageStore> {
  killable.kill();
  memory.crash();
  held.release();
  await store.close().catch(() => {});
  return await env.reopen({ port: memory });
}

describe("ConsumeQueue roll in memory", () => {
  test("putUnitNow() rolls to a file still in creation: dispatch and reads go on, units land once it exists", async () => {
    const memory = new MemoryPort(runtimeName());
    const held = heldConsumeQueueRolls(memory);
    const { env, store, directory } = await rollWhileHeld(memory, held.port, held);
    held.release();
    assert.ok(
      await turnsUntil(async () =>
        (await memory.stat(`${directory}/${SECOND_FILE}`)) !== undefined
      ),
      "the second file is created once released",
    );
    await store.close();
    // Written to the file: a reopen (clean) serves every unit from disk.
    const bytes = await memory.readFile(`${directory}/${SECOND_FILE}`);
    assert.ok(bytes !== undefined);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    for (let u = 0; u < UNITS_PER_FILE; u++) assert.ok(view.getInt32(u * 20 + 8) > 0, `unit ${u}`);
    const again = await env.reopen({ port: memory });
    try {
      assert.equal(again.getMaxQueueOffset(TOPIC, 0), MESSAGES);
      await assertServed(again, 0, MESSAGES);
    } finally {
      await again.close();
    }
  });

  test("putUnitNow() units held in memory at a crash are recovered from the commit log", async () => {
    const memory = new MemoryPort(runtimeName());
    const killable = killablePort(memory);
    const held = heldConsumeQueueRolls(killable.port);
    const { env, store } = await rollWhileHeld(memory, held.port, held);
    // Every put is flushed (SYNC_FLUSH); the units past the roll are not.
    const again = await crashAndReopen(env, memory, killable, held, store);
    try {
      assert.equal(again.getMaxQueueOffset(TOPIC, 0), MESSAGES);
      await assertServed(again, 0, MESSAGES);
      // And the queue goes on from there.
      await putAll(again, MESSAGES, MESSAGES + 3);
      await again.whenDispatched(again.maxOffset);
      await assertServed(again, UNITS_PER_FILE, MESSAGES + 3);
    } finally {
      await again.close();
    }
  });
});

describe("ConsumeQueue flush during a roll", () => {
  test("flush() waits for the file of units held in memory: the checkpoint never counts them", async () => {
    const memory = new MemoryPort(runtimeName());
    const killable = killablePort(memory);
    const held = heldConsumeQueueRolls(killable.port);
    // Every consume-queue flush is thorough: queues, index, then the
    // checkpoint file, whose consumeQueueOffset is where recovery's
    // re-dispatch starts.
    const { env, store } = await rollWhileHeld(memory, held.port, held, {
      flushIntervalConsumeQueue: FLUSH_INTERVAL_MS,
      flushConsumeQueueThoroughInterval: 0,
    });
    const checkpointPath = `${env.directory}/checkpoint`;
    const before = await memory.readFile(checkpointPath);
    env.clock.advance(FLUSH_INTERVAL_MS);
    const written = await turnsUntil(async () => {
      const now = await memory.readFile(checkpointPath);
      return now !== undefined && (before === undefined || !bytesEqual(now, before));
    }, 200);
    const checkpoint = await StoreCheckpoint.load(memory, checkpointPath);
    const firstHeld = (await store.getMessages(TOPIC, 0, UNITS_PER_FILE, 1)).messages[0];
    assert.ok(firstHeld !== undefined);
    assert.ok(
      checkpoint.consumeQueueOffset <= firstHeld.physicalOffset,
      `checkpoint consumeQueueOffset ${checkpoint.consumeQueueOffset} (written: ${written}) ` +
        `stays at or below ${firstHeld.physicalOffset}, the record of the first held unit`,
    );
    const again = await crashAndReopen(env, memory, killable, held, store);
    try {
      assert.equal(again.getMaxQueueOffset(TOPIC, 0), MESSAGES);
      await assertServed(again, 0, MESSAGES);
    } finally {
      await again.close();
    }
  });
});

describe("ConsumeQueue turns while a file is created", () => {
  test("putUnitNow() defers a put to putUnit now and then while the next file is created", async () => {
    const memory = new MemoryPort(runtimeName());
    const held = heldConsumeQueueRolls(memory);
    const units = 0x4000;
    const table = new ConsumeQueueTable({
      port: held.port,
      rootDirectory: "/s",
      mappedFileSizeConsumeQueue: 20 * units,
      sparse: true,
    });
    await table.load();
    await table.recover();
    try {
      const cq = await table.findOrCreate(TOPIC, 0);
      // The first unit creates the first file.
      assert.equal(await cq.putUnit(0, 100, 0, 0), true);
      let q = 1;
      // Bounded by the file: the next one is prepared early in it and held.
      for (; q < units; q++) {
        const put = cq.putUnitNow(q * 100, 100, 0, q);
        if (put === undefined) break;
        assert.equal(put, true);
      }
      assert.ok(q > 1 && q < units, `putUnitNow deferred unit ${q} (file of ${units})`);
      assert.ok(await turnsUntil(() => held.waiting > 0), "the next file's creation waits");
      // The awaited put goes through (after a turn), and the fast path resumes.
      assert.equal(await cq.putUnit(q * 100, 100, 0, q), true);
      assert.equal(cq.putUnitNow((q + 1) * 100, 100, 0, q + 1), true);
      assert.equal(cq.maxOffsetInQueue, q + 2);
    } finally {
      held.release();
      await table.close();
    }
  });
});
