import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { test } from "node:test";
import { availableAdapters, createPort } from "../src/runtime/mod.ts";
import type { AdapterName } from "../src/runtime/mod.ts";
import { MqStoreError } from "../src/errors.ts";

const native = availableAdapters().find((adapter) =>
  adapter.endsWith("-ffi") || adapter === "node-koffi"
);

async function expectLocked(attempt: Promise<unknown>, holder: RegExp): Promise<void> {
  await assert.rejects(attempt, (error: unknown) => {
    assert.ok(error instanceof MqStoreError);
    assert.equal(error.code, "LOCKED");
    assert.match(error.message, holder);
    return true;
  });
}

test(
  `lockDirectory() on ${native ?? "a native adapter"} and on portable exclude each other`,
  { skip: native === undefined ? "no native adapter on this platform" : false },
  async () => {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-lock-"));
    try {
      const ffi = await createPort({ adapter: native as AdapterName });
      const portable = await createPort({ adapter: "portable" });
      const held = await ffi.lockDirectory(directory);
      await expectLocked(portable.lockDirectory(directory), new RegExp(`pid ${process.pid}`));
      await held.release();
      const portableHeld = await portable.lockDirectory(directory);
      await expectLocked(ffi.lockDirectory(directory), /portable/);
      await portableHeld.release();
      const again = await ffi.lockDirectory(directory);
      await again.release();
    } finally {
      fs.rmSync(directory, { recursive: true, force: true });
    }
  },
);
