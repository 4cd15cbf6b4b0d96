/**
 * Consume-queue files created with no awaited step: the port's synchronous
 * calls, `createSegmentNow`, the allocator's synchronous creations made
 * durable only by the queue's flush (`whenNamesDurable`), the memory
 * adapter's `strictSizes` crash model, and recovery from what a crash can
 * leave of such a creation (no name, a `.tmp`, a zero-length or short
 * file, a full-size file of zeros).
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { createPort, MemoryPort } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { createSegmentNow } from "../src/segment/_create_segment.ts";
import { ConsumeQueueAllocator } from "../src/store/_consume_queue_allocator.ts";
import { ConsumeQueue } from "../src/store/consume_queue.ts";
import { body, killablePort, openMemoryStore, queueKeyNumbers } from "./_store_helpers.ts";
import { settle } from "./_segment_helpers.ts";

const FILE_BYTES = 20 * 8;
const UNITS_PER_FILE = FILE_BYTES / 20;

function name(offset: number): string {
  return String(offset).padStart(20, "0");
}

/** `port` without any of the synchronous calls (a wrapper that offers only the awaited ones). */
function asyncOnly(port: RuntimePort): RuntimePort {
  const hidden = new Set([
    "createFileSync",
    "openFileSync",
    "statSync",
    "renameSync",
    "removeSync",
  ]);
  return new Proxy(port, {
    get(target, key) {
      if (hidden.has(String(key))) return undefined;
      const value = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** Resolves after `count` microtasks, with no turn of the event loop in between. */
async function microtasks(count: number): Promise<void> {
  for (let i = 0; i < count; i++) await Promise.resolve();
}

function temporaryDirectory(): string {
  return fs.mkdtempSync(`${os.tmpdir()}/mqstore-`);
}

describe("createSegmentNow", () => {
  test("createSegmentNow() creates the segment under its name and removes a stale .tmp", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory("/s");
    const path = `/s/${name(0)}`;
    await (await port.createFile(`${path}.tmp`, 7)).close();
    const handle = createSegmentNow(port, path, FILE_BYTES);
    assert.ok(handle !== undefined);
    assert.equal((await port.stat(path))?.sizeBytes, FILE_BYTES);
    assert.deepEqual(await port.list("/s"), [name(0)]);
    await handle.close();
  });

  test("createSegmentNow() refuses an existing segment with ALREADY_EXISTS", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory("/s");
    const path = `/s/${name(0)}`;
    await (await port.createFile(path, 20)).close();
    assert.throws(
      () => createSegmentNow(port, path, FILE_BYTES),
      (error) => error instanceof MqStoreError && error.code === "ALREADY_EXISTS",
    );
    assert.equal((await port.stat(path))?.sizeBytes, 20);
  });

  test("createSegmentNow() answers undefined, creating nothing, on a port without the synchronous calls", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory("/s");
    assert.equal(createSegmentNow(asyncOnly(port), `/s/${name(0)}`, FILE_BYTES), undefined);
    assert.deepEqual(await port.list("/s"), []);
  });

  for (const adapter of [undefined, "portable"] as const) {
    test(`createFileSync() and the other synchronous calls work on files (${adapter ?? "default"} adapter)`, async () => {
      const port = await createPort(adapter === undefined ? {} : { adapter });
      const directory = temporaryDirectory();
      try {
        const path = `${directory}/${name(0)}`;
        assert.equal(port.statSync?.(path), undefined);
        port.removeSync!(path); // Missing: no error.
        const handle = createSegmentNow(port, path, FILE_BYTES)!;
        assert.equal(handle.sizeBytes, FILE_BYTES);
        assert.equal(port.statSync!(path)?.sizeBytes, FILE_BYTES);
        assert.equal(fs.statSync(path).size, FILE_BYTES);
        assert.equal(fs.existsSync(`${path}.tmp`), false);
        const opened = port.openFileSync!(path);
        assert.equal(opened.sizeBytes, FILE_BYTES);
        await opened.close();
        await handle.close();
        assert.throws(
          () => port.createFileSync!(path, FILE_BYTES),
          (error) => error instanceof MqStoreError && error.code === "ALREADY_EXISTS",
        );
        assert.throws(
          () => port.openFileSync!(`${path}.missing`),
          (error) => error instanceof MqStoreError && error.code === "NOT_FOUND",
        );
        port.renameSync!(path, `${path}.moved`);
        assert.equal(fs.existsSync(`${path}.moved`), true);
        port.removeSync!(`${path}.moved`);
        assert.equal(fs.existsSync(`${path}.moved`), false);
      } finally {
        fs.rmSync(directory, { recursive: true, force: true });
      }
    });
  }
});

describe("MemoryPort strictSizes", () => {
  test("crash() with strictSizes leaves a created file zero-length unless it was synced", async () => {
    const port = new MemoryPort(runtimeName(), { strictSizes: true });
    await port.makeDirectory("/s");
    const unsynced = await port.createFile("/s/a", 0x2000);
    const datasynced = await port.createFile("/s/b", 0x2000);
    const mapped = await port.createFile("/s/c", 0x2000);
    await port.syncDirectory("/s");
    await datasynced.datasync();
    const mapping = await mapped.map(0, 0x2000);
    mapping.bytes[0] = 1;
    await mapping.sync(0, 1);
    void unsynced;
    port.crash();
    assert.equal((await port.stat("/s/a"))?.sizeBytes, 0);
    assert.equal((await port.stat("/s/b"))?.sizeBytes, 0x2000);
    assert.equal((await port.stat("/s/c"))?.sizeBytes, 0x2000);
    assert.equal((await port.readFile("/s/c"))?.[0], 1);
  });

  test("crash() without strictSizes keeps a created file's size with its name", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory("/s");
    await port.createFile("/s/a", 0x2000);
    await port.syncDirectory("/s");
    port.crash();
    assert.equal((await port.stat("/s/a"))?.sizeBytes, 0x2000);
  });

  test("crash({ seed, keepProbability }) with strictSizes keeps an unsynced size at 1 and loses it at 0", async () => {
    for (const [keepProbability, sizeBytes] of [[1, 0x2000], [0, 0]] as const) {
      const port = new MemoryPort(runtimeName(), { strictSizes: true });
      await port.makeDirectory("/s");
      await port.createFile("/s/a", 0x2000);
      await port.syncDirectory("/s");
      port.crash({ seed: 7, keepProbability });
      assert.equal((await port.stat("/s/a"))?.sizeBytes, sizeBytes);
    }
  });

  test("renameSync() and createFileSync() are undone by a crash before the directory sync", async () => {
    const port = new MemoryPort(runtimeName(), { strictSizes: true });
    await port.makeDirectory("/s");
    await (port.createFileSync("/s/a.tmp", 0x1000)).datasync();
    await port.syncDirectory("/s");
    port.renameSync("/s/a.tmp", "/s/a");
    port.createFileSync("/s/b", 0x1000);
    port.crash();
    assert.deepEqual(await port.list("/s"), ["a.tmp"]);
  });
});

describe("ConsumeQueueAllocator synchronous creations", () => {
  test("prepare() creates a file on disk within microtasks, with no turn of the event loop", async () => {
    const port = await createPort();
    const directory = temporaryDirectory();
    const allocator = new ConsumeQueueAllocator({ port, sparse: true });
    try {
      assert.equal(allocator.createsSynchronously, true);
      const path = `${directory}/${name(FILE_BYTES)}`;
      void allocator.prepare(path, FILE_BYTES);
      // Awaited I/O would need a turn of the event loop: none is given.
      await microtasks(200);
      assert.equal(allocator.isReady(path), true);
      assert.equal(fs.statSync(path).size, FILE_BYTES);
    } finally {
      await allocator.close();
      fs.rmSync(directory, { recursive: true, force: true });
    }
  });

  test("prepare() on a port without the synchronous calls takes the awaited path and still creates the file", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory("/s");
    const allocator = new ConsumeQueueAllocator({ port: asyncOnly(port) });
    assert.equal(allocator.createsSynchronously, false);
    const path = `/s/${name(FILE_BYTES)}`;
    await allocator.prepare(path, FILE_BYTES);
    assert.equal(allocator.isReady(path), true);
    await allocator.close();
  });

  test("whenNamesDurable() makes a synchronously created file's size and name durable", async () => {
    const port = new MemoryPort(runtimeName(), { strictSizes: true });
    await port.makeDirectory("/s");
    const allocator = new ConsumeQueueAllocator({ port });
    const first = `/s/${name(FILE_BYTES)}`;
    const second = `/s/${name(2 * FILE_BYTES)}`;
    await allocator.prepare(first, FILE_BYTES);
    await allocator.whenNamesDurable("/s");
    await allocator.prepare(second, FILE_BYTES);
    port.crash();
    // The first went through whenNamesDurable: name and full size; the second did not.
    assert.deepEqual(await port.list("/s"), [name(FILE_BYTES)]);
    assert.equal((await port.stat(first))?.sizeBytes, FILE_BYTES);
    await allocator.close().catch(() => {});
  });

  test("whenNamesDurable() syncs the file, not only the directory: a directory sync alone leaves it zero-length", async () => {
    const port = new MemoryPort(runtimeName(), { strictSizes: true });
    await port.makeDirectory("/s");
    const allocator = new ConsumeQueueAllocator({ port });
    const path = `/s/${name(FILE_BYTES)}`;
    await allocator.prepare(path, FILE_BYTES);
    await port.syncDirectory("/s");
    port.crash();
    assert.equal((await port.stat(path))?.sizeBytes, 0);
    await allocator.close().catch(() => {});
  });
});

describe("ConsumeQueue with synchronous creations", () => {
  test("putUnitNow() never declines while files are created, under a producer that never yields a turn", async () => {
    const port = await createPort();
    const root = temporaryDirectory();
    const allocator = new ConsumeQueueAllocator({ port, sparse: true });
    // Files of 8192 units: past half of one, a queue giving turns would
    // decline one put in 4096 while the next file is in creation.
    const fileBytes = 20 * 0x2000;
    const queue = new ConsumeQueue({
      port,
      rootDirectory: root,
      topic: "T",
      queueId: 0,
      mappedFileSizeConsumeQueue: fileBytes,
      sparse: true,
      allocator,
    });
    try {
      await queue.load();
      assert.equal(await queue.putUnit(0, 100, 0, 0), true);
      const units = 3 * 0x2000;
      for (let i = 1; i < units; i++) {
        assert.equal(queue.putUnitNow(100 * i, 100, 0, i), true, `unit ${i}`);
        // What `await store.putMessages()` in a loop gives: microtasks only.
        if (i % 1000 === 0) await microtasks(20);
      }
      await queue.flush(0);
      assert.equal(queue.maxOffsetInQueue, units);
      assert.equal(queue.files.length, 3);
    } finally {
      await queue.close();
      await allocator.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

/** Leftovers of a creation a crash interrupted, planted after the queue's files. */
type Leftover = "no name" | ".tmp" | "zero-length" | "short" | "zeros";

/**
 * Writes 1.5 files of units (plus the prepared third file), flushes,
 * closes, plants `leftover` at the third file, and loads the queue again.
 */
async function loadWithLeftover(
  port: RuntimePort,
  root: string,
  leftover: Leftover,
  files: { remove(path: string): void; write(path: string, bytes: number): void },
): Promise<void> {
  const units = UNITS_PER_FILE + UNITS_PER_FILE / 2;
  const open = () =>
    new ConsumeQueue({
      port,
      rootDirectory: root,
      topic: "T",
      queueId: 0,
      mappedFileSizeConsumeQueue: FILE_BYTES,
      sparse: true,
    });
  const queue = open();
  await queue.load();
  for (let i = 0; i < units; i++) assert.equal(await queue.putUnit(100 * i, 100, 0, i), true);
  await queue.flush(0);
  await queue.close();
  const directory = `${root}/consumequeue/T/0`;
  const third = `${directory}/${name(2 * FILE_BYTES)}`;
  const fourth = `${directory}/${name(3 * FILE_BYTES)}`;
  files.remove(third);
  if (leftover === "no name") files.write(fourth, FILE_BYTES);
  else if (leftover === ".tmp") files.write(`${third}.tmp`, FILE_BYTES);
  else if (leftover === "zero-length") files.write(third, 0);
  else if (leftover === "short") files.write(third, 60);
  else files.write(third, FILE_BYTES);
  const again = open();
  await again.load();
  await again.recover();
  try {
    assert.equal(again.maxOffsetInQueue, units, leftover);
    // The queue goes on over the leftover's place: the third file is made again if it went.
    for (let i = units; i < 3 * UNITS_PER_FILE; i++) {
      assert.equal(await again.putUnit(100 * i, 100, 0, i), true, `${leftover}: unit ${i}`);
    }
    assert.equal(
      (await again.getUnit(3 * UNITS_PER_FILE - 1))?.commitLogOffset,
      100 * (3 * UNITS_PER_FILE - 1),
    );
    await again.flush(0);
  } finally {
    await again.close();
  }
}

describe("ConsumeQueue.load() after an interrupted creation", () => {
  const leftovers: Leftover[] = ["no name", ".tmp", "zero-length", "short", "zeros"];
  for (const leftover of leftovers) {
    test(`load() takes a queue whose next file was left as "${leftover}" (real files)`, async () => {
      const port = await createPort();
      const root = temporaryDirectory();
      try {
        await loadWithLeftover(port, root, leftover, {
          remove: (path) => fs.rmSync(path, { force: true }),
          write: (path, bytes) => fs.writeFileSync(path, new Uint8Array(bytes)),
        });
      } finally {
        fs.rmSync(root, { recursive: true, force: true });
      }
    });
  }

  test("load() still refuses a queue whose files are all of another size", async () => {
    const root = temporaryDirectory();
    try {
      const directory = `${root}/consumequeue/T/0`;
      fs.mkdirSync(directory, { recursive: true });
      fs.writeFileSync(`${directory}/${name(0)}`, new Uint8Array(FILE_BYTES / 2));
      fs.writeFileSync(`${directory}/${name(FILE_BYTES / 2)}`, new Uint8Array(FILE_BYTES / 2));
      const queue = new ConsumeQueue({
        port: await createPort(),
        rootDirectory: root,
        topic: "T",
        queueId: 0,
        mappedFileSizeConsumeQueue: FILE_BYTES,
      });
      await assert.rejects(
        queue.load(),
        (error) => error instanceof MqStoreError && error.code === "INVALID_FILE",
      );
      assert.equal(fs.readdirSync(directory).length, 2);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe("ConsumeQueue crash with files created synchronously", () => {
  test("load() and recover() take what a torn crash leaves of files created since the last flush", async () => {
    /** What the crashes left of the last file created: no name, zero-length or full of zeros. */
    const leftovers = new Set<string>();
    for (let seed = 1; seed <= 24; seed++) {
      const memory = new MemoryPort(runtimeName(), { strictSizes: true });
      const allocator = new ConsumeQueueAllocator({ port: memory });
      const open = (withAllocator: boolean) =>
        new ConsumeQueue({
          port: memory,
          rootDirectory: "/s",
          topic: "T",
          queueId: 0,
          mappedFileSizeConsumeQueue: FILE_BYTES,
          allocator: withAllocator ? allocator : undefined,
        });
      const queue = open(true);
      await queue.load();
      const flushed = 2 * UNITS_PER_FILE + 2;
      // Within the last three files (with the one prepared ahead): see the
      // store test below.
      const units = 3 * UNITS_PER_FILE + 3;
      for (let i = 0; i < units; i++) {
        assert.equal(await queue.putUnit(100 * i, 100, 0, i), true);
        // The last flush: units and files up to here are durable.
        if (i === flushed - 1) await queue.flush(0);
      }
      memory.crash({ seed });
      // Prepared ahead after the flush (file 3 was before it).
      const last = `/s/consumequeue/T/0/${name(4 * FILE_BYTES)}`;
      const sizeBytes = (await memory.stat(last))?.sizeBytes;
      leftovers.add(
        sizeBytes === undefined ? "no name" : sizeBytes === 0 ? "zero-length" : "zeros",
      );
      const again = open(false);
      await again.load();
      await again.recover();
      try {
        const end = again.maxOffsetInQueue;
        assert.ok(end >= flushed && end <= units, `seed ${seed}: ends at ${end}`);
        for (let i = 0; i < end; i++) {
          assert.equal(
            (await again.getUnit(i))?.commitLogOffset,
            100 * i,
            `seed ${seed}: unit ${i}`,
          );
        }
        // Re-dispatch puts the lost units back.
        for (let i = end; i < units; i++) {
          assert.equal(await again.putUnit(100 * i, 100, 0, i), true);
        }
      } finally {
        await again.close();
      }
    }
    // The seeds cover every leftover of a creation.
    assert.deepEqual([...leftovers].sort(), ["no name", "zero-length", "zeros"]);
  });
});

describe("MessageStore crash with consume-queue files created synchronously", () => {
  test("MessageStore.open() after a torn crash serves every message, whatever the files created since the checkpoint became", async () => {
    // Files of 64 units; the checkpoint counts unit 129 of the third
    // file. The units past it stay within the last three files: recovery
    // walks from the third-last, as RocketMQ's does, and does not see a
    // torn page before it.
    const unitsPerFile = 64;
    const messages = 150;
    const checkpointAt = 130;
    for (let seed = 1; seed <= 16; seed++) {
      const memory = new MemoryPort(runtimeName(), { strictSizes: true });
      const killable = killablePort(memory);
      const env = await openMemoryStore({
        flushDiskType: "SYNC_FLUSH",
        mappedFileSizeConsumeQueue: 20 * unitsPerFile,
        port: killable.port,
      }, memory);
      const { store } = env;
      try {
        for (let i = 0; i < messages; i++) {
          if (i === checkpointAt) {
            env.clock.advance(61_000);
            await settle();
          }
          const r = await store.putMessage({
            topic: "A",
            queueId: 0,
            body: body(30, i),
            properties: { KEYS: String(i) },
          });
          assert.equal(r.status, "PUT_OK");
        }
      } finally {
        killable.kill();
        memory.crash({ seed });
        await store.close().catch(() => {});
      }
      const again = await env.reopen({ port: memory });
      try {
        assert.equal(again.recovery.clean, false);
        const expected = Array.from({ length: messages }, (_, i) => i);
        assert.deepEqual(await queueKeyNumbers(again, "A", 0), expected, `seed ${seed}`);
      } finally {
        await again.close();
      }
    }
  });
});
