/**
 * Durability proofs of the put path:
 * (a) real files: at every SYNC_FLUSH PUT_OK, the kernel's page cache
 *     (`cachestat`) holds no dirty or writeback page below the acknowledged
 *     end of the commit log;
 * (b) the memory adapter: random puts, a power loss (plain, or torn per
 *     page with many seeds), a reopen — every acknowledged SYNC put is
 *     there, and under ASYNC_FLUSH everything up to the flushed offset.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { availableAdapters, createPort, MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { FileHandle, RuntimePort } from "../src/runtime/port.ts";
import type { PutMessageResult } from "../src/commit_log/put_message_result.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";
import { body, killablePort, openMemoryStore, readRecords } from "./_store_helpers.ts";
import { prng } from "./_prng.ts";

const PAGE = 0x1000;
const nativeAdapter = availableAdapters().find((a) => a !== "portable" && a !== "memory");

async function probeCachestat(port: RuntimePort, directory: string): Promise<boolean> {
  const path = `${directory}/probe`;
  const handle = await port.createFile(path, PAGE);
  try {
    return handle.pageCacheState(0, PAGE) !== undefined;
  } finally {
    await handle.close();
    await port.remove(path);
  }
}

describe("durability", () => {
  test(
    "putMessage() under SYNC_FLUSH answers PUT_OK only when no page below its end is dirty (cachestat)",
    { skip: nativeAdapter === undefined ? "no native adapter here" : undefined },
    async (t) => {
      const port = await createPort({ adapter: nativeAdapter!, onNotice: () => {} });
      const root = makeTempDirectory();
      try {
        if (!await probeCachestat(port, root)) {
          t.skip("cachestat(2) is not available on this kernel");
          return;
        }
        const directory = `${root}/store`;
        const segmentBytes = 0x10_0000;
        const store = await MessageStore.open(directory, {
          port,
          flushDiskType: "SYNC_FLUSH",
          mappedFileSizeCommitLog: segmentBytes,
          // Puts start at once, while the first segment is still being
          // prepared (pre-faulted and its zeros written back) under them:
          // a pre-fault must never dirty again a page a flush made durable.
          warmMapedFileEnable: false,
          onWarning: () => {},
        });
        const handles = new Map<number, FileHandle>();
        const handleOf = async (start: number) => {
          let handle = handles.get(start);
          if (handle === undefined) {
            handle = await port.openFile(
              `${directory}/commitlog/${String(start).padStart(20, "0")}`,
              {
                readOnly: true,
              },
            );
            handles.set(start, handle);
          }
          return handle;
        };
        let checked = 0;
        const check = async (r: PutMessageResult) => {
          assert.equal(r.status, "PUT_OK");
          const end = r.appendResult!.wroteOffset + r.appendResult!.wroteBytes;
          const durableEnd = end - end % PAGE;
          // Every segment the acknowledged bytes lie in, whole pages only.
          for (let start = 0; start < durableEnd; start += segmentBytes) {
            const length = Math.min(segmentBytes, durableEnd - start);
            const state = (await handleOf(start)).pageCacheState(0, length)!;
            assert.equal(state.dirtyPages, 0, `dirty pages below ${end}`);
            assert.equal(state.writebackPages, 0, `writeback pages below ${end}`);
          }
          checked++;
        };
        try {
          const rng = prng(7);
          for (let i = 0; i < 150; i++) {
            await check(
              await store.putMessage({
                topic: "D",
                queueId: i % 4,
                body: body(100 + Math.floor(rng() * 9000), i),
              }),
            );
          }
          // Concurrent producers: every answer is checked when it arrives.
          await Promise.all(Array.from({ length: 16 }, async (_, p) => {
            for (let i = 0; i < 15; i++) {
              await check(
                await store.putMessage({
                  topic: "D",
                  queueId: p % 4,
                  body: body(3000, p * 100 + i),
                }),
              );
            }
          }));
        } finally {
          for (const handle of handles.values()) await handle.close();
          await store.close();
        }
        assert.equal(checked, 390);
      } finally {
        removeDirectory(root);
      }
    },
  );

  for (const mode of ["SYNC_FLUSH", "ASYNC_FLUSH"] as const) {
    test(`MessageStore.open() after a power loss keeps every acknowledged put (${mode}, 40 seeds)`, async () => {
      let checkedTotal = 0;
      for (let seed = 1; seed <= 40; seed++) {
        const rng = prng(seed);
        const port = new MemoryPort(runtimeName());
        const killable = killablePort(port);
        const env = await openMemoryStore({
          port: killable.port,
          flushDiskType: mode,
          flushIntervalCommitLog: 1,
          flushCommitLogLeastPages: 0,
          maxMessageSize: 0x4000,
        }, port);
        const acked = new Map<
          number,
          { seed: number; length: number; wroteBytes: number; queueOffset: number }
        >();
        let flushedAtCrash = 0;
        let crashed = false;
        const crashAfter = 20 + Math.floor(rng() * 150);
        const producer = async (p: number) => {
          for (let i = 0; !crashed; i++) {
            const length = 1 + Math.floor(rng() * 6000);
            const bodySeed = seed * 100_000 + p * 1000 + i;
            let r: PutMessageResult;
            try {
              r = await env.store.putMessage({
                topic: "D",
                queueId: p % 3,
                body: body(length, bodySeed),
              });
            } catch {
              return; // the store's mappings vanished under it
            }
            if (crashed) return;
            if (r.status === "PUT_OK") {
              acked.set(r.appendResult!.wroteOffset, {
                seed: bodySeed,
                length,
                wroteBytes: r.appendResult!.wroteBytes,
                queueOffset: r.appendResult!.queueOffset,
              });
            }
            if (mode === "ASYNC_FLUSH" && rng() < 0.2) env.clock.advance(1);
            if (acked.size >= crashAfter && !crashed) {
              crashed = true;
              flushedAtCrash = env.store.flushedOffset;
              killable.kill();
              if (seed % 2 === 0) port.crash({ seed, keepProbability: 0.5 });
              else port.crash();
              return;
            }
          }
        };
        await Promise.all(Array.from({ length: 8 }, (_, p) => producer(p)));
        assert.ok(crashed);
        const again = await MessageStore.open(env.directory, { ...env.options, port });
        try {
          const records = new Map(
            (await readRecords(port, env.directory)).map((r) => [r.offset, r.message]),
          );
          let mustSurvive = 0;
          for (const [offset, put] of acked) {
            const durable = mode === "SYNC_FLUSH" || offset + put.wroteBytes <= flushedAtCrash;
            if (!durable) continue;
            mustSurvive++;
            const message = records.get(offset);
            assert.ok(message !== undefined, `seed ${seed}: acknowledged put at ${offset} lost`);
            assert.deepEqual(
              message.body,
              body(put.length, put.seed),
              `seed ${seed}: body at ${offset}`,
            );
            assert.equal(message.queueOffset, put.queueOffset);
          }
          if (mode === "SYNC_FLUSH") assert.equal(mustSurvive, acked.size);
          checkedTotal += mustSurvive;
          // The store goes on from where the log ends, without gaps.
          const r = await again.putMessage({ topic: "D", queueId: 0, body: body(10) });
          assert.equal(r.status, "PUT_OK");
          assert.equal(r.appendResult!.queueOffset, again.nextQueueOffset("D", 0) - 1);
        } finally {
          await again.close();
        }
      }
      // Enough acknowledged puts were at stake for the proof to mean something.
      assert.ok(checkedTotal >= 40 * 10, `only ${checkedTotal} puts checked`);
    });
  }
});
