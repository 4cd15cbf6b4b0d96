import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { availableAdapters, createPort } from "../src/runtime/mod.ts";
import { TransientStorePool } from "../src/segment/transient_store_pool.ts";
import { canLock, lockedBytes } from "./_locked_memory.ts";

const SIZE = 0x1_0000;

function isCode(code: string) {
  return (error: unknown) => error instanceof MqStoreError && error.code === code;
}

describe("TransientStorePool", () => {
  test("TransientStorePool() without a port defaults to 5 unlocked heap buffers", async () => {
    const pool = new TransientStorePool({ fileSizeBytes: SIZE });
    assert.equal(pool.count, 5);
    assert.equal(pool.availableCount, 5);
    assert.equal(pool.lockedBuffers, false);
    const buffer = pool.borrow();
    assert.equal(buffer.length, SIZE);
    pool.giveBack(buffer);
    await pool.close();
  });

  test("borrow() throws POOL_EXHAUSTED when every buffer is lent", async () => {
    const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 2 });
    const a = pool.borrow();
    const b = pool.borrow();
    assert.notEqual(a, b);
    assert.equal(pool.availableCount, 0);
    assert.throws(() => pool.borrow(), isCode("POOL_EXHAUSTED"));
    pool.giveBack(a);
    assert.equal(pool.borrow(), a, "a given-back buffer is lent again");
    pool.giveBack(a);
    pool.giveBack(b);
    assert.equal(pool.availableCount, 2);
    await pool.close();
  });

  test("giveBack() refuses foreign buffers and double returns", async () => {
    const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 1 });
    assert.throws(() => pool.giveBack(new Uint8Array(SIZE)), RangeError);
    const buffer = pool.borrow();
    pool.giveBack(buffer);
    assert.throws(() => pool.giveBack(buffer), RangeError);
    await pool.close();
  });

  test("close() stops lending; buffers given back later are dropped", async () => {
    const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 2 });
    const buffer = pool.borrow();
    await pool.close();
    await pool.close();
    assert.equal(pool.availableCount, 0);
    assert.throws(() => pool.borrow(), isCode("CLOSED"));
    pool.giveBack(buffer);
    assert.equal(pool.availableCount, 0);
  });

  for (const adapter of availableAdapters()) {
    const native = adapter !== "portable" && adapter !== "memory";
    test(
      `init() allocates every buffer through the ${adapter} port, ${
        native ? "locked in memory" : "unlocked"
      }, and close() releases them`,
      async () => {
        const port = await createPort({ adapter, onNotice: () => {} });
        const count = 3;
        const expectLocked = native && canLock(count * SIZE);
        const before = lockedBytes();
        const pool = new TransientStorePool({ fileSizeBytes: SIZE, count, port });
        await pool.init();
        await pool.init(); // idempotent
        assert.equal(pool.lockedBuffers, expectLocked);
        assert.equal(pool.lockedCount, expectLocked ? count : 0);
        const locked = (n: number) => before === undefined ? undefined : before + n * SIZE;
        assert.equal(lockedBytes(), locked(expectLocked ? count : 0));
        const lent = pool.borrow();
        lent.set([1, 2, 3]);
        assert.equal(pool.availableCount, count - 1);
        await pool.close();
        // The free buffers are gone at once, the lent one when given back.
        assert.equal(lockedBytes(), locked(expectLocked ? 1 : 0));
        assert.equal(lent[2], 3, "a lent buffer stays usable after close()");
        pool.giveBack(lent);
        assert.equal(lockedBytes(), locked(0));
        assert.throws(() => pool.borrow(), isCode("CLOSED"));
      },
    );
  }

  test("borrow() on a pool with a port throws until init() resolved", async () => {
    const port = await createPort({ adapter: "memory" });
    const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 1, port });
    assert.equal(pool.availableCount, 0);
    assert.throws(() => pool.borrow(), /initialised/);
    const initializing = pool.init();
    assert.throws(() => pool.borrow(), /initialised/);
    await initializing;
    pool.giveBack(pool.borrow());
    await pool.close();
  });

  test("close() during init() releases what init() allocates after it", async () => {
    const port = await createPort({ adapter: "memory" });
    const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 3, port });
    const initializing = pool.init();
    await pool.close();
    await assert.rejects(initializing, isCode("CLOSED"));
    assert.equal(pool.availableCount, 0);
    assert.throws(() => pool.borrow(), isCode("CLOSED"));
  });

  test("TransientStorePool() rejects bad sizes and counts", () => {
    assert.throws(() => new TransientStorePool({ fileSizeBytes: 0 }), RangeError);
    assert.throws(() => new TransientStorePool({ fileSizeBytes: SIZE, count: 0 }), RangeError);
    assert.throws(() => new TransientStorePool({ fileSizeBytes: SIZE, count: 1.5 }), RangeError);
  });
});
