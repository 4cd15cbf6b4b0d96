/**
 * Conformance suite of the runtime port: the same checks against every
 * adapter {@link availableAdapters} lists on this runtime (the FFI adapter
 * of the host, `portable` and `memory`). Checks that do not apply to an
 * adapter are skipped with the reason.
 *
 * Runs unchanged under `deno test -A`, `bun test` and
 * `node --import tsx --test`.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import process from "node:process";
import { describe, test } from "node:test";
import { MqStoreError, type MqStoreErrorCode } from "../src/errors.ts";
import {
  type AdapterName,
  availableAdapters,
  createPort,
  MemoryPort,
  type RuntimePort,
} from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import {
  hex,
  immutableDirectoriesWork,
  isRoot,
  pattern,
  runJsonFixture,
  setImmutable,
  withTempDirectory,
} from "./_helpers.ts";

const PAGE = 0x1000;
const GiB = 0x4000_0000;
/** 2^32: offsets at and above it need 64-bit file positions everywhere. */
const FOUR_GiB = 0x1_0000_0000;

/** Asserts that `promise` rejects with an {@link MqStoreError} of `code`. */
async function rejectsWithCode(
  promise: Promise<unknown> | (() => Promise<unknown>),
  code: MqStoreErrorCode,
  mentions?: string,
): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof MqStoreError, `expected MqStoreError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    if (mentions !== undefined) assert.match(error.message, new RegExp(escape(mentions)));
    return true;
  });
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** A fresh directory on the adapter's file system (in memory too). */
async function scratch<T>(
  port: RuntimePort,
  body: (directory: string) => Promise<T>,
): Promise<T> {
  return await withTempDirectory(async (directory) => {
    await port.makeDirectory(directory);
    return await body(directory);
  });
}

const created = new Map<AdapterName, RuntimePort | Error>();
for (const adapter of availableAdapters()) {
  try {
    created.set(adapter, await createPort({ adapter }));
  } catch (error) {
    created.set(adapter, error instanceof Error ? error : new Error(String(error)));
  }
}
const IMMUTABLE_DIRECTORIES = isRoot() && immutableDirectoriesWork();

for (const [adapter, portOrError] of created) {
  describe(`${adapter} adapter`, () => {
    if (portOrError instanceof Error) {
      test(`createPort() creates the ${adapter} adapter`, () => {
        throw portOrError;
      });
      return;
    }
    const port = portOrError;
    const inMemory = adapter === "memory";
    const native = port.canMap && !inMemory;
    const noMap = port.canMap ? false : `${adapter} has no mmap`;
    const notOnDisk = inMemory
      ? "memory files are invisible to node:fs and other processes"
      : false;

    test("createPort() reports the adapter", () => {
      assert.equal(port.adapter, adapter);
      assert.equal(port.pageSizeBytes % PAGE, 0);
    });

    test("bootId() names the running boot, the same for every call and process", async () => {
      const id = await port.bootId();
      assert.equal(await port.bootId(), id);
      if (inMemory) {
        // A simulated power loss is a reboot.
        const machine = new MemoryPort(runtimeName());
        const before = await machine.bootId();
        assert.ok(before !== undefined);
        machine.crash();
        const after = await machine.bootId();
        assert.ok(after !== undefined && after !== before, `${before} then ${after}`);
        assert.equal(await machine.bootId(), after);
      } else if (fs.existsSync("/proc/sys/kernel/random/boot_id")) {
        assert.equal(id, fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim());
      } else {
        assert.equal(id, undefined);
      }
    });

    test("createFile() creates a file of the exact size, reading zeros", async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/00000000000000000000`;
        const sizeBytes = 0x10_1000;
        const file = await port.createFile(path, sizeBytes);
        try {
          assert.equal(file.sizeBytes, sizeBytes);
          assert.equal((await port.stat(path))?.sizeBytes, sizeBytes);
          const tail = new Uint8Array(64).fill(0xff);
          assert.equal(await file.read(tail, sizeBytes - 64), 64);
          assert.deepEqual(tail, new Uint8Array(64));
          if (!inMemory) assert.equal(fs.statSync(path).size, sizeBytes);
          if (native) {
            // posix_fallocate allocated every block up front.
            assert.ok(fs.statSync(path).blocks * 512 >= sizeBytes);
          }
        } finally {
          await file.close();
        }
      });
    });

    test("createFile() fails with ALREADY_EXISTS on an existing path", async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/a`;
        await (await port.createFile(path, PAGE)).close();
        await rejectsWithCode(port.createFile(path, PAGE), "ALREADY_EXISTS", path);
      });
    });

    test("createFile() rejects sizes 0, -1 and 1.5 with RangeError", async () => {
      await scratch(port, async (directory) => {
        for (const sizeBytes of [0, -1, 1.5, Number.NaN]) {
          await assert.rejects(
            async () => await port.createFile(`${directory}/a`, sizeBytes),
            RangeError,
            `size ${sizeBytes}`,
          );
        }
        assert.equal(await port.stat(`${directory}/a`), undefined);
      });
    });

    test("createFile() fails with NOT_FOUND in a missing directory", async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/missing/a`;
        await rejectsWithCode(port.createFile(path, PAGE), "NOT_FOUND", path);
      });
    });

    test("createFile() fails with PERMISSION_DENIED in a directory of mode 0o500", {
      skip: inMemory
        ? "the memory file system has no permissions"
        : isRoot()
        ? "root bypasses mode bits (the immutable-directory test covers root)"
        : false,
    }, async () => {
      await scratch(port, async (directory) => {
        const readOnly = `${directory}/ro`;
        fs.mkdirSync(readOnly, { mode: 0o500 });
        try {
          await rejectsWithCode(
            port.createFile(`${readOnly}/a`, PAGE),
            "PERMISSION_DENIED",
            readOnly,
          );
        } finally {
          fs.chmodSync(readOnly, 0o700);
        }
      });
    });

    test("createFile() fails with PERMISSION_DENIED in an immutable directory, even as root", {
      skip: inMemory
        ? "the memory file system has no permissions"
        : IMMUTABLE_DIRECTORIES
        ? false
        : "needs root and chattr +i (CAP_LINUX_IMMUTABLE on ext4/xfs/btrfs)",
    }, async () => {
      await scratch(port, async (directory) => {
        const locked = `${directory}/immutable`;
        fs.mkdirSync(locked);
        assert.ok(setImmutable(locked, true));
        try {
          await rejectsWithCode(
            port.createFile(`${locked}/a`, PAGE),
            "PERMISSION_DENIED",
            locked,
          );
        } finally {
          setImmutable(locked, false);
        }
      });
    });

    test("Mapping.sync() flushes writes through the mapping, as the dirty-page probe shows", {
      skip: noMap,
    }, async () => {
      await scratch(port, async (directory) => {
        const sizeBytes = 16 * PAGE;
        const file = await port.createFile(`${directory}/a`, sizeBytes);
        const mapping = await file.map();
        try {
          assert.equal(mapping.fileOffset, 0);
          assert.equal(mapping.length, sizeBytes);
          assert.equal(mapping.bytes.length, sizeBytes);
          mapping.bytes.set(pattern(3 * PAGE), 2 * PAGE);
          const before = file.pageCacheState(0, sizeBytes);
          assert.ok(before !== undefined, "cachestat(2) is available");
          assert.ok(before.dirtyPages > 0, `dirty before sync: ${JSON.stringify(before)}`);
          await mapping.sync(0, sizeBytes);
          const after = file.pageCacheState(0, sizeBytes);
          assert.ok(after !== undefined);
          assert.equal(after.dirtyPages + after.writebackPages, 0, JSON.stringify(after));
          // The mapping and read() see the same bytes.
          const back = new Uint8Array(3 * PAGE);
          assert.equal(await file.read(back, 2 * PAGE), back.length);
          assert.deepEqual(back, pattern(3 * PAGE));
        } finally {
          mapping.unmap();
          await file.close();
        }
      });
    });

    test("FileHandle.datasync() flushes write(), as the dirty-page probe shows", async () => {
      await scratch(port, async (directory) => {
        const sizeBytes = 8 * PAGE;
        const file = await port.createFile(`${directory}/a`, sizeBytes);
        try {
          await file.write(pattern(PAGE + 10, 7), PAGE - 5);
          const before = file.pageCacheState(0, sizeBytes);
          if (port.adapter === "portable") {
            // No cachestat binding without FFI: the probe says so.
            assert.equal(before, undefined);
          } else {
            assert.ok(before !== undefined);
            assert.ok(before.dirtyPages > 0, JSON.stringify(before));
          }
          await file.datasync();
          const after = file.pageCacheState(0, sizeBytes);
          if (after !== undefined) {
            assert.equal(after.dirtyPages + after.writebackPages, 0, JSON.stringify(after));
          }
          const back = new Uint8Array(PAGE + 10);
          assert.equal(await file.read(back, PAGE - 5), back.length);
          assert.deepEqual(back, pattern(PAGE + 10, 7));
        } finally {
          await file.close();
        }
      });
    });

    test("FileHandle.writeSync() and datasyncSync() write and flush on the calling thread", async () => {
      await scratch(port, async (directory) => {
        const sizeBytes = 8 * PAGE;
        const file = await port.createFile(`${directory}/a`, sizeBytes);
        try {
          file.writeSync(pattern(2 * PAGE + 3, 9), PAGE - 1);
          const back = new Uint8Array(2 * PAGE + 3);
          assert.equal(await file.read(back, PAGE - 1), back.length);
          assert.deepEqual(back, pattern(2 * PAGE + 3, 9));
          const before = file.pageCacheState(0, sizeBytes);
          if (before !== undefined) assert.ok(before.dirtyPages > 0, JSON.stringify(before));
          assert.ok(file.datasyncSync !== undefined, "every adapter offers datasyncSync");
          file.datasyncSync();
          const after = file.pageCacheState(0, sizeBytes);
          if (after !== undefined) {
            assert.equal(after.dirtyPages + after.writebackPages, 0, JSON.stringify(after));
          }
          assert.throws(() => file.writeSync(new Uint8Array(1), -1), RangeError);
        } finally {
          await file.close();
        }
        assert.throws(() => file.writeSync(new Uint8Array(1), 0), { code: "CLOSED" });
        assert.throws(() => file.datasyncSync!(), { code: "CLOSED" });
      });
    });

    test("FileHandle.dataRanges() leaves out extents allocated and never written", async () => {
      await scratch(port, async (directory) => {
        const sizeBytes = 0x40_0000;
        const file = await port.createFile(`${directory}/a`, sizeBytes);
        try {
          const written = [0x100, 0x20_0007, 0x20_2000 - 1];
          for (const at of written) await file.write(Uint8Array.of(1), at);
          await file.datasync();
          // Out of the page cache, so only what the extents hold is data.
          file.adviseCache(0, sizeBytes, "dontneed");
          const ranges = file.dataRanges(0, sizeBytes);
          let at = 0;
          for (const range of ranges) {
            assert.ok(range.position >= at && range.length > 0, JSON.stringify(ranges));
            at = range.position + range.length;
          }
          assert.ok(at <= sizeBytes);
          for (const byte of written) {
            assert.ok(
              ranges.some((r) => r.position <= byte && byte < r.position + r.length),
              `byte ${byte} is in ${JSON.stringify(ranges)}`,
            );
          }
          if (native) {
            // The never-written last MiB is a hole to SEEK_DATA.
            assert.ok(at <= 0x30_0000, JSON.stringify(ranges));
          } else {
            assert.deepEqual(ranges, [{ position: 0, length: sizeBytes }]);
          }
          const inner = file.dataRanges(0x20_0000, 0x1000);
          assert.ok(
            inner.every((r) => r.position >= 0x20_0000 && r.position + r.length <= 0x20_1000),
          );
          assert.deepEqual(file.dataRanges(5, 0), []);
        } finally {
          await file.close();
        }
      });
    });

    test("a fresh child process reads back what write() and the mapping stored", {
      skip: notOnDisk,
    }, async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/a`;
        const file = await port.createFile(path, 8 * PAGE);
        try {
          await file.write(pattern(100, 1), 10);
          await file.datasync();
          if (port.canMap) {
            const mapping = await file.map(4 * PAGE, 4 * PAGE);
            mapping.bytes.set(pattern(200, 2), 123);
            await mapping.sync(0, 4 * PAGE);
            mapping.unmap();
          }
        } finally {
          await file.close();
        }
        const [written, mapped] = await runJsonFixture<string[]>("read_child.ts", [
          path,
          "10:100",
          `${4 * PAGE + 123}:200`,
        ]);
        assert.equal(written, hex(pattern(100, 1)));
        assert.equal(mapped, port.canMap ? hex(pattern(200, 2)) : hex(new Uint8Array(200)));
      });
    });

    test("FileHandle.write() and read() reach offsets beyond 2^32 in a sparse 5 GiB file", async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/big`;
        const sizeBytes = 5 * GiB;
        const position = FOUR_GiB + 12345;
        const file = await port.createFile(path, sizeBytes, { sparse: true });
        try {
          assert.equal(file.sizeBytes, sizeBytes);
          assert.equal((await port.stat(path))?.sizeBytes, sizeBytes);
          await file.write(pattern(300, 3), position);
          const back = new Uint8Array(300);
          assert.equal(await file.read(back, position), 300);
          assert.deepEqual(back, pattern(300, 3));
          // The same bytes 4 GiB lower are untouched (no 32-bit wrap-around).
          const low = new Uint8Array(300);
          await file.read(low, position - FOUR_GiB);
          assert.deepEqual(low, new Uint8Array(300));
          // Reading across the end stops at the end.
          assert.equal(await file.read(new Uint8Array(100), sizeBytes - 40), 40);
          if (!inMemory) {
            await file.datasync();
            const fd = fs.openSync(path, "r");
            try {
              const direct = new Uint8Array(300);
              assert.equal(fs.readSync(fd, direct, 0, 300, position), 300);
              assert.deepEqual(direct, pattern(300, 3));
            } finally {
              fs.closeSync(fd);
            }
          }
        } finally {
          await file.close();
        }
      });
    });

    test("FileHandle.map() maps at file offset 2^32 and the byte lands at 2^32 + x", {
      skip: noMap,
    }, async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/big`;
        const file = await port.createFile(path, 5 * GiB, { sparse: true });
        try {
          const mapping = await file.map(FOUR_GiB, 16 * PAGE);
          try {
            assert.equal(mapping.fileOffset, FOUR_GiB);
            mapping.bytes[4321] = 0xa5;
            mapping.bytes[16 * PAGE - 1] = 0x5a;
            await mapping.sync(0, 16 * PAGE);
          } finally {
            mapping.unmap();
          }
          const back = new Uint8Array(1);
          await file.read(back, FOUR_GiB + 4321);
          assert.equal(back[0], 0xa5);
          await file.read(back, 4321);
          assert.equal(back[0], 0);
          if (!inMemory) {
            const fd = fs.openSync(path, "r");
            try {
              const direct = new Uint8Array(1);
              fs.readSync(fd, direct, 0, 1, FOUR_GiB + 4321);
              assert.equal(direct[0], 0xa5);
              fs.readSync(fd, direct, 0, 1, FOUR_GiB + 16 * PAGE - 1);
              assert.equal(direct[0], 0x5a);
            } finally {
              fs.closeSync(fd);
            }
          }
        } finally {
          await file.close();
        }
      });
    });

    test("FileHandle.map() rejects an unaligned offset and a range past the end", {
      skip: noMap,
    }, async () => {
      await scratch(port, async (directory) => {
        const file = await port.createFile(`${directory}/a`, 4 * PAGE);
        try {
          await assert.rejects(async () => await file.map(100, PAGE), RangeError);
          await assert.rejects(async () => await file.map(0, 5 * PAGE), RangeError);
        } finally {
          await file.close();
        }
      });
    });

    test("FileHandle.map() on the portable adapter fails with UNSUPPORTED", {
      skip: port.canMap ? `${adapter} can map` : false,
    }, async () => {
      await scratch(port, async (directory) => {
        const file = await port.createFile(`${directory}/a`, PAGE);
        try {
          await rejectsWithCode(file.map(), "UNSUPPORTED");
        } finally {
          await file.close();
        }
      });
    });

    test(
      "Mapping.unmap() leaves a view that is empty or reads zeros, and later operations reject",
      {
        skip: noMap,
      },
      async () => {
        await scratch(port, async (directory) => {
          const file = await port.createFile(`${directory}/a`, 4 * PAGE);
          try {
            const mapping = await file.map();
            const view = mapping.bytes;
            view.set(pattern(PAGE, 9), PAGE);
            await mapping.sync(PAGE, PAGE);
            mapping.unmap();
            mapping.unmap();
            // Touching the old view must not crash the process.
            const stale = mapping.bytes;
            assert.ok(
              stale.length === 0 || stale.every((byte) => byte === 0),
              `stale view of length ${stale.length} must be empty or zeros`,
            );
            assert.ok(view.length === 0 || view.every((byte) => byte === 0));
            await rejectsWithCode(mapping.sync(0, PAGE), "CLOSED");
            await rejectsWithCode(mapping.populate(0, PAGE), "CLOSED");
            assert.equal(mapping.lock(), false);
            mapping.unlock();
            mapping.advise(0, PAGE, "random");
            // The file keeps what was written through the mapping.
            const back = new Uint8Array(PAGE);
            await file.read(back, PAGE);
            assert.deepEqual(back, pattern(PAGE, 9));
          } finally {
            await file.close();
          }
        });
      },
    );

    test("Mapping.populate(), advise(), lock() and unlock() accept a live mapping", {
      skip: noMap,
    }, async () => {
      await scratch(port, async (directory) => {
        const file = await port.createFile(`${directory}/a`, 8 * PAGE);
        const mapping = await file.map();
        try {
          mapping.advise(0, 8 * PAGE, "random");
          await mapping.populate(0, 8 * PAGE);
          if (mapping.lock()) mapping.unlock();
          file.adviseCache(0, 8 * PAGE, "dontneed");
          assert.throws(() => mapping.advise(0, 9 * PAGE, "random"), RangeError);
        } finally {
          mapping.unmap();
          await file.close();
        }
      });
    });

    test("Mapping.populate() leaves the bytes there and those written while it runs", {
      skip: noMap,
    }, async () => {
      // The FFI adapters read the range from another thread after the
      // pre-fault (see NativeLibc.madviseAsync): it must never write.
      await scratch(port, async (directory) => {
        const file = await port.createFile(`${directory}/a`, 8 * PAGE);
        const mapping = await file.map();
        try {
          mapping.bytes.set(pattern(3 * PAGE, 4), 0);
          // A range ending inside a page, from inside one.
          const populated = mapping.populate(PAGE + 5, 6 * PAGE + 11, { read: true });
          mapping.bytes.set(pattern(2 * PAGE, 6), 3 * PAGE);
          await populated;
          await mapping.populate(7 * PAGE, PAGE, { read: true });
          const expected = new Uint8Array(8 * PAGE);
          expected.set(pattern(3 * PAGE, 4), 0);
          expected.set(pattern(2 * PAGE, 6), 3 * PAGE);
          assert.deepEqual(mapping.bytes, expected);
          await mapping.sync(0, 8 * PAGE);
          const back = new Uint8Array(8 * PAGE);
          await file.read(back, 0);
          assert.deepEqual(back, expected);
        } finally {
          mapping.unmap();
          await file.close();
        }
      });
    });

    test("lockDirectory() refuses a second lock in this process and works again after release", async () => {
      await scratch(port, async (directory) => {
        const lock = await port.lockDirectory(directory);
        await rejectsWithCode(port.lockDirectory(directory), "LOCKED", directory);
        await lock.release();
        await lock.release();
        const again = await port.lockDirectory(directory);
        await again.release();
      });
    });

    test("lockDirectory() refuses another process with LOCKED naming the holder pid", {
      skip: inMemory ? "the memory adapter's lock is in-process only" : false,
    }, async () => {
      await scratch(port, async (directory) => {
        const lock = await port.lockDirectory(directory);
        let released = false;
        try {
          const refused = await runJsonFixture<{ code?: string; message?: string }>(
            "lock_child.ts",
            [adapter, directory],
          );
          assert.equal(refused.code, "LOCKED", JSON.stringify(refused));
          assert.match(refused.message ?? "", new RegExp(`pid ${process.pid}\\b`));
          await lock.release();
          released = true;
          const granted = await runJsonFixture<{ locked?: boolean }>(
            "lock_child.ts",
            [adapter, directory],
          );
          assert.deepEqual(granted, { locked: true });
        } finally {
          if (!released) await lock.release();
        }
      });
    });

    test("lockDirectory() fails with NOT_FOUND on a missing directory", async () => {
      await scratch(port, async (directory) => {
        await rejectsWithCode(port.lockDirectory(`${directory}/missing`), "NOT_FOUND");
      });
    });

    test("writeFileAtomic() replaces a file that readFile() returns", async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/checkpoint`;
        assert.equal(await port.readFile(path), undefined);
        await port.writeFileAtomic(path, pattern(PAGE, 4));
        assert.deepEqual(await port.readFile(path), pattern(PAGE, 4));
        await port.writeFileAtomic(path, new Uint8Array([1, 2, 3]));
        assert.deepEqual(await port.readFile(path), new Uint8Array([1, 2, 3]));
        assert.deepEqual(await port.list(directory), ["checkpoint"]);
        if (!inMemory) {
          assert.deepEqual(new Uint8Array(fs.readFileSync(path)), new Uint8Array([1, 2, 3]));
        }
      });
    });

    test("rename(), remove(), list() and stat() manage directory entries", async () => {
      await scratch(port, async (directory) => {
        await port.makeDirectory(`${directory}/sub/deeper`);
        await port.makeDirectory(`${directory}/sub/deeper`);
        for (const name of ["b", "a", "c"]) {
          await (await port.createFile(`${directory}/sub/${name}`, PAGE)).close();
        }
        assert.deepEqual(await port.list(`${directory}/sub`), ["a", "b", "c", "deeper"]);
        const fileStat = await port.stat(`${directory}/sub/a`);
        assert.ok(fileStat?.isFile && !fileStat.isDirectory);
        assert.equal(fileStat.sizeBytes, PAGE);
        assert.ok(Number.isFinite(fileStat.modifiedMs) && fileStat.modifiedMs > 0);
        const directoryStat = await port.stat(`${directory}/sub/deeper`);
        assert.ok(directoryStat?.isDirectory && !directoryStat.isFile);

        await port.rename(`${directory}/sub/a`, `${directory}/sub/z`);
        await port.rename(`${directory}/sub/b`, `${directory}/sub/c`);
        assert.deepEqual(await port.list(`${directory}/sub`), ["c", "deeper", "z"]);
        await rejectsWithCode(
          port.rename(`${directory}/sub/a`, `${directory}/sub/y`),
          "NOT_FOUND",
        );

        await port.remove(`${directory}/sub/z`);
        await port.remove(`${directory}/sub/z`);
        assert.equal(await port.stat(`${directory}/sub/z`), undefined);
        assert.deepEqual(await port.list(`${directory}/sub`), ["c", "deeper"]);
        await rejectsWithCode(port.list(`${directory}/missing`), "NOT_FOUND");
        await rejectsWithCode(port.openFile(`${directory}/missing`), "NOT_FOUND");
      });
    });

    test("openFile() opens an existing file read-only or read-write", async () => {
      await scratch(port, async (directory) => {
        const path = `${directory}/a`;
        const created = await port.createFile(path, 2 * PAGE);
        await created.write(pattern(10, 5), PAGE);
        await created.close();
        await created.close();
        await rejectsWithCode(created.read(new Uint8Array(1), 0), "CLOSED");

        const reader = await port.openFile(path, { readOnly: true });
        try {
          assert.equal(reader.readOnly, true);
          assert.equal(reader.sizeBytes, 2 * PAGE);
          const back = new Uint8Array(10);
          assert.equal(await reader.read(back, PAGE), 10);
          assert.deepEqual(back, pattern(10, 5));
        } finally {
          await reader.close();
        }
        const writer = await port.openFile(path);
        try {
          assert.equal(writer.readOnly, false);
          await writer.write(new Uint8Array([0xee]), 0);
        } finally {
          await writer.close();
        }
        assert.equal((await port.readFile(path))?.[0], 0xee);
      });
    });

    test("syncDirectory() syncs a directory and fails with NOT_FOUND on a missing one", async () => {
      await scratch(port, async (directory) => {
        await (await port.createFile(`${directory}/a`, PAGE)).close();
        await port.syncDirectory(directory);
        await rejectsWithCode(port.syncDirectory(`${directory}/missing`), "NOT_FOUND");
      });
    });

    test("diskSpace() reports a sane total and available space", async () => {
      await scratch(port, async (directory) => {
        const space = await port.diskSpace(directory);
        assert.ok(Number.isSafeInteger(space.totalBytes) && space.totalBytes > 0);
        assert.ok(Number.isSafeInteger(space.availableBytes));
        assert.ok(space.availableBytes >= 0 && space.availableBytes <= space.totalBytes);
        if (port.adapter === "memory") return;
        // Reserved blocks count neither as used nor as available (df's
        // Use%): within a GiB of what statfs says, as other writers move it.
        const stats = fs.statfsSync(directory);
        const expected = (stats.blocks - stats.bfree + stats.bavail) * stats.bsize;
        assert.ok(
          Math.abs(space.totalBytes - expected) <= 0x4000_0000,
          `total ${space.totalBytes}, used + available ${expected}`,
        );
      });
    });
  });
}
