import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { RuntimePort } from "../src/runtime/port.ts";
import { ConsumeQueue } from "../src/store/consume_queue.ts";
import { ConsumeQueueTable } from "../src/store/consume_queue_table.ts";
import {
  adapterCases,
  type SegmentEnv,
  segmentName,
  spyPort,
  withSegmentEnv,
} from "./_segment_helpers.ts";

/** Ten units per file keeps every case to a few files. */
const FILE_SIZE = 200;
const UNITS_PER_FILE = 10;
const UNIT = 20;
const MESSAGE_SIZE = 100;

function queueOf(env: SegmentEnv, topic = "TopicTest", queueId = 0): ConsumeQueue {
  return new ConsumeQueue({
    port: env.port,
    rootDirectory: env.directory,
    topic,
    queueId,
    mappedFileSizeConsumeQueue: FILE_SIZE,
    sparse: true,
  });
}

async function openQueue(env: SegmentEnv): Promise<ConsumeQueue> {
  const cq = queueOf(env);
  await cq.load();
  await cq.recover();
  return cq;
}

/** Puts units 0..count-1 with message i at offset 100·i, size 100, tagsCode −i. */
async function putUnits(cq: ConsumeQueue, from: number, count: number): Promise<void> {
  for (let q = from; q < from + count; q++) {
    assert.equal(await cq.putUnit(q * MESSAGE_SIZE, MESSAGE_SIZE, -q, q), true);
  }
}

async function readFileBytes(port: RuntimePort, path: string): Promise<Uint8Array> {
  const bytes = await port.readFile(path);
  assert.ok(bytes !== undefined, `${path} exists`);
  return bytes;
}

/** Flushes both queues, then checks that their first files hold the same bytes. */
async function assertSameFirstFiles(
  port: RuntimePort,
  actual: ConsumeQueue,
  expected: ConsumeQueue,
): Promise<void> {
  await actual.flush(0);
  await expected.flush(0);
  assert.deepEqual(
    await readFileBytes(port, actual.files[0]!.path),
    await readFileBytes(port, expected.files[0]!.path),
  );
}

const cases = await adapterCases();

describe("ConsumeQueue", () => {
  test("ConsumeQueue() rejects a file size that is not a whole number of units", () => {
    assert.throws(
      () =>
        new ConsumeQueue({
          port: {} as RuntimePort,
          rootDirectory: "/s",
          topic: "t",
          queueId: 0,
          mappedFileSizeConsumeQueue: 610,
        }),
      RangeError,
    );
  });

  for (const { adapter, skip } of cases) {
    describe(adapter, { skip }, () => {
      test("putUnitsNow() writes the bytes putUnitNow() writes unit by unit", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const byRun = queueOf(env, "ByRun");
          const byUnit = queueOf(env, "ByUnit");
          for (const cq of [byRun, byUnit]) {
            await cq.load();
            await cq.recover();
            assert.equal(await cq.putUnit(0x1_0000_0000 - 50, 50, 7, 0), true);
          }
          // Offsets across 2^32; tagsCodes repeated, negative, past 2^32.
          const count = 7;
          const offsets = new Float64Array(count);
          const sizes = new Int32Array([100, 0x7FFF_FFFE, 60, 60, 61, 1, 300]);
          const tagsCodes = new Float64Array([
            -1,
            -1,
            0x12_3456_789A,
            0x12_3456_789A,
            0,
            -0x8000_0000,
            5,
          ]);
          let at = 0x1_0000_0000;
          for (let i = 0; i < count; i++) {
            offsets[i] = at;
            at += sizes[i]!;
          }
          const put = byRun.putUnitsNow(count, 1, offsets, sizes, tagsCodes);
          if (put === 0) {
            // Not written through a mapping: putUnitsNow declines.
            assert.equal(byRun.files[0]!.writeMode !== "mapping", true);
          } else {
            assert.equal(put, count);
            for (let i = 0; i < count; i++) {
              assert.equal(byUnit.putUnitNow(offsets[i]!, sizes[i]!, tagsCodes[i]!, 1 + i), true);
            }
            for (let q = 0; q <= count; q++) {
              assert.deepEqual(await byRun.getUnit(q), await byUnit.getUnit(q));
            }
            assert.deepEqual(await byRun.getUnit(3), {
              commitLogOffset: 0x1_0000_0000 + 100 + 0x7FFF_FFFE,
              size: 60,
              tagsCode: 0x12_3456_789A,
            });
            // A unit refused: nothing of the run is written.
            assert.throws(
              () => byRun.putUnitsNow(2, 8, new Float64Array([at, at + 1.5]), sizes, tagsCodes),
              /Commit-log offset/,
            );
            assert.equal(byRun.maxOffsetInQueue, 8);
            await assertSameFirstFiles(env.port, byRun, byUnit);
          }
          await byRun.close();
          await byUnit.close();
        });
      });

      test("putUniformRunNow() and putUnitsNow() write long runs as positional writes where the port says so, the bytes putUnitNow() writes", async () => {
        // Runs of 256 units or more are staged and written with writeSync
        // (RuntimePort.positionalRunWrites), 4096 units a call at most.
        const unitsPerFile = 6000;
        for (const positional of [true, false]) {
          await withSegmentEnv(adapter, async (env) => {
            let writes = 0;
            const spied = spyPort(env.port, [], {
              beforeCall: (operation) => {
                if (operation === "writeSync") writes++;
              },
            });
            const port = new Proxy(spied, {
              get: (target, key) =>
                key === "positionalRunWrites"
                  ? positional && env.port.positionalRunWrites === true
                  : Reflect.get(target, key),
            });
            const queue = (topic: string, port: RuntimePort) =>
              new ConsumeQueue({
                port,
                rootDirectory: env.directory,
                topic,
                queueId: 0,
                mappedFileSizeConsumeQueue: unitsPerFile * UNIT,
                sparse: true,
              });
            const byRun = queue("ByRun", port);
            const byUnit = queue("ByUnit", env.port);
            for (const cq of [byRun, byUnit]) {
              await cq.load();
              await cq.recover();
              assert.equal(await cq.putUnit(0x1_0000_0000 - 50, 50, 7, 0), true);
            }
            // A uniform run longer than one write takes, offsets across 2^32.
            const from = 0x1_0000_0000;
            const put = byRun.putUniformRunNow(5000, 1, from, 90, -3);
            if (byRun.files[0]!.writeMode !== "mapping") {
              assert.equal(put, 0, "not written through a mapping: declined");
              await byRun.close();
              await byUnit.close();
              return;
            }
            assert.equal(put, 5000);
            assert.equal(writes, positional && env.port.positionalRunWrites === true ? 2 : 0);
            for (let i = 0; i < 5000; i++) {
              assert.equal(byUnit.putUnitNow(from + 90 * i, 90, -3, 1 + i), true);
            }
            // Sizes and tagsCodes of their own, past the file's end: the units that fit.
            const count = 1200;
            const offsets = new Float64Array(count);
            const sizes = new Int32Array(count);
            const tagsCodes = new Float64Array(count);
            let at = from + 90 * 5000;
            for (let i = 0; i < count; i++) {
              offsets[i] = at;
              sizes[i] = 60 + (i % 7);
              tagsCodes[i] = i % 3 === 0 ? -i : 0x12_3456_0000 + i;
              at += sizes[i]!;
            }
            const fit = unitsPerFile - 5001;
            assert.equal(byRun.putUnitsNow(count, 5001, offsets, sizes, tagsCodes), fit);
            for (let i = 0; i < fit; i++) {
              assert.equal(
                byUnit.putUnitNow(offsets[i]!, sizes[i]!, tagsCodes[i]!, 5001 + i),
                true,
              );
            }
            assert.equal(byRun.maxOffsetInQueue, unitsPerFile);
            assert.deepEqual(await byRun.getUnit(5001 + 3), {
              commitLogOffset: offsets[3],
              size: 63,
              tagsCode: -3,
            });
            await assertSameFirstFiles(env.port, byRun, byUnit);
            await byRun.close();
            await byUnit.close();
          });
        }
      });

      test("putUnit() pads a queue whose first unit lands past 0", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          assert.equal(await cq.putUnit(5000, 77, 2112, 23), true);
          assert.deepEqual(cq.files.map((f) => f.fileName), [segmentName(400)]);
          assert.equal(cq.minOffsetInQueue, 23);
          assert.equal(cq.maxOffsetInQueue, 24);
          assert.equal(await cq.getUnit(22), undefined);
          assert.deepEqual(await cq.getUnit(23), {
            commitLogOffset: 5000,
            size: 77,
            tagsCode: 2112,
          });
          await cq.flush(0);
          const bytes = await readFileBytes(env.port, `${cq.directory}/${segmentName(400)}`);
          const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
          for (let at = 0; at < 3 * UNIT; at += UNIT) {
            // (0, 0x7FFFFFFF, 0), as RocketMQ's fillPreBlank writes it.
            assert.equal(view.getUint32(at) + view.getUint32(at + 4), 0);
            assert.equal(view.getInt32(at + 8), 0x7FFF_FFFF);
            assert.equal(view.getUint32(at + 12) + view.getUint32(at + 16), 0);
          }
          assert.equal(view.getUint32(3 * UNIT + 4), 5000);
          await cq.close();
          // Reopened, the padding counts as units; the min offset skips it.
          const again = await openQueue(env);
          await again.correctMinOffset(0);
          assert.equal(again.minOffsetInQueue, 23);
          assert.equal(again.maxOffsetInQueue, 24);
          await again.close();
        });
      });

      test("putUnit() skips repeats and refuses gaps", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          await putUnits(cq, 0, 3);
          // Same message again: ends at or below the last one.
          assert.equal(await cq.putUnit(200, MESSAGE_SIZE, -2, 2), false);
          // A later message for a queue offset already written.
          assert.equal(await cq.putUnit(900, MESSAGE_SIZE, 0, 1), false);
          await assert.rejects(cq.putUnit(1000, MESSAGE_SIZE, 0, 5), RangeError);
          await assert.rejects(cq.putUnit(1000, 0, 0, 3), RangeError);
          assert.equal(cq.maxOffsetInQueue, 3);
          assert.equal(cq.maxPhysicOffset, 300);
          await cq.close();
        });
      });

      test("readUnits() returns runs within one file and round-trips 64-bit fields", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          await putUnits(cq, 0, 14);
          const big = 2 ** 40 + 3;
          assert.equal(await cq.putUnit(big, 0x7FFF_FFFE, -(2 ** 40), 14), true);
          const first = await cq.readUnits(7, 100);
          assert.ok(first !== undefined);
          assert.equal(first.count, 3); // to the end of the first file
          assert.deepEqual(first.unitAt(2), { commitLogOffset: 900, size: 100, tagsCode: -9 });
          first.release();
          const second = await cq.readUnits(10, 3);
          assert.ok(second !== undefined);
          assert.equal(second.count, 3);
          assert.equal(second.commitLogOffsetAt(0), 1000);
          assert.throws(() => second.sizeAt(3), RangeError);
          second.release();
          assert.deepEqual(await cq.getUnit(14), {
            commitLogOffset: big,
            size: 0x7FFF_FFFE,
            tagsCode: -(2 ** 40),
          });
          assert.equal(await cq.readUnits(15, 1), undefined);
          await cq.close();
        });
      });

      test("truncateDirtyLogicFiles() cuts units at or past an offset and deletes emptied files", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          await putUnits(cq, 0, 25);
          assert.equal(cq.files.length, 3);
          await cq.truncateDirtyLogicFiles(1550);
          assert.equal(cq.maxOffsetInQueue, 16);
          assert.equal(cq.maxPhysicOffset, 1600);
          assert.equal(cq.files.length, 2);
          assert.equal(await cq.getUnit(16), undefined);
          await cq.truncateDirtyLogicFiles(1000);
          assert.equal(cq.maxOffsetInQueue, 10);
          assert.deepEqual(cq.files.map((f) => f.fileName), [segmentName(0)]);
          // The queue goes on where it was cut.
          await putUnits(cq, 10, 2);
          await cq.truncateDirtyLogicFiles(1100);
          assert.equal(cq.maxOffsetInQueue, 11);
          await cq.flush(0);
          await cq.close();
          // Cut units were zeroed: a reopen does not bring unit 11 back.
          const again = await openQueue(env);
          assert.equal(again.maxOffsetInQueue, 11);
          assert.equal(again.maxPhysicOffset, 1100);
          await again.close();
        });
      });

      test("truncateDirtyLogicFiles() below the first unit empties the queue", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          await putUnits(cq, 0, 12);
          await cq.truncateDirtyLogicFiles(0);
          assert.equal(cq.files.length, 0);
          assert.equal(cq.maxOffsetInQueue, 0);
          // Re-dispatch from queue offset 5 pads like a new queue.
          assert.equal(await cq.putUnit(500, MESSAGE_SIZE, 0, 5), true);
          assert.equal(cq.minOffsetInQueue, 5);
          assert.equal(cq.maxOffsetInQueue, 6);
          await cq.close();
        });
      });

      test("deleteExpiredFile() drops files below the commit log and moves the min offset", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          await putUnits(cq, 0, 25);
          assert.equal(await cq.deleteExpiredFile(1050), 1);
          assert.deepEqual(cq.files.map((f) => f.fileName), [segmentName(200), segmentName(400)]);
          assert.equal(cq.minOffsetInQueue, 11);
          assert.equal(cq.maxOffsetInQueue, 25);
          assert.equal(await cq.getUnit(10), undefined);
          assert.equal((await cq.getUnit(11))?.commitLogOffset, 1100);
          // The last file is never deleted.
          assert.equal(await cq.deleteExpiredFile(10_000), 1);
          assert.deepEqual(cq.files.map((f) => f.fileName), [segmentName(400)]);
          assert.equal(cq.minOffsetInQueue, 11);
          await cq.close();
        });
      });

      test("recover() stops at the first invalid unit, from the third-last file", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          await putUnits(cq, 0, 5 * UNITS_PER_FILE);
          await cq.flush(0);
          await cq.close();
          const zeroSize = async (queueOffset: number) => {
            const name = segmentName(Math.floor(queueOffset / UNITS_PER_FILE) * FILE_SIZE);
            const handle = await env.port.openFile(`${cq.directory}/${name}`);
            await handle.write(new Uint8Array(4), (queueOffset % UNITS_PER_FILE) * UNIT + 8);
            await handle.datasync();
            await handle.close();
          };
          // In the first file: before the third-last, not looked at.
          await zeroSize(3);
          let again = await openQueue(env);
          assert.equal(again.maxOffsetInQueue, 50);
          await again.close();
          await zeroSize(45);
          again = await openQueue(env);
          assert.equal(again.maxOffsetInQueue, 45);
          assert.equal(again.maxPhysicOffset, 4500);
          await again.close();
          // The stale units after the hole were zeroed.
          await zeroSize(45);
          const handle = await env.port.openFile(`${cq.directory}/${segmentName(800)}`);
          const tail = new Uint8Array(FILE_SIZE - 5 * UNIT);
          await handle.read(tail, 5 * UNIT);
          await handle.close();
          assert.ok(tail.every((b) => b === 0));
        });
      });

      test("recover() zeroes a stale byte anywhere past a hole; afterCrash false skips the scan", async () => {
        await withSegmentEnv(adapter, async (env) => {
          const cq = await openQueue(env);
          await putUnits(cq, 0, 2 * UNITS_PER_FILE + 4);
          await cq.flush(0);
          await cq.close();
          const path = `${cq.directory}/${segmentName(2 * FILE_SIZE)}`;
          const poke = async (position: number, value: number) => {
            const handle = await env.port.openFile(path);
            await handle.write(new Uint8Array([value]), position);
            await handle.datasync();
            await handle.close();
          };
          // A hole at unit 2 of the last file (its size field zeroed), then
          // one stale byte at every kind of position past it: word-aligned
          // or not, the very last byte of the file.
          await poke(2 * UNIT + 11, 0);
          for (const position of [2 * UNIT + 12, 3 * UNIT + 1, 150, 197, FILE_SIZE - 1]) {
            await poke(position, 0x5A);
            const again = queueOf(env);
            await again.load();
            await again.recover({ afterCrash: false });
            assert.equal(again.maxOffsetInQueue, 2 * UNITS_PER_FILE + 2);
            await again.close();
            assert.equal((await readFileBytes(env.port, path))[position], 0x5A, "left as it was");
            const crashed = await openQueue(env);
            assert.equal(crashed.maxOffsetInQueue, 2 * UNITS_PER_FILE + 2);
            await crashed.close();
            const bytes = await readFileBytes(env.port, path);
            assert.ok(bytes.subarray(2 * UNIT).every((b) => b === 0), `zeroed from ${position}`);
          }
        });
      });

      if (adapter === "memory") {
        test("recover() after a crash keeps only flushed units", async () => {
          await withSegmentEnv(adapter, async (env) => {
            const cq = await openQueue(env);
            await putUnits(cq, 0, 12);
            await cq.flush(0);
            await putUnits(cq, 12, 5);
            env.memory!.crash();
            const again = await openQueue(env);
            assert.equal(again.maxOffsetInQueue, 12);
            assert.equal(again.maxPhysicOffset, 1200);
            await putUnits(again, 12, 1);
            await again.close();
          });
        });
      }
    });
  }
});

describe("ConsumeQueueTable", () => {
  for (const { adapter, skip } of cases) {
    test(`ConsumeQueueTable.load() finds every queue, odd topic names included (${adapter})`, {
      skip,
    }, async () => {
      await withSegmentEnv(adapter, async (env) => {
        const options = {
          port: env.port,
          rootDirectory: env.directory,
          mappedFileSizeConsumeQueue: FILE_SIZE,
          sparse: true,
        };
        const table = new ConsumeQueueTable(options);
        await table.load();
        const topics = ["%RETRY%cg_pay-v2|east", "a", "TopicTest"];
        for (const [i, topic] of topics.entries()) {
          for (let queueId = 0; queueId <= i; queueId++) {
            const cq = await table.findOrCreate(topic, queueId);
            await putUnits(cq, 0, 3 + queueId);
          }
        }
        assert.equal(table.size, 6);
        assert.equal(await table.flush(0), true);
        await table.close();
        const again = new ConsumeQueueTable(options);
        await again.load();
        assert.equal(await again.recover(), 500);
        assert.equal(again.size, 6);
        assert.equal(again.find("%RETRY%cg_pay-v2|east", 0)?.maxOffsetInQueue, 3);
        assert.equal(again.find("TopicTest", 2)?.maxOffsetInQueue, 5);
        assert.equal(again.find("TopicTest", 3), undefined);
        await again.truncateDirtyLogicFiles(300);
        assert.equal(again.find("TopicTest", 2)?.maxOffsetInQueue, 3);
        await again.close();
      });
    });
  }
});
