/**
 * `MessageStore.open()` of a writable store returns once the segment the
 * first put goes to exists, is mapped and has its first pages pre-faulted:
 * a fresh store's first puts used to wait for the creation of the first
 * segment (a 1 GiB `fallocate`, two syncs and a rename: 15–45 ms) and then
 * take page faults under the pre-fault. Memory port (observing the
 * commit log's pre-faults) and real files.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { MessageStore } from "../src/store/message_store.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { hookedMappingsPort, segmentName } from "./_segment_helpers.ts";
import {
  body,
  openMemoryStore,
  SEGMENT_BYTES,
  segmentNames,
  withStoreDirectory,
} from "./_store_helpers.ts";

/** `inner`, logging each commit-log pre-fault (`populated a-b`) once it ended. */
function populateLog(inner: RuntimePort): { port: RuntimePort; events: string[] } {
  const events: string[] = [];
  const port = hookedMappingsPort(inner, {
    async populate(position, length, run) {
      await run();
      events.push(`populated ${position}-${position + length}`);
    },
  }, (path) => path.includes("/commitlog/"));
  return { port, events };
}

describe("MessageStore.open() and the first segment", () => {
  test("open() of a fresh writable store returns with the first segment created and pre-faulted", async () => {
    const memory = new MemoryPort(runtimeName());
    const logged = populateLog(memory);
    const env = await openMemoryStore({ port: logged.port }, memory);
    try {
      const names = await segmentNames(memory, env.directory);
      assert.equal(names[0], segmentName(0), "the first segment exists when open() returns");
      assert.deepEqual(logged.events, [`populated 0-${SEGMENT_BYTES}`]);
      const r = await env.store.putMessage({ topic: "F", queueId: 0, body: body(100) });
      assert.equal(r.status, "PUT_OK");
      assert.equal(r.appendResult?.wroteOffset, 0);
    } finally {
      await env.store.close();
    }
  });

  test("open() of a store whose last segment has room pre-faults it past the write position first", async () => {
    const memory = new MemoryPort(runtimeName());
    const env = await openMemoryStore({}, memory);
    for (let i = 0; i < 10; i++) {
      const r = await env.store.putMessage({ topic: "F", queueId: 0, body: body(1000, i) });
      assert.equal(r.status, "PUT_OK");
    }
    const end = env.store.maxOffset;
    await env.store.close();
    const logged = populateLog(memory);
    const store = await env.reopen({ port: logged.port });
    try {
      assert.equal(store.maxOffset, end);
      const page = memory.pageSizeBytes;
      const from = end - end % page + page;
      assert.deepEqual(logged.events, [`populated ${from}-${SEGMENT_BYTES}`]);
    } finally {
      await store.close();
    }
  });

  test("open() of a fresh store on real files leaves the first segment on disk", async () => {
    await withStoreDirectory(async (directory) => {
      const store = await MessageStore.open(directory, {
        mappedFileSizeCommitLog: SEGMENT_BYTES,
        mappedFileSizeConsumeQueue: 20 * 1024,
        maxHashSlotNum: 256,
        maxIndexNum: 1024,
        sparseFiles: true,
        onWarning: () => {},
      });
      try {
        const segment = path.join(directory, "commitlog", segmentName(0));
        assert.equal(fs.statSync(segment, { throwIfNoEntry: false })?.size, SEGMENT_BYTES);
      } finally {
        await store.close();
      }
    });
  });
});
