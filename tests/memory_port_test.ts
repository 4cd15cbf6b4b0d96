/**
 * Tests of what only the memory adapter does: simulated crashes (strict and
 * seeded), durability of directory operations, fault injection and a
 * capacity. The port conformance checks live in `runtime_port_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import process from "node:process";
import { describe, test } from "node:test";
import { MqStoreError, type MqStoreErrorCode } from "../src/errors.ts";
import { MemoryPort } from "../src/runtime/memory.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { FileHandle } from "../src/runtime/port.ts";
import { pattern } from "./_helpers.ts";

const PAGE = 0x1000;
const DIR = "/store";

async function rejectsWithCode(
  promise: Promise<unknown>,
  code: MqStoreErrorCode,
  mentions?: string,
): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof MqStoreError, `expected MqStoreError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    if (mentions !== undefined) assert.ok(error.message.includes(mentions), error.message);
    return true;
  });
}

/** A port with `/store` and a durably created file `/store/<name>`. */
async function portWithFile(
  name: string,
  sizeBytes: number,
): Promise<{ port: MemoryPort; file: FileHandle; path: string }> {
  const port = new MemoryPort(runtimeName());
  await port.makeDirectory(DIR);
  const path = `${DIR}/${name}`;
  const file = await port.createFile(path, sizeBytes);
  await port.syncDirectory(DIR);
  return { port, file, path };
}

async function contentOf(port: MemoryPort, path: string): Promise<Uint8Array | undefined> {
  return await port.readFile(path);
}

/** Which of `pageTotal` pages hold `pattern(PAGE, page)` (the rest must be zeros). */
function survivingPages(bytes: Uint8Array, pageTotal: number): number[] {
  const kept: number[] = [];
  for (let page = 0; page < pageTotal; page++) {
    const content = bytes.subarray(page * PAGE, (page + 1) * PAGE);
    if (content.every((byte) => byte === 0)) continue;
    assert.deepEqual(content, pattern(PAGE, page + 1), `page ${page} is torn`);
    kept.push(page);
  }
  return kept;
}

describe("MemoryPort", () => {
  test("crash() loses bytes written with write() and not flushed, keeping datasynced ones", async () => {
    const { port, file, path } = await portWithFile("a", 4 * PAGE);
    await file.write(pattern(PAGE, 1), 0);
    await file.datasync();
    await file.write(pattern(PAGE, 2), 2 * PAGE);
    await file.write(new Uint8Array([0xff]), 10);
    const report = port.crash();
    // A plain crash does not look at pages, so it does not count them.
    assert.equal(report.lostPages, undefined);
    const bytes = await contentOf(port, path);
    assert.ok(bytes !== undefined);
    assert.equal(bytes.length, 4 * PAGE);
    assert.deepEqual(bytes.subarray(0, PAGE), pattern(PAGE, 1));
    assert.deepEqual(bytes.subarray(2 * PAGE, 3 * PAGE), new Uint8Array(PAGE));
  });

  test("crash() keeps pages synced through a mapping and loses the others", async () => {
    const { port, file, path } = await portWithFile("a", 8 * PAGE);
    const mapping = await file.map();
    const view = mapping.bytes;
    view.set(pattern(PAGE, 1), 0);
    view.set(pattern(PAGE, 2), PAGE);
    view.set(pattern(PAGE, 3), 5 * PAGE);
    // Syncing two bytes makes the whole page that holds them durable.
    await mapping.sync(PAGE + 100, 2);
    await mapping.sync(5 * PAGE, PAGE);
    const before = file.pageCacheState(0, 8 * PAGE);
    assert.deepEqual(before, { cachedPages: 8, dirtyPages: 1, writebackPages: 0 });

    port.crash();
    assert.equal(view.length, 0, "the old view is detached");
    assert.equal(mapping.bytes.length, 0);
    await rejectsWithCode(mapping.sync(0, PAGE), "CLOSED");
    await rejectsWithCode(file.read(new Uint8Array(1), 0), "CLOSED");
    assert.equal(file.pageCacheState(0, PAGE), undefined);
    const bytes = await contentOf(port, path);
    assert.ok(bytes !== undefined);
    assert.deepEqual(bytes.subarray(0, PAGE), new Uint8Array(PAGE));
    assert.deepEqual(bytes.subarray(PAGE, 2 * PAGE), pattern(PAGE, 2));
    assert.deepEqual(bytes.subarray(5 * PAGE, 6 * PAGE), pattern(PAGE, 3));
  });

  test("crash() loses a size extension by write() that was not datasynced", async () => {
    const { port, file, path } = await portWithFile("a", PAGE);
    await file.write(pattern(10), PAGE - 5);
    assert.equal(file.sizeBytes, PAGE + 5);
    port.crash();
    const bytes = await contentOf(port, path);
    assert.ok(bytes !== undefined);
    assert.equal(bytes.length, PAGE);
    assert.deepEqual(bytes, new Uint8Array(PAGE));
  });

  test("map() views and read()/write() see the same bytes", async () => {
    const { file } = await portWithFile("a", 4 * PAGE);
    const mapping = await file.map(PAGE, 2 * PAGE);
    mapping.bytes[5] = 0x42;
    const one = new Uint8Array(1);
    await file.read(one, PAGE + 5);
    assert.equal(one[0], 0x42);
    await file.write(new Uint8Array([0x24]), PAGE + 6);
    assert.equal(mapping.bytes[6], 0x24);
    const second = await file.map(PAGE, PAGE);
    assert.equal(second.bytes[5], 0x42);
    second.unmap();
    // Another live mapping shares the buffer: the file keeps working.
    assert.equal(mapping.bytes[5], 0x42);
    mapping.unmap();
    assert.equal(mapping.bytes.length, 0);
    await file.read(one, PAGE + 5);
    assert.equal(one[0], 0x42);
  });

  test("pageCacheState() counts pages that differ from their durable content", async () => {
    const { file } = await portWithFile("a", 16 * PAGE);
    assert.deepEqual(file.pageCacheState(0, 0), {
      cachedPages: 16,
      dirtyPages: 0,
      writebackPages: 0,
    });
    await file.write(new Uint8Array(3 * PAGE).fill(1), PAGE / 2);
    assert.equal(file.pageCacheState(0, 16 * PAGE)?.dirtyPages, 4);
    assert.equal(file.pageCacheState(2 * PAGE, PAGE)?.dirtyPages, 1);
    assert.equal(file.pageCacheState(8 * PAGE, 8 * PAGE)?.dirtyPages, 0);
    await file.datasync();
    assert.equal(file.pageCacheState(0, 0)?.dirtyPages, 0);
  });

  test("crash() removes a created file whose directory was not synced", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory(DIR);
    const kept = await port.createFile(`${DIR}/kept`, PAGE);
    await kept.write(new Uint8Array([7]), 0);
    await kept.datasync();
    await port.syncDirectory(DIR);
    const lost = await port.createFile(`${DIR}/lost`, PAGE);
    await lost.datasync();
    assert.deepEqual(await port.list(DIR), ["kept", "lost"]);
    const report = port.crash();
    assert.equal(report.lostDirectoryOperations, 1);
    assert.deepEqual(await port.list(DIR), ["kept"]);
    assert.equal((await port.readFile(`${DIR}/kept`))?.[0], 7);
  });

  test("crash() undoes an unsynced rename and an unsynced remove", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory(DIR);
    await port.writeFileAtomic(`${DIR}/a`, new Uint8Array([1]));
    await port.writeFileAtomic(`${DIR}/b`, new Uint8Array([2]));
    await port.rename(`${DIR}/a`, `${DIR}/c`);
    await port.remove(`${DIR}/b`);
    assert.deepEqual(await port.list(DIR), ["c"]);
    port.crash();
    assert.deepEqual(await port.list(DIR), ["a", "b"]);
    assert.deepEqual(await port.readFile(`${DIR}/a`), new Uint8Array([1]));
    assert.deepEqual(await port.readFile(`${DIR}/b`), new Uint8Array([2]));

    await port.rename(`${DIR}/a`, `${DIR}/c`);
    await port.syncDirectory(DIR);
    port.crash();
    assert.deepEqual(await port.list(DIR), ["b", "c"]);
  });

  test("crash() closes handles and releases locks", async () => {
    const { port, file } = await portWithFile("a", PAGE);
    const lock = await port.lockDirectory(DIR);
    port.crash();
    await rejectsWithCode(file.write(new Uint8Array(1), 0), "CLOSED");
    const again = await port.lockDirectory(DIR);
    // Releasing the lock the crash dropped leaves the new holder alone.
    await lock.release();
    await rejectsWithCode(port.lockDirectory(DIR), "LOCKED", `pid ${process.pid}`);
    await again.release();
  });

  test("crash({ seed }) keeps some dirty pages and loses others, the same way for a seed", async () => {
    const pageTotal = 64;
    const run = async (seed: number) => {
      const { port, file, path } = await portWithFile("a", pageTotal * PAGE);
      const mapping = await file.map();
      for (let page = 0; page < pageTotal; page++) {
        mapping.bytes.set(pattern(PAGE, page + 1), page * PAGE);
      }
      const report = port.crash({ seed, keepProbability: 0.5 });
      const bytes = await contentOf(port, path);
      assert.ok(bytes !== undefined);
      const kept = survivingPages(bytes, pageTotal);
      assert.equal(report.keptPages, kept.length);
      assert.equal(report.lostPages, pageTotal - kept.length);
      return kept;
    };
    const first = await run(42);
    assert.ok(first.length > 0 && first.length < pageTotal, `kept ${first.length}`);
    assert.deepEqual(await run(42), first);
    assert.notDeepEqual(await run(7), first);
  });

  test("crash({ seed }) tears files independently: one file's page survives, another's is lost", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory(DIR);
    const names = ["commitlog", "consumequeue"];
    const files = [];
    for (const name of names) {
      const file = await port.createFile(`${DIR}/${name}`, 32 * PAGE);
      files.push(file);
    }
    await port.syncDirectory(DIR);
    for (const file of files) {
      for (let page = 0; page < 32; page++) {
        await file.write(pattern(PAGE, page + 1), page * PAGE);
      }
    }
    port.crash({ seed: 1234 });
    const [log, queue] = await Promise.all(
      names.map(async (name) => survivingPages((await port.readFile(`${DIR}/${name}`))!, 32)),
    );
    assert.ok(log !== undefined && queue !== undefined);
    // Some page survived in the queue while the same page of the log did not.
    assert.ok(queue.some((page) => !log.includes(page)), `${log} / ${queue}`);
  });

  test("crash({ seed, keepProbability }) keeps everything at 1 and nothing at 0", async () => {
    for (const keepProbability of [0, 1]) {
      const { port, file, path } = await portWithFile("a", 8 * PAGE);
      for (let page = 0; page < 8; page++) {
        await file.write(pattern(PAGE, page + 1), page * PAGE);
      }
      await port.createFile(`${DIR}/unsynced`, PAGE);
      port.crash({ seed: 99, keepProbability });
      const kept = survivingPages((await contentOf(port, path))!, 8);
      assert.equal(kept.length, keepProbability * 8);
      assert.equal((await port.list(DIR)).includes("unsynced"), keepProbability === 1);
    }
  });

  test("crash({ seed }) keeps or loses unsynced directory operations, a rename as one", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory(DIR);
    const total = 32;
    for (let i = 0; i < total; i++) {
      await port.writeFileAtomic(`${DIR}/old-${i}`, new Uint8Array([i]));
    }
    for (let i = 0; i < total; i++) {
      await port.rename(`${DIR}/old-${i}`, `${DIR}/new-${i}`);
    }
    const report = port.crash({ seed: 5 });
    assert.equal(report.keptDirectoryOperations + report.lostDirectoryOperations, total);
    const names = await port.list(DIR);
    assert.equal(names.length, total, names.join(" "));
    let renamed = 0;
    for (let i = 0; i < total; i++) {
      const name = names.includes(`new-${i}`) ? `new-${i}` : `old-${i}`;
      assert.ok(names.includes(name));
      assert.deepEqual(await port.readFile(`${DIR}/${name}`), new Uint8Array([i]));
      if (name.startsWith("new")) renamed++;
    }
    assert.equal(renamed, report.keptDirectoryOperations);
    assert.ok(renamed > 0 && renamed < total, `renamed ${renamed}`);
  });

  test("crash() rejects a bad seed or probability with RangeError", () => {
    const port = new MemoryPort(runtimeName());
    assert.throws(() => port.crash({ seed: -1 }), RangeError);
    assert.throws(() => port.crash({ seed: 1.5 }), RangeError);
    assert.throws(() => port.crash({ seed: 1, keepProbability: 2 }), RangeError);
    assert.throws(() => port.crash({ keepProbability: 0.5 }), RangeError);
  });

  test("write() on a read-only handle fails with PERMISSION_DENIED", async () => {
    const { port, file, path } = await portWithFile("a", PAGE);
    await file.close();
    const reader = await port.openFile(path, { readOnly: true });
    await rejectsWithCode(reader.write(new Uint8Array(1), 0), "PERMISSION_DENIED", path);
    await reader.close();
  });

  test("failNext() fails the nth write with EIO, writing nothing", async () => {
    const { port, file, path } = await portWithFile("a", PAGE);
    port.failNext({ operation: "write", nth: 2, error: "EIO" });
    await file.write(new Uint8Array([1]), 0);
    await rejectsWithCode(file.write(new Uint8Array([2]), 1), "IO_ERROR", path);
    await file.write(new Uint8Array([3]), 2);
    assert.deepEqual((await port.readFile(path))?.subarray(0, 3), new Uint8Array([1, 0, 3]));
  });

  test("failNext() fails flushes with ENOSPC, leaving the data unflushed", async () => {
    const { port, file, path } = await portWithFile("a", 2 * PAGE);
    const mapping = await file.map();
    mapping.bytes.set(pattern(PAGE, 1), 0);
    await file.write(pattern(PAGE, 2), PAGE);
    port.failNext({ operation: "flush", error: "ENOSPC" });
    port.failNext({ operation: "flush", nth: 2, error: "EIO" });
    await rejectsWithCode(mapping.sync(0, PAGE), "NO_SPACE", path);
    await rejectsWithCode(file.datasync(), "IO_ERROR", path);
    assert.equal(file.pageCacheState(0, 0)?.dirtyPages, 2);
    port.crash();
    assert.deepEqual(await port.readFile(path), new Uint8Array(2 * PAGE));
  });

  test("failNext() fails the nth createFile, creating nothing", async () => {
    const port = new MemoryPort(runtimeName());
    await port.makeDirectory(DIR);
    port.failNext({ operation: "create", error: "ENOSPC" });
    await rejectsWithCode(port.createFile(`${DIR}/a`, PAGE), "NO_SPACE", `${DIR}/a`);
    assert.deepEqual(await port.list(DIR), []);
    await (await port.createFile(`${DIR}/a`, PAGE)).close();
  });

  test("failNext() rejects a bad nth with RangeError", () => {
    const port = new MemoryPort(runtimeName());
    for (const nth of [0, -1, 1.5]) {
      assert.throws(() => port.failNext({ operation: "write", nth, error: "EIO" }), RangeError);
    }
  });

  test("createFile() and write() beyond capacityBytes fail with NO_SPACE", async () => {
    const port = new MemoryPort(runtimeName(), { capacityBytes: 4 * PAGE });
    await port.makeDirectory(DIR);
    const file = await port.createFile(`${DIR}/a`, 3 * PAGE);
    assert.deepEqual(await port.diskSpace(DIR), {
      totalBytes: 4 * PAGE,
      availableBytes: PAGE,
    });
    await rejectsWithCode(port.createFile(`${DIR}/b`, 2 * PAGE), "NO_SPACE", `${DIR}/b`);
    await rejectsWithCode(file.write(new Uint8Array(2 * PAGE), 3 * PAGE), "NO_SPACE");
    port.capacityBytes = 8 * PAGE;
    await (await port.createFile(`${DIR}/b`, 2 * PAGE)).close();
    assert.throws(() => (port.capacityBytes = -1), RangeError);
  });

  test("createFile() of a 1 GiB segment allocates lazily and maps it whole", async () => {
    const { port, file, path } = await portWithFile("00000000000000000000", 0x4000_0000);
    const mapping = await file.map();
    assert.equal(mapping.bytes.length, 0x4000_0000);
    mapping.bytes.set(pattern(100), 0x3000_0000);
    await mapping.sync(0x3000_0000, 100);
    mapping.bytes[0x3000_1000] = 1;
    // 32 MiB around the writes: the probe compares every page it covers.
    assert.equal(file.pageCacheState(0x2f00_0000, 0x0200_0000)?.dirtyPages, 1);
    port.crash();
    const reopened = await port.openFile(path);
    const back = new Uint8Array(100);
    await reopened.read(back, 0x3000_0000);
    assert.deepEqual(back, pattern(100));
    await reopened.read(back.subarray(0, 1), 0x3000_1000);
    assert.equal(back[0], 0);
    await reopened.close();
  });
});
