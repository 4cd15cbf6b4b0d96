/**
 * Bun-only behaviour of the `bun-ffi` binding (`src/runtime/bun.ts`) and its
 * worker threads (`src/runtime/_bun_worker.ts`): views at 64-bit offsets,
 * retiring by `transfer(0)` with the unmap deferred past calls in flight,
 * read-only mappings, range-accurate `msync` on the flush workers (also
 * after the file handle was closed), the `madvise` worker, OFD locks,
 * `cachestat`. Under Deno and Node every test is skipped. The cross-adapter behaviour of the
 * port is tested in `runtime_port_test.ts`.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import { test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { LIBC_CALL, LibcWorker } from "../src/runtime/_bun_worker.ts";
import { LINUX, type NativeLibc } from "../src/runtime/_native.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { createPort } from "../src/runtime/mod.ts";
import { assertOfdLockExcludesSecondDescription } from "./_native_checks.ts";

const SKIP = runtimeName() === "bun" ? false : "bun-ffi runs on Bun only";
const BUN_MODULE = new URL("../src/runtime/bun.ts", import.meta.url).href;
const OFFSET_4_GIB = 2 ** 32;
/** What the kernel (and the binding, for a retired mapping) answers for an unmapped range. */
const ENOMEM = 0xc;

/** Runs `body` with the binding and a fresh temporary directory, removed after. */
async function withLibc(
  body: (libc: NativeLibc, directory: string) => Promise<void> | void,
): Promise<void> {
  const { loadLibc } = await import(BUN_MODULE) as typeof import("../src/runtime/bun.ts");
  const directory = fs.mkdtempSync(`${os.tmpdir()}/mqstore-`);
  try {
    await body(await loadLibc(), directory);
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

/** The /proc/self/maps lines of mappings of `path`. */
function mapsOf(path: string): string[] {
  return fs.readFileSync("/proc/self/maps", "utf8").split("\n").filter((line) =>
    line.endsWith(path)
  );
}

test(
  "loadLibc() maps file offset 2^32, not offset 0 (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/big`;
      const fd = sparseFile(path, OFFSET_4_GIB + 2 * libc.pageSizeBytes);
      try {
        fs.writeSync(fd, Buffer.from("high"), 0, 4, OFFSET_4_GIB + 0x64);
        fs.writeSync(fd, Buffer.from("low!"), 0, 4, 0x64);
        const mapping = libc.mmap({ fd, path }, OFFSET_4_GIB, 2 * libc.pageSizeBytes, true);
        assert.equal(mapping.length, 2 * libc.pageSizeBytes);
        assert.equal(Buffer.from(mapping.bytes.subarray(0x64, 0x68)).toString(), "high");
        mapping.bytes.set(Buffer.from("view"), 0xc8);
        assert.equal(await libc.msync(mapping, 0xc8, 4), 0);
        const back = Buffer.alloc(4);
        fs.readSync(fd, back, 0, 4, OFFSET_4_GIB + 0xc8);
        assert.equal(back.toString(), "view");
        fs.readSync(fd, back, 0, 4, 0xc8);
        assert.deepEqual([...back], [0, 0, 0, 0]);
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "retire() detaches every view and unmaps the range (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc((libc, directory) => {
      const path = `${directory}/file`;
      const length = 4 * libc.pageSizeBytes;
      const fd = sparseFile(path, length);
      try {
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        const stale = mapping.bytes.subarray(libc.pageSizeBytes);
        stale[0] = 0xab;
        const [line] = mapsOf(path);
        assert.match(line ?? "", / rw-s /);
        libc.retire(mapping);
        libc.retire(mapping);
        assert.equal(mapping.bytes.length, 0);
        assert.equal(stale.length, 0);
        assert.equal(stale[0], undefined);
        assert.deepEqual(mapsOf(path), []);
        assert.equal(fs.readFileSync(path)[libc.pageSizeBytes], 0xab);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "mmap() makes the view at the first bytes read; a mapping retired unviewed is unmapped (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      // A variable specifier keeps deno check (which has no Bun types) from resolving bun:jsc.
      const specifier = "bun:jsc";
      const { heapStats } = await import(specifier) as {
        heapStats(): { extraMemorySize: number };
      };
      // A full collection first: one the view's report may start during
      // the test then frees no other buffer's count (CI saw one do so).
      const collect = (globalThis as { Bun?: { gc(full: boolean): void } }).Bun?.gc;
      const path = `${directory}/file`;
      const length = 64 * 2 ** 20;
      const fd = sparseFile(path, length);
      try {
        collect?.(true);
        const before = heapStats().extraMemorySize;
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        // JavaScriptCore counts a view's whole length as heap while it lives.
        assert.ok(heapStats().extraMemorySize - before < length / 2, "no view at mmap");
        assert.equal(await libc.madviseAsync(mapping, 0, length, LINUX.MADV_POPULATE_WRITE), 0);
        assert.equal(await libc.msync(mapping, 0, libc.pageSizeBytes), 0);
        assert.ok(
          heapStats().extraMemorySize - before < length / 2,
          "no view for the address calls",
        );
        collect?.(true);
        const beforeView = heapStats().extraMemorySize;
        mapping.bytes[5] = 7;
        assert.ok(
          heapStats().extraMemorySize - beforeView >= length,
          "the view at the first read",
        );
        assert.equal(mapping.bytes.length, length);
        libc.retire(mapping);
        assert.equal(mapping.bytes.length, 0);
        const read = new Uint8Array(8);
        fs.readSync(fd, read, 0, 8, 0);
        assert.deepEqual([...read], [0, 0, 0, 0, 0, 7, 0, 0]);

        const unviewed = libc.mmap({ fd, path }, 0, length, true);
        assert.equal(mapsOf(path).length, 1);
        libc.retire(unviewed);
        assert.equal(unviewed.bytes.length, 0, "a mapping retired unviewed reads empty");
        assert.deepEqual(mapsOf(path), []);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "mmap() maps read-only with PROT_READ and retire() unmaps it (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc((libc, directory) => {
      const path = `${directory}/file`;
      const length = 2 * libc.pageSizeBytes;
      fs.writeFileSync(path, new Uint8Array(length).fill(0x5a));
      const fd = fs.openSync(path, "r");
      try {
        const mapping = libc.mmap({ fd, path }, libc.pageSizeBytes, libc.pageSizeBytes, false);
        const lines = mapsOf(path);
        assert.equal(lines.length, 1);
        assert.match(lines[0] ?? "", / r--s 00001000 /);
        assert.ok(mapping.bytes.every((byte) => byte === 0x5a));
        libc.retire(mapping);
        assert.equal(mapping.bytes.length, 0);
        assert.deepEqual(mapsOf(path), []);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "mmap() refuses a range past the end of the file (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc((libc, directory) => {
      const path = `${directory}/file`;
      const fd = sparseFile(path, libc.pageSizeBytes);
      try {
        for (const writable of [true, false]) {
          assert.throws(
            () => libc.mmap({ fd, path }, 0, 2 * libc.pageSizeBytes, writable),
            (error) => error instanceof MqStoreError && error.code === "INVALID_FILE",
          );
        }
        assert.deepEqual(mapsOf(path), []);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "msync() writes back only the pages of its range (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const page = libc.pageSizeBytes;
      const pages = 0x10;
      const length = pages * page;
      const fd = fs.openSync(path, "w+");
      try {
        assert.equal(libc.fallocate(fd, 0, length), 0);
        assert.equal(fs.fstatSync(fd).size, length);
        if (libc.cachestat(fd, 0, length) === undefined) return; // A kernel before 6.5.
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        for (let at = 0; at < length; at += page) mapping.bytes[at] = 1;
        assert.equal(libc.cachestat(fd, 0, length)?.dirtyPages, pages);
        // An unaligned position: the flush starts at its page.
        assert.equal(await libc.msync(mapping, page + 1, 1), 0);
        assert.equal(libc.cachestat(fd, page, page)?.dirtyPages, 0);
        assert.equal(libc.cachestat(fd, 0, page)?.dirtyPages, 1);
        assert.equal(libc.cachestat(fd, 2 * page, length - 2 * page)?.dirtyPages, pages - 2);
        assert.equal(await libc.msync(mapping, 0, length), 0);
        assert.equal(libc.cachestat(fd, 0, length)?.dirtyPages, 0);
        libc.retire(mapping);
        assert.equal(await libc.msync(mapping, 0, length), ENOMEM);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "Mapping.sync() after populate() cleans the synced page and leaves the others dirty (bun-ffi)",
  { skip: SKIP },
  async () => {
    const port = await createPort({ adapter: "bun-ffi" });
    const directory = fs.mkdtempSync(`${os.tmpdir()}/mqstore-`);
    try {
      const page = port.pageSizeBytes;
      const pages = 0x40;
      const synced = 0x21;
      const file = await port.createFile(`${directory}/segment`, pages * page);
      const mapping = await file.map();
      try {
        if (file.pageCacheState(0, pages * page) === undefined) return; // Before Linux 6.5.
        mapping.advise(0, pages * page, "random");
        await mapping.populate(0, pages * page);
        // MADV_POPULATE_WRITE dirties every page it faults in: fdatasync
        // would write all of them, msync of a range only that range.
        assert.equal(file.pageCacheState(0, pages * page)?.dirtyPages, pages);
        mapping.bytes.fill(0x7e, synced * page, (synced + 1) * page);
        await mapping.sync(synced * page, page);
        assert.equal(file.pageCacheState(synced * page, page)?.dirtyPages, 0);
        assert.equal(file.pageCacheState((synced - 1) * page, page)?.dirtyPages, 1);
        assert.equal(file.pageCacheState((synced + 1) * page, page)?.dirtyPages, 1);
        assert.ok((file.pageCacheState(0, pages * page)?.dirtyPages ?? 0) > 0);
        const back = Buffer.alloc(page);
        const fd = fs.openSync(`${directory}/segment`, "r");
        fs.readSync(fd, back, 0, page, synced * page);
        fs.closeSync(fd);
        assert.ok(back.every((byte) => byte === 0x7e));
      } finally {
        mapping.unmap();
        await file.close();
      }
    } finally {
      fs.rmSync(directory, { recursive: true, force: true });
    }
  },
);

test(
  "retire() detaches at once and unmaps only after the msync in flight answered (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const length = 0x100 * libc.pageSizeBytes;
      const fd = fs.openSync(path, "w+");
      try {
        assert.equal(libc.fallocate(fd, 0, length), 0);
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        mapping.bytes.fill(0x3c);
        const flushed = libc.msync(mapping, 0, length);
        libc.retire(mapping);
        // The answer cannot have been delivered yet: it needs this turn to end.
        assert.equal(mapping.bytes.length, 0);
        assert.equal(mapsOf(path).length, 1);
        assert.equal(await flushed, 0);
        assert.deepEqual(mapsOf(path), []);
        if (libc.cachestat(fd, 0, length) !== undefined) {
          assert.equal(libc.cachestat(fd, 0, length)?.dirtyPages, 0);
        }
        assert.ok(fs.readFileSync(path).every((byte) => byte === 0x3c));
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "msync() of two mappings at once flushes both (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const length = 0x40 * libc.pageSizeBytes;
      const files = ["a", "b"].map((name) => {
        const path = `${directory}/${name}`;
        const fd = fs.openSync(path, "w+");
        assert.equal(libc.fallocate(fd, 0, length), 0);
        return { path, fd, mapping: libc.mmap({ fd, path }, 0, length, true) };
      });
      try {
        for (const { mapping } of files) mapping.bytes.fill(0x11);
        const errnos = await Promise.all(
          files.map(({ mapping }) => libc.msync(mapping, 0, length)),
        );
        assert.deepEqual(errnos, [0, 0]);
        for (const { fd } of files) {
          if (libc.cachestat(fd, 0, length) === undefined) return;
          assert.equal(libc.cachestat(fd, 0, length)?.dirtyPages, 0);
        }
      } finally {
        for (const { fd, mapping } of files) {
          libc.retire(mapping);
          fs.closeSync(fd);
        }
      }
    }),
);

test(
  "msync() flushes the mapped file after its descriptor was closed and reused (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const length = 4 * libc.pageSizeBytes;
      const fd = fs.openSync(path, "w+");
      assert.equal(libc.fallocate(fd, 0, length), 0);
      const mapping = libc.mmap({ fd, path }, 0, length, true);
      fs.closeSync(fd);
      // Likely to get the same descriptor number back.
      const other = fs.openSync(`${directory}/other`, "w+");
      const probe = fs.openSync(path, "r");
      try {
        mapping.bytes.fill(0xcd);
        if (libc.cachestat(probe, 0, length) === undefined) return;
        assert.ok((libc.cachestat(probe, 0, length)?.dirtyPages ?? 0) > 0);
        assert.equal(await libc.msync(mapping, 0, length), 0);
        assert.equal(libc.cachestat(probe, 0, length)?.dirtyPages, 0);
        libc.retire(mapping);
      } finally {
        fs.closeSync(other);
        fs.closeSync(probe);
      }
    }),
);

test(
  "madvise() and madviseAsync() align the range down to the page (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const page = libc.pageSizeBytes;
      const pages = 0x20;
      const fd = fs.openSync(path, "w+");
      try {
        assert.equal(libc.fallocate(fd, 0, pages * page), 0);
        const mapping = libc.mmap({ fd, path }, 0, pages * page, true);
        // Unaligned addresses would be EINVAL (22) without the alignment.
        // MADV_RANDOM over the whole mapping (from an unaligned position), so
        // no read-around caches pages beyond those asked for.
        assert.equal(libc.madvise(mapping, 0x10, pages * page - 0x10, LINUX.MADV_RANDOM), 0);
        assert.equal(
          await libc.madviseAsync(mapping, page + 1, 2 * page, LINUX.MADV_POPULATE_WRITE),
          0,
        );
        // The worker faulted in pages 1 to 3 and no others.
        assert.equal(libc.cachestat(fd, page, 3 * page)?.cachedPages ?? 3, 3);
        assert.equal(libc.cachestat(fd, 4 * page, 4 * page)?.cachedPages ?? 0, 0);
        // Advice that is not a pre-fault runs on this thread, aligned too.
        assert.equal(
          await libc.madviseAsync(mapping, 5 * page + 7, 1, LINUX.MADV_SEQUENTIAL),
          0,
        );
        libc.retire(mapping);
        assert.equal(libc.madvise(mapping, 0, page, LINUX.MADV_NORMAL), ENOMEM);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "madviseAsync() resolves 0 when the mapping is retired while it runs (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const length = 0x100 * libc.pageSizeBytes;
      const fd = fs.openSync(path, "w+");
      try {
        assert.equal(libc.fallocate(fd, 0, length), 0);
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        const populated = libc.madviseAsync(mapping, 0, length, LINUX.MADV_POPULATE_WRITE);
        libc.retire(mapping);
        assert.equal(await populated, 0);
        assert.equal(
          await libc.madviseAsync(mapping, 0, length, LINUX.MADV_POPULATE_WRITE),
          ENOMEM,
        );
        assert.deepEqual(mapsOf(path), []);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "mlock() and munlock() pin the whole mapping (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc((libc, directory) => {
      const path = `${directory}/file`;
      const length = 2 * libc.pageSizeBytes;
      const fd = sparseFile(path, length);
      try {
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        const locked = libc.mlock(mapping);
        // Refused under a small RLIMIT_MEMLOCK without CAP_IPC_LOCK.
        assert.ok([0, LINUX.EAGAIN, 1, ENOMEM].includes(locked), `mlock errno ${locked}`);
        if (locked === 0) assert.equal(libc.munlock(mapping), 0);
        libc.retire(mapping);
        assert.equal(libc.mlock(mapping), ENOMEM);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "fcntlLock() refuses a second open file description (bun-ffi)",
  { skip: SKIP },
  () => withLibc((libc, directory) => assertOfdLockExcludesSecondDescription(libc, directory)),
);

test(
  "madviseAsync() keeps the process alive until answered, not after (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc((_libc, directory) => {
      const path = `${directory}/file`;
      // Nothing awaits the pre-fault: only the pending worker request can
      // keep the process alive until "answered" is printed, and the idle
      // worker must then let it exit.
      const child = `
        import fs from "node:fs";
        const { loadLibc } = await import(${JSON.stringify(BUN_MODULE)});
        const libc = await loadLibc();
        const length = 0x400 * libc.pageSizeBytes;
        const fd = fs.openSync(${JSON.stringify(path)}, "w+");
        libc.fallocate(fd, 0, length);
        const mapping = libc.mmap({ fd, path: ${JSON.stringify(path)} }, 0, length, true);
        // The first answer leaves the worker idle (unreferenced); the
        // second request must reference it again.
        console.log("first " + await libc.madviseAsync(mapping, 0, 1, ${LINUX.MADV_POPULATE_WRITE}));
        libc.madviseAsync(mapping, 0, length, ${LINUX.MADV_POPULATE_WRITE})
          .then((errno) => console.log("answered " + errno));
      `;
      const script = `${directory}/child.ts`;
      fs.writeFileSync(script, child);
      // The timeout only turns a hang into a failure; nothing is timed.
      const result = spawnSync(process.execPath, [script], {
        encoding: "utf8",
        timeout: 60_000,
      });
      assert.equal(result.signal, null, "the child hung");
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout.trim(), "first 0\nanswered 0");
    }),
);

test(
  "mmap() refuses a view longer than Bun's largest ArrayBuffer (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc((libc, directory) => {
      const path = `${directory}/file`;
      const length = OFFSET_4_GIB + libc.pageSizeBytes;
      const fd = sparseFile(path, length);
      try {
        assert.throws(
          () => libc.mmap({ fd, path }, 0, length, true),
          (error) => error instanceof MqStoreError && error.code === "UNSUPPORTED",
        );
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "msync() does not keep the process from exiting after a map, sync and unmap (bun-ffi)",
  { skip: SKIP },
  () =>
    withLibc((_libc, directory) => {
      const path = `${directory}/file`;
      // The second flush is not awaited: its pending request alone must keep
      // the process alive until "answered", and the idle flush threads must
      // then let it exit.
      const child = `
        import fs from "node:fs";
        const { loadLibc } = await import(${JSON.stringify(BUN_MODULE)});
        const libc = await loadLibc();
        const length = 0x100 * libc.pageSizeBytes;
        const fd = fs.openSync(${JSON.stringify(path)}, "w+");
        libc.fallocate(fd, 0, length);
        const mapping = libc.mmap({ fd, path: ${JSON.stringify(path)} }, 0, length, true);
        mapping.bytes.fill(1);
        console.log("first " + await libc.msync(mapping, 0, libc.pageSizeBytes));
        libc.msync(mapping, 0, length).then((errno) => console.log("answered " + errno));
        libc.retire(mapping);
        fs.closeSync(fd);
      `;
      const script = `${directory}/child.ts`;
      fs.writeFileSync(script, child);
      // The timeout only turns a hang into a failure; nothing is timed.
      const result = spawnSync(process.execPath, [script], {
        encoding: "utf8",
        timeout: 60_000,
      });
      assert.equal(result.signal, null, "the child hung");
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout.trim(), "first 0\nanswered 0");
      assert.ok(fs.readFileSync(path).every((byte) => byte === 1));
    }),
);

test(
  "LibcWorker.call() rejects with IO_ERROR when its thread cannot start (bun-ffi)",
  { skip: SKIP },
  async () => {
    const worker = new LibcWorker("libmqstore-missing.so.0", "msync");
    for (let attempt = 0; attempt < 2; attempt++) {
      await assert.rejects(
        worker.call(LIBC_CALL.MSYNC, 0, 0, LINUX.MS_SYNC),
        (error) => error instanceof MqStoreError && error.code === "IO_ERROR",
      );
    }
    assert.equal(worker.pendingCount, 0);
  },
);
