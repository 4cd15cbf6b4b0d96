import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setImmediate } from "node:timers";
import { MqStoreError } from "../src/errors.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { isAbleTo, MappedFile } from "../src/segment/mapped_file.ts";
import {
  PREPARE_POPULATE_CHUNK_BYTES,
  PREPARE_WRITE_CHUNK_BYTES,
} from "../src/segment/constants.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { TransientStorePool } from "../src/segment/transient_store_pool.ts";
import { pattern } from "./_helpers.ts";
import {
  adapterCases,
  hookedMappingsPort,
  rejectsWithCode,
  type SegmentEnv,
  segmentName,
  settle,
  spyPort,
  withSegmentEnv,
} from "./_segment_helpers.ts";

const SIZE = 0x1_0000; // 64 KiB segments keep the tests fast.
const PAGE = 0x1000;

describe("isAbleTo()", () => {
  const cases: Array<
    [done: number, target: number, full: boolean, leastPages: number, able: boolean]
  > = [
    [4095, 4097, false, 1, true], // crosses one page edge: one page
    [0, 4095, false, 1, false],
    [0, 4096, false, 1, true],
    [4096, 8191, false, 1, false],
    [0, 8191, false, 2, false],
    [0, 8192, false, 2, true],
    [4095, 8192, false, 2, true],
    [5, 5, false, 0, false],
    [5, 6, false, 0, true],
    [0, 0, true, 4, true], // a full file is always flushed
    [SIZE, SIZE, true, 0, true],
  ];
  for (const [done, target, full, leastPages, able] of cases) {
    test(`isAbleTo() is ${able} for ${done} → ${target}, full ${full}, leastPages ${leastPages}`, () => {
      assert.equal(isAbleTo(done, target, full, leastPages), able);
    });
  }
});

function pathOf(env: SegmentEnv, offset: number): string {
  return `${env.directory}/${segmentName(offset)}`;
}

function create(
  env: SegmentEnv,
  offset = 0,
  extra: Partial<Parameters<typeof MappedFile.create>[0]> = {},
) {
  return MappedFile.create({
    port: env.port,
    path: pathOf(env, offset),
    fileSizeBytes: SIZE,
    sparse: true,
    ...extra,
  });
}

function appendPayload(file: MappedFile, payload: Uint8Array, timestampMs = 1) {
  return file.append((target) => {
    assert.ok(target.writableBytes >= payload.length);
    target.bytes.set(payload, target.index);
    return { wroteBytes: payload.length, storeTimestampMs: timestampMs };
  });
}

async function readAll(file: MappedFile, position: number, size: number): Promise<Uint8Array> {
  const range = await file.selectRange(position, size);
  assert.ok(range !== undefined, `range [${position}, ${position + size}) readable`);
  const copy = range.bytes.slice();
  range.release();
  return copy;
}

/**
 * Wraps a port so that `Mapping.populate` waits at a gate until `open()`
 * (then runs for real), and logs `populate a-b` when a pre-fault is asked
 * for, `populated a-b` when it ended and `sync a-b` when a sync starts.
 */
function gatedPopulatePort(inner: RuntimePort): {
  port: RuntimePort;
  events: string[];
  open(): void;
} {
  const events: string[] = [];
  let open!: () => void;
  const gate = new Promise<void>((resolve) => open = resolve);
  const port = hookedMappingsPort(inner, {
    async populate(position, length, run) {
      events.push(`populate ${position}-${position + length}`);
      await gate;
      await run();
      events.push(`populated ${position}-${position + length}`);
    },
    sync(position, length, run) {
      events.push(`sync ${position}-${position + length}`);
      return run();
    },
  });
  return { port, events, open };
}

/** A sparse segment at offset 0 whose pre-faults wait at a gate ({@link gatedPopulatePort}). */
async function gatedFile(
  env: SegmentEnv,
  sizeBytes: number,
): Promise<{ gated: ReturnType<typeof gatedPopulatePort>; file: MappedFile }> {
  const gated = gatedPopulatePort(env.port);
  const file = await MappedFile.create({
    port: gated.port,
    path: pathOf(env, 0),
    fileSizeBytes: sizeBytes,
    sparse: true,
  });
  return { gated, file };
}

const cases = await adapterCases();

for (const { adapter, skip } of cases) {
  describe(`MappedFile on ${adapter}`, () => {
    const run = (name: string, body: (env: SegmentEnv) => Promise<void>) =>
      test(name, { skip }, () => withSegmentEnv(adapter, body));

    run("create() makes a segment of the exact size named by its offset", async (env) => {
      const file = await create(env, 3 * SIZE);
      assert.equal(file.fileFromOffset, 3 * SIZE);
      assert.equal(file.fileName, segmentName(3 * SIZE));
      assert.equal(file.writeMode, env.port.canMap ? "mapping" : "window");
      assert.equal((await env.port.stat(file.path))?.sizeBytes, SIZE);
      assert.deepEqual(await env.port.list(env.directory), [segmentName(3 * SIZE)]);
      assert.equal(file.wrotePosition, 0);
      await file.close();
    });

    run("create() refuses an existing segment and leaves it alone", async (env) => {
      const file = await create(env);
      appendPayload(file, pattern(10));
      await file.flush(0);
      await rejectsWithCode(create(env), "ALREADY_EXISTS");
      assert.deepEqual(await readAll(file, 0, 10), pattern(10));
      await file.close();
    });

    run("append() writes at the wrote position and keeps the store timestamp", async (env) => {
      const file = await create(env, SIZE);
      const seen: number[] = [];
      for (let i = 0; i < 3; i++) {
        file.append((target) => {
          seen.push(target.fileOffset);
          assert.equal(target.remainingBytes, SIZE - 100 * i);
          target.bytes.set(pattern(100, i), target.index);
          return { wroteBytes: 100, storeTimestampMs: 1000 + i };
        });
      }
      assert.deepEqual(seen, [SIZE, SIZE + 100, SIZE + 200]);
      assert.equal(file.wrotePosition, 300);
      assert.equal(file.storeTimestampMs, 1002);
      await file.flush(0);
      assert.deepEqual(await readAll(file, 100, 100), pattern(100, 1));
      await file.close();
    });

    run("append() rejects a callback that reports more than fits", async (env) => {
      const file = await create(env);
      assert.throws(
        () => file.append(() => ({ wroteBytes: SIZE + 1, storeTimestampMs: 0 })),
        RangeError,
      );
      assert.equal(file.wrotePosition, 0);
      await file.close();
    });

    run("appendBytes() fills the file exactly and refuses one byte too many", async (env) => {
      const file = await create(env, 0, { writeBufferSizeBytes: SIZE });
      assert.equal(file.appendBytes(new Uint8Array(SIZE - 1)), true);
      assert.equal(file.isFull, false);
      assert.equal(file.appendBytes(new Uint8Array(2)), false, "one byte short");
      assert.equal(file.wrotePosition, SIZE - 1);
      assert.equal(file.appendBytes(new Uint8Array([7])), true);
      assert.equal(file.isFull, true);
      assert.throws(() => file.appendBytes(new Uint8Array(1)), RangeError);
      assert.equal(await file.flush(100), SIZE, "a full file flushes whatever leastPages says");
      assert.deepEqual(await readAll(file, SIZE - 1, 1), new Uint8Array([7]));
      await file.close();
    });

    run(
      "appendPositional() writes through the file where appends go through the mapping",
      async (env) => {
        const file = await create(env);
        file.appendBytes(pattern(100));
        const run = pattern(SIZE - 100, 5);
        if (file.writeMode !== "mapping") {
          assert.equal(file.appendPositional(run), false, "only a mapping's file");
          assert.equal(file.wrotePosition, 100);
          await file.close();
          return;
        }
        assert.equal(file.appendPositional(pattern(SIZE - 99)), false, "one byte short");
        assert.equal(file.wrotePosition, 100);
        assert.equal(file.appendPositional(run), true);
        assert.equal(file.wrotePosition, SIZE);
        assert.equal(file.readPosition, SIZE);
        // What readers see through the mapping, and what is flushed.
        assert.deepEqual(await readAll(file, 100, SIZE - 100), run);
        assert.equal(await file.flush(0), SIZE);
        assert.equal(file.appendPositional(new Uint8Array(1)), false, "a full file");
        await file.close();
      },
    );

    // [flushed before, wrote, leastPages, flushed after]
    const flushCases: Array<[number, number, number, number]> = [
      [0, 4095, 1, 0],
      [0, 4096, 1, 4096],
      [4095, 4097, 1, 4097],
      [4096, 8191, 1, 4096],
      [0, 8191, 2, 0],
      [0, 3 * PAGE, 4, 0],
      [0, 4 * PAGE, 4, 4 * PAGE],
      [0, 1, 0, 1],
      [100, 100, 0, 100],
    ];
    for (const [before, wrote, leastPages, after] of flushCases) {
      run(
        `flush(${leastPages}) moves flushed ${before} → ${after} when wrote is ${wrote}`,
        async (env) => {
          const file = await create(env);
          if (before > 0) {
            file.appendBytes(pattern(before));
            assert.equal(await file.flush(0), before);
          }
          if (wrote > before) file.appendBytes(pattern(wrote - before, 3));
          assert.equal(await file.flush(leastPages), after);
          assert.equal(file.flushedPosition, after);
          await file.close();
        },
      );
    }

    run("readPosition never includes bytes only in a write buffer", async (env) => {
      const file = await create(env);
      file.appendBytes(pattern(100));
      if (file.writeMode === "mapping") {
        assert.equal(file.readPosition, 100);
      } else {
        assert.equal(file.readPosition, 0);
        assert.equal(await file.selectRange(0, 1), undefined);
        assert.equal(await file.commit(0), 100);
        assert.equal(file.readPosition, 100);
      }
      assert.equal(await file.selectRange(50, 51), undefined, "past the read position");
      assert.deepEqual(await readAll(file, 50, 50), pattern(100).subarray(50));
      await file.close();
    });

    run("open() reads back what was flushed and refuses a wrong size", async (env) => {
      const file = await create(env, SIZE);
      file.appendBytes(pattern(5000));
      await file.flush(0);
      await file.close();
      const reopened = await MappedFile.open({
        port: env.port,
        path: file.path,
        fileSizeBytes: SIZE,
      });
      reopened.resetPositions(SIZE);
      assert.deepEqual(await readAll(reopened, 0, 5000), pattern(5000));
      assert.deepEqual(await readAll(reopened, 5000, 10), new Uint8Array(10));
      await reopened.close();
      const wrong = await env.port.createFile(pathOf(env, 2 * SIZE), SIZE - 1, { sparse: true });
      await wrong.close();
      await rejectsWithCode(
        MappedFile.open({ port: env.port, path: pathOf(env, 2 * SIZE), fileSizeBytes: SIZE }),
        "INVALID_FILE",
      );
    });

    run(
      "selectView() hands out held views where the port maps, and refuses elsewhere",
      async (env) => {
        const file = await create(env);
        file.appendBytes(pattern(300));
        await file.flush(0);
        if (!file.readsThroughMapping) {
          assert.throws(() => file.selectView(0, 1), MqStoreError);
          await file.close();
          return;
        }
        assert.equal(file.selectView(0, file.readPosition + 1), undefined);
        const view = file.selectView(100);
        assert.ok(view);
        assert.equal(view.fileOffset, 100);
        assert.deepEqual(view.bytes.slice(), pattern(300).subarray(100));
        assert.equal(file.refCount, 2);
        view.release();
        view.release();
        assert.equal(file.refCount, 1);
        await file.close();
      },
    );

    run("resetPositions() truncates and appends continue from there", async (env) => {
      const file = await create(env);
      file.appendBytes(pattern(3000));
      await file.flush(0);
      file.resetPositions(1000);
      assert.equal(file.wrotePosition, 1000);
      assert.equal(file.flushedPosition, 1000);
      file.appendBytes(new Uint8Array(10).fill(9));
      await file.flush(0);
      assert.deepEqual(await readAll(file, 1000, 10), new Uint8Array(10).fill(9));
      assert.throws(() => file.resetPositions(SIZE + 1), RangeError);
      await file.close();
    });

    run("destroy() waits for a reader holding a range", async (env) => {
      const clock = new ManualClock(1_000);
      const file = await create(env, 0, { clock });
      file.appendBytes(pattern(200));
      await file.flush(0);
      const range = await file.selectRange(0, 200);
      assert.ok(range);
      if (file.writeMode !== "mapping") {
        // Positional reads hand out copies and hold nothing afterwards.
        await file.destroy({ waitMs: 60_000 });
        assert.equal(await env.port.stat(file.path), undefined);
        assert.deepEqual(range.bytes, pattern(200));
        return;
      }
      let destroyed = false;
      const destroying = file.destroy({ waitMs: 60_000 }).then(() => destroyed = true);
      await settle();
      assert.equal(destroyed, false);
      assert.equal(file.isAvailable, false);
      assert.equal(await file.selectRange(0, 1), undefined, "no new readers while closing");
      assert.deepEqual(range.bytes.slice(), pattern(200), "the held view stays valid");
      assert.ok(await env.port.stat(file.path));
      range.release();
      range.release(); // idempotent
      await destroying;
      assert.equal(await env.port.stat(file.path), undefined);
      assert.equal(clock.pendingTimerCount, 0);
    });

    run("destroy() retires the mapping after its timeout, detaching the held view", async (env) => {
      const clock = new ManualClock(1_000);
      const file = await create(env, 0, { clock });
      file.appendBytes(pattern(PAGE));
      await file.flush(0);
      const range = await file.selectRange(0, PAGE);
      assert.ok(range);
      const destroying = file.destroy({ waitMs: 5_000 });
      await settle();
      clock.advance(5_000);
      await destroying;
      assert.equal(await env.port.stat(file.path), undefined);
      if (file.writeMode === "mapping") {
        const view = range.bytes;
        assert.ok(view.length === 0 || view.every((b) => b === 0), "detached or zeros");
      }
      range.release();
    });

    run("tryDestroy() spares a held segment until forceAfterMs", async (env) => {
      const clock = new ManualClock(1_000);
      const file = await create(env, 0, { clock });
      file.appendBytes(pattern(10));
      await file.flush(0);
      const range = await file.selectRange(0, 10);
      assert.ok(range);
      if (file.writeMode === "mapping") {
        assert.equal(await file.tryDestroy(1_000), false);
        clock.advance(999);
        assert.equal(await file.tryDestroy(1_000), false);
        assert.ok(await env.port.stat(file.path));
        clock.advance(1);
        assert.equal(await file.tryDestroy(1_000), true);
      } else {
        // Positional reads return copies: nothing is held after the read.
        assert.equal(await file.tryDestroy(1_000), true);
      }
      assert.equal(await env.port.stat(file.path), undefined);
      range.release();
    });

    run(
      "commit() in pool mode copies into the file and gives the buffer back when full",
      async (env) => {
        // A buffer from the port: locked in memory on the FFI adapters.
        const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 1, port: env.port });
        await pool.init();
        const file = await create(env, 0, { pool });
        assert.equal(file.writeMode, "pool");
        assert.equal(pool.availableCount, 0);
        file.appendBytes(pattern(PAGE - 1));
        assert.equal(await file.commit(1), 0, "less than a page");
        assert.equal(file.readPosition, 0);
        file.appendBytes(pattern(2, 5));
        assert.equal(await file.commit(1), PAGE + 1, "4095 → 4097 is one page");
        assert.equal(await file.flush(0), PAGE + 1);
        assert.deepEqual(await readAll(file, PAGE - 1, 2), pattern(2, 5));
        file.appendBytes(pattern(SIZE - PAGE - 1, 7));
        assert.equal(file.isFull, true);
        assert.equal(file.holdsPoolBuffer, true);
        assert.equal(await file.commit(4), SIZE);
        assert.equal(file.holdsPoolBuffer, false);
        assert.equal(pool.availableCount, 1);
        assert.equal(await file.flush(4), SIZE);
        assert.deepEqual(await readAll(file, PAGE + 1, 100), pattern(100, 7));
        await file.close();
        await pool.close();
      },
    );

    run("ensureWritable() makes room in a bounded write buffer", async (env) => {
      const window = 2 * PAGE;
      const file = await create(env, 0, { writeBufferSizeBytes: window });
      const chunk = 3000;
      const chunks = Math.floor(SIZE / chunk);
      for (let i = 0; i < chunks; i++) {
        if (file.writableBytes < chunk) {
          if (file.writeMode === "window") {
            assert.throws(() => file.appendBytes(pattern(chunk, i)), RangeError);
          }
          await file.ensureWritable(chunk);
        }
        assert.equal(file.appendBytes(pattern(chunk, i)), true);
      }
      await file.flush(0);
      assert.equal(file.flushedPosition, chunks * chunk);
      for (const i of [0, 1, chunks - 1]) {
        assert.deepEqual(await readAll(file, i * chunk, chunk), pattern(chunk, i));
      }
      await file.close();
    });

    run("commit() keeps appends made while it is writing", async (env) => {
      const file = await create(env, 0, { writeBufferSizeBytes: 4 * PAGE });
      file.appendBytes(pattern(1000, 1));
      const committing = file.commit(0);
      file.appendBytes(pattern(1000, 2)); // lands while the write is in flight
      await committing;
      file.appendBytes(pattern(1000, 3));
      await file.flush(0);
      assert.equal(file.flushedPosition, 3000);
      assert.deepEqual(await readAll(file, 0, 1000), pattern(1000, 1));
      assert.deepEqual(await readAll(file, 1000, 1000), pattern(1000, 2));
      assert.deepEqual(await readAll(file, 2000, 1000), pattern(1000, 3));
      await file.close();
    });

    run("warm() pre-faults a mapped segment", async (env) => {
      const file = await create(env);
      assert.equal(await file.warm(), false);
      file.appendBytes(pattern(10));
      assert.equal(await file.flush(0), 10);
      await file.close();
    });

    run("flush() with maxBytes stops at whole pages and always moves", async (env) => {
      const file = await create(env);
      appendPayload(file, pattern(5 * PAGE + 100));
      if (file.writeMode === "mapping") {
        assert.equal(await file.flush(0, 2 * PAGE + 10), 2 * PAGE, "whole pages up to the bound");
        assert.equal(await file.flush(0, 1), 3 * PAGE, "at least one page");
      }
      assert.equal(await file.flush(0, 0x10_0000), 5 * PAGE + 100);
      assert.throws(() => file.flush(0, 0), RangeError);
      assert.deepEqual(await readAll(file, 0, 5 * PAGE + 100), pattern(5 * PAGE + 100));
      await file.close();
    });

    run(
      "prepare() with writeZeros leaves appended bytes and positions to the writer",
      async (env) => {
        const log: string[] = [];
        const file = await create(env, 0, { port: spyPort(env.port, log) });
        appendPayload(file, pattern(PAGE + 10, 1));
        log.length = 0;
        const preparing = file.prepare({ writeZeros: true });
        appendPayload(file, pattern(3 * PAGE, 2)); // the writer moves on meanwhile
        await preparing;
        await file.whenPrepared();
        assert.equal(file.flushedPosition, 0, "only flush() moves the flushed position");
        assert.equal(file.wrotePosition, 4 * PAGE + 10);
        if (file.writeMode === "mapping") {
          // Advised at creation: the preparation only writes the zeros.
          assert.ok(!log.includes("advise:random") && log.includes("sync"), log.join(", "));
        } else {
          assert.deepEqual(log, [], "nothing to prepare without a write mapping");
        }
        assert.equal(await file.flush(0), 4 * PAGE + 10);
        assert.deepEqual(await readAll(file, 0, PAGE + 10), pattern(PAGE + 10, 1));
        assert.deepEqual(await readAll(file, PAGE + 10, 3 * PAGE), pattern(3 * PAGE, 2));
        await file.close();
      },
    );

    run("prepare() writes zeros only when its pace lets it", async (env) => {
      const log: string[] = [];
      const file = await create(env, 0, { port: spyPort(env.port, log) });
      if (file.writeMode !== "mapping") return await file.close();
      let open!: () => void;
      const gate = new Promise<void>((resolve) => open = resolve);
      let quiet = false;
      log.length = 0;
      const preparing = file.prepare({
        writeZeros: true,
        pace: () => quiet ? undefined : gate.then(() => void (quiet = true)),
      });
      await settle();
      assert.ok(!log.includes("sync"), "no zeros written while the pace holds");
      open();
      await preparing;
      assert.ok(log.includes("sync"));
      await file.close();
    });

    run(
      "flush() waits for a pre-fault chunk it overlaps, so a flushed page is never dirtied again",
      async (env) => {
        const gated = gatedPopulatePort(env.port);
        const file = await create(env, 0, { port: gated.port });
        if (file.writeMode !== "mapping") return await file.close();
        const preparing = file.prepare();
        await settle();
        assert.deepEqual(gated.events, ["populate 0-65536"], "held at the gate");
        appendPayload(file, pattern(3 * PAGE, 4)); // the writer overtakes it
        const flushing = file.flush(0);
        await settle();
        assert.deepEqual(gated.events, ["populate 0-65536"], "the flush waits for the chunk");
        gated.open();
        assert.equal(await flushing, 3 * PAGE);
        await preparing;
        assert.deepEqual(gated.events, [
          "populate 0-65536",
          "populated 0-65536",
          "sync 0-12288",
        ]);
        // The real kernel agrees: nothing below the flushed position is dirty.
        const probe = await env.port.openFile(file.path, { readOnly: true });
        try {
          const state = probe.pageCacheState(0, 3 * PAGE);
          if (state !== undefined && env.memory === undefined) {
            assert.equal(state.dirtyPages, 0, "pages dirtied again after their flush");
            assert.equal(state.writebackPages, 0);
          }
        } finally {
          await probe.close();
        }
        assert.deepEqual(await readAll(file, 0, 3 * PAGE), pattern(3 * PAGE, 4));
        await file.close();
      },
    );

    run("prepare() starts each chunk above the writer's page, re-read per chunk", async (env) => {
      const size = 4 * PREPARE_WRITE_CHUNK_BYTES;
      const { gated, file } = await gatedFile(env, size);
      if (file.writeMode !== "mapping") return await file.close();
      appendPayload(file, pattern(PAGE + 10, 1));
      await file.flush(0);
      gated.events.length = 0;
      const preparing = file.prepare({ writeZeros: true });
      await settle();
      // The first chunk starts above the page holding the write position.
      assert.deepEqual(gated.events, [
        `populate ${2 * PAGE}-${2 * PAGE + PREPARE_WRITE_CHUNK_BYTES}`,
      ]);
      // Meanwhile the writer passes the whole chunk and half the next one.
      const wrote = PREPARE_WRITE_CHUNK_BYTES + PREPARE_WRITE_CHUNK_BYTES / 2 + 10;
      appendPayload(file, pattern(wrote - file.wrotePosition, 2));
      gated.open();
      await preparing;
      const next = wrote - wrote % PAGE + PAGE;
      const populated = gated.events.filter((e) => e.startsWith("populate "));
      assert.deepEqual(populated, [
        `populate ${2 * PAGE}-${2 * PAGE + PREPARE_WRITE_CHUNK_BYTES}`,
        `populate ${next}-${next + PREPARE_WRITE_CHUNK_BYTES}`,
        `populate ${next + PREPARE_WRITE_CHUNK_BYTES}-${next + 2 * PREPARE_WRITE_CHUNK_BYTES}`,
        `populate ${next + 2 * PREPARE_WRITE_CHUNK_BYTES}-${size}`,
      ]);
      // Zeros are written back only above the writer's page too: none for
      // the chunk it passed, and the later chunks from where they start.
      assert.deepEqual(
        gated.events.filter((e) => e.startsWith("sync ")),
        populated.slice(1).map((e) => e.replace("populate", "sync")),
      );
      assert.equal(file.flushedPosition, PAGE + 10, "only flush() moves the flushed position");
      await file.close();
    });

    run("prepare() asks for the read after each pre-fault chunk only with read", async (env) => {
      for (const read of [undefined, false, true]) {
        const reads: boolean[] = [];
        const port = hookedMappingsPort(env.port, {
          populate(_position, _length, run, options) {
            reads.push(options?.read === true);
            return run();
          },
        });
        const size = 2 * PREPARE_POPULATE_CHUNK_BYTES;
        const file = await MappedFile.create({
          port,
          path: pathOf(env, read === undefined ? 0 : read ? 2 * size : size),
          fileSizeBytes: size,
          sparse: true,
        });
        await file.prepare({ read });
        if (file.writeMode === "mapping") {
          assert.ok(reads.length > 0);
          assert.deepEqual(reads, reads.map(() => read === true));
        } else {
          assert.deepEqual(reads, []);
        }
        await file.close();
      }
    });

    run(
      "prepare() grows a pre-fault chunk to twice what the writer passed during the last one",
      async (env) => {
        const chunk = PREPARE_POPULATE_CHUNK_BYTES;
        const size = 4 * chunk;
        const { gated, file } = await gatedFile(env, size);
        if (file.writeMode !== "mapping") return await file.close();
        const preparing = file.prepare();
        await settle();
        assert.deepEqual(gated.events, [`populate 0-${chunk}`]);
        // While the first chunk runs, the writer passes three quarters of it.
        const passed = (3 * chunk) / 4 + 10;
        appendPayload(file, pattern(passed, 5));
        gated.open();
        await preparing;
        // Twice the writer's advance, in whole pages; then, with the writer
        // still, back to the smallest chunk.
        const grown = chunk + Math.ceil((2 * passed) / PAGE) * PAGE;
        assert.deepEqual(gated.events.filter((e) => e.startsWith("populate ")), [
          `populate 0-${chunk}`,
          `populate ${chunk}-${grown}`,
          `populate ${grown}-${grown + chunk}`,
          `populate ${grown + chunk}-${size}`,
        ]);
        assert.deepEqual(await readAll(file, 0, passed), pattern(passed, 5));
        await file.close();
      },
    );

    run(
      "prepare() with writerOffset grows the chunks of a segment ahead of its writer to twice what the writer appended",
      async (env) => {
        const chunk = PREPARE_POPULATE_CHUNK_BYTES;
        const size = 4 * chunk;
        const { gated, file } = await gatedFile(env, size);
        if (file.writeMode !== "mapping") return await file.close();
        // The writer is in an earlier segment: this one's own write
        // position stays 0.
        let writer = 0;
        const preparing = file.prepare({ writerOffset: () => writer });
        await settle();
        assert.deepEqual(gated.events, [`populate 0-${chunk}`]);
        // While the first chunk runs, the writer appends 3/4 of a chunk
        // elsewhere.
        writer += (3 * chunk) / 4;
        gated.open();
        await preparing;
        // Twice its advance; then, with the writer still, the smallest.
        const grown = chunk + (3 * chunk) / 2;
        assert.deepEqual(gated.events.filter((e) => e.startsWith("populate ")), [
          `populate 0-${chunk}`,
          `populate ${chunk}-${grown}`,
          `populate ${grown}-${grown + chunk}`,
          `populate ${grown + chunk}-${size}`,
        ]);
        await file.close();
      },
    );

    run("close() stops a preparation in progress", async (env) => {
      const file = await create(env);
      const preparing = file.prepare({
        writeZeros: true,
        pace: () => new Promise<void>((resolve) => setImmediate(resolve)),
      });
      await file.close();
      assert.equal(await preparing, false);
      assert.equal(await file.prepare(), false, "nothing to prepare once closed");
    });

    run("flush() after close() is refused with CLOSED", async (env) => {
      const file = await create(env);
      file.appendBytes(pattern(10));
      await file.close();
      await file.close(); // idempotent
      await rejectsWithCode(file.flush(0), "CLOSED");
      assert.throws(() => file.appendBytes(pattern(1)), MqStoreError);
    });

    run(
      "create() syncs the sized file before renaming it, then syncs the directory",
      async (env) => {
        const log: string[] = [];
        const file = await create(env, 0, { port: spyPort(env.port, log) });
        const order = log.filter((e) => ["datasync", "rename", "syncDirectory"].includes(e));
        assert.deepEqual(order, ["datasync", "rename", "syncDirectory"]);
        assert.deepEqual(await env.port.list(env.directory), [segmentName(0)]);
        await file.close();
      },
    );

    run("warm() pre-faults under the random advice given at creation, then locks", async (env) => {
      const log: string[] = [];
      const file = await create(env, 0, { port: spyPort(env.port, log) });
      if (file.writeMode === "mapping") {
        assert.deepEqual(log.filter((e) => e.startsWith("advise")), ["advise:random"]);
      }
      log.length = 0;
      const locked = await file.warm({ lock: true });
      if (file.writeMode === "mapping") {
        assert.deepEqual(log, ["populate", "lock"]);
        assert.equal(typeof locked, "boolean");
      } else {
        assert.deepEqual(log, [], "nothing to warm without a write mapping");
        assert.equal(locked, false);
      }
      file.appendBytes(pattern(10));
      assert.equal(await file.flush(0), 10);
      await file.close();
    });

    run("zeroRange() erases stale bytes past a cut, durably", async (env) => {
      const file = await create(env, 0, { writeBufferSizeBytes: SIZE });
      file.appendBytes(pattern(3 * PAGE, 1));
      await file.flush(0);
      file.resetPositions(PAGE + 10);
      assert.throws(() => file.zeroRange(PAGE, 2 * PAGE), RangeError, "below wrote");
      await file.zeroRange(PAGE + 10, 3 * PAGE);
      file.resetPositions(SIZE);
      assert.deepEqual(
        await readAll(file, 0, PAGE + 10),
        pattern(3 * PAGE, 1).subarray(0, PAGE + 10),
      );
      assert.deepEqual(
        await readAll(file, PAGE + 10, 2 * PAGE - 10),
        new Uint8Array(2 * PAGE - 10),
      );
      await file.close();
    });

    if (adapter === "memory") {
      run("crash() keeps only flushed bytes", async (env) => {
        const memory = env.memory;
        assert.ok(memory);
        const file = await create(env, 0, { sparse: false });
        file.appendBytes(pattern(2 * PAGE, 1));
        await file.flush(0);
        file.appendBytes(pattern(PAGE, 2));
        memory.crash();
        const reopened = await MappedFile.open({
          port: env.port,
          path: file.path,
          fileSizeBytes: SIZE,
        });
        reopened.resetPositions(SIZE);
        assert.deepEqual(await readAll(reopened, 0, 2 * PAGE), pattern(2 * PAGE, 1));
        assert.deepEqual(await readAll(reopened, 2 * PAGE, PAGE), new Uint8Array(PAGE));
        await reopened.close();
      });

      run("crash() loses bytes a pool file committed but did not flush", async (env) => {
        const memory = env.memory;
        assert.ok(memory);
        const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 1 });
        const file = await create(env, 0, { pool });
        file.appendBytes(pattern(100, 1));
        await file.commit(0);
        await file.flush(0);
        file.appendBytes(pattern(100, 2));
        await file.commit(0);
        memory.crash();
        const reopened = await MappedFile.open({
          port: env.port,
          path: file.path,
          fileSizeBytes: SIZE,
        });
        reopened.resetPositions(SIZE);
        assert.deepEqual(await readAll(reopened, 0, 100), pattern(100, 1));
        assert.deepEqual(await readAll(reopened, 100, 100), new Uint8Array(100));
        await reopened.close();
      });

      run(
        "create() survives a crash right after it: the segment exists at full size",
        async (env) => {
          const memory = env.memory;
          assert.ok(memory);
          const file = await create(env, SIZE, { sparse: false });
          memory.crash();
          assert.equal((await env.port.stat(file.path))?.sizeBytes, SIZE);
          assert.deepEqual(await env.port.list(env.directory), [segmentName(SIZE)]);
        },
      );

      run("create() interrupted before its rename leaves no segment name behind", async (env) => {
        const memory = env.memory;
        assert.ok(memory);
        const port = spyPort(env.port, [], { beforeRename: () => memory.crash() });
        await assert.rejects(create(env, 0, { port, sparse: false }));
        const names = await env.port.list(env.directory);
        assert.ok(names.every((name) => name.endsWith(".tmp")), `only half-made files: ${names}`);
      });

      run("create() removes the temporary file when its sync fails", async (env) => {
        const memory = env.memory;
        assert.ok(memory);
        memory.failNext({ operation: "flush", error: "EIO" });
        await rejectsWithCode(create(env, 0, { sparse: false }), "IO_ERROR");
        assert.deepEqual(await env.port.list(env.directory), []);
      });

      run("crash() keeps zeroRange() zeros", async (env) => {
        const memory = env.memory;
        assert.ok(memory);
        const file = await create(env, 0, { sparse: false });
        file.appendBytes(pattern(2 * PAGE, 1));
        await file.flush(0);
        file.resetPositions(100);
        await file.zeroRange(100, 2 * PAGE);
        memory.crash();
        const reopened = await MappedFile.open({
          port: env.port,
          path: file.path,
          fileSizeBytes: SIZE,
        });
        reopened.resetPositions(SIZE);
        assert.deepEqual(await readAll(reopened, 0, 100), pattern(100, 1));
        assert.deepEqual(
          await readAll(reopened, 100, 2 * PAGE - 100),
          new Uint8Array(2 * PAGE - 100),
        );
        await reopened.close();
      });

      run("flush() reports an injected I/O error and does not advance", async (env) => {
        const memory = env.memory;
        assert.ok(memory);
        const file = await create(env);
        file.appendBytes(pattern(100));
        memory.failNext({ operation: "flush", error: "EIO" });
        await rejectsWithCode(file.flush(0), "IO_ERROR");
        assert.equal(file.flushedPosition, 0);
        assert.equal(await file.flush(0), 100);
        await file.close();
      });

      run(
        "create() with NO_SPACE leaves no file behind and gives the pool buffer back",
        async (env) => {
          const memory = env.memory;
          assert.ok(memory);
          const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 1 });
          memory.failNext({ operation: "create", error: "ENOSPC" });
          await rejectsWithCode(create(env, 0, { pool }), "NO_SPACE");
          assert.deepEqual(await env.port.list(env.directory), []);
          assert.equal(pool.availableCount, 1);
        },
      );
    }
  });
}
