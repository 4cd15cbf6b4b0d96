/**
 * `MappedFile.startFlush()` with positional writes (the group commit's
 * flush): the `fdatasync` starts in the caller's step, and flushes begun
 * this way fail in begin order.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { createPort } from "../src/runtime/mod.ts";
import { MappedFile } from "../src/segment/mapped_file.ts";
import { spyPort } from "./_segment_helpers.ts";

const SIZE = 0x1_0000; // 64 KiB segments keep the tests fast.
const DIRECTORY = "/store/commitlog";

async function syncSegment(
  log: string[],
  beforeCall?: (operation: string) => void,
): Promise<MappedFile> {
  const memory = await createPort({ adapter: "memory" });
  await memory.makeDirectory(DIRECTORY);
  return await MappedFile.create({
    port: spyPort(memory, log, { beforeCall }),
    path: `${DIRECTORY}/00000000000000000000`,
    fileSizeBytes: SIZE,
    positionalWrites: true,
  });
}

describe("MappedFile.startFlush()", () => {
  test("startFlush() writes and starts the fdatasync before it returns", async () => {
    const log: string[] = [];
    const file = await syncSegment(log);
    try {
      assert.equal(file.appendBytes(new Uint8Array(100).fill(7)), true);
      log.length = 0;
      const flushed = file.startFlush();
      // Nothing awaited yet: the device already has the flush.
      assert.deepEqual(log, ["datasync"]);
      assert.equal(await flushed, 100);
      assert.equal(file.flushedPosition, 100);
    } finally {
      await file.close();
    }
  });

  test("startFlush() fails with an earlier flush's error when that one failed", async () => {
    const log: string[] = [];
    let armed = false;
    let datasyncs = 0;
    const failure = new MqStoreError("IO_ERROR", "fdatasync failed (test)");
    const file = await syncSegment(log, (operation) => {
      if (armed && operation === "datasync" && ++datasyncs === 1) throw failure;
    });
    try {
      armed = true;
      file.appendBytes(new Uint8Array(100).fill(1));
      const first = file.startFlush();
      file.appendBytes(new Uint8Array(50).fill(2));
      const second = file.startFlush();
      await assert.rejects(first, (error) => error === failure);
      // The second fdatasync succeeded, but its bytes sit behind the first's.
      await assert.rejects(second, (error) => error === failure);
      assert.equal(datasyncs, 2);
      assert.equal(file.flushedPosition, 0);
    } finally {
      await file.close();
    }
  });
});
