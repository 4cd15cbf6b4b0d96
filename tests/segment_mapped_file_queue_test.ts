import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "../src/segment/clock.ts";
import type { MappedFile } from "../src/segment/mapped_file.ts";
import { MappedFileQueue, type MappedFileQueueOptions } from "../src/segment/mapped_file_queue.ts";
import { TransientStorePool } from "../src/segment/transient_store_pool.ts";
import { pattern } from "./_helpers.ts";
import {
  adapterCases,
  rejectsWithCode,
  type SegmentEnv,
  segmentName,
  spyPort,
  withSegmentEnv,
} from "./_segment_helpers.ts";

const SIZE = 0x1_0000;
const PAGE = 0x1000;
const DAY_MS = 86_400_000;

function queueOf(env: SegmentEnv, extra: Partial<MappedFileQueueOptions> = {}): MappedFileQueue {
  return new MappedFileQueue({
    port: env.port,
    directory: `${env.directory}/commitlog`,
    fileSizeBytes: SIZE,
    sparse: true,
    writeBufferSizeBytes: SIZE,
    ...extra,
  });
}

/** Appends `bytes` at the queue's end, rolling into new segments as needed (no BLANK marker). */
async function appendAcross(queue: MappedFileQueue, bytes: Uint8Array): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const file = await queue.getOrCreateLastMappedFile(0);
    const n = Math.min(bytes.length - done, SIZE - file.wrotePosition);
    await file.ensureWritable(n);
    assert.equal(file.appendBytes(bytes.subarray(done, done + n)), true);
    done += n;
  }
}

/** Makes a queue of `count` full segments starting at `firstOffset`, flushed and closed. */
async function writeSegments(env: SegmentEnv, firstOffset: number, count: number): Promise<void> {
  const queue = queueOf(env);
  await queue.load();
  await queue.getOrCreateLastMappedFile(firstOffset);
  for (let i = 0; i < count; i++) {
    const file = await queue.getOrCreateLastMappedFile(firstOffset);
    file.appendBytes(pattern(SIZE, i));
  }
  await queue.commit(0);
  await queue.flush(0);
  await queue.close();
}

async function readAt(queue: MappedFileQueue, offset: number, size: number): Promise<Uint8Array> {
  const file = queue.findMappedFileByOffset(offset);
  assert.ok(file, `a segment holds offset ${offset}`);
  const range = await file.selectRange(offset - file.fileFromOffset, size);
  assert.ok(range, `offset ${offset} readable`);
  const copy = range.bytes.slice();
  range.release();
  return copy;
}

async function names(env: SegmentEnv): Promise<string[]> {
  return await env.port.list(`${env.directory}/commitlog`);
}

const cases = await adapterCases();

for (const { adapter, skip } of cases) {
  describe(`MappedFileQueue on ${adapter}`, () => {
    const run = (name: string, body: (env: SegmentEnv) => Promise<void>) =>
      test(name, { skip }, () => withSegmentEnv(adapter, body));

    run("getOrCreateLastMappedFile() creates segments named by start offset", async (env) => {
      const queue = queueOf(env);
      await queue.load();
      assert.equal(queue.minOffset, -1);
      assert.equal(queue.maxOffset, 0);
      const first = await queue.getOrCreateLastMappedFile(2 * SIZE + 5);
      assert.equal(first.fileFromOffset, 2 * SIZE);
      assert.equal(await queue.getOrCreateLastMappedFile(0), first, "not full: the same file");
      first.appendBytes(pattern(SIZE));
      const second = await queue.getOrCreateLastMappedFile(0);
      assert.equal(second.fileFromOffset, 3 * SIZE);
      assert.deepEqual(await names(env), [segmentName(2 * SIZE), segmentName(3 * SIZE)]);
      assert.equal(queue.minOffset, 2 * SIZE);
      queue.checkSelf();
      await queue.close();
      await queue.close(); // idempotent
    });

    run("getOrCreateLastMappedFile() called concurrently creates one segment", async (env) => {
      const queue = queueOf(env);
      await queue.load();
      const [a, b] = await Promise.all([
        queue.getOrCreateLastMappedFile(0),
        queue.getOrCreateLastMappedFile(0),
      ]);
      assert.equal(a, b);
      a.appendBytes(pattern(SIZE));
      const [c, d] = await Promise.all([
        queue.getOrCreateLastMappedFile(0),
        queue.getOrCreateLastMappedFile(0),
      ]);
      assert.equal(c, d);
      assert.equal(queue.files.length, 2);
      await queue.close();
    });

    run("findMappedFileByOffset() maps offsets to segments at the edges", async (env) => {
      await writeSegments(env, SIZE, 3);
      const queue = queueOf(env);
      await queue.load();
      const [a, b, c] = queue.files as MappedFile[];
      const table: Array<[number, MappedFile | undefined]> = [
        [0, undefined],
        [SIZE - 1, undefined],
        [SIZE, a],
        [2 * SIZE - 1, a],
        [2 * SIZE, b],
        [3 * SIZE, c],
        [4 * SIZE - 1, c],
        [4 * SIZE, undefined],
      ];
      for (const [offset, file] of table) {
        assert.equal(queue.findMappedFileByOffset(offset), file, `offset ${offset}`);
      }
      await queue.close();
    });

    run("load() opens existing segments as full and reads their bytes", async (env) => {
      await writeSegments(env, 0, 3);
      const queue = queueOf(env);
      await queue.load();
      assert.equal(queue.files.length, 3);
      assert.equal(queue.minOffset, 0);
      assert.equal(queue.maxOffset, 3 * SIZE);
      assert.ok(queue.files.every((file) => file.isFull));
      assert.deepEqual(await readAt(queue, SIZE + 100, 10), pattern(SIZE, 1).subarray(100, 110));
      queue.checkSelf();
      await queue.close();
    });

    run("load() refuses a segment of the wrong size with INVALID_FILE", async (env) => {
      await writeSegments(env, 0, 2);
      const wrong = await env.port.createFile(
        `${env.directory}/commitlog/${segmentName(2 * SIZE)}`,
        SIZE - PAGE,
        { sparse: true },
      );
      await wrong.close();
      await rejectsWithCode(queueOf(env).load(), "INVALID_FILE");
    });

    run("load() refuses a missing middle segment with INVALID_FILE", async (env) => {
      await writeSegments(env, 0, 3);
      await env.port.remove(`${env.directory}/commitlog/${segmentName(SIZE)}`);
      await rejectsWithCode(queueOf(env).load(), "INVALID_FILE");
    });

    run("load() refuses a name that is not a multiple of the segment size", async (env) => {
      await env.port.makeDirectory(`${env.directory}/commitlog`);
      const odd = await env.port.createFile(
        `${env.directory}/commitlog/${segmentName(100)}`,
        SIZE,
        { sparse: true },
      );
      await odd.close();
      await rejectsWithCode(queueOf(env).load(), "INVALID_FILE");
    });

    run("load() removes a half-made .tmp segment", async (env) => {
      await writeSegments(env, 0, 1);
      const half = await env.port.createFile(
        `${env.directory}/commitlog/${segmentName(SIZE)}.tmp`,
        PAGE,
        { sparse: true },
      );
      await half.close();
      const queue = queueOf(env);
      await queue.load();
      assert.deepEqual(await names(env), [segmentName(0)]);
      assert.equal(queue.files.length, 1);
      await queue.close();
    });

    run("flush() advances across a segment boundary", async (env) => {
      const queue = queueOf(env);
      await queue.load();
      await appendAcross(queue, pattern(SIZE - 10));
      assert.equal(await queue.flush(0), true);
      assert.equal(queue.flushedWhere, SIZE - 10);
      // A put that fills the first segment and ends in the second.
      await appendAcross(queue, pattern(60, 9));
      assert.equal(queue.files.length, 2);
      assert.equal(await queue.flush(4), true, "the full first segment is flushed regardless");
      assert.equal(queue.flushedWhere, SIZE);
      assert.equal(await queue.flush(0), true);
      assert.equal(queue.flushedWhere, SIZE + 50);
      assert.equal(await queue.flush(0), false, "nothing left");
      assert.deepEqual(await readAt(queue, SIZE - 10, 10), pattern(60, 9).subarray(0, 10));
      assert.deepEqual(await readAt(queue, SIZE, 50), pattern(60, 9).subarray(10));
      await queue.close();
    });

    run("unflushedBytes and uncommittedBytes follow appends, commits and flushes", async (env) => {
      const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 2 });
      const queue = queueOf(env, { pool });
      await queue.load();
      assert.equal(queue.unflushedBytes, 0);
      await appendAcross(queue, pattern(SIZE + 10));
      assert.equal(queue.uncommittedBytes, SIZE + 10);
      assert.equal(queue.unflushedBytes, SIZE, "only committed bytes are visible");
      await queue.commit(0);
      assert.equal(queue.uncommittedBytes, 0);
      assert.equal(queue.unflushedBytes, SIZE + 10);
      await queue.flush(0);
      assert.equal(queue.unflushedBytes, 0);
      await queue.close();
      await pool.close();
    });

    run(
      "findMappedFileByTime() finds the first segment modified at or after a time",
      async (env) => {
        await writeSegments(env, 0, 2);
        const queue = queueOf(env);
        await queue.load();
        const [a, b] = queue.files as [MappedFile, MappedFile];
        assert.equal(await queue.findMappedFileByTime(0), a);
        assert.equal(
          await queue.findMappedFileByTime(await b.lastModifiedMs() + DAY_MS),
          b,
          "else the last",
        );
        await queue.close();
        assert.equal(await queueOf(env).findMappedFileByTime(0), undefined);
      },
    );

    run("flush() honours leastPages on the queue", async (env) => {
      const queue = queueOf(env);
      await queue.load();
      await appendAcross(queue, pattern(3 * PAGE));
      assert.equal(await queue.flush(4), false);
      assert.equal(queue.flushedWhere, 0);
      await appendAcross(queue, pattern(PAGE));
      assert.equal(await queue.flush(4), true);
      assert.equal(queue.flushedWhere, 4 * PAGE);
      await queue.close();
    });

    run("commit() advances across a segment boundary with pool buffers", async (env) => {
      const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 2 });
      const queue = queueOf(env, { pool });
      await queue.load();
      await appendAcross(queue, pattern(SIZE + 100));
      assert.equal(queue.maxOffset, SIZE, "readers see only committed bytes");
      assert.equal(queue.maxWrotePosition, SIZE + 100);
      assert.equal(await queue.commit(0), true);
      assert.equal(queue.committedWhere, SIZE + 100);
      assert.equal(pool.availableCount, 1, "the full segment gave its buffer back");
      assert.equal(queue.maxOffset, SIZE + 100);
      await queue.flush(0);
      assert.equal(queue.flushedWhere, SIZE + 100);
      assert.deepEqual(await readAt(queue, SIZE, 100), pattern(SIZE + 100).subarray(SIZE));
      await queue.close();
      assert.equal(pool.availableCount, 2);
      await pool.close();
    });

    run("truncateDirtyFiles() trims the holding segment and deletes later ones", async (env) => {
      await writeSegments(env, 0, 3);
      const queue = queueOf(env);
      await queue.load();
      queue.flushedWhere = 3 * SIZE;
      queue.committedWhere = 3 * SIZE;
      await queue.truncateDirtyFiles(SIZE + 100);
      assert.equal(queue.files.length, 2);
      assert.deepEqual(await names(env), [segmentName(0), segmentName(SIZE)]);
      const last = queue.lastFile;
      assert.ok(last);
      assert.equal(last.wrotePosition, 100);
      assert.equal(last.flushedPosition, 100);
      assert.equal(queue.flushedWhere, SIZE + 100);
      assert.equal(queue.maxOffset, SIZE + 100);
      // Appends continue at the cut.
      await appendAcross(queue, new Uint8Array(5).fill(0xee));
      await queue.flush(0);
      assert.deepEqual(await readAt(queue, SIZE + 100, 5), new Uint8Array(5).fill(0xee));
      await queue.close();
    });

    run("truncateDirtyFiles() at a segment edge keeps an empty segment", async (env) => {
      await writeSegments(env, 0, 3);
      const queue = queueOf(env);
      await queue.load();
      await queue.truncateDirtyFiles(SIZE);
      assert.equal(queue.files.length, 2);
      assert.equal(queue.lastFile?.wrotePosition, 0);
      assert.equal(queue.files[0]?.isFull, true);
      await queue.close();
    });

    run(
      "deleteExpiredByTime() deletes old segments, never the last, at most maxCount",
      async (env) => {
        await writeSegments(env, 0, 4);
        const clock = new ManualClock(Date.now());
        const queue = queueOf(env, { clock });
        await queue.load();
        assert.equal(await queue.deleteExpiredByTime({ expiredTimeMs: DAY_MS }), 0, "young");
        clock.advance(DAY_MS + 60_000);
        assert.equal(await queue.deleteExpiredByTime({ expiredTimeMs: DAY_MS, maxCount: 2 }), 2);
        assert.deepEqual(await names(env), [segmentName(2 * SIZE), segmentName(3 * SIZE)]);
        assert.equal(await queue.deleteExpiredByTime({ expiredTimeMs: DAY_MS }), 1);
        assert.equal(
          await queue.deleteExpiredByTime({ expiredTimeMs: DAY_MS }),
          0,
          "the last stays",
        );
        assert.equal(queue.minOffset, 3 * SIZE);
        assert.equal(queue.findMappedFileByOffset(3 * SIZE + 1), queue.lastFile);
        queue.checkSelf();
        await queue.close();
      },
    );

    run("deleteExpiredByTime() with cleanImmediately ignores age", async (env) => {
      await writeSegments(env, 0, 3);
      const queue = queueOf(env, { clock: new ManualClock(0) });
      await queue.load();
      assert.equal(
        await queue.deleteExpiredByTime({ expiredTimeMs: DAY_MS, cleanImmediately: true }),
        2,
      );
      await queue.close();
    });

    run("deleteExpiredByTime() waits for a reader holding the segment", async (env) => {
      await writeSegments(env, 0, 3);
      const clock = new ManualClock(Date.now() + DAY_MS * 2);
      const queue = queueOf(env, { clock });
      await queue.load();
      const first = queue.firstFile;
      assert.ok(first);
      const range = await first.selectRange(0, 100);
      assert.ok(range);
      const options = { expiredTimeMs: DAY_MS, forceAfterMs: 60_000 };
      const deleted = await queue.deleteExpiredByTime(options);
      if (first.writeMode !== "mapping") {
        // A positional read returned a copy; nothing holds the segment.
        assert.equal(deleted, 2);
        assert.deepEqual(range.bytes, pattern(SIZE, 0).subarray(0, 100));
        await queue.close();
        return;
      }
      assert.equal(deleted, 0, "held: spared, and the walk stops there");
      assert.equal(queue.files.length, 3);
      assert.deepEqual(range.bytes.slice(), pattern(SIZE, 0).subarray(0, 100));
      assert.equal(await queue.retryDeleteFirstFile(60_000), false);
      range.release();
      assert.equal(await queue.retryDeleteFirstFile(60_000), true);
      assert.deepEqual(await names(env), [segmentName(SIZE), segmentName(2 * SIZE)]);
      // A reader that never lets go is overridden after forceAfterMs.
      const second = queue.firstFile;
      assert.ok(second);
      const stuck = await second.selectRange(0, 10);
      assert.ok(stuck);
      assert.equal(await queue.deleteExpiredByTime(options), 0);
      clock.advance(60_000);
      assert.equal(await queue.deleteExpiredByTime(options), 1);
      assert.ok(stuck.bytes.length === 0 || stuck.bytes.every((b) => b === 0), "retired view");
      stuck.release();
      await queue.close();
    });

    run(
      "deleteExpiredByOffset() deletes unit segments whose last unit is below the offset",
      async (env) => {
        const unit = 20;
        const unitsPerFile = 3200;
        const queue = queueOf(env, { fileSizeBytes: unit * unitsPerFile });
        await queue.load();
        await assert.rejects(
          queue.deleteExpiredByOffset(0, 24),
          RangeError,
          "64000 is not whole 24-byte units",
        );
        // Unit i points at commit-log offset 2^32 + 1000 * i (above 32 bits on purpose).
        const entry = new Uint8Array(unit);
        const view = new DataView(entry.buffer);
        for (let i = 0; i < 3 * unitsPerFile; i++) {
          const file = await queue.getOrCreateLastMappedFile(0);
          const offset = 0x1_0000_0000 + 1000 * i;
          view.setUint32(0, Math.floor(offset / 0x1_0000_0000));
          view.setUint32(4, offset >>> 0);
          await file.ensureWritable(unit);
          assert.equal(file.appendBytes(entry), true);
        }
        assert.equal(queue.files.length, 3);
        await queue.commit(0);
        await queue.flush(0);
        const lastOfFirst = 0x1_0000_0000 + 1000 * (unitsPerFile - 1);
        assert.equal(await queue.deleteExpiredByOffset(lastOfFirst, unit), 0);
        assert.equal(await queue.deleteExpiredByOffset(lastOfFirst + 1, unit), 1);
        assert.equal(queue.minOffset, unit * unitsPerFile);
        assert.equal(await queue.deleteExpiredByOffset(Number.MAX_SAFE_INTEGER, unit), 1);
        assert.equal(queue.files.length, 1, "never the last segment");
        await queue.close();
      },
    );

    run("readOnly load() refuses to create or delete", async (env) => {
      await writeSegments(env, 0, 2);
      const queue = queueOf(env, { readOnly: true });
      await queue.load();
      assert.equal(queue.maxOffset, 2 * SIZE);
      assert.deepEqual(await readAt(queue, 10, 10), pattern(SIZE, 0).subarray(10, 20));
      await rejectsWithCode(queue.getOrCreateLastMappedFile(0), "UNSUPPORTED");
      await rejectsWithCode(queue.deleteExpiredByTime({ expiredTimeMs: 0 }), "UNSUPPORTED");
      await queue.close();
    });

    if (adapter === "memory") {
      for (const point of ["datasync", "rename", "syncDirectory", "openFile"]) {
        run(
          `a crash at ${point} while creating a segment never leaves a wrong-sized one`,
          async (env) => {
            const memory = env.memory;
            assert.ok(memory);
            for (let seed = 1; seed <= 8; seed++) {
              const directory = `${env.directory}/${seed}`;
              let armed = false;
              let dead = false;
              // After the power loss the process is gone: no cleanup runs.
              const port = spyPort(env.port, [], {
                beforeCall: (operation) => {
                  if (dead) throw new Error("power loss");
                  if (armed && operation === point) {
                    dead = true;
                    memory.crash({ seed });
                    throw new Error("power loss");
                  }
                },
              });
              const queue = queueOf(env, { port, directory, sparse: false });
              await queue.load();
              (await queue.getOrCreateLastMappedFile(0)).appendBytes(pattern(SIZE));
              await queue.flush(0);
              armed = true;
              await assert.rejects(queue.getOrCreateLastMappedFile(0), /power loss/);
              const reloaded = queueOf(env, { directory });
              await reloaded.load();
              assert.ok(reloaded.files.length === 1 || reloaded.files.length === 2, `seed ${seed}`);
              assert.deepEqual(
                await env.port.list(directory),
                reloaded.files.map((f) => f.fileName),
              );
              assert.deepEqual(await readAt(reloaded, 0, 100), pattern(SIZE).subarray(0, 100));
              await reloaded.close();
            }
          },
        );
      }

      run("crash() keeps exactly what flush() covered, across segments", async (env) => {
        const memory = env.memory;
        assert.ok(memory);
        const queue = queueOf(env, { sparse: false });
        await queue.load();
        const bytes = pattern(SIZE + 3 * PAGE, 4);
        await appendAcross(queue, bytes.subarray(0, SIZE + PAGE));
        await queue.flush(0);
        assert.equal(queue.flushedWhere, SIZE + PAGE);
        await appendAcross(queue, bytes.subarray(SIZE + PAGE));
        memory.crash();
        const reloaded = queueOf(env);
        await reloaded.load();
        assert.equal(reloaded.files.length, 2);
        assert.deepEqual(await readAt(reloaded, 0, SIZE), bytes.subarray(0, SIZE));
        assert.deepEqual(await readAt(reloaded, SIZE, PAGE), bytes.subarray(SIZE, SIZE + PAGE));
        assert.deepEqual(await readAt(reloaded, SIZE + PAGE, 2 * PAGE), new Uint8Array(2 * PAGE));
        await reloaded.close();
      });
    }
  });
}
