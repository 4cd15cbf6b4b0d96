/**
 * The pre-fault of the consume-queue file a queue rolls into starts only
 * after the next file's creation, which the roll starts at once: a
 * creation maps its file on the JavaScript thread, and an `mmap` waits for
 * a pre-fault in flight to release the process's mmap lock (the map is
 * logged when asked for: it follows the creation by a few microtasks).
 * A queue's first file, created on demand, is pre-faulted only once the
 * queue is busy: by pieces from 16 KiB written on, and the rest once it is
 * ⅛ full, when the next file is prepared; every page at most once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { FileHandle, Mapping, PopulateOptions, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ConsumeQueueAllocator } from "../src/store/_consume_queue_allocator.ts";
import { ConsumeQueue } from "../src/store/consume_queue.ts";

const FILE_BYTES = 20 * 0x400;

function name(offset: number): string {
  return String(offset).padStart(20, "0");
}

function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/**
 * `port`, logging every file's synchronous creation, every mapping made and
 * every pre-fault (`populate <file>`, and `(no read)` after a pre-fault not
 * read from another thread too: consume-queue files always are).
 */
function recordingPort(port: RuntimePort, log: string[], ranges?: string[]): RuntimePort {
  const mappingOf = (mapping: Mapping, path: string): Mapping =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "populate") {
          return (position: number, length: number, options?: PopulateOptions) => {
            const read = options?.read === true ? "" : " (no read)";
            log.push(`populate ${baseName(path)}${read}`);
            ranges?.push(`${baseName(path)} [${position}, ${position + length})`);
            return target.populate(position, length, options);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  const handleOf = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "map") {
          return async (fileOffset?: number, length?: number) => {
            log.push(`map ${baseName(target.path)}`);
            return mappingOf(await target.map(fileOffset, length), target.path);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  return new Proxy(port, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (key === "createFileSync") {
        return (...args: Parameters<NonNullable<RuntimePort["createFileSync"]>>) => {
          log.push(`create ${baseName(args[0]).replace(/\.tmp$/, "")}`);
          return target.createFileSync!(...args);
        };
      }
      if (key === "openFileSync") {
        return (...args: Parameters<NonNullable<RuntimePort["openFileSync"]>>) =>
          handleOf(target.openFileSync!(...args));
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/**
 * An allocator over a memory port with an empty directory `/q`, whose
 * creations, mappings and pre-faults are logged into `log`.
 */
async function recordingAllocator(
  sparse = false,
): Promise<{ log: string[]; allocator: ConsumeQueueAllocator }> {
  const log: string[] = [];
  const memory = new MemoryPort(runtimeName());
  await memory.makeDirectory("/q");
  return {
    log,
    allocator: new ConsumeQueueAllocator({ port: recordingPort(memory, log), sparse }),
  };
}

/**
 * Queue 0 of topic T under `/store`, its allocator's calls logged into
 * `log`; `populated()` waits for the allocator and the files, then returns
 * the pre-faults logged.
 */
function recordingQueue(fileBytes = FILE_BYTES): {
  log: string[];
  ranges: string[];
  memory: MemoryPort;
  allocator: ConsumeQueueAllocator;
  cq: ConsumeQueue;
  populated: () => Promise<string[]>;
} {
  const log: string[] = [];
  const ranges: string[] = [];
  const memory = new MemoryPort(runtimeName());
  const port = recordingPort(memory, log, ranges);
  const allocator = new ConsumeQueueAllocator({ port });
  const cq = new ConsumeQueue({
    port,
    rootDirectory: "/store",
    topic: "T",
    queueId: 0,
    mappedFileSizeConsumeQueue: fileBytes,
    allocator,
  });
  const populated = async () => {
    await allocator.whenIdle();
    for (const file of cq.files) await file.whenPrepared();
    return log.filter((line) => line.startsWith("populate"));
  };
  return { log, ranges, memory, allocator, cq, populated };
}

/**
 * Puts units of `cq` in order (unit `n` at byte `20 n`, commit-log offset
 * `100 n`) until its write position reaches `position`, then answers the
 * pre-faults started meanwhile (`populated`). `restartAt(n)`: the next unit
 * put is unit `n` (after a cut).
 */
function unitWriter(cq: ConsumeQueue, populated: () => Promise<string[]>): {
  putUpTo: (position: number) => Promise<string[]>;
  restartAt: (unit: number) => void;
} {
  let next = 0;
  return {
    putUpTo: async (position) => {
      for (; next * 20 < position; next++) await cq.putUnit(next * 100, 100, 0, next);
      return await populated();
    },
    restartAt: (unit) => {
      next = unit;
    },
  };
}

/** Asserts that no two logged pre-faults (`<file> [start, end)`) share a byte of a file. */
function assertDisjoint(ranges: readonly string[]): void {
  const parsed = ranges.map((range) => {
    const match = /^(\S+) \[(\d+), (\d+)\)$/.exec(range);
    assert.ok(match !== null, range);
    return { file: match[1], start: Number(match[2]), end: Number(match[3]) };
  });
  for (const [i, a] of parsed.entries()) {
    for (const b of parsed.slice(i + 1)) {
      const overlap = a.file === b.file && a.start < b.end && b.start < a.end;
      assert.ok(!overlap, `${ranges[i]} overlaps ${b.file} [${b.start}, ${b.end})`);
    }
  }
}

describe("ConsumeQueueAllocator roll pre-fault", () => {
  test("request() pre-faults the rolled-into file only after the next file, prepared at the roll, is created", async () => {
    const { log, allocator } = await recordingAllocator();
    try {
      assert.equal(allocator.createsSynchronously, true);
      const first = `/q/${name(FILE_BYTES)}`;
      const second = `/q/${name(2 * FILE_BYTES)}`;
      await allocator.prepare(first, FILE_BYTES);
      log.length = 0;
      // As a queue's roll does: take the file, then prepare the next one
      // in the same synchronous step.
      const taken = allocator.request(first, second, FILE_BYTES);
      void allocator.prepare(second, FILE_BYTES);
      const file = await taken;
      await allocator.whenIdle();
      await file.whenPrepared();
      assert.deepEqual(log, [
        `create ${name(2 * FILE_BYTES)}`,
        `map ${name(2 * FILE_BYTES)}`,
        `populate ${name(FILE_BYTES)}`,
      ]);
      await file.close({ waitMs: 0 });
    } finally {
      await allocator.close();
    }
  });

  test("request() pre-faults the rolled-into file when no creation follows", async () => {
    const { log, allocator } = await recordingAllocator();
    try {
      const first = `/q/${name(FILE_BYTES)}`;
      await allocator.prepare(first, FILE_BYTES);
      log.length = 0;
      const file = await allocator.request(first, `/q/${name(2 * FILE_BYTES)}`, FILE_BYTES);
      await file.whenPrepared();
      assert.deepEqual(log, [`populate ${name(FILE_BYTES)}`]);
      await file.close({ waitMs: 0 });
    } finally {
      await allocator.close();
    }
  });

  test("populateRest() pre-faults a file created on request, once, after the creation in flight", async () => {
    const { log, allocator } = await recordingAllocator();
    try {
      const first = `/q/${name(0)}`;
      const second = `/q/${name(FILE_BYTES)}`;
      const file = await allocator.request(first, second, FILE_BYTES);
      await file.whenPrepared();
      assert.deepEqual(log.filter((line) => line.startsWith("populate")), []);
      log.length = 0;
      // As a queue ⅛ into the file does: prepare the next, then this call.
      void allocator.prepare(second, FILE_BYTES);
      allocator.populateRest(file);
      allocator.populateRest(file);
      await allocator.whenIdle();
      await file.whenPrepared();
      assert.deepEqual(log, [
        `create ${name(FILE_BYTES)}`,
        `map ${name(FILE_BYTES)}`,
        `populate ${name(0)}`,
      ]);
      await file.close({ waitMs: 0 });
    } finally {
      await allocator.close();
    }
  });

  test("populateRest() adds nothing to a rolled-into file's pre-fault, nor with sparse files", async () => {
    for (const sparse of [false, true]) {
      const { log, allocator } = await recordingAllocator(sparse);
      try {
        const first = `/q/${name(FILE_BYTES)}`;
        await allocator.prepare(first, FILE_BYTES);
        log.length = 0;
        const file = await allocator.request(first, `/q/${name(2 * FILE_BYTES)}`, FILE_BYTES);
        allocator.populateRest(file);
        await file.whenPrepared();
        assert.deepEqual(log, sparse ? [] : [`populate ${name(FILE_BYTES)}`], `sparse ${sparse}`);
        await file.close({ waitMs: 0 });
      } finally {
        await allocator.close();
      }
    }
  });

  test("ConsumeQueue pre-faults its first file once it is ⅛ full, not before", async () => {
    const { log, allocator, cq } = recordingQueue();
    try {
      await cq.load();
      const units = FILE_BYTES / 20;
      const eighth = units / 8;
      const put = async (from: number, to: number) => {
        for (let i = from; i < to; i++) await cq.putUnit(i * 100, 100, 0, i);
        await allocator.whenIdle();
        for (const file of cq.files) await file.whenPrepared();
      };
      await put(0, eighth - 1);
      assert.deepEqual(log.filter((line) => line.startsWith("populate")), []);
      await put(eighth - 1, eighth + 1);
      assert.deepEqual(log.filter((line) => line.startsWith("populate")), [`populate ${name(0)}`]);
    } finally {
      await cq.close();
      await allocator.close();
    }
  });

  test("ConsumeQueue pre-faults a first file of 16 KiB or more written by doubling pieces, then the rest at ⅛", async () => {
    // 16,384 units: ⅛ is 40,960 bytes, past the first piece at 16 KiB.
    const fileBytes = 20 * 0x4000;
    const { ranges, cq, populated } = recordingQueue(fileBytes);
    try {
      await cq.load();
      const writer = unitWriter(cq, populated);
      const putUpTo = writer.putUpTo;
      assert.deepEqual(await putUpTo(0x4000 - 20), [], "nothing below 16 KiB");
      // At 16,400 (the unit past 16 KiB): up to 4 × 16,400, from the writer's next page.
      assert.equal((await putUpTo(0x4000 + 20)).length, 1);
      assert.deepEqual(ranges, [`${name(0)} [20480, 69632)`]);
      // At twice that (32,800): up to 4 × 32,800, from where the first piece ended.
      await putUpTo(32_800 - 20);
      assert.equal(ranges.length, 1);
      await putUpTo(32_800 + 20);
      assert.deepEqual(ranges.slice(1), [`${name(0)} [69632, 135168)`]);
      // ⅛ full (40,960): the rest, from there.
      await putUpTo(40_960 + 20);
      assert.deepEqual(ranges.slice(2), [`${name(0)} [135168, ${fileBytes})`]);
      // Nothing more while the file fills.
      await putUpTo(fileBytes / 2);
      assert.equal(ranges.length, 3);
    } finally {
      await cq.close();
    }
  });

  test("ConsumeQueue cut below 16 KiB resumes its head pieces where they ended: no page pre-faulted twice", async () => {
    // As above: ⅛ of 16,384 units is 40,960 bytes, pieces at 16,400 and 32,800.
    const fileBytes = 20 * 0x4000;
    const { ranges, cq, populated } = recordingQueue(fileBytes);
    try {
      await cq.load();
      const writer = unitWriter(cq, populated);
      const putUpTo = writer.putUpTo;
      // The first piece, then a cut at 8,000 bytes (the units from 400 on).
      await putUpTo(0x4000 + 20);
      assert.deepEqual(ranges, [`${name(0)} [20480, 69632)`]);
      await cq.truncateDirtyLogicFiles(400 * 100);
      assert.equal(cq.maxOffsetInQueue, 400);
      assert.equal(cq.files.length, 1);
      writer.restartAt(400);
      // Written again past 16 KiB: that piece is pre-faulted already.
      await putUpTo(0x4000 + 20);
      assert.equal(ranges.length, 1);
      // The second piece and the rest start where the first piece ended.
      await putUpTo(32_800 + 20);
      assert.deepEqual(ranges.slice(1), [`${name(0)} [69632, 135168)`]);
      await putUpTo(40_960 + 20);
      assert.deepEqual(ranges.slice(2), [`${name(0)} [135168, ${fileBytes})`]);
      await putUpTo(fileBytes / 2);
      assert.equal(ranges.length, 3);
      assertDisjoint(ranges);
    } finally {
      await cq.close();
    }
  });

  test("ConsumeQueue cut to nothing pre-faults its new first file by pieces from 16 KiB again", async () => {
    const fileBytes = 20 * 0x4000;
    const { ranges, cq, populated } = recordingQueue(fileBytes);
    try {
      await cq.load();
      const writer = unitWriter(cq, populated);
      const putUpTo = writer.putUpTo;
      // Between the second piece and ⅛: the next piece would be the rest.
      await putUpTo(32_800 + 20);
      assert.equal(ranges.length, 2);
      // Every unit cut: the file goes, and the next put creates a new one.
      await cq.truncateDirtyLogicFiles(0);
      assert.equal(cq.files.length, 0);
      assert.equal(cq.maxOffsetInQueue, 0);
      ranges.length = 0;
      writer.restartAt(0);
      // The new file gets the pieces a fresh queue's first file gets.
      await putUpTo(0x4000 - 20);
      assert.deepEqual(ranges, [], "nothing below 16 KiB");
      await putUpTo(0x4000 + 20);
      assert.deepEqual(ranges, [`${name(0)} [20480, 69632)`]);
      await putUpTo(32_800 + 20);
      assert.deepEqual(ranges.slice(1), [`${name(0)} [69632, 135168)`]);
      await putUpTo(40_960 + 20);
      assert.deepEqual(ranges.slice(2), [`${name(0)} [135168, ${fileBytes})`]);
      assertDisjoint(ranges);
    } finally {
      await cq.close();
    }
  });

  test("populateHead() asks each range once, and nothing for a file pre-faulted whole or sparse", async () => {
    for (const sparse of [false, true]) {
      const log: string[] = [];
      const ranges: string[] = [];
      const memory = new MemoryPort(runtimeName());
      await memory.makeDirectory("/q");
      const allocator = new ConsumeQueueAllocator({
        port: recordingPort(memory, log, ranges),
        sparse,
      });
      const fileBytes = 0x10_0000;
      try {
        const file = await allocator.request(`/q/${name(0)}`, `/q/${name(fileBytes)}`, fileBytes);
        assert.equal(allocator.populateHead(file, 0x5000), !sparse);
        // Within what was asked: nothing new.
        assert.equal(allocator.populateHead(file, 0x4100), !sparse);
        assert.equal(allocator.populateHead(file, 0x9000), !sparse);
        await file.whenPrepared();
        assert.deepEqual(
          ranges,
          sparse ? [] : [`${name(0)} [0, 20480)`, `${name(0)} [20480, 36864)`],
          `sparse ${sparse}`,
        );
        // Past the end: the rest, and then no more pieces.
        assert.equal(allocator.populateHead(file, fileBytes + 1), false);
        await file.whenPrepared();
        assert.equal(allocator.populateHead(file, 0xA000), false);
        allocator.populateRest(file);
        await file.whenPrepared();
        assert.deepEqual(
          ranges.slice(2),
          sparse ? [] : [`${name(0)} [36864, ${fileBytes})`],
          `sparse ${sparse}`,
        );
        await file.close({ waitMs: 0 });
      } finally {
        await allocator.close();
      }
    }
  });

  test("ConsumeQueue files still skip the read after a truncation while its runs go in by positional writes", async () => {
    const { allocator, cq, populated } = recordingQueue();
    try {
      await cq.load();
      const units = FILE_BYTES / 20;
      const run = 0x100;
      // One unit, then positional runs (≥ 256 units) up to the file's end.
      assert.equal(await cq.putUnit(0, 100, 0, 0), true);
      let next = 1;
      const putRun = (n: number) => {
        assert.equal(cq.putUniformRunNow(n, next, next * 100, 100, 0), n);
        next += n;
      };
      putRun(units - 1 - run);
      assert.deepEqual(await populated(), [`populate ${name(0)} (no read)`]);
      // A truncation at the log's end (cutting nothing) still has the
      // allocator forget the queue.
      await cq.truncateDirtyLogicFiles(next * 100);
      putRun(run);
      // The next unit rolls into the next file, pre-faulted at the roll.
      assert.equal(await cq.putUnit(next * 100, 100, 0, next), true);
      assert.equal(cq.files.length, 2);
      assert.deepEqual(await populated(), [
        `populate ${name(0)} (no read)`,
        `populate ${name(FILE_BYTES)} (no read)`,
      ]);
    } finally {
      await cq.close();
      await allocator.close();
    }
  });

  test("ConsumeQueue has its files pre-faulted without the read while its runs go in by positional writes", async () => {
    const { memory, allocator, cq, populated } = recordingQueue();
    assert.equal(memory.positionalRunWrites, true);
    try {
      await cq.load();
      const units = FILE_BYTES / 20;
      // The first unit makes the file; a run of 256 (a positional write)
      // takes the queue past ⅛ of it.
      assert.equal(await cq.putUnit(0, 100, 0, 0), true);
      assert.equal(cq.putUniformRunNow(0x100, 1, 100, 100, 0), 0x100);
      assert.deepEqual(await populated(), [`populate ${name(0)} (no read)`]);
      // Runs of 64 go through the mapping: the next file, rolled into, is read.
      let next = 0x101;
      while (next < units) {
        const n = cq.putUniformRunNow(Math.min(64, units - next), next, next * 100, 100, 0);
        assert.ok(n > 0);
        next += n;
      }
      assert.equal(await cq.putUnit(next * 100, 100, 0, next), true);
      assert.deepEqual(await populated(), [
        `populate ${name(0)} (no read)`,
        `populate ${name(FILE_BYTES)}`,
      ]);
    } finally {
      await cq.close();
      await allocator.close();
    }
  });
});
