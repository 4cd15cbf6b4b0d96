/**
 * A new consume queue's first file made with no turn of the event loop
 * where the port has the synchronous calls (`makeDirectorySync`,
 * `listSync` and the allocator's): a producer that never yields is then
 * never made to give turns for it. Also the two synchronous port calls
 * themselves, on the real and memory adapters.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { createPort, MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { ConsumeQueueAllocator } from "../src/store/_consume_queue_allocator.ts";
import { ConsumeQueue } from "../src/store/consume_queue.ts";

/** 8000 units a file. */
const CQ_FILE_BYTES = 20 * 8000;
/** More units than the 4096 after which a queue waiting for awaited I/O declines a put. */
const UNITS = 5000;

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

/** Lets every pending microtask run, and no macrotask (no turn of the event loop). */
async function microtasks(rounds = 200): Promise<void> {
  for (let i = 0; i < rounds; i++) await Promise.resolve();
}

/** `port` whose awaited directory calls reject: only the synchronous ones work. */
function syncDirectoriesOnly(port: RuntimePort): RuntimePort {
  return new Proxy(port, {
    get(target, key) {
      if (key === "makeDirectory" || key === "list") {
        return () => Promise.reject(new Error(`${String(key)} must not be awaited`));
      }
      const value = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

function tempDir(): string {
  return fs.mkdtempSync(os.tmpdir() + "/mqstore-");
}

describe("a new consume queue's first file", () => {
  test("ConsumeQueue.startInMemory() writes the held units to the first file within microtasks on a real port", async () => {
    const dir = tempDir();
    try {
      const port = await createPort();
      const allocator = new ConsumeQueueAllocator({ port, sparse: true });
      const cq = new ConsumeQueue({
        port,
        rootDirectory: dir,
        topic: "T",
        queueId: 0,
        mappedFileSizeConsumeQueue: CQ_FILE_BYTES,
        sparse: true,
        allocator,
      });
      const errors: unknown[] = [];
      cq.startInMemory((error) => errors.push(error));
      const { offsets, sizes, tagsCodes } = run(UNITS);
      // Every put taken at once: none declined to make the producer give a
      // turn, as for a creation that awaits I/O.
      for (let i = 0; i < UNITS; i++) {
        assert.equal(cq.putUnitNow(offsets[i]!, sizes[i]!, tagsCodes[i]!, i), true, `unit ${i}`);
      }
      await microtasks();
      assert.equal(cq.inMemoryUnitCount, 0);
      assert.ok(fs.statSync(`${dir}/consumequeue/T/0/00000000000000000000`).isFile());
      assert.deepEqual(await cq.getUnit(UNITS - 1), {
        commitLogOffset: (UNITS - 1) * 100,
        size: 100,
        tagsCode: UNITS - 1,
      });
      assert.deepEqual(errors, []);
      await cq.close();
      await allocator.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test("MappedFileQueue.load() makes, lists and cleans its directory with the port's synchronous calls", async () => {
    const dir = tempDir();
    try {
      const port = await createPort();
      fs.mkdirSync(`${dir}/q`);
      fs.writeFileSync(`${dir}/q/00000000000000000000.tmp`, "");
      const queue = new MappedFileQueue({
        port: syncDirectoriesOnly(port),
        directory: `${dir}/q/a/b`,
        fileSizeBytes: 0x1000,
      });
      await queue.load();
      assert.ok(fs.statSync(`${dir}/q/a/b`).isDirectory());
      await queue.close();
      const stale = new MappedFileQueue({ port, directory: `${dir}/q`, fileSizeBytes: 0x1000 });
      await stale.load();
      assert.deepEqual(fs.readdirSync(`${dir}/q`), ["a"]);
      await stale.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const kind of ["real", "memory"] as const) {
    test(`RuntimePort.makeDirectorySync() and listSync() make nested directories and list sorted names (${kind})`, async () => {
      const dir = kind === "real" ? tempDir() : "/store";
      try {
        const port: RuntimePort = kind === "real"
          ? await createPort()
          : new MemoryPort(runtimeName());
        assert.ok(port.makeDirectorySync !== undefined && port.listSync !== undefined);
        port.makeDirectorySync(`${dir}/x/y`);
        port.makeDirectorySync(`${dir}/x/y`);
        for (const name of ["c", "a", "b"]) {
          const file = await port.createFile(`${dir}/x/${name}`, 0x10);
          await file.close();
        }
        assert.deepEqual(port.listSync(`${dir}/x`), ["a", "b", "c", "y"]);
        assert.deepEqual(port.listSync(`${dir}/x/y`), []);
        assert.throws(
          () => port.listSync!(`${dir}/missing`),
          (error: unknown) => error instanceof MqStoreError && error.code === "NOT_FOUND",
        );
      } finally {
        if (kind === "real") fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
