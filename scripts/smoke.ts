/**
 * Smoke demo of the runtime layer (`npm run smoke`; `npm start` runs
 * `mqstore bench`): creates a store directory, takes its lock, creates a fallocated
 * commit-log segment, maps it, writes records through the mapping, flushes
 * them off the JavaScript thread, proves with the page-cache probe that no
 * written page is left dirty, then re-reads the bytes from a fresh process
 * and prints which runtime and adapter served it.
 *
 * Usage: `deno run -A scripts/smoke.ts [--adapter NAME] [--keep]`
 * (also runs under `bun` and `node --import tsx`).
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { createPort, runtimeName } from "../src/runtime/mod.ts";
import type { AdapterName } from "../src/runtime/mod.ts";

const SEGMENT_SIZE_BYTES = 4 * 1024 * 1024;
const RECORD_SIZE_BYTES = 200;
const RECORD_COUNT = 10_000;

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Child mode: read `length` bytes of `file` with node:fs and print their hash. */
function readBack(file: string, length: number): void {
  const fd = fs.openSync(file, "r");
  const bytes = new Uint8Array(length);
  fs.readSync(fd, bytes, 0, length, 0);
  fs.closeSync(fd);
  console.log(sha256(bytes));
}

function childCommand(script: string): { command: string; args: string[] } {
  switch (runtimeName()) {
    case "deno":
      return { command: process.execPath, args: ["run", "-A", script] };
    case "bun":
      return { command: process.execPath, args: [script] };
    case "node":
      return { command: process.execPath, args: ["--import", "tsx", script] };
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === "--read-back") {
    readBack(argv[1]!, Number(argv[2]));
    return;
  }
  const adapterIndex = argv.indexOf("--adapter");
  const adapter = adapterIndex >= 0 ? argv[adapterIndex + 1] as AdapterName : "auto";
  const keep = argv.includes("--keep");
  const port = await createPort({ adapter });
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-smoke-"));
  const commitLog = path.join(root, "commitlog");
  const segmentPath = path.join(commitLog, "0".padStart(20, "0"));
  console.log(`mqstore smoke: runtime ${port.runtime}, adapter ${port.adapter}`);
  console.log(`  store directory ${root}`);
  const lock = await port.lockDirectory(root);
  try {
    await port.makeDirectory(commitLog);
    const file = await port.createFile(segmentPath, SEGMENT_SIZE_BYTES);
    const written = new Uint8Array(RECORD_SIZE_BYTES * RECORD_COUNT);
    for (let i = 0; i < written.length; i++) written[i] = (i * 31 + (i >>> 8)) & 0xff;
    const started = performance.now();
    if (port.canMap) {
      const mapping = await file.map();
      for (let i = 0; i < RECORD_COUNT; i++) {
        const at = i * RECORD_SIZE_BYTES;
        mapping.bytes.set(written.subarray(at, at + RECORD_SIZE_BYTES), at);
      }
      const dirty = file.pageCacheState(0, written.length);
      await mapping.sync(0, written.length);
      const after = file.pageCacheState(0, written.length);
      const elapsedMs = performance.now() - started;
      console.log(
        `  wrote ${RECORD_COUNT} × ${RECORD_SIZE_BYTES} B through the mapping and flushed in ${
          elapsedMs.toFixed(1)
        } ms`,
      );
      if (dirty !== undefined && after !== undefined) {
        console.log(
          `  page-cache probe: ${dirty.dirtyPages} dirty pages before flush, ${
            after.dirtyPages + after.writebackPages
          } dirty or in writeback after`,
        );
        if (after.dirtyPages + after.writebackPages !== 0) {
          throw new Error("flushed pages are still dirty");
        }
      }
      mapping.unmap();
    } else {
      await file.write(written, 0);
      await file.datasync();
      console.log(`  wrote ${written.length} B with positional writes and fdatasync`);
    }
    await file.close();
    await port.syncDirectory(commitLog);
    const { command, args } = childCommand(import.meta.filename ?? process.argv[1]!);
    const child = spawnSync(
      command,
      [...args, "--read-back", segmentPath, String(written.length)],
      {
        encoding: "utf8",
      },
    );
    const readHash = child.stdout.trim();
    const expected = sha256(written);
    console.log(
      `  re-read from a fresh ${port.runtime} process (pid ${child.pid}): ${
        readHash === expected ? "bytes match" : "MISMATCH"
      }`,
    );
    if (readHash !== expected) {
      throw new Error(`read-back hash ${readHash} != ${expected}; child said ${child.stderr}`);
    }
    console.log("PASS");
  } finally {
    await lock.release();
    if (!keep) fs.rmSync(root, { recursive: true, force: true });
  }
}

await main();
