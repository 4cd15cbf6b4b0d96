/**
 * The crash matrix (memory adapter): a store is crashed at chosen points —
 * mid-append, after append before flush, mid-flush, mid-segment-roll,
 * mid-dispatch, mid-checkpoint write — in both crash modes (every unflushed
 * page lost; each dirty page kept or lost by a seed), over many seeds, then
 * reopened. After every crash: no acknowledged-and-flushed message is
 * lost, none is served twice, no corrupt record is served, queue offsets
 * are contiguous, and new puts are accepted.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { bodyCrc } from "../src/record/mod.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import {
  body,
  gatedPort,
  killablePort,
  openMemoryStore,
  SEGMENT_BYTES,
  settle,
  waitForSegments,
} from "./_store_helpers.ts";

const TOPIC = "C";
const QUEUES = 3;

type CrashPoint =
  | "mid-append"
  | "after-append-before-flush"
  | "mid-flush"
  | "mid-segment-roll"
  | "mid-dispatch"
  | "mid-checkpoint";

const POINTS: readonly CrashPoint[] = [
  "mid-append",
  "after-append-before-flush",
  "mid-flush",
  "mid-segment-roll",
  "mid-dispatch",
  "mid-checkpoint",
];

/** Seeds per point and crash mode (`MQSTORE_CRASH_MATRIX_SEEDS` for more). */
const SEEDS_DEFAULT = 6;

function seedCount(): number {
  const raw = process.env.MQSTORE_CRASH_MATRIX_SEEDS;
  const parsed = raw === undefined ? NaN : Number.parseInt(raw, 10);
  return Number.isSafeInteger(parsed) && parsed > 0 ? parsed : SEEDS_DEFAULT;
}

/** A put the store acknowledged. */
interface Acked {
  offset: number;
  end: number;
  queueId: number;
  queueOffset: number;
  bodySeed: number;
  length: number;
}

function random(seed: number): () => number {
  let x = seed * 0x9E37_79B9 | 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 0x1_0000_0000;
  };
}

/**
 * Wraps a port so that the next `writeFileAtomic` of the checkpoint, once
 * armed, leaves a half-written temporary file and calls `onCrash` instead.
 */
function checkpointTrap(inner: RuntimePort): {
  port: RuntimePort;
  arm(onCrash: () => void): void;
  readonly fired: boolean;
} {
  let armed: (() => void) | undefined;
  let fired = false;
  const port = new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "writeFileAtomic") {
        return async (path: string, bytes: Uint8Array) => {
          if (armed !== undefined && path.endsWith("/checkpoint")) {
            const crash = armed;
            armed = undefined;
            const handle = await target.createFile(`${path}.tmp`, bytes.length, { sparse: true });
            await handle.write(bytes.subarray(0, bytes.length >> 1), 0);
            fired = true;
            crash();
            throw new Error("crashed while writing the checkpoint");
          }
          return value.apply(target, [path, bytes]);
        };
      }
      return value.bind(target);
    },
  });
  return {
    port,
    arm: (onCrash) => {
      armed = onCrash;
    },
    get fired() {
      return fired;
    },
  };
}

/** Reads every queue whole and checks what the invariants need. */
/**
 * Every queue read whole: contiguous offsets, no record twice, and each
 * record served exactly one of the puts (its KEYS name the put, whose
 * body and TAGS it must have: a torn tail is caught whatever field it
 * hits); every acknowledged put among them.
 */
async function checkServed(
  store: MessageStore,
  acked: readonly Acked[],
  seed: number,
  label: string,
) {
  const served = new Set<number>();
  for (let queueId = 0; queueId < QUEUES; queueId++) {
    let next = store.getMinQueueOffset(TOPIC, queueId);
    assert.equal(next, 0, `${label}: queue ${queueId} min`);
    for (let round = 0; round < 10_000; round++) {
      const page = await store.getMessages(TOPIC, queueId, next, 32);
      if (page.status !== "FOUND") {
        assert.equal(page.status, next === 0 ? "NO_MESSAGE_IN_QUEUE" : "OFFSET_OVERFLOW_ONE");
        break;
      }
      for (const [i, message] of page.messages.entries()) {
        assert.equal(message.queueOffset, next + i, `${label}: queue ${queueId} contiguous`);
        assert.equal(message.queueId, queueId);
        assert.ok(!served.has(message.physicalOffset), `${label}: ${message.physicalOffset} twice`);
        served.add(message.physicalOffset);
        assert.equal(bodyCrc(message.body), message.bodyCRC, `${label}: corrupt record served`);
        const keys = message.properties.get("KEYS") ?? "";
        assert.match(keys, /^k[0-9]+$/, `${label}: KEYS of ${message.physicalOffset}`);
        const index = Number(keys.slice(1));
        assert.equal(message.properties.get("TAGS"), `t${index % 4}`, `${label}: TAGS of ${keys}`);
        assert.equal(message.queueId, index % QUEUES, `${label}: queue of ${keys}`);
        assert.deepEqual(
          message.body,
          body(message.body.length, seed * 100_000 + index),
          `${label}: body of ${keys}`,
        );
      }
      next = page.nextQueueOffset;
    }
    assert.equal(next, store.getMaxQueueOffset(TOPIC, queueId));
    assert.equal(store.nextQueueOffset(TOPIC, queueId), next, `${label}: next queue offset`);
  }
  for (const put of acked) {
    assert.ok(served.has(put.offset), `${label}: acknowledged put at ${put.offset} lost`);
    const message = await store.getMessage(put.offset);
    assert.deepEqual(
      message?.body,
      body(put.length, put.bodySeed),
      `${label}: body at ${put.offset}`,
    );
    assert.equal(message?.queueOffset, put.queueOffset);
    assert.equal(message?.queueId, put.queueId);
  }
  return served.size;
}

async function scenario(point: CrashPoint, seed: number, seeded: boolean): Promise<number> {
  const label = `${point} seed ${seed}${seeded ? " (torn pages)" : ""}`;
  const rng = random(seed * 31 + POINTS.indexOf(point));
  const memory = new MemoryPort(runtimeName());
  const killable = killablePort(memory);
  const gate = gatedPort(killable.port);
  const trap = checkpointTrap(gate.port);
  const async = point === "after-append-before-flush";
  const options: MessageStoreOptions = {
    port: trap.port,
    flushDiskType: async ? "ASYNC_FLUSH" : "SYNC_FLUSH",
    flushIntervalCommitLog: 1_000,
    flushCommitLogLeastPages: 0,
    mappedFileSizeConsumeQueue: 20 * 32,
    flushIntervalConsumeQueue: 1_000,
    flushConsumeQueueLeastPages: 0,
    flushConsumeQueueThoroughInterval: point === "mid-checkpoint" ? 0 : 60_000,
    maxHashSlotNum: 16,
    maxIndexNum: 64,
    maxMessageSize: 0x1000,
  };
  const env = await openMemoryStore(options, memory);
  const store = env.store;
  const acked: Acked[] = [];
  let crashed = false;
  const crash = () => {
    if (crashed) return;
    crashed = true;
    killable.kill();
    if (seeded) memory.crash({ seed, keepProbability: 0.5 });
    else memory.crash();
  };
  let putCount = 0;
  const put = async (length = 50 + Math.floor(rng() * 1500)) => {
    const index = putCount++;
    const queueId = index % QUEUES;
    const bodySeed = seed * 100_000 + index;
    let r;
    try {
      r = await store.putMessage({
        topic: TOPIC,
        queueId,
        body: body(length, bodySeed),
        properties: { KEYS: `k${index}`, TAGS: `t${index % 4}` },
      });
    } catch {
      return; // the crashed store's port failed under it
    }
    if (crashed || r.status !== "PUT_OK") return;
    const a = r.appendResult!;
    acked.push({
      offset: a.wroteOffset,
      end: a.wroteOffset + a.wroteBytes,
      queueId,
      queueOffset: a.queueOffset,
      bodySeed,
      length,
    });
  };
  const warmup = 10 + Math.floor(rng() * 60);
  for (let i = 0; i < warmup; i++) await put();
  // Let the dispatcher and the consume-queue flusher run now and then.
  env.clock.advance(1_000);
  await settle();
  let flushedAtCrash = Number.MAX_SAFE_INTEGER;
  // The segment allocated ahead is ready before the crash: a crash in the
  // allocator's own creation is the segment layer's matter (and its
  // leftovers are covered by the recovery tests).
  const allocatorIdle = async () => {
    await waitForSegments(memory, env.directory, Math.floor(store.maxOffset / SEGMENT_BYTES) + 2);
  };
  switch (point) {
    case "mid-append": {
      // Room for every put in flight: the crash hits appends, not a roll.
      while (store.maxOffset % SEGMENT_BYTES > SEGMENT_BYTES - 20 * 300) await put(1500);
      await allocatorIdle();
      const inFlight = Array.from({ length: 20 }, () => put(50 + Math.floor(rng() * 200)));
      await Promise.race(inFlight);
      crash();
      await Promise.allSettled(inFlight);
      break;
    }
    case "after-append-before-flush": {
      for (let i = 0; i < 20; i++) await put();
      await store.whenFlushed(acked[Math.floor(acked.length / 2)]!.end);
      for (let i = 0; i < 20; i++) await put();
      await allocatorIdle();
      flushedAtCrash = store.flushedOffset;
      crash();
      break;
    }
    case "mid-flush": {
      await allocatorIdle();
      gate.hold();
      const inFlight = Array.from({ length: 10 }, () => put());
      await settle();
      crash();
      gate.release();
      await Promise.allSettled(inFlight);
      break;
    }
    case "mid-segment-roll": {
      const segments = Math.floor(store.maxOffset / SEGMENT_BYTES) + 1;
      await waitForSegments(memory, env.directory, segments + 1);
      while (store.maxOffset % SEGMENT_BYTES < SEGMENT_BYTES - 0x1000) await put(1500);
      // This one does not fit: BLANK, then the next segment.
      const rolling = put(0xC00);
      const more = put(100);
      await Promise.resolve();
      crash();
      await Promise.allSettled([rolling, more]);
      break;
    }
    case "mid-dispatch": {
      for (let i = 0; i < 30; i++) await put();
      await allocatorIdle();
      // A consume-queue flush in progress when the crash comes.
      env.clock.advance(1_000);
      crash();
      break;
    }
    case "mid-checkpoint": {
      for (let i = 0; i < 20; i++) await put();
      await store.whenDispatched(store.maxOffset);
      await allocatorIdle();
      trap.arm(crash);
      env.clock.advance(1_000);
      for (let turn = 0; turn < 10_000 && !crashed; turn++) await settle();
      assert.ok(trap.fired, `${label}: the checkpoint write was reached`);
      break;
    }
  }
  crash();
  await settle();
  const durable = acked.filter((a) => a.end <= flushedAtCrash);
  const again = await env.reopen({ port: memory });
  try {
    const served = await checkServed(again, durable, seed, label);
    // New puts are accepted and continue every queue.
    for (let queueId = 0; queueId < QUEUES; queueId++) {
      const next = again.nextQueueOffset(TOPIC, queueId);
      const r = await again.putMessage({ topic: TOPIC, queueId, body: body(10, queueId) });
      assert.equal(r.status, "PUT_OK", label);
      assert.equal(r.appendResult!.queueOffset, next, label);
    }
    await again.whenDispatched(again.maxOffset);
    const page = await again.getMessages(TOPIC, 0, again.getMaxQueueOffset(TOPIC, 0) - 1, 1);
    assert.equal(page.status, "FOUND", label);
    return served;
  } finally {
    await again.close();
  }
}

describe("crash matrix", () => {
  for (const point of POINTS) {
    test(`MessageStore.open() after a crash ${point} keeps every flushed put, once, in order`, async () => {
      let served = 0;
      const seeds = seedCount();
      for (let seed = 1; seed <= seeds; seed++) {
        served += await scenario(point, seed, false);
        served += await scenario(point, seed, true);
      }
      // Enough messages were at stake for the checks to mean something.
      assert.ok(served >= seeds * 2 * 10, `only ${served} messages served`);
    });
  }
});
