/**
 * Deno-only behaviour of the `deno-ffi` binding (`src/runtime/deno.ts`):
 * detaching views before `munmap`, keeping a range mapped while a
 * nonblocking call runs on it, 64-bit offsets, page alignment of
 * `msync`/`madvise`, read-only protection, OFD locks across processes,
 * `cachestat`, and the fallback without `--allow-ffi`. Under Bun and Node
 * every test is skipped. The cross-adapter behaviour of the port is tested
 * in `runtime_port_test.ts`.
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import { test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { LINUX, type NativeLibc } from "../src/runtime/_native.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { assertOfdLockExcludesSecondDescription } from "./_native_checks.ts";

const SKIP = runtimeName() === "deno" ? false : "deno-ffi runs on Deno only";
const DENO_MODULE = new URL("../src/runtime/deno.ts", import.meta.url).href;
const FS_PORT_MODULE = new URL("../src/runtime/_fs_port.ts", import.meta.url).href;
const MOD_MODULE = new URL("../src/runtime/mod.ts", import.meta.url).href;
const OFFSET_4_GIB = 2 ** 32;

/** Runs `body` with the binding and a fresh temporary directory, removed after. */
async function withLibc(
  body: (libc: NativeLibc, directory: string) => Promise<void> | void,
): Promise<void> {
  const { loadLibc } = await import(DENO_MODULE) as typeof import("../src/runtime/deno.ts");
  const directory = fs.mkdtempSync(`${os.tmpdir()}/mqstore-`);
  try {
    await body(loadLibc(), directory);
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

/** Creates a sparse file of `sizeBytes` and returns an open read-write descriptor. */
function sparseFile(path: string, sizeBytes: number): number {
  const fd = fs.openSync(path, "w+");
  fs.ftruncateSync(fd, sizeBytes);
  return fd;
}

/** The permissions column of the lines of /proc/self/maps that map `path`. */
function mappedAs(path: string): string[] {
  return fs.readFileSync("/proc/self/maps", "utf8").split("\n")
    .filter((line) => line.endsWith(` ${path}`))
    .map((line) => line.split(/\s+/)[1] ?? "");
}

/** Runs a Deno script with the given permission flags; returns its stdout parsed as JSON. */
async function runChild(
  directory: string,
  flags: string[],
  source: string,
  args: string[] = [],
): Promise<unknown> {
  const script = `${directory}/child.ts`;
  fs.writeFileSync(script, source);
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-config", ...flags, script, ...args],
    cwd: directory,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 0, stderr);
  return JSON.parse(new TextDecoder().decode(output.stdout));
}

test(
  "loadLibc() returns one cached binding (deno-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc) => {
      const { loadLibc } = await import(DENO_MODULE) as typeof import("../src/runtime/deno.ts");
      assert.equal(loadLibc(), libc);
      assert.equal(libc.runtime, "deno");
      assert.equal(libc.adapter, "deno-ffi");
      assert.ok(libc.pageSizeBytes >= 0x1000);
      assert.equal(libc.pageSizeBytes & (libc.pageSizeBytes - 1), 0);
    }),
);

test(
  "retire() detaches every view before munmap (deno-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const length = 4 * libc.pageSizeBytes;
      const fd = sparseFile(path, length);
      try {
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        const stale = mapping.bytes;
        const tail = stale.subarray(0x100);
        const words = new Uint32Array(stale.buffer);
        const view = new DataView(stale.buffer);
        stale.fill(0xab);
        assert.equal(await libc.msync(mapping, 0, length), 0);
        assert.deepEqual(mappedAs(path), ["rw-s"]);
        libc.retire(mapping);
        libc.retire(mapping);
        assert.equal((stale.buffer as ArrayBuffer).detached, true);
        assert.deepEqual([stale.length, tail.length, words.length], [0, 0, 0]);
        // Reads and writes of a detached view never reach the old address.
        assert.equal(stale[0], undefined);
        assert.equal(tail[0x10], undefined);
        stale[0] = 1;
        assert.equal(stale[0], undefined);
        assert.throws(() => view.getUint8(0), TypeError);
        // The range is unmapped and the file kept what was synced.
        assert.deepEqual(mappedAs(path), []);
        assert.ok(fs.readFileSync(path).every((byte) => byte === 0xab));
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test("retire() keeps the range mapped until an in-flight msync returns (deno-ffi)", {
  skip: SKIP,
}, () =>
  withLibc(async (libc, directory) => {
    const path = `${directory}/file`;
    const length = 0x100 * libc.pageSizeBytes;
    const fd = sparseFile(path, length);
    try {
      const mapping = libc.mmap({ fd, path }, 0, length, true);
      for (let position = 0; position < length; position += libc.pageSizeBytes) {
        mapping.bytes[position] = 0x5a;
      }
      const flushed = libc.msync(mapping, 0, length);
      libc.retire(mapping);
      assert.equal(mapping.bytes.length, 0);
      // munmap waits for the msync running on another thread.
      assert.deepEqual(mappedAs(path), ["rw-s"]);
      assert.equal(await flushed, 0);
      assert.deepEqual(mappedAs(path), []);
      // A call after retire() never touches the address.
      assert.notEqual(await libc.msync(mapping, 0, length), 0);
      assert.notEqual(libc.madvise(mapping, 0, length, LINUX.MADV_DONTNEED), 0);
    } finally {
      fs.closeSync(fd);
    }
  }));

test(
  "mmap() maps file offset 2^32, not offset 0 (deno-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/big`;
      const fd = sparseFile(path, OFFSET_4_GIB + 2 * libc.pageSizeBytes);
      try {
        fs.writeSync(fd, new TextEncoder().encode("high"), 0, 4, OFFSET_4_GIB + 0x64);
        fs.writeSync(fd, new TextEncoder().encode("low!"), 0, 4, 0x64);
        const mapping = libc.mmap({ fd, path }, OFFSET_4_GIB, 2 * libc.pageSizeBytes, true);
        assert.equal(new TextDecoder().decode(mapping.bytes.subarray(0x64, 0x68)), "high");
        mapping.bytes.set(new TextEncoder().encode("view"), 0xc8);
        assert.equal(await libc.msync(mapping, 0xc8, 4), 0);
        const back = new Uint8Array(4);
        fs.readSync(fd, back, 0, 4, OFFSET_4_GIB + 0xc8);
        assert.equal(new TextDecoder().decode(back), "view");
        fs.readSync(fd, back, 0, 4, 0xc8);
        assert.deepEqual([...back], [0, 0, 0, 0]);
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test("msync() aligns the start down to the page and flushes only the range (deno-ffi)", {
  skip: SKIP,
}, () =>
  withLibc(async (libc, directory) => {
    const path = `${directory}/file`;
    const page = libc.pageSizeBytes;
    const length = 4 * page;
    const fd = fs.openSync(path, "w+");
    try {
      assert.equal(libc.fallocate(fd, 0, length), 0);
      const mapping = libc.mmap({ fd, path }, 0, length, true);
      mapping.bytes[page + 0x10] = 0xab;
      mapping.bytes[3 * page] = 0xcd;
      // An unaligned address would be EINVAL, reported as EIO (5).
      assert.equal(await libc.msync(mapping, page + 1, 0x20), 0);
      const flushed = libc.cachestat(fd, page, page);
      if (flushed !== undefined) { // undefined: a kernel before 6.5.
        assert.equal(flushed.dirtyPages, 0);
        assert.equal(libc.cachestat(fd, 3 * page, page)?.dirtyPages, 1);
      }
      assert.equal(libc.madvise(mapping, page + 0x10, 0x100, LINUX.MADV_WILLNEED), 0);
      assert.throws(() => libc.madvise(mapping, page, length, LINUX.MADV_WILLNEED), RangeError);
      libc.retire(mapping);
    } finally {
      fs.closeSync(fd);
    }
  }));

test(
  "madviseAsync() pre-faults a range for writing (deno-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const pages = 0x10;
      const length = pages * libc.pageSizeBytes;
      const fd = fs.openSync(path, "w+");
      try {
        assert.equal(libc.fallocate(fd, 0, length), 0);
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        const errno = await libc.madviseAsync(
          mapping,
          1,
          length - 1,
          LINUX.MADV_POPULATE_WRITE,
        );
        // EINVAL (22): a kernel before 5.14, which the port skips.
        assert.ok(errno === 0 || errno === 0x16, `errno ${errno}`);
        const state = libc.cachestat(fd, 0, length);
        if (errno === 0 && state !== undefined) assert.equal(state.cachedPages, pages);
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test("mmap() maps a read-only descriptor PROT_READ and reports refusals (deno-ffi)", {
  skip: SKIP,
}, () =>
  withLibc((libc, directory) => {
    const path = `${directory}/file`;
    fs.writeFileSync(path, new Uint8Array(libc.pageSizeBytes).fill(0x7e));
    const fd = fs.openSync(path, "r");
    try {
      const mapping = libc.mmap({ fd, path }, 0, libc.pageSizeBytes, false);
      assert.deepEqual(mappedAs(path), ["r--s"]);
      assert.equal(mapping.bytes[0x123], 0x7e);
      libc.retire(mapping);
      // A shared writable mapping of a read-only descriptor is EACCES.
      assert.throws(
        () => libc.mmap({ fd, path }, 0, libc.pageSizeBytes, true),
        (error) =>
          error instanceof MqStoreError && error.code === "PERMISSION_DENIED" &&
          error.message.includes(`map ${libc.pageSizeBytes} bytes at offset 0 of ${path}`),
      );
      assert.deepEqual(mappedAs(path), []);
    } finally {
      fs.closeSync(fd);
    }
  }));

test(
  "fcntlLock() refuses a second open file description (deno-ffi)",
  { skip: SKIP },
  () => withLibc((libc, directory) => assertOfdLockExcludesSecondDescription(libc, directory)),
);

test(
  "cachestat() counts dirty pages until msync (deno-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const pages = 0x10;
      const length = pages * libc.pageSizeBytes;
      const fd = fs.openSync(path, "w+");
      try {
        assert.equal(libc.fallocate(fd, 0, length), 0);
        assert.equal(fs.fstatSync(fd).size, length);
        const before = libc.cachestat(fd, 0, length);
        if (before === undefined) return; // A kernel before 6.5: nothing to count.
        assert.equal(before.dirtyPages, 0);
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        for (let page = 0; page < pages; page++) mapping.bytes[page * libc.pageSizeBytes] = 1;
        assert.equal(libc.cachestat(fd, 0, length)?.dirtyPages, pages);
        assert.equal(await libc.msync(mapping, 0, length), 0);
        assert.equal(libc.cachestat(fd, 0, length)?.dirtyPages, 0);
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test("lockDirectory() refuses a second process, naming the holder (deno-ffi)", {
  skip: SKIP,
}, () =>
  withLibc(async (libc, directory) => {
    const { FsPort } = await import(FS_PORT_MODULE) as typeof import("../src/runtime/_fs_port.ts");
    const store = `${directory}/store`;
    fs.mkdirSync(store);
    const port = new FsPort("deno", libc);
    const lock = await port.lockDirectory(store);
    try {
      await assert.rejects(
        port.lockDirectory(store),
        (error) => error instanceof MqStoreError && error.code === "LOCKED",
      );
      const child = await runChild(
        directory,
        ["--allow-all"],
        `
        import { FsPort } from ${JSON.stringify(FS_PORT_MODULE)};
        import { loadLibc } from ${JSON.stringify(DENO_MODULE)};
        const port = new FsPort("deno", loadLibc());
        try {
          await port.lockDirectory(Deno.args[0]);
          console.log(JSON.stringify({ code: "none" }));
        } catch (error) {
          console.log(JSON.stringify({ code: error.code, message: error.message }));
        }
        `,
        [store],
      ) as { code: string; message: string };
      assert.equal(child.code, "LOCKED");
      assert.ok(child.message.includes(`pid ${process.pid} (deno-ffi)`), child.message);
    } finally {
      await lock.release();
    }
  }));

test("createPort() falls back to portable with one notice without --allow-ffi (deno-ffi)", {
  skip: SKIP,
}, () =>
  withLibc(async (_libc, directory) => {
    const child = await runChild(
      directory,
      ["--allow-read", "--allow-write", "--allow-env"],
      `
      import { createPort } from ${JSON.stringify(MOD_MODULE)};
      import { loadLibc } from ${JSON.stringify(DENO_MODULE)};
      let code = "none";
      try {
        loadLibc();
      } catch (error) {
        code = error.code;
      }
      const notices = [];
      const port = await createPort({ onNotice: (message) => notices.push(message) });
      console.log(JSON.stringify({ code, adapter: port.adapter, notices }));
      `,
    ) as { code: string; adapter: string; notices: string[] };
    assert.equal(child.code, "PERMISSION_DENIED");
    assert.equal(child.adapter, "portable");
    assert.equal(child.notices.length, 1);
    assert.match(child.notices[0] ?? "", /^mqstore: deno-ffi unavailable .*--allow-ffi[^\n]*$/);
  }));
