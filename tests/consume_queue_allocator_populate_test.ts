/**
 * The pre-fault of the consume-queue file a queue rolls into starts only
 * after the next file's creation, which the roll starts at once: a
 * creation maps its file on the JavaScript thread, and an `mmap` waits for
 * a pre-fault in flight to release the process's mmap lock (the map is
 * logged when asked for: it follows the creation by a few microtasks).
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { FileHandle, Mapping, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ConsumeQueueAllocator } from "../src/store/_consume_queue_allocator.ts";

const FILE_BYTES = 20 * 0x400;

function name(offset: number): string {
  return String(offset).padStart(20, "0");
}

function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** `port`, logging every file's synchronous creation, every mapping made and every pre-fault. */
function recordingPort(port: RuntimePort, log: string[]): RuntimePort {
  const mappingOf = (mapping: Mapping, path: string): Mapping =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "populate") {
          return (position: number, length: number) => {
            log.push(`populate ${baseName(path)}`);
            return target.populate(position, length);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  const handleOf = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "map") {
          return async (fileOffset?: number, length?: number) => {
            log.push(`map ${baseName(target.path)}`);
            return mappingOf(await target.map(fileOffset, length), target.path);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  return new Proxy(port, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (key === "createFileSync") {
        return (...args: Parameters<NonNullable<RuntimePort["createFileSync"]>>) => {
          log.push(`create ${baseName(args[0]).replace(/\.tmp$/, "")}`);
          return target.createFileSync!(...args);
        };
      }
      if (key === "openFileSync") {
        return (...args: Parameters<NonNullable<RuntimePort["openFileSync"]>>) =>
          handleOf(target.openFileSync!(...args));
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

describe("ConsumeQueueAllocator roll pre-fault", () => {
  test("request() pre-faults the rolled-into file only after the next file, prepared at the roll, is created", async () => {
    const log: string[] = [];
    const memory = new MemoryPort(runtimeName());
    await memory.makeDirectory("/q");
    const port = recordingPort(memory, log);
    const allocator = new ConsumeQueueAllocator({ port });
    try {
      assert.equal(allocator.createsSynchronously, true);
      const first = `/q/${name(FILE_BYTES)}`;
      const second = `/q/${name(2 * FILE_BYTES)}`;
      await allocator.prepare(first, FILE_BYTES);
      log.length = 0;
      // As a queue's roll does: take the file, then prepare the next one
      // in the same synchronous step.
      const taken = allocator.request(first, second, FILE_BYTES);
      void allocator.prepare(second, FILE_BYTES);
      const file = await taken;
      await allocator.whenIdle();
      await file.whenPrepared();
      assert.deepEqual(log, [
        `create ${name(2 * FILE_BYTES)}`,
        `map ${name(2 * FILE_BYTES)}`,
        `populate ${name(FILE_BYTES)}`,
      ]);
      await file.close({ waitMs: 0 });
    } finally {
      await allocator.close();
    }
  });

  test("request() pre-faults the rolled-into file when no creation follows", async () => {
    const log: string[] = [];
    const memory = new MemoryPort(runtimeName());
    await memory.makeDirectory("/q");
    const allocator = new ConsumeQueueAllocator({ port: recordingPort(memory, log) });
    try {
      const first = `/q/${name(FILE_BYTES)}`;
      await allocator.prepare(first, FILE_BYTES);
      log.length = 0;
      const file = await allocator.request(first, `/q/${name(2 * FILE_BYTES)}`, FILE_BYTES);
      await file.whenPrepared();
      assert.deepEqual(log, [`populate ${name(FILE_BYTES)}`]);
      await file.close({ waitMs: 0 });
    } finally {
      await allocator.close();
    }
  });
});
