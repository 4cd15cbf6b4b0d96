/**
 * The index file makes its mapping's view at the first entry or lookup, not
 * at create, prepare or open: a header written before then goes in by a
 * positional write at flush, and into the view once it is made.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, test } from "node:test";
import { PREPARED_TIMESTAMP } from "../src/store/_index_file_constants.ts";
import { IndexFile } from "../src/store/index_file.ts";
import type { FileHandle, Mapping, RuntimePort } from "../src/runtime/port.ts";
import { adapterCases, handlesPort, mappingsPort, withSegmentEnv } from "./_segment_helpers.ts";

const SLOTS = 64;
const ENTRIES = 1000;
const T0 = 1_795_954_493_497;
const ALL_TIME = Number.MAX_SAFE_INTEGER;

/** `inner`, counting the reads of each mapping's `bytes` in `reads`. */
function countingPort(inner: RuntimePort, reads: { count: number }): RuntimePort {
  return mappingsPort(inner, (mapping: Mapping) =>
    new Proxy(mapping, {
      get(target, key) {
        if (key === "bytes") reads.count++;
        const value = Reflect.get(target, key);
        return typeof value === "function" ? value.bind(target) : value;
      },
    }));
}

/**
 * `inner`, its file handles' positional writes at position 0, while
 * `gate.closed`, held until `gate.held` settles.
 */
function gatedHeaderWritesPort(
  inner: RuntimePort,
  gate: { closed: boolean; held: Promise<void> },
): RuntimePort {
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "write") {
          return async (bytes: Uint8Array, position: number) => {
            if (gate.closed && position === 0) await gate.held;
            return await target.write(bytes, position);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  return handlesPort(inner, wrapHandle);
}

const cases = await adapterCases();

for (const { adapter, skip } of cases) {
  describe(`IndexFile lazy view (${adapter})`, { skip }, () => {
    test("create, prepare, activate and open read no view; the first entry or lookup does", async () => {
      await withSegmentEnv(adapter, async (env) => {
        if (!env.port.canMap) return;
        const reads = { count: 0 };
        const port = countingPort(env.port, reads);
        const options = { port, hashSlotNum: SLOTS, indexNum: ENTRIES, sparse: true };

        const prepared = await IndexFile.prepare({ ...options, path: `${env.directory}/a` });
        assert.equal(reads.count, 0, "prepare writes its header without the view");
        if (adapter !== "memory") {
          // The prepared mark is in the file (flushed by prepare).
          const header = fs.readFileSync(`${env.directory}/a.tmp`).subarray(0, 8);
          assert.equal(
            new DataView(header.buffer, header.byteOffset).getBigInt64(0),
            BigInt(PREPARED_TIMESTAMP),
          );
        }
        await prepared.activate(0x1000, T0);
        await prepared.flush();
        assert.equal(reads.count, 0);
        const reopened = await IndexFile.open({ ...options, path: `${env.directory}/a` });
        assert.equal(reads.count, 0, "open reads the header without the view");
        assert.equal(reopened.beginPhyOffset, 0x1000);
        assert.equal(reopened.beginTimestamp, T0);
        const found: number[] = [];
        reopened.selectPhyOffset(found, "T#k", 64, 0, ALL_TIME);
        assert.deepEqual(found, []);
        assert.ok(reads.count > 0, "a lookup makes the view");
        await reopened.close();
        await prepared.close();

        reads.count = 0;
        const file = await IndexFile.create({
          ...options,
          path: `${env.directory}/b`,
          endPhyOffset: 0x2000,
          endTimestamp: T0,
        });
        assert.equal(reads.count, 0, "create writes its header without the view");
        assert.equal(file.putKey("T#k", 0x2000, T0 + 1000), true);
        assert.ok(reads.count > 0, "the first entry makes the view");
        await file.flush();
        await file.close();
        const again = await IndexFile.open({ ...options, path: `${env.directory}/b` });
        assert.equal(
          again.beginPhyOffset,
          0x2000,
          "the header staged before the view reached the file",
        );
        assert.equal(again.indexCount, 2);
        const offsets: number[] = [];
        again.selectPhyOffset(offsets, "T#k", 64, 0, ALL_TIME);
        assert.deepEqual(offsets, [0x2000]);
        await again.close();
      });
    });

    test("an entry put while flush() writes the staged header keeps its header", async () => {
      await withSegmentEnv(adapter, async (env) => {
        if (!env.port.canMap) return;
        let release = () => {};
        const gate = {
          closed: false,
          held: new Promise<void>((resolve) => release = resolve),
        };
        const port = gatedHeaderWritesPort(env.port, gate);
        const options = { port, hashSlotNum: SLOTS, indexNum: ENTRIES, sparse: true };
        const path = `${env.directory}/c`;
        const file = await IndexFile.create({
          ...options,
          path,
          endPhyOffset: 0x2000,
          endTimestamp: T0,
        });
        gate.closed = true;
        const flushing = file.flush();
        // The staged header's write waits at the gate; the first entry
        // makes the view and writes the header with its begin fields.
        assert.equal(file.putKey("T#k", 0x3000, T0 + 1000), true);
        assert.equal(file.putKey("T#m", 0x3100, T0 + 2000), true);
        gate.closed = false;
        release();
        await flushing;
        await file.flush();
        await file.close();
        const again = await IndexFile.open({ ...options, path });
        assert.equal(again.beginPhyOffset, 0x3000);
        assert.equal(again.beginTimestamp, T0 + 1000);
        assert.equal(again.endPhyOffset, 0x3100);
        assert.equal(again.indexCount, 3);
        const offsets: number[] = [];
        again.selectPhyOffset(offsets, "T#k", 64, T0, ALL_TIME);
        assert.deepEqual(offsets, [0x3000]);
        await again.close();
      });
    });
  });
}
