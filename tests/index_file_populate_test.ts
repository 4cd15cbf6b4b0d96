/**
 * The index file's pre-fault of its entries: a chunk of
 * INDEX_POPULATE_CHUNK_BYTES past the writer, off the JavaScript thread,
 * the next one once the writer comes into the one before (done or not);
 * never the header or the slots; nothing without a mapping; nothing more
 * after a failed chunk.
 *
 * @module
 */

import assert from "node:assert/strict";
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
import type { RuntimePort } from "../src/runtime/port.ts";
import { adapterCases, hookedMappingsPort, settle, withSegmentEnv } from "./_segment_helpers.ts";

const SLOTS = 64;
/** Entries for two and a half chunks. */
const ENTRIES = Math.ceil((5 * INDEX_POPULATE_CHUNK_BYTES) / 2 / INDEX_ENTRY_SIZE_BYTES);
const ENTRIES_START = INDEX_HEADER_SIZE_BYTES + SLOTS * HASH_SLOT_SIZE_BYTES;
const T0 = 1_795_954_493_497;

/** A populate call on an index file's mapping. */
interface Populated {
  position: number;
  length: number;
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
    populate(position, length, run) {
      const running = answer?.() ?? run();
      calls.push({ position, length, done: running.then(() => {}, () => {}) });
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
        }
        await file.close();
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
