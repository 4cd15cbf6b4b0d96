import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import { AllocateMappedFileService } from "../src/segment/allocate_mapped_file_service.ts";
import type { MappedFile } from "../src/segment/mapped_file.ts";
import { MappedFileQueue } from "../src/segment/mapped_file_queue.ts";
import { TransientStorePool } from "../src/segment/transient_store_pool.ts";
import { pattern } from "./_helpers.ts";
import {
  adapterCases,
  rejectsWithCode,
  type SegmentEnv,
  segmentName,
  settle,
  spyPort,
  withSegmentEnv,
} from "./_segment_helpers.ts";

const SIZE = 0x1_0000;

/** A port whose createFile() for chosen paths waits for a gate (or fails). */
class GatedPort {
  readonly port: RuntimePort;
  /** Paths passed to createFile, in order. */
  readonly created: string[] = [];
  #gates = new Map<string, { entered: () => void; open: Promise<void> }>();
  #failures = new Map<string, Error>();

  constructor(inner: RuntimePort) {
    this.port = new Proxy(inner, {
      get: (target, key) => {
        if (key === "createFile") return this.#createFile.bind(this, target);
        const value = Reflect.get(target, key);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  }

  /** Holds the creation of `path` until the returned `open()` is called; `entered` resolves when it starts. */
  gate(path: string): { entered: Promise<void>; open: () => void } {
    let entered!: () => void;
    const enteredPromise = new Promise<void>((resolve) => entered = resolve);
    let open!: () => void;
    const openPromise = new Promise<void>((resolve) => open = resolve);
    this.#gates.set(`${path}.tmp`, { entered, open: openPromise });
    return { entered: enteredPromise, open };
  }

  /** Makes the creation of `path` fail with `error`. */
  fail(path: string, error: Error): void {
    this.#failures.set(`${path}.tmp`, error);
  }

  /** Lets the creation of `path` succeed again. */
  clearFailure(path: string): void {
    this.#failures.delete(`${path}.tmp`);
  }

  async #createFile(
    inner: RuntimePort,
    path: string,
    sizeBytes: number,
    options?: { sparse?: boolean },
  ): Promise<FileHandle> {
    this.created.push(path);
    const gate = this.#gates.get(path);
    if (gate !== undefined) {
      gate.entered();
      await gate.open;
    }
    const failure = this.#failures.get(path);
    if (failure !== undefined) throw failure;
    return await inner.createFile(path, sizeBytes, options);
  }
}

function pathOf(env: SegmentEnv, offset: number): string {
  return `${env.directory}/${segmentName(offset)}`;
}

async function readBack(file: MappedFile, size: number): Promise<Uint8Array> {
  const range = await file.selectRange(0, size);
  assert.ok(range !== undefined);
  const copy = range.bytes.slice();
  range.release();
  return copy;
}

const cases = await adapterCases();

for (const { adapter, skip } of cases) {
  describe(`AllocateMappedFileService on ${adapter}`, () => {
    const run = (name: string, body: (env: SegmentEnv) => Promise<void>) =>
      test(name, { skip }, () => withSegmentEnv(adapter, body));

    run("request() returns segment n while n+1 is still being prepared", async (env) => {
      const gated = new GatedPort(env.port);
      const allocator = new AllocateMappedFileService({ port: gated.port, sparse: true });
      allocator.start();
      const next = gated.gate(pathOf(env, SIZE));
      const first = await allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE);
      assert.equal(first.fileFromOffset, 0);
      // The writer has segment 0 and appends while segment 1 is mid-creation.
      await next.entered;
      first.appendBytes(pattern(SIZE));
      assert.equal(await first.flush(0), SIZE);
      assert.equal(allocator.pendingCount, 1);
      next.open();
      const second = await allocator.request(pathOf(env, SIZE), pathOf(env, 2 * SIZE), SIZE);
      assert.equal(second.fileFromOffset, SIZE);
      assert.equal(
        gated.created.filter((p) => p === `${pathOf(env, SIZE)}.tmp`).length,
        1,
        "segment 1 was created once, ahead",
      );
      await first.close();
      await second.close();
      await allocator.close();
    });

    run("request() hands out the segment prepared ahead without creating it again", async (env) => {
      const gated = new GatedPort(env.port);
      const allocator = new AllocateMappedFileService({ port: gated.port, sparse: true });
      allocator.start();
      const a = await allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE);
      const b = await allocator.request(pathOf(env, SIZE), pathOf(env, 2 * SIZE), SIZE);
      const c = await allocator.request(pathOf(env, 2 * SIZE), pathOf(env, 3 * SIZE), SIZE);
      for (const file of [a, b, c]) await file.close();
      await allocator.close();
      // Segment 3 may or may not have been started when close() came.
      assert.deepEqual(
        gated.created.slice(0, 3),
        [0, 1, 2].map((i) => `${pathOf(env, i * SIZE)}.tmp`),
        "each segment created once, in order",
      );
      assert.equal(new Set(gated.created).size, gated.created.length);
      assert.deepEqual(
        await env.port.list(env.directory),
        [0, 1, 2].map((i) => segmentName(i * SIZE)),
        "close() removed the unclaimed segment 3",
      );
    });

    run("an ahead allocation error surfaces on the next request", async (env) => {
      const gated = new GatedPort(env.port);
      const allocator = new AllocateMappedFileService({ port: gated.port, sparse: true });
      allocator.start();
      const gate = gated.gate(pathOf(env, SIZE));
      gated.fail(pathOf(env, SIZE), new MqStoreError("NO_SPACE", "Cannot allocate: disk full"));
      const first = await allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE);
      await gate.entered;
      gate.open();
      await allocator.whenIdle();
      assert.equal(allocator.pendingCount, 0);
      await rejectsWithCode(
        allocator.request(pathOf(env, SIZE), pathOf(env, 2 * SIZE), SIZE),
        "NO_SPACE",
      );
      // Reported once; the retry creates the segment.
      gated.clearFailure(pathOf(env, SIZE));
      const retry = await allocator.request(pathOf(env, SIZE), pathOf(env, 2 * SIZE), SIZE);
      assert.equal(retry.fileFromOffset, SIZE);
      await first.close();
      await retry.close();
      await allocator.close();
    });

    run("close() waits for the creation in progress and removes it", async (env) => {
      const gated = new GatedPort(env.port);
      const allocator = new AllocateMappedFileService({ port: gated.port, sparse: true });
      allocator.start();
      const gate = gated.gate(pathOf(env, SIZE));
      const first = await allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE);
      await gate.entered;
      const closing = allocator.close();
      gate.open();
      await closing;
      await allocator.close(); // idempotent
      assert.deepEqual(await env.port.list(env.directory), [segmentName(0)]);
      await rejectsWithCode(
        allocator.request(pathOf(env, SIZE), pathOf(env, 2 * SIZE), SIZE),
        "CLOSED",
      );
      await first.close();
    });

    run("request() before start() is refused", async (env) => {
      const allocator = new AllocateMappedFileService({ port: env.port, sparse: true });
      await rejectsWithCode(allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE), "CLOSED");
      await allocator.close();
    });

    run("with a pool, segments prepared ahead borrow buffers and leave one free", async (env) => {
      const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 2 });
      const allocator = new AllocateMappedFileService({ port: env.port, pool, sparse: true });
      allocator.start();
      const first = await allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE);
      assert.equal(first.writeMode, "pool");
      await allocator.close();
      assert.equal(pool.availableCount, 1, "the ahead segment's buffer came back on close");
      await first.close();
      assert.equal(pool.availableCount, 2);
      await pool.close();
    });

    run(
      "segments prepared ahead are pre-faulted under random advice; an mlock refusal is warned once",
      async (env) => {
        const log: string[] = [];
        const warnings: string[] = [];
        const allocator = new AllocateMappedFileService({
          port: spyPort(env.port, log, { lockResult: false }),
          sparse: true,
          lockMemory: true,
          onWarning: (message) => warnings.push(message),
        });
        allocator.start();
        const a = await allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE);
        const b = await allocator.request(pathOf(env, SIZE), pathOf(env, 2 * SIZE), SIZE);
        await allocator.whenIdle();
        if (env.port.canMap) {
          // Each segment is advised at creation, then prepared: pre-faulted
          // under that advice, not advised again.
          const warm = log.filter((e) => e === "advise:random" || e === "populate");
          assert.deepEqual(warm.slice(0, 4), [
            "advise:random",
            "populate",
            "advise:random",
            "populate",
          ]);
        }
        assert.equal(warnings.length, 1);
        await a.close();
        await b.close();
        await allocator.close();
      },
    );

    run("request() hands a segment over before its preparation ends", async (env) => {
      let open!: () => void;
      const gate = new Promise<void>((resolve) => open = resolve);
      let populating = 0;
      // Holds every pre-fault until the gate opens.
      const port = new Proxy(env.port, {
        get(target, key) {
          const value = Reflect.get(target, key);
          if (key !== "openFile" || typeof value !== "function") {
            return typeof value === "function" ? value.bind(target) : value;
          }
          return async (...args: unknown[]) => {
            const handle: FileHandle = await value.apply(target, args);
            return new Proxy(handle, {
              get(h, k) {
                const v = Reflect.get(h, k);
                if (k !== "map" || typeof v !== "function") {
                  return typeof v === "function" ? v.bind(h) : v;
                }
                return async (...mapArgs: unknown[]) => {
                  const mapping = await v.apply(h, mapArgs);
                  return new Proxy(mapping, {
                    get(m, mk) {
                      const mv = Reflect.get(m, mk);
                      if (typeof mv !== "function") return mv;
                      if (mk !== "populate") return mv.bind(m);
                      return async (...populateArgs: unknown[]) => {
                        populating++;
                        await gate;
                        return mv.apply(m, populateArgs);
                      };
                    },
                  });
                };
              },
            });
          };
        },
      });
      const allocator = new AllocateMappedFileService({ port, sparse: true, writeZeros: true });
      allocator.start();
      const file = await allocator.request(pathOf(env, 0), pathOf(env, SIZE), SIZE);
      let prepared = false;
      const whenPrepared = file.whenPrepared().then(() => prepared = true);
      file.appendBytes(pattern(100)); // usable while its preparation waits
      let flushed = false;
      const flushing = file.flush(0).then((position) => (flushed = true, position));
      await settle();
      if (file.writeMode === "mapping") {
        assert.equal(populating, 1, "the preparation is waiting in its pre-fault");
        assert.equal(prepared, false);
        // The pre-fault covers the appended page: a flush before it ends
        // would be undone (the page dirtied again), so the flush waits.
        assert.equal(flushed, false, "the flush waits for the pre-fault it overlaps");
      }
      open();
      assert.equal(await flushing, 100);
      await whenPrepared;
      await allocator.whenIdle();
      assert.deepEqual(await readBack(file, 100), pattern(100));
      await file.close();
      await allocator.close();
    });

    run("a queue with an allocator rolls over into prepared segments", async (env) => {
      const allocator = new AllocateMappedFileService({ port: env.port, sparse: true });
      allocator.start();
      const queue = new MappedFileQueue({
        port: env.port,
        directory: env.directory,
        fileSizeBytes: SIZE,
        allocator,
        writeBufferSizeBytes: SIZE,
      });
      await queue.load();
      for (let i = 0; i < 3; i++) {
        const file = await queue.getOrCreateLastMappedFile(0);
        assert.equal(file.fileFromOffset, i * SIZE);
        file.appendBytes(pattern(SIZE, i));
      }
      await queue.flush(0);
      assert.equal(queue.flushedWhere, 3 * SIZE);
      await allocator.close();
      await queue.close();
      assert.deepEqual(
        await env.port.list(env.directory),
        [0, 1, 2].map((i) => segmentName(i * SIZE)),
      );
    });
  });
}
