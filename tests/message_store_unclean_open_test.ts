/**
 * What an unclean open reads (issue 6): verification starts at the segment
 * holding the checkpoint's flushed commit-log offset (mqstore's block), a
 * torn tail past it is still cut and zeroed, stale bytes are looked for
 * only as far as the writer's bounds (kept in the checkpoint) allow, and a
 * checkpoint without mqstore's blocks falls back to RocketMQ's rule and
 * the whole tail. Memory disk, crashed by the test.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { tornTailOf } from "../src/commit_log/_recovery.ts";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { checkRecord, encodeMessage } from "../src/record/mod.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import {
  CHECKPOINT_BOUNDS_END,
  CHECKPOINT_BOUNDS_POSITION,
  CHECKPOINT_EXTENSION_POSITION,
} from "../src/commit_log/constants.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import {
  body,
  type MemoryStoreEnv,
  openMemoryStore,
  readRecords,
  SEGMENT_BYTES,
  settle,
} from "./_store_helpers.ts";

const TOPIC = "U";
const QUEUES = 3;
const MAX_MESSAGE_BYTES = 0x400;
const UNFLUSHED_BYTES_MAX = 0x1000;
/** Where stale bytes may lie past the cut with the bounds above (see CommitLog#staleBounds). */
const STALE_BYTES_MAX = UNFLUSHED_BYTES_MAX + 3 * (MAX_MESSAGE_BYTES + 8);

async function openStore(): Promise<MemoryStoreEnv> {
  return await openMemoryStore({
    flushDiskType: "SYNC_FLUSH",
    maxMessageSize: MAX_MESSAGE_BYTES,
    unflushedBytesMax: UNFLUSHED_BYTES_MAX,
    flushConsumeQueueThoroughInterval: 0,
  });
}

/** Puts messages of 600-800 bytes round-robin over the queues until the log passes `offset`. */
async function putUntil(store: MessageStore, offset: number, from: number): Promise<number> {
  let i = from;
  while (store.maxOffset < offset) {
    const r = await store.putMessage({
      topic: TOPIC,
      queueId: i % QUEUES,
      body: body(600 + (i * 37) % 200, i),
      properties: { KEYS: `k${i}` },
    });
    assert.equal(r.status, "PUT_OK");
    i++;
  }
  return i;
}

/** Writes the checkpoint (a thorough consume-queue flush) and waits until it holds the log end. */
async function checkpointNow(env: MemoryStoreEnv): Promise<number> {
  await env.store.whenDispatched(env.store.maxOffset);
  env.clock.advance(1_000);
  for (let turn = 0; turn < 10_000; turn++) {
    const checkpoint = await StoreCheckpoint.load(env.port, `${env.directory}/checkpoint`);
    if (checkpoint.commitLogOffset >= env.store.maxOffset) return checkpoint.commitLogOffset;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`the checkpoint never reached ${env.store.maxOffset}`);
}

/**
 * A store a little past its first segment, checkpointed at its end, then
 * crashed: `i` messages, the log ending at `cut` (no bytes past it yet).
 */
async function crashedPastSegment(): Promise<{ env: MemoryStoreEnv; i: number; cut: number }> {
  const env = await openStore();
  const i = await putUntil(env.store, SEGMENT_BYTES + 0x800, 0);
  await checkpointNow(env);
  const cut = env.store.maxOffset;
  await settle();
  env.port.crash();
  return { env, i, cut };
}

/** Every queue read whole: `count` messages, queue offsets contiguous. */
async function assertServed(store: MessageStore, count: number): Promise<void> {
  let served = 0;
  for (let queueId = 0; queueId < QUEUES; queueId++) {
    let next = 0;
    for (let round = 0; round < 1_000; round++) {
      const page = await store.getMessages(TOPIC, queueId, next, 32);
      if (page.status !== "FOUND") break;
      for (const [i, message] of page.messages.entries()) {
        assert.equal(message.queueOffset, next + i);
      }
      served += page.messages.length;
      next = page.nextQueueOffset;
    }
    assert.equal(next, store.nextQueueOffset(TOPIC, queueId));
  }
  assert.equal(served, count);
}

function segmentPath(env: MemoryStoreEnv, offset: number): string {
  const start = offset - offset % SEGMENT_BYTES;
  return `${env.directory}/commitlog/${String(start).padStart(20, "0")}`;
}

async function writeAt(env: MemoryStoreEnv, offset: number, bytes: Uint8Array): Promise<void> {
  const file = await env.port.openFile(segmentPath(env, offset));
  await file.write(bytes, offset % SEGMENT_BYTES);
  await file.datasync();
  await file.close();
}

async function byteAt(env: MemoryStoreEnv, offset: number): Promise<number> {
  return (await env.port.readFile(segmentPath(env, offset)))![offset % SEGMENT_BYTES]!;
}

/** Replaces mqstore's blocks of the checkpoint with zeros, as RocketMQ writes it. */
async function eraseMqstoreBlocks(env: MemoryStoreEnv, from: number, to: number): Promise<void> {
  const path = `${env.directory}/checkpoint`;
  const bytes = (await env.port.readFile(path))!;
  bytes.fill(0, from, to);
  await env.port.writeFileAtomic(path, bytes);
}

/**
 * `env.port`, whose commit-log files list data (`dataRanges`) up to
 * `listedEnd`, a position in the segment, and record in `asked` each
 * position a listing was asked from.
 */
function listingPort(env: MemoryStoreEnv, listedEnd: number, asked: number[]): RuntimePort {
  const listing = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "dataRanges" && target.path.includes("/commitlog/")) {
          return (position: number, length: number) => {
            asked.push(position);
            const end = Math.min(position + length, listedEnd);
            return end > position ? [{ position, length: end - position }] : [];
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  return new Proxy(env.port, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (key === "openFile" || key === "createFile") {
        return async (...args: unknown[]) => listing(await value.apply(target, args));
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

describe("MessageStore unclean open cost", () => {
  test("MessageStore.open() after a crash verifies from the checkpoint's segment only", async () => {
    const env = await openStore();
    let i = await putUntil(env.store, 3.5 * SEGMENT_BYTES, 0);
    const checkpointed = await checkpointNow(env);
    i = await putUntil(env.store, 4.7 * SEGMENT_BYTES, i);
    const records = await readRecords(env.port, env.directory);
    const end = env.store.maxOffset;
    await settle();
    env.port.crash();
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal(again.recovery.endKind, "end");
      assert.equal(again.maxOffset, end);
      const segmentStart = checkpointed - checkpointed % SEGMENT_BYTES;
      assert.equal(segmentStart, 3 * SEGMENT_BYTES);
      // Walked: the records of the checkpoint's segment and after, no more.
      const walked = records.filter((r) => r.offset >= segmentStart).length;
      assert.equal(again.recovery.messageCount, walked);
      assert.ok(walked < records.length / 2, `${walked} of ${records.length}`);
      await assertServed(again, i);
      const r = await again.putMessage({ topic: TOPIC, queueId: 0, body: body(10) });
      assert.equal(r.appendResult?.queueOffset, Math.ceil(i / QUEUES));
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() after a crash cuts and zeroes a torn tail past the checkpoint", async () => {
    const env = await openStore();
    let i = await putUntil(env.store, 2.5 * SEGMENT_BYTES, 0);
    const checkpointed = await checkpointNow(env);
    i = await putUntil(env.store, checkpointed + 0x2000, i);
    const records = await readRecords(env.port, env.directory);
    const end = env.store.maxOffset;
    await settle();
    env.port.crash();
    // A torn record past the checkpoint (zeros in its body), intact ones
    // after it (a later page kept, an earlier one lost).
    const victimIndex = records.findIndex((r) => r.offset >= checkpointed) + 2;
    const victim = records[victimIndex]!;
    await writeAt(env, victim.offset + 200, new Uint8Array(20));
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.endKind, "invalid");
      assert.match(again.recovery.detail, /CRC/);
      assert.equal(again.maxOffset, victim.offset);
      const segmentStart = checkpointed - checkpointed % SEGMENT_BYTES;
      assert.equal(
        again.recovery.messageCount,
        records.filter((r) => r.offset >= segmentStart && r.offset < victim.offset).length,
      );
      const bytes = (await env.port.readFile(segmentPath(env, victim.offset)))!;
      const from = victim.offset % SEGMENT_BYTES;
      assert.ok(bytes.subarray(from, from + (end - victim.offset)).every((b) => b === 0));
      await assertServed(again, victimIndex);
    } finally {
      await again.close();
    }
  });

  const tailCases = [
    { name: "only within the writer's bounds", erase: false, near: 0x100, far: true },
    {
      name: "through the whole tail when they reach the guard",
      erase: false,
      near: STALE_BYTES_MAX - 0x10,
      far: false,
    },
    {
      name: "through the whole tail when the checkpoint lacks them",
      erase: true,
      near: 0x100,
      far: false,
    },
  ];
  for (const { name, erase, near, far } of tailCases) {
    test(`MessageStore.open() after a crash looks for stale bytes ${name}`, async () => {
      const { env, i, cut } = await crashedPastSegment();
      const farOffset = cut + STALE_BYTES_MAX + 0x2000;
      assert.ok(farOffset % SEGMENT_BYTES > cut % SEGMENT_BYTES, "in the cut's segment");
      await writeAt(env, cut + near, new Uint8Array([0xA5]));
      await writeAt(env, farOffset, new Uint8Array([0x5A]));
      if (erase) await eraseMqstoreBlocks(env, CHECKPOINT_BOUNDS_POSITION, CHECKPOINT_BOUNDS_END);
      const again = await env.reopen();
      try {
        assert.equal(again.recovery.endKind, "invalid");
        assert.equal(again.maxOffset, cut);
        assert.equal(await byteAt(env, cut + near), 0);
        // Past the bounds nothing was read, so nothing was zeroed.
        assert.equal(await byteAt(env, farOffset), far ? 0x5A : 0);
        await assertServed(again, i);
      } finally {
        await again.close();
      }
    });
  }

  test("MessageStore.open() after a crash reads only the tail the file system lists as data", async () => {
    const { env, i, cut } = await crashedPastSegment();
    const near = cut + 0x100;
    const far = cut + STALE_BYTES_MAX + 0x2000;
    await writeAt(env, near, new Uint8Array([0xA5]));
    await writeAt(env, far, new Uint8Array([0x5A]));
    // No bounds: the whole tail would be read...
    await eraseMqstoreBlocks(env, CHECKPOINT_BOUNDS_POSITION, CHECKPOINT_BOUNDS_END);
    // ...but the file system lists data up to a page past the near byte
    // only (the far byte is planted where a real one would list a hole,
    // to show it is not read).
    const asked: number[] = [];
    const again = await env.reopen({
      port: listingPort(env, near % SEGMENT_BYTES + 0x1000, asked),
    });
    try {
      assert.equal(again.recovery.endKind, "invalid");
      assert.equal(again.maxOffset, cut);
      assert.deepEqual(asked, [cut % SEGMENT_BYTES]);
      assert.equal(await byteAt(env, near), 0);
      assert.equal(await byteAt(env, far), 0x5A);
      await assertServed(again, i);
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open({ readOnly }) after a crash ends at the cut, looks for no stale bytes, changes nothing", async () => {
    const { env, i, cut } = await crashedPastSegment();
    const near = cut + 0x100;
    await writeAt(env, near, new Uint8Array([0xA5]));
    // Without bounds a writer reads the whole tail.
    await eraseMqstoreBlocks(env, CHECKPOINT_BOUNDS_POSITION, CHECKPOINT_BOUNDS_END);
    const segments = await env.port.list(`${env.directory}/commitlog`);
    assert.ok(segments.length > 2, "the writer had made a segment ahead");
    const asked: number[] = [];
    const reader = await env.reopen({
      port: listingPort(env, SEGMENT_BYTES, asked),
      readOnly: true,
    });
    try {
      assert.deepEqual(asked, []);
      assert.equal(reader.recovery.endKind, "end");
      // The segment made ahead is past the end, not part of the log.
      assert.equal(reader.maxOffset, cut);
      await assertServed(reader, i);
    } finally {
      await reader.close();
    }
    assert.equal(await byteAt(env, near), 0xA5);
    assert.deepEqual(await env.port.list(`${env.directory}/commitlog`), segments);
    // The next writer finds the stale byte and zeroes it.
    const writer = await env.reopen();
    try {
      assert.equal(writer.recovery.endKind, "invalid");
      assert.equal(writer.maxOffset, cut);
      assert.equal(await byteAt(env, near), 0);
    } finally {
      await writer.close();
    }
  });

  /** The `abort` marker as a process of the port's current boot writes it. */
  async function markerOfThisBoot(env: MemoryStoreEnv): Promise<Uint8Array> {
    return new TextEncoder().encode(`boot ${await env.port.bootId()}\n`);
  }

  const bootCases = [
    { name: "of a process of this boot looks for stale bytes within one put", sameBoot: true },
    { name: "left by RocketMQ (an empty marker) looks as far as a power loss", sameBoot: false },
  ];
  for (const { name, sameBoot } of bootCases) {
    test(`MessageStore.open() after a crash ${name}`, async () => {
      const { env, i, cut } = await crashedPastSegment();
      // The marker the crashed process left: naming this boot (a process
      // death, the page cache kept), or empty.
      await env.port.writeFileAtomic(
        `${env.directory}/abort`,
        sameBoot ? await markerOfThisBoot(env) : new Uint8Array(0),
      );
      // A torn put right at the cut, and a byte past any put's reach but
      // within a power loss's.
      const put = MAX_MESSAGE_BYTES + 8;
      const near = cut + 0x10;
      const far = cut + 2 * put + 0x100;
      assert.ok(far < cut + STALE_BYTES_MAX - put && far % SEGMENT_BYTES > cut % SEGMENT_BYTES);
      await writeAt(env, near, new Uint8Array([0xA5]));
      await writeAt(env, far, new Uint8Array([0x5A]));
      const again = await env.reopen();
      try {
        assert.equal(again.recovery.clean, false);
        assert.equal(again.recovery.sameBoot, sameBoot);
        assert.equal(again.recovery.endKind, "invalid");
        assert.equal(again.maxOffset, cut);
        assert.equal(await byteAt(env, near), 0);
        // Only the search after a power loss reaches the far byte.
        assert.equal(await byteAt(env, far), sameBoot ? 0x5A : 0);
        await assertServed(again, i);
        // Either way the store is marked with this boot once recovered.
        assert.deepEqual(
          await env.port.readFile(`${env.directory}/abort`),
          await markerOfThisBoot(env),
        );
      } finally {
        await again.close();
      }
    });
  }

  test("MessageStore.open() marks a store with its boot, and a reboot is not the same boot", async () => {
    const env = await openStore();
    const marker = await markerOfThisBoot(env);
    assert.deepEqual(await env.port.readFile(`${env.directory}/abort`), marker);
    assert.equal(env.store.recovery.sameBoot, false);
    const i = await putUntil(env.store, SEGMENT_BYTES / 2, 0);
    await settle();
    env.port.crash();
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal(again.recovery.sameBoot, false);
      const now = await markerOfThisBoot(env);
      assert.notDeepEqual(now, marker);
      assert.deepEqual(await env.port.readFile(`${env.directory}/abort`), now);
      await assertServed(again, i);
    } finally {
      await again.close();
    }
    assert.equal(await env.port.readFile(`${env.directory}/abort`), undefined);
  });

  test("MessageStore.open() after a crash walks every record when the checkpoint has no mqstore offsets", async () => {
    const env = await openStore();
    const i = await putUntil(env.store, 3.5 * SEGMENT_BYTES, 0);
    await checkpointNow(env);
    const records = await readRecords(env.port, env.directory);
    await settle();
    env.port.crash();
    await eraseMqstoreBlocks(env, CHECKPOINT_EXTENSION_POSITION, CHECKPOINT_BOUNDS_END);
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal(again.recovery.messageCount, records.length);
      await assertServed(again, i);
      // Open wrote mqstore's blocks back.
      const checkpoint = await StoreCheckpoint.load(env.port, `${env.directory}/checkpoint`);
      assert.equal(checkpoint.commitLogOffset, again.maxOffset);
      assert.equal(checkpoint.unflushedBytesMax, UNFLUSHED_BYTES_MAX);
      assert.equal(checkpoint.putBytesMax, MAX_MESSAGE_BYTES);
    } finally {
      await again.close();
    }
  });
});

/** A page of the file, and the smallest unit a power loss takes (tornTailOf). */
const PAGE_BYTES = 0x1000;
const SECTOR_BYTES = 0x200;

/** The last `unit` boundary before `end` (the one whose unit holds the record's last byte). */
function lastBoundary(end: number, unit: number): number {
  return (end - 1) - (end - 1) % unit;
}

/** A record put by {@link putUntilPlaced}; `i` counts the messages put so far. */
interface Placed {
  i: number;
  offset: number;
  end: number;
  /** Where the value of property P starts. */
  valueStart: number;
}

/**
 * Puts messages with property P = `value` (bodies of varying sizes) until
 * `placed` accepts where one landed; that record then ends the log.
 */
async function putUntilPlaced(
  store: MessageStore,
  from: number,
  value: string,
  placed: (record: Placed) => boolean,
): Promise<Placed> {
  const valueBytes = new TextEncoder().encode(value).length;
  for (let i = from; i < from + 400; i++) {
    const r = await store.putMessage({
      topic: TOPIC,
      queueId: i % QUEUES,
      body: body(100 + (i * 37) % 200, i),
      properties: { P: value },
    });
    assert.equal(r.status, "PUT_OK");
    const offset = r.appendResult!.wroteOffset;
    const end = offset + r.appendResult!.wroteBytes;
    const record = { i: i + 1, offset, end, valueStart: end - valueBytes };
    if (placed(record)) return record;
  }
  throw new Error("no record landed as asked");
}

/** A store with a few messages, checkpointed at its end; `before` messages were put. */
async function checkpointedStore(): Promise<{ env: MemoryStoreEnv; before: number }> {
  const env = await openStore();
  const before = await putUntil(env.store, 0x3000, 0);
  await checkpointNow(env);
  return { env, before };
}

/** The value of property P of the last message of queue `queueId`. */
async function lastValue(store: MessageStore, queueId: number): Promise<string | undefined> {
  const page = await store.getMessages(
    TOPIC,
    queueId,
    store.getMaxQueueOffset(TOPIC, queueId) - 1,
    1,
  );
  return page.messages[0]?.properties.get("P");
}

describe("MessageStore unclean open: torn tails", () => {
  for (const [unitName, unit] of [["page", PAGE_BYTES], ["sector", SECTOR_BYTES]] as const) {
    test(`MessageStore.open() after a crash cuts a record whose properties lost their last ${unitName}`, async () => {
      const { env, before } = await checkpointedStore();
      // A boundary inside the value, past its first character: the
      // properties read as well-formed with everything after it lost.
      const victim = await putUntilPlaced(env.store, before, "v".repeat(600), (r) => {
        const boundary = lastBoundary(r.end, unit);
        return boundary > r.valueStart && boundary < r.end - 1;
      });
      const boundary = lastBoundary(victim.end, unit);
      assert.equal(env.store.maxOffset, victim.end);
      await settle();
      env.port.crash();
      await writeAt(env, boundary, new Uint8Array(unit));
      const again = await env.reopen();
      try {
        assert.equal(again.recovery.endKind, "invalid");
        assert.match(again.recovery.detail, /PROPERTIES_MALFORMED/);
        assert.match(again.recovery.detail, new RegExp(`zeros from offset ${boundary}`));
        assert.equal(again.maxOffset, victim.offset);
        // Every message before it, and the torn bytes zeroed.
        await assertServed(again, victim.i - 1);
        const bytes = (await env.port.readFile(segmentPath(env, victim.offset)))!;
        const from = victim.offset % SEGMENT_BYTES;
        assert.ok(bytes.subarray(from, from + (victim.end - victim.offset)).every((b) => b === 0));
      } finally {
        await again.close();
      }
    });
  }

  const keptCases = [
    {
      name: "a last record whole",
      value: "v".repeat(600),
      placed: (r: Placed) => lastBoundary(r.end, SECTOR_BYTES) > r.valueStart,
    },
    {
      // NULs are legal in a value; these do not reach back to a sector boundary.
      name: "a last record whose value ends in NULs within a sector",
      value: "v".repeat(601) + "\u0000".repeat(7),
      placed: (r: Placed) => lastBoundary(r.end, SECTOR_BYTES) < r.end - 7,
    },
  ];
  for (const { name, value, placed } of keptCases) {
    test(`MessageStore.open() after a crash keeps ${name}`, async () => {
      const { env, before } = await checkpointedStore();
      const last = await putUntilPlaced(env.store, before, value, placed);
      await settle();
      env.port.crash();
      const again = await env.reopen();
      try {
        assert.equal(again.recovery.clean, false);
        assert.equal(again.recovery.endKind, "end");
        assert.equal(again.maxOffset, last.end);
        await assertServed(again, last.i);
        assert.equal(await lastValue(again, (last.i - 1) % QUEUES), value);
      } finally {
        await again.close();
      }
    });
  }

  // A value ending in NULs across a sector boundary: a clean open keeps it
  // (the rule is for crashes only), and so does any open when records follow.
  const nulCases = [
    { name: "a last record", crash: false, after: 0 },
    { name: "a record followed by others", crash: false, after: 2 },
    { name: "a record followed by others", crash: true, after: 2 },
  ];
  for (const { name, crash, after } of nulCases) {
    test(`MessageStore.open() ${crash ? "after a crash" : "after a close"} keeps ${name} whose value ends in NULs across a sector boundary`, async () => {
      const { env, before } = await checkpointedStore();
      const value = "z" + "\u0000".repeat(600);
      const nuls = await putUntilPlaced(
        env.store,
        before,
        value,
        (r) => r.end % SECTOR_BYTES !== 0,
      );
      let i = nuls.i;
      for (; i < nuls.i + after; i++) {
        const r = await env.store.putMessage({
          topic: TOPIC,
          queueId: i % QUEUES,
          body: body(50, i),
        });
        assert.equal(r.status, "PUT_OK");
      }
      const end = env.store.maxOffset;
      if (crash) {
        await settle();
        env.port.crash();
      } else {
        await env.store.close();
      }
      const again = await env.reopen();
      try {
        assert.equal(again.recovery.clean, !crash);
        assert.equal(again.recovery.endKind, "end");
        assert.equal(again.maxOffset, end);
        await assertServed(again, i);
        const queueId = (nuls.i - 1) % QUEUES;
        const page = await again.getMessages(TOPIC, queueId, 0, 1_000);
        const stored = page.messages.find((m) => m.physicalOffset === nuls.offset);
        assert.equal(stored?.properties.get("P"), value);
      } finally {
        await again.close();
      }
    });
  }
});

describe("MessageStore unclean open: the checkpoint after a cut", () => {
  const cases = [
    { name: "all its points", keepLogPoint: false },
    // As under ASYNC_FLUSH, where dispatch runs ahead of the log's flush.
    { name: "the consume-queue and index points", keepLogPoint: true },
  ];
  for (const { name, keepLogPoint } of cases) {
    test(`MessageStore.open() after a crash that cut the log lowers ${name} before the first put`, async () => {
      const env = await openStore();
      await putUntil(env.store, 2.5 * SEGMENT_BYTES, 0);
      const checkpointed = await checkpointNow(env);
      const path = `${env.directory}/checkpoint`;
      const loaded = await StoreCheckpoint.load(env.port, path);
      assert.equal(loaded.consumeQueueOffset, checkpointed);
      assert.equal(loaded.indexOffset, checkpointed);
      const records = await readRecords(env.port, env.directory);
      await settle();
      env.port.crash();
      // A power loss took the last records (pages the checkpoint had counted).
      const victimIndex = records.length - 5;
      const victim = records[victimIndex]!;
      assert.equal(segmentPath(env, victim.offset), segmentPath(env, checkpointed - 1));
      await writeAt(env, victim.offset, new Uint8Array(checkpointed - victim.offset));
      if (keepLogPoint) {
        loaded.commitLogOffset = victim.offset;
        await loaded.flush();
      }
      const again = await env.reopen();
      let next = victimIndex;
      try {
        assert.equal(again.maxOffset, victim.offset);
        const checkpoint = await StoreCheckpoint.load(env.port, path);
        assert.equal(checkpoint.commitLogOffset, victim.offset);
        assert.equal(checkpoint.consumeQueueOffset, victim.offset);
        assert.equal(checkpoint.indexOffset, victim.offset);
        await assertServed(again, victimIndex);
        // New records where the lost ones were, below the old points; then
        // a second crash tears the last one (a page of its body lost).
        next = await putUntil(again, victim.offset + 0x800, victimIndex);
        assert.ok(again.maxOffset < checkpointed);
        await settle();
        env.port.crash();
      } catch (error) {
        await again.close();
        throw error;
      }
      const last = (await readRecords(env.port, env.directory)).at(-1)!;
      await writeAt(env, last.offset + 200, new Uint8Array(20));
      const third = await env.reopen();
      try {
        assert.equal(third.recovery.clean, false);
        // Verified with its CRC, not trusted below the old commit-log point.
        assert.equal(third.recovery.endKind, "invalid");
        assert.match(third.recovery.detail, /CRC/);
        assert.equal(third.maxOffset, last.offset);
        await assertServed(third, next - 1);
      } finally {
        await third.close();
      }
    });
  }
});

describe("tornTailOf", () => {
  test("tornTailOf() finds the lost tail at any file position of the scanned bytes", () => {
    const record = encodeMessage({
      topic: TOPIC,
      queueId: 0,
      body: body(40),
      properties: { P: "v".repeat(700) },
    });
    for (const base of [0, 300, 0x1000 - 17]) {
      const bytes = new Uint8Array(0x1000);
      const at = 100;
      bytes.set(record, at);
      const view = checkRecord(bytes, at);
      assert.equal(view.kind, "message");
      const end = view.propertiesPosition + view.propertiesLength;
      // The last sector boundary (in the file) inside the properties.
      const boundary = (end - 1) - (base + end - 1) % SECTOR_BYTES;
      assert.ok(boundary > view.propertiesPosition + 2, `base ${base}`);
      assert.equal(tornTailOf(bytes, view, base), -1, `base ${base}: whole`);
      bytes.fill(0, boundary);
      assert.equal(tornTailOf(bytes, view, base), boundary, `base ${base}: torn`);
      // Lost from one sector earlier: the first lost sector is reported.
      if (boundary - SECTOR_BYTES > view.propertiesPosition) {
        bytes.fill(0, boundary - SECTOR_BYTES);
        assert.equal(tornTailOf(bytes, view, base), boundary - SECTOR_BYTES, `base ${base}`);
      }
      // A byte written after the record in the same sector: not a lost tail.
      if (end < Math.min(boundary + SECTOR_BYTES, bytes.length)) {
        bytes[end] = 1;
        assert.equal(tornTailOf(bytes, view, base), -1, `base ${base}: data after it`);
      }
    }
  });
});
