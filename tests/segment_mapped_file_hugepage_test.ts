/**
 * Segments asked for large folios (`randomAccess: false`, the commit log
 * under ASYNC_FLUSH) advised `MADV_HUGEPAGE`, so that their first pages
 * are 2 MiB folios instead of the kernel's ramp from 4 KiB; and the
 * `"hugepage"` advice of the real adapters.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, test } from "node:test";
import { createPort, MemoryPort } from "../src/runtime/mod.ts";
import type { Mapping, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { MappedFile } from "../src/segment/mapped_file.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";
import { mappingsPort } from "./_segment_helpers.ts";

const SEGMENT_BYTES = 0x40_0000;
const PATH = "/s/00000000000000000000";

/** `inner`, logging every mapping `advise` as "advice@position+length". */
function adviceSpyPort(inner: RuntimePort, log: string[]): RuntimePort {
  const wrapMapping = (mapping: Mapping): Mapping =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (key === "advise") {
            log.push(`${String(args[2])}@${String(args[0])}+${String(args[1])}`);
          }
          return value.apply(target, args);
        };
      },
    });
  return mappingsPort(inner, wrapMapping);
}

/** The `VmFlags` of this process's mapping of `path`, or undefined. */
function vmFlagsOf(path: string): string[] | undefined {
  const blocks = fs.readFileSync("/proc/self/smaps", "utf8").split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/);
  const block = blocks.find((b) => b.split("\n")[0]!.endsWith(path));
  const line = block?.split("\n").find((l) => l.startsWith("VmFlags:"));
  return line?.slice("VmFlags:".length).trim().split(/\s+/);
}

describe("huge-page advice", () => {
  for (const randomAccess of [false, true]) {
    test(
      `MappedFile.create() with randomAccess ${randomAccess} advises the mapping ${
        randomAccess ? "random" : "hugepage"
      } before any page is touched, and prepare() advises only what the range lacks`,
      async () => {
        const memory = new MemoryPort(runtimeName());
        await memory.makeDirectory("/s");
        const log: string[] = [];
        const file = await MappedFile.create({
          port: adviceSpyPort(memory, log),
          path: PATH,
          fileSizeBytes: SEGMENT_BYTES,
          randomAccess,
        });
        assert.deepEqual(log, [`${randomAccess ? "random" : "hugepage"}@0+${SEGMENT_BYTES}`]);
        assert.ok(file.appendBytes(new Uint8Array(0x1000)));
        log.length = 0;
        // The range from the write position carries this advice already:
        // no madvise (each takes the mmap lock for writing).
        await file.prepare({ randomAccess, populate: false });
        assert.deepEqual(log, []);
        // The other advice, from the write position.
        await file.prepare({ randomAccess: !randomAccess, populate: false });
        assert.deepEqual(
          log,
          randomAccess
            ? [`normal@4096+${SEGMENT_BYTES - 0x1000}`, `hugepage@4096+${SEGMENT_BYTES - 0x1000}`]
            : [`random@4096+${SEGMENT_BYTES - 0x1000}`],
        );
        await file.close();
      },
    );
  }

  test("MappedFile.open() leaves the advice to the first prepare(), and a second one advises nothing", async () => {
    const memory = new MemoryPort(runtimeName());
    await memory.makeDirectory("/s");
    await (await memory.createFile(PATH, SEGMENT_BYTES)).close();
    const log: string[] = [];
    const file = await MappedFile.open({
      port: adviceSpyPort(memory, log),
      path: PATH,
      fileSizeBytes: SEGMENT_BYTES,
    });
    assert.deepEqual(log, []);
    // As a consume-queue file: advised at its creation, pre-faulted when
    // its queue rolls into it.
    await file.prepare({ populate: false });
    assert.deepEqual(log, [`random@0+${SEGMENT_BYTES}`]);
    await file.prepare({ populate: true });
    assert.deepEqual(log, [`random@0+${SEGMENT_BYTES}`]);
    await file.close();
  });

  test("Mapping.advise() with hugepage marks a real mapping for huge pages, and nohugepage unmarks it", async (t) => {
    const port = await createPort({ onNotice: () => {} });
    if (!port.canMap || !fs.existsSync("/sys/kernel/mm/transparent_hugepage")) {
      t.skip("needs a mapping adapter on Linux with transparent huge pages");
      return;
    }
    const directory = makeTempDirectory();
    try {
      const path = `${directory}/segment`;
      const handle = await port.createFile(path, SEGMENT_BYTES);
      const mapping = await handle.map(0, SEGMENT_BYTES);
      mapping.advise(0, SEGMENT_BYTES, "random");
      assert.ok(!vmFlagsOf(path)?.includes("hg"), `flags ${vmFlagsOf(path)?.join(" ")}`);
      mapping.advise(0, SEGMENT_BYTES, "hugepage");
      assert.ok(vmFlagsOf(path)?.includes("hg"), `flags ${vmFlagsOf(path)?.join(" ")}`);
      // Random advice leaves the huge-page mark; nohugepage takes it back.
      mapping.advise(0, SEGMENT_BYTES, "random");
      assert.ok(vmFlagsOf(path)?.includes("hg"), `flags ${vmFlagsOf(path)?.join(" ")}`);
      mapping.advise(0, SEGMENT_BYTES, "nohugepage");
      const flags = vmFlagsOf(path);
      assert.ok(!flags?.includes("hg") && flags?.includes("nh"), `flags ${flags?.join(" ")}`);
      // As file-cache advice they do nothing (no posix_fadvise stands for them).
      handle.adviseCache(0, SEGMENT_BYTES, "hugepage");
      handle.adviseCache(0, SEGMENT_BYTES, "nohugepage");
      mapping.bytes[0] = 1;
      mapping.unmap();
      await handle.close();
    } finally {
      removeDirectory(directory);
    }
  });
});
