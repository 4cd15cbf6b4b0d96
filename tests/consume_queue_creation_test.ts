import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { createSegmentFile, createSegmentName } from "../src/segment/_create_segment.ts";
import { ConsumeQueueAllocator } from "../src/store/_consume_queue_allocator.ts";
import { ConsumeQueue } from "../src/store/consume_queue.ts";

const ROOT = "/store";
const SEGMENT = "/store/seg/00000000000000000000";
/** 1000 units a file: room for a run past the 4096 units a first file once held. */
const CQ_FILE_BYTES = 20 * 10_000;
const FIRST_FILE = `${ROOT}/consumequeue/T/0/00000000000000000000`;

/** `inner`, with its directory syncs failing while `failing.on` (consume queues only). */
function failingDirectorySyncs(inner: MemoryPort): { port: RuntimePort; failing: { on: boolean } } {
  const failing = { on: false };
  const port = new Proxy(inner, {
    get(target, key) {
      if (key === "syncDirectory") {
        return async (path: string) => {
          if (failing.on && path.includes("/consumequeue/")) {
            throw new MqStoreError("IO_ERROR", `Cannot sync ${path}: injected`);
          }
          await target.syncDirectory(path);
        };
      }
      const value = Reflect.get(target, key, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { port, failing };
}

function queueOf(port: RuntimePort, allocator: ConsumeQueueAllocator): ConsumeQueue {
  return new ConsumeQueue({
    port,
    rootDirectory: ROOT,
    topic: "T",
    queueId: 0,
    mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
    sparse: true,
    allocator,
  });
}

/** Units 0..count-1: message i at offset 100·i, size 100, tagsCode i. */
function run(count: number): { offsets: Float64Array; sizes: Int32Array; tagsCodes: Float64Array } {
  const offsets = new Float64Array(count);
  const sizes = new Int32Array(count).fill(100);
  const tagsCodes = new Float64Array(count);
  for (let i = 0; i < count; i++) {
    offsets[i] = i * 100;
    tagsCodes[i] = i;
  }
  return { offsets, sizes, tagsCodes };
}

describe("consume-queue file creation", () => {
  test("createSegmentName() with syncDirectory false leaves the name to the caller: a crash undoes it", async () => {
    const memory = new MemoryPort(runtimeName());
    await memory.makeDirectory("/store/seg");
    await createSegmentName(memory, SEGMENT, 4096, { syncDirectory: false });
    assert.equal((await memory.stat(SEGMENT))?.sizeBytes, 4096);
    memory.crash();
    assert.equal(await memory.stat(SEGMENT), undefined);
    assert.equal(await memory.stat(`${SEGMENT}.tmp`), undefined);
    await createSegmentName(memory, SEGMENT, 4096);
    memory.crash();
    assert.equal((await memory.stat(SEGMENT))?.sizeBytes, 4096);
  });

  test("createSegmentName() reports a failed rename even when the handle's close throws at once", async () => {
    // A port whose close throws instead of rejecting (the crash tests'
    // killed port does) once left the rename's rejection unhandled and
    // reported the close's error instead.
    const memory = new MemoryPort(runtimeName());
    await memory.makeDirectory("/store/seg");
    const port = new Proxy(memory, {
      get(target, key) {
        if (key === "rename") {
          return async (from: string, to: string) => {
            await Promise.resolve();
            throw new MqStoreError("IO_ERROR", `Cannot rename ${from} to ${to}: injected`);
          };
        }
        if (key === "createFile") {
          return async (...args: Parameters<MemoryPort["createFile"]>) => {
            const handle = await target.createFile(...args);
            return new Proxy(handle, {
              get(object, name) {
                if (name === "close") {
                  return () => {
                    void object.close();
                    throw new Error("close: thrown at once");
                  };
                }
                const value = Reflect.get(object, name, object);
                return typeof value === "function" ? value.bind(object) : value;
              },
            });
          };
        }
        const value = Reflect.get(target, key, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    await assert.rejects(
      createSegmentName(port, SEGMENT, 4096),
      (error: unknown) => error instanceof MqStoreError && /injected/.test(error.message),
    );
    assert.equal(await memory.stat(SEGMENT), undefined);
    assert.equal(await memory.stat(`${SEGMENT}.tmp`), undefined);
  });

  test("createSegmentFile() removes a stale .tmp, opens the segment durable, refuses an existing one", async () => {
    const memory = new MemoryPort(runtimeName());
    await memory.makeDirectory("/store/seg");
    await (await memory.createFile(`${SEGMENT}.tmp`, 100)).close();
    const handle = await createSegmentFile(memory, SEGMENT, 4096);
    assert.equal(handle.sizeBytes, 4096);
    await handle.close();
    assert.equal(await memory.stat(`${SEGMENT}.tmp`), undefined);
    memory.crash();
    assert.equal((await memory.stat(SEGMENT))?.sizeBytes, 4096);
    await assert.rejects(
      createSegmentFile(memory, SEGMENT, 4096),
      (error) => error instanceof MqStoreError && error.code === "ALREADY_EXISTS",
    );
  });

  test("ConsumeQueue.putUnitsNow() holds a run past 4096 units in memory while the first file is created", async () => {
    const memory = new MemoryPort(runtimeName());
    const allocator = new ConsumeQueueAllocator({ port: memory, sparse: true });
    const cq = queueOf(memory, allocator);
    const errors: unknown[] = [];
    cq.startInMemory((error) => errors.push(error));
    const { offsets, sizes, tagsCodes } = run(5000);
    // No await since the start: the file cannot exist yet.
    assert.equal(cq.putUnitsNow(5000, 0, offsets, sizes, tagsCodes), 5000);
    assert.equal(cq.inMemoryUnitCount, 5000);
    assert.equal(cq.maxOffsetInQueue, 5000);
    await cq.whenFileReady();
    assert.equal(cq.inMemoryUnitCount, 0);
    assert.deepEqual(await cq.getUnit(4999), {
      commitLogOffset: 499_900,
      size: 100,
      tagsCode: 4999,
    });
    assert.deepEqual(errors, []);
    await cq.close();
    await allocator.close();
  });

  test("ConsumeQueue.flush() makes the name of a file the allocator created durable, again after a failed background sync", async () => {
    const memory = new MemoryPort(runtimeName());
    const { port, failing } = failingDirectorySyncs(memory);
    const allocator = new ConsumeQueueAllocator({ port, sparse: true });
    const cq = queueOf(port, allocator);
    cq.startInMemory(() => {});
    failing.on = true;
    assert.equal(await cq.putUnit(0, 100, 0, 0), true);
    await cq.whenFileReady();
    // The background directory sync has failed: the name is not durable.
    await allocator.whenIdle();
    failing.on = false;
    await cq.flush(0);
    memory.crash();
    assert.equal((await memory.stat(FIRST_FILE))?.sizeBytes, CQ_FILE_BYTES);
    await cq.close().catch(() => {});
    await allocator.close().catch(() => {});
  });

  test("ConsumeQueue.flush() rejects while the name of its new file cannot be made durable", async () => {
    const memory = new MemoryPort(runtimeName());
    const { port, failing } = failingDirectorySyncs(memory);
    const allocator = new ConsumeQueueAllocator({ port, sparse: true });
    const cq = queueOf(port, allocator);
    cq.startInMemory(() => {});
    failing.on = true;
    assert.equal(await cq.putUnit(0, 100, 0, 0), true);
    await cq.whenFileReady();
    await allocator.whenIdle();
    await assert.rejects(
      cq.flush(0),
      (error) => error instanceof MqStoreError && error.code === "IO_ERROR",
    );
    failing.on = false;
    await cq.close().catch(() => {});
    await allocator.close().catch(() => {});
  });
});
