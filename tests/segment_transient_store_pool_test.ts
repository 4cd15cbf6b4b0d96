import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MqStoreError } from "../src/errors.ts";
import { TransientStorePool } from "../src/segment/transient_store_pool.ts";

const SIZE = 0x1_0000;

function isCode(code: string) {
  return (error: unknown) => error instanceof MqStoreError && error.code === code;
}

describe("TransientStorePool", () => {
  test("TransientStorePool() defaults to 5 unlocked segment-sized buffers", () => {
    const pool = new TransientStorePool({ fileSizeBytes: SIZE });
    assert.equal(pool.count, 5);
    assert.equal(pool.availableCount, 5);
    assert.equal(pool.lockedBuffers, false);
    const buffer = pool.borrow();
    assert.equal(buffer.length, SIZE);
    pool.giveBack(buffer);
    pool.close();
  });

  test("borrow() throws POOL_EXHAUSTED when every buffer is lent", () => {
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
    pool.close();
  });

  test("giveBack() refuses foreign buffers and double returns", () => {
    const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 1 });
    assert.throws(() => pool.giveBack(new Uint8Array(SIZE)), RangeError);
    const buffer = pool.borrow();
    pool.giveBack(buffer);
    assert.throws(() => pool.giveBack(buffer), RangeError);
    pool.close();
  });

  test("close() stops lending; buffers given back later are dropped", () => {
    const pool = new TransientStorePool({ fileSizeBytes: SIZE, count: 2 });
    const buffer = pool.borrow();
    pool.close();
    pool.close();
    assert.equal(pool.availableCount, 0);
    assert.throws(() => pool.borrow(), isCode("CLOSED"));
    pool.giveBack(buffer);
    assert.equal(pool.availableCount, 0);
  });

  test("TransientStorePool() rejects bad sizes and counts", () => {
    assert.throws(() => new TransientStorePool({ fileSizeBytes: 0 }), RangeError);
    assert.throws(() => new TransientStorePool({ fileSizeBytes: SIZE, count: 0 }), RangeError);
    assert.throws(() => new TransientStorePool({ fileSizeBytes: SIZE, count: 1.5 }), RangeError);
  });
});
