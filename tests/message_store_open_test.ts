/**
 * MessageStore.open / close: the lock, the abort marker, read-only opens,
 * and commit-log recovery (clean and unclean, cuts at invalid records,
 * zeroing past the cut), on every adapter this host offers.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { adapterCases, segmentEnv } from "./_segment_helpers.ts";
import {
  body,
  openMemoryStore,
  readRecords,
  SEGMENT_BYTES,
  segmentNames,
} from "./_store_helpers.ts";

const cases = await adapterCases();
const SEGMENT0 = "0".repeat(20);

const put = (store: MessageStore, length = 100, queueId = 0) =>
  store.putMessage({ topic: "T", queueId, body: body(length, length), properties: { KEYS: "k" } });

function isCode(code: string) {
  return (error: unknown) => error instanceof MqStoreError && error.code === code;
}

describe("MessageStore open and close", () => {
  for (const { adapter, skip } of cases) {
    test(`MessageStore.open() locks, marks abort, recovers and reopens cleanly (${adapter})`, {
      skip,
    }, async () => {
      const env = await segmentEnv(adapter);
      const directory = `${env.directory}/store`;
      const options = {
        port: env.port,
        mappedFileSizeCommitLog: SEGMENT_BYTES,
        flushDiskType: "SYNC_FLUSH" as const,
        sparseFiles: adapter === "portable",
        onWarning: () => {},
      };
      try {
        const store = await MessageStore.open(directory, options);
        let endBefore = 0;
        try {
          assert.notEqual(await env.port.stat(`${directory}/abort`), undefined);
          await assert.rejects(MessageStore.open(directory, options), isCode("LOCKED"));
          for (let i = 0; i < 150; i++) {
            assert.equal((await put(store, 900, i % 3)).status, "PUT_OK");
          }
          endBefore = store.maxOffset;
        } finally {
          await store.close();
        }
        assert.equal(await env.port.stat(`${directory}/abort`), undefined);
        const again = await MessageStore.open(directory, options);
        try {
          assert.equal(again.recovery.clean, true);
          assert.equal(again.recovery.endKind, "end");
          assert.equal(again.nextQueueOffset("T", 0), 50);
          assert.equal(again.nextQueueOffset("T", 2), 50);
          const r = await put(again, 10, 1);
          assert.equal(r.appendResult!.queueOffset, 50);
          assert.equal(r.appendResult!.wroteOffset, endBefore);
        } finally {
          await again.close();
        }
        assert.equal((await readRecords(env.port, directory)).length, 151);
      } finally {
        env.cleanup();
      }
    });
  }

  test("MessageStore.open({ readOnly }) takes no lock, writes nothing and refuses puts", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    try {
      for (let i = 0; i < 10; i++) await put(env.store);
      const ro = await env.reopen({ readOnly: true });
      try {
        assert.equal(ro.readOnly, true);
        assert.equal(ro.recovery.maxOffset, env.store.maxOffset);
        const r = await put(ro);
        assert.equal(r.status, "SERVICE_NOT_AVAILABLE");
        assert.match(r.error!.message, /read-only/);
      } finally {
        await ro.close();
      }
      // The writer is unaffected and still holds its lock and abort.
      assert.equal((await put(env.store)).status, "PUT_OK");
      assert.notEqual(await env.port.stat(`${env.directory}/abort`), undefined);
    } finally {
      await env.store.close();
    }
    await assert.rejects(
      MessageStore.open("/nothing", { port: new MemoryPort(runtimeName()), readOnly: true }),
      isCode("NOT_FOUND"),
    );
  });

  test("close() is idempotent and waits for puts in flight", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    const puts = Array.from({ length: 50 }, () => put(env.store, 3000));
    const closing = [env.store.close(), env.store.close()];
    const results = await Promise.all(puts);
    await Promise.all(closing);
    assert.ok(results.every((r) => r.status === "PUT_OK"), results.map((r) => r.status).join());
    env.port.crash();
    assert.equal((await readRecords(env.port, env.directory)).length, 50);
  });

  test("MessageStore.open() after a crash cuts the log at a corrupt record and zeroes what follows", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    const results = [];
    for (let i = 0; i < 100; i++) results.push(await put(env.store, 1500, i % 2));
    // Corrupt the body of record 50 (in the second segment) and crash.
    const victim = results[50]!.appendResult!;
    const segmentStart = Math.floor(victim.wroteOffset / SEGMENT_BYTES) * SEGMENT_BYTES;
    const path = `${env.directory}/commitlog/${String(segmentStart).padStart(20, "0")}`;
    const handle = await env.port.openFile(path);
    const position = victim.wroteOffset - segmentStart + 200;
    const flipped = new Uint8Array(1);
    await handle.read(flipped, position);
    flipped[0]! ^= 0xFF;
    await handle.write(flipped, position);
    await handle.datasync();
    await handle.close();
    env.port.crash();

    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, false);
      assert.equal(again.recovery.endKind, "invalid");
      assert.match(again.recovery.detail, /CRC/);
      assert.equal(again.maxOffset, victim.wroteOffset);
      assert.equal(again.nextQueueOffset("T", 0), 25);
      assert.equal(again.nextQueueOffset("T", 1), 25);
      // Later segments are gone; the cut segment holds zeros past the cut.
      const names = await segmentNames(env.port, env.directory);
      assert.equal(names.at(-1), String(segmentStart).padStart(20, "0"));
      const bytes = (await env.port.readFile(path))!;
      assert.ok(bytes.subarray(victim.wroteOffset - segmentStart).every((b) => b === 0));
      const r = await put(again, 10, 0);
      assert.equal(r.appendResult!.wroteOffset, victim.wroteOffset);
      assert.equal(r.appendResult!.queueOffset, 25);
    } finally {
      await again.close();
    }
    const records = await readRecords(env.port, env.directory);
    assert.equal(records.length, 51);
  });

  test("MessageStore.open() after a clean close verifies only the last three segments", async () => {
    const env = await openMemoryStore({ flushDiskType: "SYNC_FLUSH" });
    for (let i = 0; i < 200; i++) await put(env.store, 1500);
    await env.store.close();
    const names = await segmentNames(env.port, env.directory);
    assert.ok(names.length >= 5);
    // Corrupt a body in the first segment: a clean open does not check its CRC.
    const handle = await env.port.openFile(`${env.directory}/commitlog/${SEGMENT0}`);
    const flipped = new Uint8Array([0xAA]);
    await handle.write(flipped, 300);
    await handle.datasync();
    await handle.close();
    const again = await env.reopen();
    try {
      assert.equal(again.recovery.clean, true);
      assert.equal(again.recovery.endKind, "end");
      assert.equal(again.nextQueueOffset("T", 0), 200);
    } finally {
      await again.close();
    }
  });

  test("MessageStore.open() refuses a segment of the wrong size", async () => {
    const env = await openMemoryStore();
    await put(env.store);
    await env.store.close();
    await assert.rejects(
      env.reopen({ mappedFileSizeCommitLog: SEGMENT_BYTES * 2 }),
      isCode("INVALID_FILE"),
    );
    // The failed open released the lock.
    const again = await env.reopen();
    await again.close();
  });
});
