/**
 * GroupCommitService with two flushes in flight (SYNC_FLUSH segments with
 * positional writes): answers in the order the flushes began and never
 * ahead of durability, a failed flush beside another, FLUSH_DISK_TIMEOUT,
 * close while both run, the lone producer flushed on the thread, and
 * read-your-write after PUT_OK. Each flush of the commit log is held
 * until the test releases (or fails) it, one by one.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { availableAdapters, createPort, MemoryPort } from "../src/runtime/mod.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { GroupCommitService } from "../src/commit_log/group_commit_service.ts";
import type { PutMessageResult } from "../src/commit_log/put_message_result.ts";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { StoreStats } from "../src/commit_log/store_stats.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { body, commitLogHandlesPort, SEGMENT_BYTES } from "./_store_helpers.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";

const nativeAdapter = availableAdapters().find((a) => a !== "portable" && a !== "memory");

/** One held `fdatasync`: it runs (and resolves) or fails when the test says. */
interface HeldFlush {
  release(): void;
  fail(error: Error): void;
}

/**
 * Wraps `inner` so that, once `holding.on` is set, every `fdatasync` of a
 * path containing `/commitlog/` waits in `held` until released;
 * `datasyncSync` is hidden (it cannot be held).
 */
function holdingPort(inner: RuntimePort): {
  port: RuntimePort;
  held: HeldFlush[];
  holding: { on: boolean };
} {
  const held: HeldFlush[] = [];
  const holding = { on: false };
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "datasyncSync") return undefined;
        if (key === "datasync" && holding.on) {
          return () =>
            new Promise<void>((resolve, reject) => {
              held.push({
                release: () =>
                  (value as () => Promise<void>).apply(target, []).then(resolve, reject),
                fail: reject,
              });
            });
        }
        return value.bind(target);
      },
    });
  const port = commitLogHandlesPort(inner, wrapHandle);
  return { port, held, holding };
}

/** Lets microtasks and a few event-loop turns run. */
async function turns(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

interface Env {
  queue: MappedFileQueue;
  groupCommit: GroupCommitService;
  held: HeldFlush[];
  clock: ManualClock;
  errors: unknown[];
  /** Appends `bytes` (100 when not given) and asks for their flush. */
  put(bytes?: number): { end: number; answer: Promise<PutMessageResult> };
  /** Makes the load two producers: each flush then takes one put. */
  twoProducers(): Promise<void>;
}

async function open(
  splitMinBytes = 0,
  onFlushed: (flushedWhere: number) => void = () => {},
): Promise<Env> {
  const { port, held, holding } = holdingPort(new MemoryPort(runtimeName()));
  const clock = new ManualClock(1_000);
  const queue = new MappedFileQueue({
    port,
    directory: "/group/commitlog",
    fileSizeBytes: SEGMENT_BYTES,
    positionalWrites: true,
  });
  await queue.load();
  const errors: unknown[] = [];
  const groupCommit = new GroupCommitService({
    queue,
    clock,
    syncFlushTimeoutMs: 5_000,
    checkpoint: await StoreCheckpoint.load(port, "/group/checkpoint"),
    stats: new StoreStats(),
    onFlushed,
    onError: (error) => errors.push(error),
    // 0: two flushes in flight whatever the load (100-byte puts here).
    splitMinBytes,
  });
  const file = await queue.getOrCreateLastMappedFile(0);
  holding.on = true;
  const put = (bytes = 100) => {
    file.appendBytes(body(bytes));
    const end = queue.maxWrotePosition;
    return { end, answer: groupCommit.request(end, { status: "PUT_OK" }, clock.nowMs()) };
  };
  const twoProducers = async () => {
    const answers = [put().answer, put().answer];
    await turns();
    for (const flush of held.splice(0)) flush.release();
    for (const answer of answers) assert.equal((await answer).status, "PUT_OK");
  };
  return { queue, groupCommit, held, clock, errors, put, twoProducers };
}

/** Resolves to whether `promise` settled within a few turns. */
async function settledSoon(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(() => settled = true, () => settled = true);
  await turns();
  return settled;
}

describe("GroupCommitService, two flushes in flight", () => {
  test("GroupCommitService answers two flushes in flight in begin order, never ahead of durability", async () => {
    const env = await open();
    await env.twoProducers();
    const flushedBefore = env.queue.flushedWhere;
    const a = env.put();
    const b = env.put();
    const c = env.put();
    await turns();
    assert.equal(env.held.length, 2, "a second flush began beside the first, not a third");
    assert.equal(env.groupCommit.flushesInFlight, 2);
    const order: string[] = [];
    a.answer.then(() => order.push("a"));
    b.answer.then(() => order.push("b"));
    // The later flush returns first: it answers nobody until the earlier one is done.
    env.held[1]!.release();
    await turns();
    assert.deepEqual(order, []);
    assert.equal(env.queue.flushedWhere, flushedBefore);
    env.held[0]!.release();
    assert.equal((await a.answer).status, "PUT_OK");
    assert.equal((await b.answer).status, "PUT_OK");
    assert.deepEqual(order, ["a", "b"]);
    assert.ok(env.queue.flushedWhere >= b.end);
    assert.equal(await settledSoon(c.answer), false, "c waits for a flush of its own");
    assert.equal(env.held.length, 3);
    env.held[2]!.release();
    assert.equal((await c.answer).status, "PUT_OK");
    assert.equal(env.queue.flushedWhere, c.end);
    assert.deepEqual(env.errors, []);
    await env.groupCommit.close();
    await env.queue.close();
  });

  for (
    const { failing, first, answers } of [
      { failing: 1, first: 0, answers: ["PUT_OK", "UNKNOWN_ERROR"] },
      { failing: 1, first: 1, answers: ["PUT_OK", "UNKNOWN_ERROR"] },
      { failing: 0, first: 1, answers: ["UNKNOWN_ERROR", "UNKNOWN_ERROR"] },
    ]
  ) {
    test(`GroupCommitService answers ${answers.join(" and ")} when flush ${failing} of two fails (flush ${first} returns first)`, async () => {
      const env = await open();
      await env.twoProducers();
      const a = env.put();
      const b = env.put();
      await turns();
      assert.equal(env.held.length, 2);
      const settle = (index: number) => {
        if (index === failing) env.held[index]!.fail(new MqStoreError("IO_ERROR", "EIO"));
        else env.held[index]!.release();
      };
      settle(first);
      await turns();
      settle(1 - first);
      const results = [await a.answer, await b.answer];
      assert.deepEqual(results.map((r) => r.status), answers);
      assert.equal(env.errors.length, 1, "the failure is reported once");
      const later = env.put();
      assert.equal(
        (await later.answer).status,
        "UNKNOWN_ERROR",
        "the service refuses from then on",
      );
      await env.groupCommit.close();
      await env.queue.close();
    });
  }

  test("GroupCommitService answers group after group of other sizes, each only once durable", async () => {
    // The waiter arrays keep their room from one group to the next (and
    // give it back after a burst): entries left from a larger group are
    // never answered again, nor counted as waiting.
    const env = await open();
    await env.twoProducers();
    const answered: number[] = [];
    for (const size of [6, 2, 1, 4_200, 3, 1]) {
      // 8-byte puts: the burst fits the 64 KiB segment.
      const puts = Array.from({ length: size }, () => env.put(8));
      assert.equal(env.groupCommit.waitingCount, size);
      let settledCount = 0;
      for (const put of puts) {
        put.answer.then((result) => {
          assert.equal(result.status, "PUT_OK");
          assert.ok(env.queue.flushedWhere >= put.end, "answered once durable");
          settledCount++;
        });
      }
      await turns();
      assert.equal(settledCount, 0, "nothing answered before a flush");
      while (settledCount < size) {
        for (const flush of env.held.splice(0)) flush.release();
        await turns();
      }
      assert.equal(env.groupCommit.waitingCount, 0);
      answered.push(settledCount);
    }
    assert.deepEqual(answered, [6, 2, 1, 4_200, 3, 1]);
    assert.deepEqual(env.errors, []);
    await env.groupCommit.close();
    await env.queue.close();
  });

  test("GroupCommitService runs one flush at a time while the load is under splitMinBytes", async () => {
    // With splitMinBytes 0 the same puts run two flushes (tests above).
    const env = await open(250);
    /** Releases held flushes until every answer came; returns the statuses. */
    const drain = async (puts: { answer: Promise<PutMessageResult> }[]) => {
      const all = Promise.all(puts.map((put) => put.answer));
      while (!await settledSoon(all)) for (const flush of env.held.splice(0)) flush.release();
      return (await all).map((r) => r.status);
    };
    await env.twoProducers(); // a load of 200 bytes
    const first = [env.put(), env.put()];
    await turns();
    assert.equal(env.held.length, 1);
    const more = [env.put(), env.put()];
    await turns();
    assert.equal(env.held.length, 1, "no second flush beside the first");
    assert.deepEqual(await drain([...first, ...more]), ["PUT_OK", "PUT_OK", "PUT_OK", "PUT_OK"]);
    await env.groupCommit.close();
    await env.queue.close();
  });

  test("GroupCommitService measures the load of two flushes in flight as the bytes waiting, once", async () => {
    // 450 bytes: six producers of 100-byte puts (600 bytes waiting) split
    // the load, four (400) run one flush at a time. Measured from the
    // flushed offset when a flush began, the load of two flushes in flight
    // counted the other one's puts too (600 for four producers) and kept
    // them split.
    const env = await open(450);
    const ready: Array<() => void> = [];
    /** `puts` puts, each after the last was answered. */
    const producer = async (puts: number) => {
      await new Promise<void>((resolve) => ready.push(resolve));
      for (let i = 0; i < puts; i++) assert.equal((await env.put().answer).status, "PUT_OK");
    };
    const producers = [6, 6, 30, 30, 30, 30].map(producer);
    for (const go of ready.splice(0)) go();
    let done = false;
    const all = Promise.all(producers).then(() => done = true);
    /** Flushes in flight seen before each release, in order. */
    const inFlight: number[] = [];
    while (!done) {
      await turns();
      if (env.held.length === 0) continue;
      inFlight.push(env.held.length);
      env.held.shift()!.release();
    }
    await all;
    assert.ok(inFlight.slice(0, 8).includes(2), `six producers split: ${inFlight}`);
    assert.deepEqual(
      inFlight.slice(-20).filter((n) => n > 1),
      [],
      `four producers run one flush at a time: ${inFlight}`,
    );
    await env.groupCommit.close();
    await env.queue.close();
  });

  test("GroupCommitService begins a group's flush at its last put and flushes a straggler on a turn", async () => {
    const reported: number[] = [];
    const env = await open(0x4000_0000, (flushedWhere) => reported.push(flushedWhere));
    await env.twoProducers(); // a load of two producers
    await turns();
    assert.deepEqual(reported, [env.queue.flushedWhere], "nobody came back: reported on a turn");
    // Both come back: the second put begins their flush, in its own step.
    const a = env.put();
    assert.equal(env.held.length, 0, "the first of two waits for the second");
    const b = env.put();
    assert.equal(env.held.length, 1, "the group's last put begins its flush");
    env.held.splice(0)[0]!.release();
    assert.equal((await a.answer).status, "PUT_OK");
    assert.equal((await b.answer).status, "PUT_OK");
    // One of the two comes back: it waits for the other a while, then for a turn.
    const c = env.put();
    assert.equal(env.held.length, 0);
    await turns();
    assert.equal(env.held.length, 1, "the straggler is flushed alone on a turn");
    env.held.splice(0)[0]!.release();
    assert.equal((await c.answer).status, "PUT_OK");
    assert.equal(env.queue.flushedWhere, c.end);
    await turns();
    assert.equal(reported.at(-1), c.end);
    assert.equal(env.groupCommit.isQuiet, true);
    await env.groupCommit.close();
    await env.queue.close();
  });

  test("GroupCommitService answers FLUSH_DISK_TIMEOUT while two flushes run, and nothing twice", async () => {
    const env = await open();
    await env.twoProducers();
    const a = env.put();
    const b = env.put();
    await turns();
    assert.equal(env.held.length, 2);
    env.clock.advance(5_000);
    assert.equal((await a.answer).status, "FLUSH_DISK_TIMEOUT");
    assert.equal((await b.answer).status, "FLUSH_DISK_TIMEOUT");
    for (const flush of env.held) flush.release();
    await turns();
    assert.equal(env.queue.flushedWhere, b.end, "the flushes still complete");
    assert.equal((await a.answer).status, "FLUSH_DISK_TIMEOUT");
    assert.deepEqual(env.errors, []);
    await env.groupCommit.close();
    await env.queue.close();
  });

  test("GroupCommitService still flushes a timed-out put's record when no put follows", async () => {
    // One flush at a time: b waits behind a's flush, then both time out.
    const env = await open(Number.MAX_SAFE_INTEGER);
    const a = env.put();
    await turns();
    assert.equal(env.held.length, 1);
    const b = env.put();
    await turns();
    assert.equal(env.held.length, 1, "b waits behind the flush in flight");
    env.clock.advance(5_000);
    assert.equal((await a.answer).status, "FLUSH_DISK_TIMEOUT");
    assert.equal((await b.answer).status, "FLUSH_DISK_TIMEOUT");
    env.held[0]!.release();
    await turns();
    assert.equal(env.queue.flushedWhere, a.end);
    assert.equal(env.held.length, 2, "a flush began for b's record, with no waiter left");
    env.held[1]!.release();
    await turns();
    assert.equal(env.queue.flushedWhere, b.end);
    assert.deepEqual(env.errors, []);
    await env.groupCommit.close();
    await env.queue.close();
  });

  test("GroupCommitService.close() waits for two flushes in flight and answers their puts", async () => {
    const env = await open();
    await env.twoProducers();
    const a = env.put();
    const b = env.put();
    await turns();
    assert.equal(env.held.length, 2);
    const closing = env.groupCommit.close();
    assert.equal(await settledSoon(closing), false, "close waits for the flushes");
    env.held[1]!.release();
    env.held[0]!.release();
    await closing;
    assert.equal((await a.answer).status, "PUT_OK");
    assert.equal((await b.answer).status, "PUT_OK");
    assert.equal(env.queue.flushedWhere, b.end);
    await env.queue.close();
  });

  test("GroupCommitService flushes a lone producer on the thread and a group off it", async () => {
    const memory = new MemoryPort(runtimeName());
    let onThread = 0;
    let offThread = 0;
    const port = new Proxy(memory, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key !== "createFile" && key !== "openFile") return value.bind(target);
        return async (...args: unknown[]) => {
          const handle: FileHandle = await value.apply(target, args);
          if (!String(args[0]).includes("/commitlog/")) return handle;
          return new Proxy(handle, {
            get(inner, name) {
              const method = Reflect.get(inner, name);
              if (name === "datasync") offThread++;
              if (name === "datasyncSync") onThread++;
              return typeof method === "function" ? method.bind(inner) : method;
            },
          });
        };
      },
    }) as RuntimePort;
    const store = await MessageStore.open("/lone", {
      port,
      flushDiskType: "SYNC_FLUSH",
      mappedFileSizeCommitLog: SEGMENT_BYTES,
      onWarning: () => {},
    });
    try {
      const message = { topic: "T", queueId: 0, body: body(100) };
      for (let i = 0; i < 4; i++) assert.equal((await store.putMessage(message)).status, "PUT_OK");
      assert.ok(onThread >= 3, `a lone producer: ${onThread} flushes on the thread`);
      const before = { onThread, offThread };
      const group = await Promise.all(Array.from({ length: 8 }, () => store.putMessage(message)));
      assert.ok(group.every((r) => r.status === "PUT_OK"));
      assert.equal(onThread, before.onThread, "a group is never flushed on the thread");
      assert.ok(offThread > before.offThread);
    } finally {
      await store.close();
    }
  });

  for (const adapter of ["memory", nativeAdapter] as const) {
    test(
      `putMessage() under SYNC_FLUSH is readable by offset and in its queue once PUT_OK (${
        adapter ?? "no native adapter: skipped"
      })`,
      async (t) => {
        if (adapter === undefined) return t.skip("no native adapter on this runtime");
        const root = adapter === "memory" ? undefined : makeTempDirectory();
        const port = adapter === "memory"
          ? new MemoryPort(runtimeName())
          : await createPort({ adapter });
        const store = await MessageStore.open(`${root ?? ""}/rw`, {
          port,
          flushDiskType: "SYNC_FLUSH",
          mappedFileSizeCommitLog: SEGMENT_BYTES,
          mappedFileSizeConsumeQueue: 20 * 1024,
          maxHashSlotNum: 256,
          maxIndexNum: 1024,
          onWarning: () => {},
        });
        try {
          // Eight producers, enough puts to roll segments: each checks its
          // own put as soon as it is answered.
          await Promise.all(Array.from({ length: 8 }, async (_, producer) => {
            for (let i = 0; i < 40; i++) {
              const payload = body(300, producer * 1_000 + i);
              const r = await store.putMessage({ topic: "RW", queueId: producer, body: payload });
              assert.equal(r.status, "PUT_OK");
              const append = r.appendResult!;
              assert.ok(store.flushedOffset >= append.wroteOffset + append.wroteBytes);
              const byOffset = await store.getMessage(append.wroteOffset);
              assert.deepEqual(byOffset?.body, payload);
              const page = await store.getMessages("RW", producer, append.queueOffset, 1);
              assert.equal(page.status, "FOUND");
              assert.deepEqual(page.messages[0]?.body, payload);
            }
          }));
        } finally {
          await store.close();
          if (root !== undefined) removeDirectory(root);
        }
      },
    );
  }
});
