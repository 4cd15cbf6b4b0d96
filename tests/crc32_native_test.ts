import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { createPort, runtimeName } from "../src/runtime/mod.ts";
import {
  BODY_CRC_MASK,
  bodyCrc,
  type BodyCrcWriter,
  crc32Implementation,
  crc32Table,
  installBodyCrcWriter,
  nativeBodyCrcBytesMax,
  nativeBodyCrcs,
  writeBodyCrcs,
} from "../src/record/crc32.ts";
import {
  loadWasmBodyCrcWriter,
  REGION_BYTES_MAX,
  RUN_TRIPLES_MAX,
  WASM_BODY_BYTES_MAX,
  WASM_LANES_VARIANT,
  WASM_TABLE_BODY_BYTES_MAX,
  WASM_TABLE_VARIANT,
  wasmCrcVariant,
} from "../src/runtime/_wasm_crc32.ts";
import {
  CC_DIRECTORY_PREFIX,
  removeOrphanedCompileDirectories,
} from "../src/runtime/_bun_crc32.ts";

/** A small deterministic generator (xorshift32), so a failure can be replayed. */
function generator(seed: number): () => number {
  let state = seed | 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return state >>> 0;
  };
}

/** Builds `count` random non-overlapping triples in a random buffer. */
function randomBatch(seed: number, count: number, bodyBytesMax: number) {
  const next = generator(seed);
  const lengths = Array.from({ length: count }, () => next() % (bodyBytesMax + 1));
  // Each record: some gap, the CRC field, some gap, the body.
  const gaps = Array.from({ length: count }, () => [next() % 9, next() % 9]);
  let size = 0;
  for (let i = 0; i < count; i++) size += gaps[i]![0]! + 4 + gaps[i]![1]! + lengths[i]!;
  const padding = next() % 17;
  const backing = new Uint8Array(size + 2 * padding);
  for (let i = 0; i < backing.length; i++) backing[i] = next();
  // A view with a non-zero byteOffset, as a segment slice would be.
  const bytes = backing.subarray(padding, padding + size);
  const ranges = new Int32Array(3 * count);
  let position = 0;
  for (let i = 0; i < count; i++) {
    position += gaps[i]![0]!;
    ranges[3 * i + 2] = position;
    position += 4 + gaps[i]![1]!;
    ranges[3 * i] = position;
    ranges[3 * i + 1] = lengths[i]!;
    position += lengths[i]!;
  }
  return { bytes, ranges };
}

function expectedCrcs(bytes: Uint8Array, ranges: Int32Array, count: number): number[] {
  const crcs: number[] = [];
  for (let i = 0; i < count; i++) {
    const body = ranges[3 * i]!;
    crcs.push(crc32Table(bytes, body, body + ranges[3 * i + 1]!) & BODY_CRC_MASK);
  }
  return crcs;
}

function writtenCrcs(bytes: Uint8Array, ranges: Int32Array, count: number): number[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Array.from({ length: count }, (_, i) => view.getInt32(ranges[3 * i + 2]!));
}

/**
 * Bodies of `lengths` packed one after another (each `header` bytes past
 * the start of its record, its CRC field just before it), random bytes;
 * checks that `writer` writes every CRC crc32Table gives.
 */
function checkPacked(
  writer: BodyCrcWriter,
  next: () => number,
  lengths: readonly number[],
  label: string,
  header = 0x10,
): void {
  const count = lengths.length;
  const size = lengths.reduce((sum, length) => sum + header + length, 0);
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = next();
  const ranges = new Int32Array(3 * count);
  let position = 0;
  for (let i = 0; i < count; i++) {
    ranges.set([position + header, lengths[i]!, position + header - 4], 3 * i);
    position += header + lengths[i]!;
  }
  const expected = expectedCrcs(bytes, ranges, count);
  assert.equal(writer.write(bytes, ranges, count), -1, label);
  assert.deepEqual(writtenCrcs(bytes, ranges, count), expected, label);
}

function checkRandomBatches(label: string, bodyBytesMax = 0x1000): void {
  for (let seed = 1; seed <= 40; seed++) {
    const count = 1 + seed * 7 % 64;
    const { bytes, ranges } = randomBatch(seed * 0x9E3779B1, count, bodyBytesMax);
    const expected = expectedCrcs(bytes, ranges, count);
    writeBodyCrcs(bytes, ranges, count);
    assert.deepEqual(writtenCrcs(bytes, ranges, count), expected, `${label}, seed ${seed}`);
  }
}

/** The writer createPort() installs on this runtime, loaded again. */
async function runtimeWriter(): Promise<BodyCrcWriter | undefined> {
  if (runtimeName() === "node") return loadWasmBodyCrcWriter();
  if (runtimeName() !== "bun" || !libdeflatePresent()) return undefined;
  const { loadBunBodyCrcWriter } = await import("../src/runtime/_bun_crc32.ts");
  return loadBunBodyCrcWriter();
}

/** Whether the Debian libdeflate the Bun writer needs is on this machine. */
function libdeflatePresent(): boolean {
  return ["/usr/lib/x86_64-linux-gnu/libdeflate.so.0", "/usr/lib/aarch64-linux-gnu/libdeflate.so.0"]
    .some((path) => fs.existsSync(path));
}

describe("crc32 native body CRCs", () => {
  test("writeBodyCrcs() matches crc32Table on the JavaScript path", async () => {
    await createPort({ adapter: "memory" });
    const installed = nativeBodyCrcs();
    installBodyCrcWriter(undefined);
    try {
      assert.equal(nativeBodyCrcs(), false);
      assert.match(crc32Implementation(), /node:zlib/);
      checkRandomBatches("JavaScript path");
    } finally {
      if (installed) installBodyCrcWriter(await runtimeWriter());
    }
  });

  test("createPort() installs a writer whose CRCs match crc32Table", async () => {
    await createPort({ adapter: "memory" });
    const runtime = runtimeName();
    const expectNative = runtime === "node" || (runtime === "bun" && libdeflatePresent());
    assert.equal(nativeBodyCrcs(), expectNative, crc32Implementation());
    if (runtime === "node") {
      // The variant this host compiles (the table loop alone without SIMD).
      const variant = wasmCrcVariant();
      assert.equal(crc32Implementation(), variant.name);
      assert.equal(nativeBodyCrcBytesMax(), variant.bodyBytesMax);
    } else if (expectNative) {
      assert.match(crc32Implementation(), /libdeflate/);
      assert.equal(nativeBodyCrcBytesMax(), Infinity);
    } else {
      assert.match(crc32Implementation(), /node:zlib/);
      assert.equal(nativeBodyCrcBytesMax(), -1);
    }
    checkRandomBatches(crc32Implementation());
  });

  test("loadWasmBodyCrcWriter() writes the CRCs crc32Table gives, short and long bodies mixed", async () => {
    await createPort({ adapter: "memory" });
    const installed = await runtimeWriter();
    installBodyCrcWriter(loadWasmBodyCrcWriter());
    try {
      assert.match(crc32Implementation(), /WebAssembly/);
      // Lengths 0..0x1000: most past WASM_BODY_BYTES_MAX, done one by one between runs.
      checkRandomBatches("WebAssembly, long bodies");
      // Lengths 0..0x120: nearly all in runs, every tail length 0..15.
      checkRandomBatches("WebAssembly, short bodies", 0x120);
    } finally {
      installBodyCrcWriter(installed);
    }
  });

  test("loadWasmBodyCrcWriter() writes the CRCs crc32Table gives for groups of 16 bodies side by side", () => {
    const writer = loadWasmBodyCrcWriter();
    const next = generator(0x5EED);
    const spread = (count: number, shortest: number, longest: number) =>
      Array.from({ length: count }, () => shortest + next() % (longest - shortest + 1));
    const MAX = WASM_BODY_BYTES_MAX;
    // One length a batch (whole 16-byte columns or not, whole groups of 16
    // or not), lengths that differ within each group (the shortest one
    // sets the columns done side by side), and bodies short enough on
    // average to skip the side-by-side pass.
    const cases: Array<[string, number[]]> = [
      ["1000 × 128 B", spread(0x3E8, 0x80, 0x80)],
      ["16 × 16 B", spread(0x10, 0x10, 0x10)],
      ["17 × 47 B", spread(0x11, 0x2F, 0x2F)],
      ["33 × 767 B", spread(0x21, 0x2FF, 0x2FF)],
      ["31 × 64–65 B", spread(0x1F, 0x40, 0x41)],
      ["256 × 0–288 B", spread(0x100, 0x00, 0x120)],
      ["64 × 108–148 B", spread(0x40, 0x6C, 0x94)],
      ["48 × 0–32 B", spread(0x30, 0x00, 0x20)],
      ["32 × 15 B", spread(0x20, 0x0F, 0x0F)],
      // One column block a group: a 16 B body among longer ones.
      ["16 B among 15 × 64–300 B", [...spread(7, 0x40, 0x12C), 0x10, ...spread(8, 0x40, 0x12C)]],
      [
        "16 B in each of 3 groups",
        spread(0x30, 0x40, 0x100).map((n, i) => i % 16 === 5 ? 0x10 : n),
      ],
      // At the limit: whole groups of it, and lengths around it (MAX + 1
      // done by bodyCrc between runs of at least 16).
      ["33 × WASM_BODY_BYTES_MAX", spread(0x21, MAX, MAX)],
      ["48 × MAX - 1..MAX + 1", spread(0x30, MAX - 1, MAX + 1)],
      ["MAX - 1..MAX, MAX + 1, MAX - 1..MAX", [
        ...spread(0x20, MAX - 1, MAX),
        MAX + 1,
        ...spread(0x11, MAX - 1, MAX),
      ]],
    ];
    for (const [label, lengths] of cases) checkPacked(writer, next, lengths, label);
  });

  test("loadWasmBodyCrcWriter() keeps its CRCs right while its memory grows between calls", () => {
    const writer = loadWasmBodyCrcWriter();
    const next = generator(0x6A0);
    // 2 groups in the first page, then about 1.1 MiB (the memory grows),
    // then small again in the grown memory.
    checkPacked(writer, next, new Array(0x20).fill(0x40), "small");
    checkPacked(writer, next, new Array(0x400).fill(0).map(() => 0x400 + next() % 0x80), "large");
    checkPacked(
      writer,
      next,
      new Array(0x30).fill(0).map(() => 0x40 + next() % 0x40),
      "small again",
    );
  });

  test("wasmCrcVariant() takes the lanes only where their module validates", () => {
    const given: Uint8Array<ArrayBuffer>[] = [];
    const refuse = (bytes: Uint8Array<ArrayBuffer>) => (given.push(bytes), false);
    assert.equal(wasmCrcVariant(refuse), WASM_TABLE_VARIANT);
    assert.equal(wasmCrcVariant(() => true), WASM_LANES_VARIANT);
    // What it asked about is the module exporting the lanes, and by default
    // it takes them where that module validates (not under Node's
    // --no-enable-sse4-1, where this test passes too).
    assert.equal(given.length, 1);
    assert.ok(new TextDecoder("latin1").decode(given[0]!).includes("\x05lanes"));
    const validates = WebAssembly.validate(given[0]!);
    assert.equal(wasmCrcVariant(), validates ? WASM_LANES_VARIANT : WASM_TABLE_VARIANT);
    assert.deepEqual(WASM_TABLE_VARIANT.passes, ["crcs"]);
    assert.equal(WASM_TABLE_VARIANT.bodyBytesMax, WASM_TABLE_BODY_BYTES_MAX);
    assert.equal(WASM_LANES_VARIANT.bodyBytesMax, WASM_BODY_BYTES_MAX);
    assert.notEqual(WASM_TABLE_VARIANT.name, WASM_LANES_VARIANT.name);
  });

  test("loadWasmBodyCrcWriter(WASM_TABLE_VARIANT) writes the bodyCrc of every length, without SIMD", () => {
    const writer = loadWasmBodyCrcWriter(WASM_TABLE_VARIANT);
    assert.equal(writer.name, WASM_TABLE_VARIANT.name);
    assert.equal(writer.bodyBytesMax, WASM_TABLE_BODY_BYTES_MAX);
    const next = generator(0x7AB1E);
    // Every length 0..0x4F, then a spread up to twice the limit (the long
    // ones done by bodyCrc between runs), in groups of 16 and more.
    const lengths = [
      ...Array.from({ length: 0x50 }, (_, i) => i),
      ...Array.from({ length: 0x60 }, () => 0x10 + next() % (2 * WASM_TABLE_BODY_BYTES_MAX)),
      WASM_TABLE_BODY_BYTES_MAX - 1,
      WASM_TABLE_BODY_BYTES_MAX,
      WASM_TABLE_BODY_BYTES_MAX + 1,
      ...new Array(0x20).fill(0x80),
    ];
    const size = lengths.reduce((sum, length) => sum + 0x0C + length, 0);
    const bytes = new Uint8Array(size);
    for (let i = 0; i < size; i++) bytes[i] = next();
    const ranges = new Int32Array(3 * lengths.length);
    let position = 0;
    for (let i = 0; i < lengths.length; i++) {
      ranges.set([position + 0x0C, lengths[i]!, position + 0x04], 3 * i);
      position += 0x0C + lengths[i]!;
    }
    const expected = lengths.map((_, i) =>
      bodyCrc(bytes, ranges[3 * i]!, ranges[3 * i]! + ranges[3 * i + 1]!)
    );
    assert.equal(writer.write(bytes, ranges, lengths.length), -1);
    assert.deepEqual(writtenCrcs(bytes, ranges, lengths.length), expected);
  });

  test("loadWasmBodyCrcWriter() splits a batch whose records span more than one call takes", () => {
    const writer = loadWasmBodyCrcWriter();
    // Three short bodies 3 MiB apart: 6 MiB of records, more than one call copies in.
    const bytes = new Uint8Array(0x60_0000 + 0x100);
    const next = generator(7);
    const ranges = new Int32Array(9);
    for (let i = 0; i < 3; i++) {
      const body = i * 0x30_0000 + 0x10;
      for (let k = 0; k < 0xC8; k++) bytes[body + k] = next();
      ranges.set([body, 0xC8, body - 0x08], 3 * i);
    }
    const expected = expectedCrcs(bytes, ranges, 3);
    assert.equal(writer.write(bytes, ranges, 3), -1);
    assert.deepEqual(writtenCrcs(bytes, ranges, 3), expected);
  });

  test("loadWasmBodyCrcWriter() runs groups of 16 side by side across the calls of a split batch", () => {
    const writer = loadWasmBodyCrcWriter();
    const next = generator(0xC1A5);
    // 3 clusters of 16 bodies of 64–200 B, 3 MiB apart: the first two in
    // one call (2 groups), the third in another (past REGION_BYTES_MAX).
    const bytes = new Uint8Array(2 * 0x30_0000 + 0x1000);
    const ranges = new Int32Array(3 * 0x30);
    for (let cluster = 0; cluster < 3; cluster++) {
      let position = cluster * 0x30_0000;
      for (let k = 0; k < 0x10; k++) {
        const length = 0x40 + next() % 0x89;
        for (let i = position; i < position + 0x10 + length; i++) bytes[i] = next();
        ranges.set([position + 0x10, length, position + 0x04], 3 * (cluster * 0x10 + k));
        position += 0x10 + length;
      }
    }
    assert.ok(2 * 0x30_0000 > REGION_BYTES_MAX && 0x30_0000 + 0x1000 < REGION_BYTES_MAX);
    const expected = expectedCrcs(bytes, ranges, 0x30);
    assert.equal(writer.write(bytes, ranges, 0x30), -1);
    assert.deepEqual(writtenCrcs(bytes, ranges, 0x30), expected);
    // More triples of 48 B (records of 52 B) than one call takes, in less
    // than one region: split by the triple count, the second call with 3
    // groups and 5 more.
    const count = RUN_TRIPLES_MAX + 0x35;
    assert.ok(count * (4 + 0x30) < REGION_BYTES_MAX);
    checkPacked(writer, next, new Array(count).fill(0x30), `${count} × 48 B`, 4);
  });

  test("removeOrphanedCompileDirectories() removes the compile directories of ended processes only", () => {
    const parent = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-test-cc-"));
    try {
      // A process that ran and ended: its pid is free.
      const ended = spawnSync("true");
      assert.equal(ended.status, 0);
      const names = [
        `${CC_DIRECTORY_PREFIX}${ended.pid}-a1B2c3`,
        `${CC_DIRECTORY_PREFIX}${process.pid}-d4E5f6`,
        `${CC_DIRECTORY_PREFIX}g7H8i9`,
        "other-1-x",
      ];
      for (const name of names) {
        fs.mkdirSync(path.join(parent, name));
        fs.writeFileSync(path.join(parent, name, "body_crcs.c"), "");
      }
      assert.equal(removeOrphanedCompileDirectories(parent), 1);
      assert.deepEqual(fs.readdirSync(parent).sort(), names.slice(1).sort());
    } finally {
      fs.rmSync(parent, { recursive: true, force: true });
    }
  });

  test("writeBodyCrcs() refuses a triple outside the buffer and writes the ones before it", async () => {
    await createPort({ adapter: "memory" });
    const bytes = new Uint8Array(0x100);
    bytes.fill(0x5A, 0x40, 0x80);
    const cases: Array<[string, number, number, number]> = [
      ["body past the end", 0xF0, 0x20, 0x10],
      ["negative body", -1, 4, 0x10],
      ["negative length", 0x40, -4, 0x10],
      ["CRC field past the end", 0x40, 0x10, 0xFD],
      ["negative CRC position", 0x40, 0x10, -4],
    ];
    for (const [label, body, length, at] of cases) {
      bytes.fill(0, 0, 0x10);
      const ranges = Int32Array.of(0x40, 0x40, 0x00, body, length, at, 0x40, 0x40, 0x08);
      assert.throws(() => writeBodyCrcs(bytes, ranges, 3), RangeError, label);
      assert.deepEqual(writtenCrcs(bytes, ranges, 1), expectedCrcs(bytes, ranges, 1), label);
      assert.equal(new DataView(bytes.buffer).getInt32(0x08), 0, `${label}: nothing after it`);
    }
    assert.throws(() => writeBodyCrcs(bytes, new Int32Array(3), 2), RangeError);
    assert.throws(() => writeBodyCrcs(new Uint8Array(0), Int32Array.of(0, 0, 0), 1), RangeError);
    writeBodyCrcs(new Uint8Array(0), new Int32Array(0), 0);
  });
});
