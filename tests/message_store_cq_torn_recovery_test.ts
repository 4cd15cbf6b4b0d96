/**
 * Consume-queue recovery after a torn crash (session 9, helper F): a crash
 * that loses a page of an earlier consume-queue file and keeps later
 * files' pages leaves a hole in the middle of the queue. After reopening,
 * every acknowledged message must still be served through its topic/queue
 * (`getMessages`) and by offset (`getMessage`), with its body.
 *
 * Seeded memory-disk crashes (a bounded number of seeds here; set
 * `MQSTORE_CQ_TORN_SEEDS` for more), and a real-file variant that plants a
 * zeroed page in the middle of an earlier consume-queue file.
 *
 * @module
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import process from "node:process";
import { describe, test } from "node:test";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { createPort, MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ConsumeQueue } from "../src/store/consume_queue.ts";
import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import { body, openMemoryStore, settle } from "./_store_helpers.ts";

const TOPIC = "T";
const QUEUES = 2;
/** 512 units (2.5 pages) a file: a page-sized hole can fall mid-file or on a file's start. */
const CQ_FILE_BYTES = 20 * 512;
/** Per queue: over 4 files (a whole number of batches per queue). */
const PUTS_PER_QUEUE = 4 * 512 + 208;
const BATCH = 16;
const SEEDS_DEFAULT = 8;
const PAGE_BYTES = 0x1000;

/** A message the store acknowledged. */
interface Acked {
  /** End of the message's batch in the commit log. */
  end: number;
  queueId: number;
  queueOffset: number;
  bodySeed: number;
  length: number;
}

function seedCount(): number {
  const raw = process.env.MQSTORE_CQ_TORN_SEEDS;
  const parsed = raw === undefined ? NaN : Number.parseInt(raw, 10);
  return Number.isSafeInteger(parsed) && parsed > 0 ? parsed : SEEDS_DEFAULT;
}

/**
 * Puts `count` messages per queue in batches of {@link BATCH} (one queue
 * a batch, alternating), every acknowledged one recorded.
 */
async function putAll(
  store: MessageStore,
  acked: Acked[],
  count: number,
  seed: number,
  onBatch?: (batch: number) => Promise<void>,
): Promise<void> {
  let n = 0;
  for (let batch = 0; batch * BATCH < count * QUEUES; batch++) {
    const queueId = batch % QUEUES;
    const messages = [];
    const seeds: number[] = [];
    for (let i = 0; i < BATCH; i++, n++) {
      const bodySeed = seed * 1_000_000 + n;
      seeds.push(bodySeed);
      messages.push({
        topic: TOPIC,
        queueId,
        body: body(40 + n % 90, bodySeed),
        properties: { TAGS: `t${n % 3}` },
      });
    }
    const r = await store.putMessages(messages);
    assert.equal(r.status, "PUT_OK");
    const a = r.appendResult!;
    for (let i = 0; i < BATCH; i++) {
      acked.push({
        end: a.wroteOffset + a.wroteBytes,
        queueId,
        queueOffset: a.queueOffset + i,
        bodySeed: seeds[i]!,
        length: messages[i]!.body.length,
      });
    }
    await onBatch?.(batch);
  }
}

/** Checks that every acknowledged message is served by queue and by offset. */
async function assertAllServed(store: MessageStore, acked: readonly Acked[]): Promise<void> {
  for (let queueId = 0; queueId < QUEUES; queueId++) {
    const expected = acked.filter((a) => a.queueId === queueId);
    let queueOffset = 0;
    for (const a of expected) {
      assert.equal(a.queueOffset, queueOffset, "acknowledged queue offsets are dense");
      queueOffset++;
    }
    let next = 0;
    // Bounded: each round reads at least one message or fails.
    while (next < expected.length) {
      const page = await store.getMessages(TOPIC, queueId, next, 64);
      assert.equal(
        page.status,
        "FOUND",
        `queue ${queueId} offset ${next} of ${expected.length} acknowledged: ${page.status}`,
      );
      assert.ok(page.messages.length > 0);
      for (const message of page.messages) {
        const a = expected[message.queueOffset];
        if (a === undefined) break;
        assert.equal(message.queueOffset, next, `queue ${queueId} serves offset ${next} in order`);
        assert.equal(message.queueId, queueId);
        assert.deepEqual(
          message.body,
          body(a.length, a.bodySeed),
          `queue ${queueId} offset ${next}`,
        );
        const byOffset = await store.getMessage(message.physicalOffset);
        assert.ok(byOffset !== undefined, `getMessage(${message.physicalOffset})`);
        assert.equal(byOffset.queueOffset, next);
        assert.deepEqual(byOffset.body, message.body);
        next++;
      }
    }
  }
}

describe("MessageStore.open() after a torn crash", () => {
  const seeds = seedCount();
  for (let seed = 1; seed <= seeds; seed++) {
    // Odd seeds SYNC (every put acknowledged durable), even ones ASYNC
    // (acknowledged up to the last flush).
    const sync = seed % 2 === 1;
    const mode = sync ? "SYNC" : "ASYNC";
    test(`MessageStore.open() serves every acknowledged message after a torn crash (${mode}, seed ${seed})`, async () => {
      const memory = new MemoryPort(runtimeName());
      const options: MessageStoreOptions = {
        flushDiskType: sync ? "SYNC_FLUSH" : "ASYNC_FLUSH",
        flushIntervalCommitLog: 500,
        flushCommitLogLeastPages: 0,
        mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
        flushIntervalConsumeQueue: 60_000,
        flushConsumeQueueLeastPages: 0,
        flushConsumeQueueThoroughInterval: 0,
        messageIndexEnable: false,
      };
      const env = await openMemoryStore(options, memory);
      const acked: Acked[] = [];
      const checkpointBatch = 2 * (512 / BATCH) + (seed % 7);
      const lastBatch = PUTS_PER_QUEUE * QUEUES / BATCH - 1;
      await putAll(env.store, acked, PUTS_PER_QUEUE, seed, async (batch) => {
        if (batch === checkpointBatch) {
          // One consume-queue checkpoint early on (after the first file
          // of each queue), none after: every later consume-queue page is
          // dirty.
          env.clock.advance(60_000);
          await settle();
        } else if (!sync && batch === lastBatch - (seed % 5)) {
          // The commit log only (ASYNC): flushed near the end.
          env.clock.advance(1_000);
          await settle();
        }
      });
      await env.store.whenDispatched(env.store.maxOffset);
      assert.ok(
        env.store.checkpoint.consumeQueueOffset > 0,
        "a consume-queue checkpoint was written",
      );
      const flushedAtCrash = env.store.flushedOffset;
      const report = memory.crash({ seed, keepProbability: 0.5 });
      assert.ok((report.lostPages ?? 0) > 0, "the crash lost pages");
      const durable = acked.filter((a) => a.end <= flushedAtCrash);
      if (sync) assert.equal(durable.length, acked.length);
      else assert.ok(durable.length > acked.length / 2, "most puts were flushed");
      const store = await env.reopen();
      try {
        assert.equal(store.recovery.clean, false);
        await assertAllServed(store, durable);
        // And the store goes on: a new put gets the queue's next offset.
        const next = store.getMaxQueueOffset(TOPIC, 0);
        assert.ok(next >= durable.filter((a) => a.queueId === 0).length);
        const r = await store.putMessage({ topic: TOPIC, queueId: 0, body: body(10, 7) });
        assert.equal(r.status, "PUT_OK");
        assert.equal(r.appendResult!.queueOffset, next);
      } finally {
        await store.close();
      }
    });
  }
});

describe("MessageStore.open() after a zeroed consume-queue page", () => {
  test("MessageStore.open() refills a zeroed page in an earlier consume-queue file (real files)", async () => {
    const directory = fs.mkdtempSync(os.tmpdir() + "/mqstore-");
    try {
      const options: MessageStoreOptions = {
        flushDiskType: "SYNC_FLUSH",
        mappedFileSizeCommitLog: 0x4_0000,
        mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
        messageIndexEnable: false,
        onWarning: () => {},
      };
      let store = await MessageStore.open(directory, options);
      const acked: Acked[] = [];
      let checkpointOffset = -1;
      try {
        await putAll(store, acked, PUTS_PER_QUEUE, 99, (batch) => {
          // Where the checkpoint of a crash would stand: the first file of each queue.
          if (batch === 2 * (512 / BATCH) + 3) checkpointOffset = store.maxOffset;
          return Promise.resolve();
        });
      } finally {
        await store.close();
      }
      // Make it an abnormal open whose consume-queue checkpoint is early,
      // and zero the second page of each queue's second file (past it).
      fs.writeFileSync(`${directory}/abort`, new Uint8Array(0));
      const realPort = await createPort({});
      const checkpoint = await StoreCheckpoint.load(realPort, `${directory}/checkpoint`);
      checkpoint.consumeQueueOffset = checkpointOffset;
      await checkpoint.flush();
      for (let queueId = 0; queueId < QUEUES; queueId++) {
        const queueDirectory = `${directory}/consumequeue/${TOPIC}/${queueId}`;
        const names = fs.readdirSync(queueDirectory).filter((n) => /^[0-9]{20}$/.test(n)).sort();
        assert.ok(names.length >= 4, `queue ${queueId} spans ${names.length} files`);
        const fd = fs.openSync(`${queueDirectory}/${names[1]}`, "r+");
        try {
          fs.writeSync(fd, new Uint8Array(PAGE_BYTES), 0, PAGE_BYTES, PAGE_BYTES);
        } finally {
          fs.closeSync(fd);
        }
      }
      store = await MessageStore.open(directory, options);
      try {
        assert.equal(store.recovery.clean, false);
        await assertAllServed(store, acked);
      } finally {
        await store.close();
      }
    } finally {
      fs.rmSync(directory, { recursive: true, force: true });
    }
  });
});

describe("ConsumeQueue.recover() after a crash", () => {
  /** 10 units a file; message q at commit-log offset 100·q, size 100. */
  const FILE_BYTES = 200;
  const queueOf = (port: MemoryPort) =>
    new ConsumeQueue({
      port,
      rootDirectory: "/s",
      topic: "Q",
      queueId: 0,
      mappedFileSizeConsumeQueue: FILE_BYTES,
    });
  /** Writes `count` units from queue offset `from`, flushes and closes. */
  const written = async (port: MemoryPort, from: number, count: number) => {
    const cq = queueOf(port);
    await cq.load();
    await cq.recover({ afterCrash: false });
    for (let q = from; q < from + count; q++) {
      assert.equal(await cq.putUnit(q * 100, 100, 0, q), true);
    }
    await cq.flush(0);
    await cq.close();
  };
  /** Zeroes the unit of queue offset `q` on disk. */
  const zeroUnit = async (port: MemoryPort, q: number) => {
    const name = String(Math.floor(q / 10) * FILE_BYTES).padStart(20, "0");
    const handle = await port.openFile(`/s/consumequeue/Q/0/${name}`);
    await handle.write(new Uint8Array(20), (q % 10) * 20);
    await handle.datasync();
    await handle.close();
  };
  const reopened = async (port: MemoryPort, options: { fromCommitLogOffset?: number }) => {
    const cq = queueOf(port);
    await cq.load();
    const end = await cq.recover({ afterCrash: true, ...options });
    return { cq, end };
  };

  test("recover() ends the queue at the first unit at or past fromCommitLogOffset, past a hole in an earlier file", async () => {
    const port = new MemoryPort(runtimeName());
    await written(port, 0, 55);
    // A hole in the second file, which a walk from the third-last misses.
    await zeroUnit(port, 17);
    const old = await reopened(port, {});
    assert.equal(old.cq.maxOffsetInQueue, 55, "RocketMQ's walk does not see the hole");
    await old.cq.close();
    // The checkpoint at message 12: units 12 on are rebuilt by re-dispatch.
    const { cq, end } = await reopened(port, { fromCommitLogOffset: 1200 });
    assert.equal(end, 1200);
    assert.equal(cq.maxOffsetInQueue, 12);
    assert.equal(cq.files.length, 2);
    for (let q = 12; q < 55; q++) assert.equal(await cq.putUnit(q * 100, 100, 0, q), true);
    assert.equal(cq.maxOffsetInQueue, 55);
    assert.deepEqual(await cq.getUnit(17), { commitLogOffset: 1700, size: 100, tagsCode: 0 });
    await cq.close();
  });

  test("recover() finds the file holding fromCommitLogOffset past files whose first unit was lost", async () => {
    const port = new MemoryPort(runtimeName());
    await written(port, 0, 45);
    // The fourth file's first unit is lost; the checkpoint is in the third.
    await zeroUnit(port, 30);
    const { cq, end } = await reopened(port, { fromCommitLogOffset: 2500 });
    assert.equal(end, 2500);
    assert.equal(cq.maxOffsetInQueue, 25);
    assert.equal(cq.files.length, 3);
    await cq.close();
  });

  test("recover() with a negative fromCommitLogOffset walks from the first file", async () => {
    const port = new MemoryPort(runtimeName());
    await written(port, 0, 55);
    await zeroUnit(port, 3);
    const { cq, end } = await reopened(port, { fromCommitLogOffset: -1 });
    assert.equal(end, 300);
    assert.equal(cq.maxOffsetInQueue, 3);
    assert.equal(cq.files.length, 1);
    await cq.close();
  });

  test("recover() does not count padding units as a message end", async () => {
    const port = new MemoryPort(runtimeName());
    // A queue whose first file starts padded up to queue offset 25.
    await written(port, 25, 10);
    const { cq, end } = await reopened(port, { fromCommitLogOffset: 2500 });
    assert.equal(end, -1, "no message below the checkpoint");
    assert.equal(cq.maxOffsetInQueue, 25);
    assert.equal(await cq.putUnit(2500, 100, 0, 25), true, "not skipped as a repeat");
    await cq.close();
  });
});
