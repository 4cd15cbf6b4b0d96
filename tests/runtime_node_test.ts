/**
 * Node-only behaviour of the `node-koffi` binding (`src/runtime/node.ts`):
 * 64-bit offsets, page alignment of `msync`/`madvise`, retiring a mapping
 * whose view cannot be detached, OFD locks, `cachestat`. Under Deno and Bun
 * every test is skipped. The cross-adapter behaviour of the port is tested
 * in `runtime_port_test.ts`.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import { test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { LINUX, type NativeLibc } from "../src/runtime/_native.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { assertOfdLockExcludesSecondDescription } from "./_native_checks.ts";

const SKIP = runtimeName() === "node" ? false : "node-koffi runs on Node only";
const NODE_MODULE = new URL("../src/runtime/node.ts", import.meta.url).href;
const OFFSET_4_GIB = 2 ** 32;

/** Runs `body` with the binding and a fresh temporary directory, removed after. */
async function withLibc(
  body: (libc: NativeLibc, directory: string) => Promise<void> | void,
): Promise<void> {
  const { loadLibc } = await import(NODE_MODULE) as typeof import("../src/runtime/node.ts");
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

function mapsLines(): string[] {
  return fs.readFileSync("/proc/self/maps", "utf8").split("\n").filter((line) => line !== "");
}

test(
  "loadLibc() maps file offset 2^32, not offset 0 (node-koffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/big`;
      const fd = sparseFile(path, OFFSET_4_GIB + 2 * libc.pageSizeBytes);
      try {
        fs.writeSync(fd, Buffer.from("high"), 0, 4, OFFSET_4_GIB + 0x64);
        fs.writeSync(fd, Buffer.from("low!"), 0, 4, 0x64);
        const mapping = libc.mmap({ fd, path }, OFFSET_4_GIB, 2 * libc.pageSizeBytes, true);
        assert.equal(Buffer.from(mapping.bytes.subarray(0x64, 0x68)).toString(), "high");
        mapping.bytes.set(Buffer.from("view"), 0xc8);
        assert.equal(await libc.msync(mapping, 0xc8, 4), 0);
        const back = Buffer.alloc(4);
        fs.readSync(fd, back, 0, 4, OFFSET_4_GIB + 0xc8);
        assert.equal(back.toString(), "view");
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "loadLibc() aligns msync and madvise down to the page (node-koffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const page = libc.pageSizeBytes;
      const fd = sparseFile(path, 4 * page);
      try {
        const mapping = libc.mmap({ fd, path }, 0, 4 * page, true);
        mapping.bytes[page + 1] = 0xab;
        // Unaligned addresses would be EINVAL (22) without the alignment.
        assert.equal(await libc.msync(mapping, page + 1, 10), 0);
        assert.equal(libc.madvise(mapping, page + 0x10, 0x100, LINUX.MADV_WILLNEED), 0);
        assert.equal(
          await libc.madviseAsync(mapping, page + 1, 2 * page, LINUX.MADV_POPULATE_WRITE),
          0,
        );
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "retire() leaves a stale view reading zeros (node-koffi)",
  { skip: SKIP },
  () =>
    withLibc(async (libc, directory) => {
      const path = `${directory}/file`;
      const length = 4 * libc.pageSizeBytes;
      const fd = sparseFile(path, length);
      try {
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        const stale = mapping.bytes;
        stale.fill(0xab);
        assert.equal(await libc.msync(mapping, 0, length), 0);
        assert.ok(mapsLines().some((line) => line.endsWith(path)));
        libc.retire(mapping);
        libc.retire(mapping);
        assert.equal(stale.length, length);
        assert.ok(stale.every((byte) => byte === 0));
        // A stale write must not fault either; it lands in private memory.
        stale[0x10] = 1;
        assert.equal(stale[0x10], 1);
        // The file mapping is gone and the file kept what was synced.
        assert.ok(!mapsLines().some((line) => line.endsWith(path)));
        assert.ok(fs.readFileSync(path).every((byte) => byte === 0xab));
      } finally {
        fs.closeSync(fd);
      }
    }),
);

/**
 * The start of a child script (an ES module run with --expose-gc) that
 * loads the Node adapter's libc as `libc`, makes `fd`, a file of
 * `length` (`pages` pages) at `path`, and reads the process's mappings
 * with `maps()` ({ start, end, perms, inode, name }).
 */
function mapsChildPreamble(path: string, pages: number): string {
  return `
      import fs from "node:fs";
      const { loadLibc } = await import(${JSON.stringify(NODE_MODULE)});
      const path = ${JSON.stringify(path)};
      const libc = loadLibc();
      const length = ${pages} * libc.pageSizeBytes;
      const fd = fs.openSync(path, "w+");
      fs.ftruncateSync(fd, length);
      const maps = () => fs.readFileSync("/proc/self/maps", "utf8").split("\\n")
        .filter((line) => line !== "").map((line) => {
          const [range, perms, , , inode, name] = line.split(/\\s+/);
          const [start, end] = range.split("-").map((hex) => parseInt(hex, 16));
          return { start, end, perms, inode, name: name ?? "" };
        });`;
}

test("retire() releases the range once the view is collected (node-koffi)", {
  skip: SKIP,
}, () =>
  withLibc((_libc, directory) => {
    const path = `${directory}/file`;
    // An unusual length, so no other mapping is likely to reuse the range.
    const pages = 0x107;
    const child = `${mapsChildPreamble(path, pages)}
      const overlapping = (start) => maps().filter((m) => m.start < start + length && m.end > start);
      function mapAndRetire() {
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        mapping.bytes[0] = 1;
        const start = maps().find((m) => m.name === path).start;
        libc.retire(mapping);
        return { start, retired: overlapping(start) };
      }
      const { start, retired } = mapAndRetire();
      let rounds = 0;
      while (overlapping(start).length > 0 && rounds < 100) {
        globalThis.gc();
        await new Promise((resolve) => setTimeout(resolve, 0));
        rounds++;
      }
      console.log(JSON.stringify({ retired, left: overlapping(start), rounds }));
    `;
    const result = spawnSync(
      process.execPath,
      ["--expose-gc", "--import", "tsx", "--input-type=module", "-e", child],
      { encoding: "utf8" },
    );
    assert.equal(result.status, 0, result.stderr);
    const report = JSON.parse(result.stdout) as {
      retired: { perms: string; inode: string; name: string }[];
      left: unknown[];
    };
    // Right after retire(): anonymous memory (inode 0, no file) in place.
    assert.ok(report.retired.length > 0);
    for (const region of report.retired) {
      assert.deepEqual([region.inode, region.name, region.perms], ["0", "", "rw-p"]);
    }
    // After the view was collected: nothing left in the range.
    assert.deepEqual(report.left, []);
  }));

test(
  "mmap() makes a file mapping's view at its first use (node-koffi)",
  { skip: SKIP },
  () =>
    withLibc((libc, directory) => {
      // V8 counts a view's length as external memory when it is made, and
      // a GiB of it starts a full collection: see KoffiFileMapping.
      const path = `${directory}/file`;
      const length = 0x1000_0000;
      const fd = sparseFile(path, length);
      try {
        const before = process.memoryUsage().external;
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        assert.ok(process.memoryUsage().external - before < length / 2);
        assert.ok(
          libc.madvise(mapping, 0, libc.pageSizeBytes, LINUX.MADV_WILLNEED) === 0,
          "advice works on the address, with no view",
        );
        const bytes = mapping.bytes;
        assert.ok(process.memoryUsage().external - before >= length / 2);
        assert.equal(bytes.length, length);
        assert.equal(mapping.bytes, bytes, "one view for the mapping's life");
        bytes[0x10] = 0xcd;
        assert.equal(bytes[0x10], 0xcd);
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test(
  "mmap() releases a range once its mapping and view, if made, are collected (node-koffi)",
  { skip: SKIP },
  () =>
    withLibc((_libc, directory) => {
      const path = `${directory}/file`;
      // Unusual lengths, so no other mapping is likely to reuse the ranges.
      const pages = 0x10b;
      const child = `${mapsChildPreamble(path, pages)}
      const mapped = (start) => maps().some((m) => m.start < start + length && m.end > start);
      const collect = async (rounds) => {
        for (let i = 0; i < rounds; i++) {
          globalThis.gc();
          await new Promise((resolve) => setTimeout(resolve, 0));
        }
      };
      const waitUnmapped = async (start) => {
        let rounds = 0;
        while (mapped(start) && rounds < 100) {
          await collect(1);
          rounds++;
        }
        return !mapped(start);
      };
      const startOf = () => maps().filter((m) => m.name === path).at(-1).start;
      // Never viewed, never retired: dropped.
      const neverViewed = (() => {
        libc.mmap({ fd, path }, 0, length, true);
        return startOf();
      })();
      const neverViewedReleased = await waitUnmapped(neverViewed);
      // Viewed, then the mapping object dropped (and seen collected) while
      // the view is held.
      let mappingCollected = false;
      const probe = new FinalizationRegistry(() => {
        mappingCollected = true;
      });
      let held = (() => {
        const mapping = libc.mmap({ fd, path }, 0, length, true);
        probe.register(mapping, 0);
        mapping.bytes[0] = 7;
        return mapping.bytes;
      })();
      const viewed = startOf();
      for (let rounds = 0; !mappingCollected && rounds < 100; rounds++) await collect(1);
      const keptWhileViewHeld = mappingCollected && mapped(viewed) && held[0] === 7;
      held = undefined;
      const viewedReleased = await waitUnmapped(viewed);
      console.log(JSON.stringify({ neverViewedReleased, keptWhileViewHeld, viewedReleased }));
    `;
      const result = spawnSync(
        process.execPath,
        ["--expose-gc", "--import", "tsx", "--input-type=module", "-e", child],
        { encoding: "utf8" },
      );
      assert.equal(result.status, 0, result.stderr);
      assert.deepEqual(JSON.parse(result.stdout), {
        neverViewedReleased: true,
        keptWhileViewHeld: true,
        viewedReleased: true,
      });
    }),
);

test(
  "fcntlLock() refuses a second open file description (node-koffi)",
  { skip: SKIP },
  () => withLibc((libc, directory) => assertOfdLockExcludesSecondDescription(libc, directory)),
);

test(
  "cachestat() counts dirty pages until msync (node-koffi)",
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
        const written = libc.cachestat(fd, 0, length);
        assert.ok(written !== undefined && written.dirtyPages > 0);
        assert.equal(await libc.msync(mapping, 0, length), 0);
        assert.equal(libc.cachestat(fd, 0, length)?.dirtyPages, 0);
        libc.retire(mapping);
      } finally {
        fs.closeSync(fd);
      }
    }),
);

test("mmap() refuses a view longer than Node's largest ArrayBuffer (node-koffi)", {
  skip: SKIP,
}, () =>
  withLibc(async (libc, directory) => {
    const { constants } = await import("node:buffer");
    const path = `${directory}/file`;
    const fd = sparseFile(path, libc.pageSizeBytes);
    try {
      // koffi aborts the process on such a view, so mmap() must refuse first.
      const length = constants.MAX_LENGTH + libc.pageSizeBytes;
      assert.throws(
        () => libc.mmap({ fd, path }, 0, length, false),
        (error) => error instanceof MqStoreError && error.code === "UNSUPPORTED",
      );
    } finally {
      fs.closeSync(fd);
    }
  }));
