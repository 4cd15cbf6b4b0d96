/**
 * The index file's pre-fault of its entries: a chunk of
 * INDEX_POPULATE_CHUNK_BYTES past the writer, off the JavaScript thread,
 * the next one once the writer comes into the one before (done or not);
 * never the header or the slots; nothing without a mapping; nothing more
 * after a failed chunk. The advice of its two regions: the header and the
 * slots `MADV_RANDOM`, the entries `MADV_HUGEPAGE`.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, test } from "node:test";
import {
  HASH_SLOT_SIZE_BYTES,
  INDEX_ENTRY_SIZE_BYTES,
  INDEX_HEADER_SIZE_BYTES,
  INDEX_POPULATE_CHUNK_BYTES,
} from "../src/store/_index_file_constants.ts";
import { MqStoreError } from "../src/errors.ts";
import { IndexFile } from "../src/store/index_file.ts";
import { javaHashCode } from "../src/record/mod.ts";
import type { Advice, RuntimePort } from "../src/runtime/port.ts";
import {
  adapterCases,
  hookedMappingsPort,
  mappingsPort,
  settle,
  withSegmentEnv,
} from "./_segment_helpers.ts";

const SLOTS = 64;
/** Entries for two and a half chunks. */
const ENTRIES = Math.ceil((5 * INDEX_POPULATE_CHUNK_BYTES) / 2 / INDEX_ENTRY_SIZE_BYTES);
const ENTRIES_START = INDEX_HEADER_SIZE_BYTES + SLOTS * HASH_SLOT_SIZE_BYTES;
const T0 = 1_795_954_493_497;

/** A populate call on an index file's mapping. */
interface Populated {
  position: number;
  length: number;
  /** The call's `PopulateOptions.read`. */
  read: boolean;
  /** Settles when the call does (never rejects). */
  done: Promise<void>;
}

/**
 * `inner` with every mapping's `populate` recorded in `calls`, and
 * answered by `answer` when given (else by the mapping).
 */
function recordingPort(
  inner: RuntimePort,
  calls: Populated[],
  answer?: () => Promise<void>,
): RuntimePort {
  return hookedMappingsPort(inner, {
    populate(position, length, run, options) {
      const running = answer?.() ?? run();
      const read = options?.read === true;
      calls.push({ position, length, read, done: running.then(() => {}, () => {}) });
      return running;
    },
  });
}

/** A fresh index file of {@link SLOTS} slots and {@link ENTRIES} entries at `path`. */
function createIndexFile(port: RuntimePort, path: string): Promise<IndexFile> {
  return IndexFile.create({ port, path, hashSlotNum: SLOTS, indexNum: ENTRIES, sparse: true });
}

/** Two keys' hashes, the same for every message (the writer's position is what matters). */
const HASHES = new Int32Array([javaHashCode("T#a"), javaHashCode("T#b")]);

/** The calls' ranges. */
function rangesOf(calls: readonly Populated[]): { position: number; length: number }[] {
  return calls.map(({ position, length }) => ({ position, length }));
}

/** Waits for the last call to settle, and for what its settling starts. */
async function lastDone(calls: readonly Populated[]): Promise<void> {
  await calls.at(-1)?.done;
  await settle();
}

/** One past the last entry written. */
function entriesEnd(file: IndexFile): number {
  return ENTRIES_START + file.indexCount * INDEX_ENTRY_SIZE_BYTES;
}

/** An `advise` call on a mapping. */
interface Advised {
  position: number;
  length: number;
  advice: Advice;
}

/** `inner` with every mapping's `advise` recorded in `calls` (and made). */
function advisingPort(inner: RuntimePort, calls: Advised[]): RuntimePort {
  return mappingsPort(inner, (mapping) =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "advise") {
          return (position: number, length: number, advice: Advice) => {
            calls.push({ position, length, advice });
            return value.call(target, position, length, advice);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    }));
}

/**
 * The `VmFlags` of each of this runtime's mappings of `path` (Linux's
 * `/proc/self/smaps`), in address order; undefined where there is none.
 */
function vmFlagsOf(path: string): string[][] | undefined {
  let smaps: string;
  try {
    smaps = fs.readFileSync("/proc/self/smaps", "utf8");
  } catch {
    return undefined;
  }
  const flags: string[][] = [];
  let mine = false;
  for (const line of smaps.split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) mine = line.endsWith(` ${path}`);
    else if (mine && line.startsWith("VmFlags:")) flags.push(line.split(/\s+/).slice(1));
  }
  return flags.length > 0 ? flags : undefined;
}

/** Puts messages of two keys until the entries end past `position`. */
function writePast(file: IndexFile, position: number): void {
  while (entriesEnd(file) <= position) {
    assert.equal(file.putKeyHashes(HASHES, 2, file.indexCount * 0x100, T0), true);
  }
}

/**
 * Where a chunk asked for with the entries ending at `end` starts: the
 * first page boundary past byte `end`, which the next entry starts at.
 */
function pageAfter(end: number, pageBytes: number): number {
  let boundary = 0;
  while (boundary <= end) boundary += pageBytes;
  return boundary;
}

const cases = await adapterCases();

for (const { adapter, skip } of cases) {
  describe(`IndexFile pre-fault (${adapter})`, { skip }, () => {
    test("IndexFile.putKeyHashes() pre-faults the entries a chunk at a time ahead of the writer", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const calls: Populated[] = [];
        const port = recordingPort(env.port, calls);
        const file = await createIndexFile(port, `${env.directory}/20261129121453504`);
        await settle();
        assert.equal(calls.length, 0, "the header and the slots are not pre-faulted");
        if (!env.port.canMap) {
          // Without a mapping the file is a copy in memory: nothing to pre-fault.
          writePast(file, ENTRIES_START + 3 * INDEX_POPULATE_CHUNK_BYTES / 2);
          await settle();
          assert.equal(calls.length, 0);
          await file.close();
          return;
        }
        const page = env.port.pageSizeBytes;
        const size = file.fileSizeBytes;
        assert.equal(file.putKeyHashes(HASHES, 2, 0x100, T0), true);
        const first = pageAfter(entriesEnd(file), page);
        assert.deepEqual(rangesOf(calls), [{
          position: first,
          length: INDEX_POPULATE_CHUNK_BYTES,
        }]);
        // Up to the chunk: nothing more.
        writePast(file, first - 2 * INDEX_ENTRY_SIZE_BYTES);
        assert.equal(calls.length, 1, "no chunk before the writer comes into the one asked for");
        // The writer comes into the chunk, not yet done: the next is asked for.
        writePast(file, first);
        const second = first + INDEX_POPULATE_CHUNK_BYTES;
        assert.deepEqual(rangesOf(calls)[1], {
          position: second,
          length: INDEX_POPULATE_CHUNK_BYTES,
        });
        await lastDone(calls);
        if (adapter !== "memory") {
          // The chunk really is in the page cache, ahead of the writer.
          const probe = await env.port.openFile(file.path, { readOnly: true });
          try {
            const state = probe.pageCacheState(second, INDEX_POPULATE_CHUNK_BYTES);
            if (state !== undefined) {
              assert.equal(state.cachedPages, INDEX_POPULATE_CHUNK_BYTES / page);
            }
          } finally {
            await probe.close();
          }
        }
        // Done, and the writer not yet in it: nothing more until it is.
        writePast(file, second - 2 * INDEX_ENTRY_SIZE_BYTES);
        assert.equal(calls.length, 2, "no chunk before the writer comes into the one asked for");
        writePast(file, second);
        // The last chunk ends at the file's end.
        assert.deepEqual(rangesOf(calls)[2], {
          position: second + INDEX_POPULATE_CHUNK_BYTES,
          length: size - second - INDEX_POPULATE_CHUNK_BYTES,
        });
        await lastDone(calls);
        writePast(file, size - 4 * INDEX_ENTRY_SIZE_BYTES);
        await settle();
        assert.equal(calls.length, 3, "nothing past the file's end");
        for (const call of calls) {
          assert.ok(call.position >= ENTRIES_START && call.position % page === 0);
          assert.ok(call.position + call.length <= size);
          // Entries are 2 MiB folios: not read from another thread after.
          assert.equal(call.read, false);
        }
        await file.close();
      });
    });

    test("IndexFile advises the header and the slots MADV_RANDOM, and the entries MADV_HUGEPAGE while it has room", async () => {
      await withSegmentEnv(adapter, async (env) => {
        const calls: Advised[] = [];
        const port = advisingPort(env.port, calls);
        // Slots over several pages: the entries start inside the fifth.
        const slots = 0x1000;
        const path = `${env.directory}/20261129121453506`;
        const file = await IndexFile.create({ port, path, hashSlotNum: slots, indexNum: 0x100 });
        if (!env.port.canMap) {
          assert.deepEqual(calls, [], "a copy in memory takes no advice");
          await file.close();
          return;
        }
        const page = env.port.pageSizeBytes;
        const entriesStart = INDEX_HEADER_SIZE_BYTES + slots * HASH_SLOT_SIZE_BYTES;
        const entriesPage = entriesStart - entriesStart % page;
        assert.ok(entriesPage > 0);
        assert.deepEqual(calls, [
          { position: 0, length: entriesPage, advice: "random" },
          { position: entriesPage, length: file.fileSizeBytes - entriesPage, advice: "hugepage" },
        ]);
        if (adapter !== "memory") {
          // The kernel holds it: two mappings of the file, random then hugepage.
          const flags = vmFlagsOf(path);
          if (flags !== undefined) {
            assert.equal(flags.length, 2);
            assert.ok(flags[0]!.includes("rr") && !flags[0]!.includes("hg"), flags[0]!.join(" "));
            assert.ok(flags[1]!.includes("hg") && !flags[1]!.includes("rr"), flags[1]!.join(" "));
          }
        }
        assert.equal(file.putKeyHashes(HASHES, 2, 0x100, T0), true);
        await file.close();
        const slotsOnly = [{ position: 0, length: entriesPage, advice: "random" }];
        // A read-only open writes no entry: the slots only.
        calls.length = 0;
        const reader = await IndexFile.open({
          port,
          path,
          hashSlotNum: slots,
          indexNum: 0x100,
          readOnly: true,
        });
        assert.deepEqual(calls, slotsOnly);
        assert.equal(reader.indexCount, 3);
        await reader.close();
        // A writable open of a file with room: both, as at creation.
        calls.length = 0;
        const writer = await IndexFile.open({ port, path, hashSlotNum: slots, indexNum: 0x100 });
        assert.deepEqual(calls.map((call) => call.advice), ["random", "hugepage"]);
        await writer.close();
        // A full file is never written again: the slots only.
        const fullPath = `${env.directory}/20261129121453507`;
        const full = await IndexFile.create({
          port,
          path: fullPath,
          hashSlotNum: slots,
          indexNum: 3,
        });
        assert.equal(full.putKeyHashes(HASHES, 2, 0x100, T0), true);
        assert.equal(full.isWriteFull, true);
        await full.flush();
        await full.close();
        calls.length = 0;
        const reopened = await IndexFile.open({
          port,
          path: fullPath,
          hashSlotNum: slots,
          indexNum: 3,
        });
        assert.deepEqual(calls, slotsOnly);
        await reopened.close();
      });
    });

    test("IndexFile.putKeyHashes() asks for no more pre-fault after a failed chunk, and its entries still go in", async () => {
      await withSegmentEnv(adapter, async (env) => {
        if (!env.port.canMap) return;
        const calls: Populated[] = [];
        const port = recordingPort(
          env.port,
          calls,
          () => Promise.reject(new MqStoreError("IO_ERROR", "Pre-fault failed (a test)")),
        );
        const file = await createIndexFile(port, `${env.directory}/20261129121453505`);
        assert.equal(file.putKeyHashes(HASHES, 2, 0x100, T0), true);
        assert.equal(calls.length, 1);
        await lastDone(calls);
        writePast(file, ENTRIES_START + 3 * INDEX_POPULATE_CHUNK_BYTES / 2);
        await settle();
        assert.equal(calls.length, 1, "no chunk after the failed one");
        const last = file.indexCount - 1;
        assert.equal(file.entryAt(last).phyOffset, last * 0x100 - 0x100);
        await file.close();
      });
    });
  });
}
