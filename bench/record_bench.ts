/**
 * Record-format benchmarks:
 * - CRC-32 implementations (node:zlib, JS slicing-by-8, hash-wasm, and the
 *   one `crc32()` picked for this runtime) at 128 B, 1 KiB and 64 KiB, plus
 *   the small sizes that set the per-runtime threshold, and the body CRCs of
 *   a batch of 1000 (group "crc32 batch": per body with `node:zlib`,
 *   `writeBodyCrcs` in JavaScript, the native writer where one loads, and
 *   per-body FFI calls to the system zlib and to libdeflate on Deno and Bun);
 * - encode (validation + CRC + patch) into a reused buffer, of one message
 *   object again and again and of a new properties object per message;
 * - check (structure + CRC, no strings) and full decode of records laid out
 *   in a segment,
 * for 128 B, 1 KiB and 64 KiB bodies, with and without TAGS/KEYS.
 *
 * Run: `deno bench -A bench/record_bench.ts`, or standalone with figures in
 * records/s and GB/s: `deno run -A bench/record_bench.ts`,
 * `bun bench/record_bench.ts`, `node --import tsx bench/record_bench.ts`
 * (flags: `--json`, `--filter <text>`, `--time-ms <n>`).
 *
 * @module
 */

import { createCRC32 } from "hash-wasm";
import { decodeMessageView, RecordChecker } from "../src/record/decoder.ts";
import {
  BODY_CRC_MASK,
  type BodyCrcWriter,
  crc32,
  crc32Table,
  crc32Zlib,
  wholeBodyCrc,
  writeBodyCrcs,
} from "../src/record/crc32.ts";
import { MessageEncoder, patchRecord } from "../src/record/encoder.ts";
import type { MessageInput } from "../src/record/message.ts";
import { bench, runStandalone } from "./_harness.ts";

const SIZES: readonly [string, number][] = [["128 B", 128], ["1 KiB", 1024], ["64 KiB", 65536]];
const CRC_THRESHOLD_SIZES = [16, 32, 64, 128, 192, 256, 384, 512, 768];

function filled(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let x = seed;
  for (let i = 0; i < length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) | 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

// ---------------------------------------------------------------------------
// CRC-32

const wasmCrc = await createCRC32();

for (const [label, size] of SIZES) {
  const buffer = filled(size + 16, size);
  const start = 8;
  const end = start + size;
  const group = `crc32 ${label}`;
  bench({
    group,
    name: `zlib ${label}`,
    bytesPerIteration: size,
    baseline: true,
    fn: () => crc32Zlib(buffer, start, end),
  });
  bench({
    group,
    name: `js slicing-by-8 ${label}`,
    bytesPerIteration: size,
    fn: () => crc32Table(buffer, start, end),
  });
  bench({
    group,
    name: `hash-wasm ${label}`,
    bytesPerIteration: size,
    fn: () => {
      wasmCrc.init();
      wasmCrc.update(buffer.subarray(start, end));
      return wasmCrc.digest("binary");
    },
  });
  bench({
    group,
    name: `crc32() selected ${label}`,
    bytesPerIteration: size,
    fn: () => crc32(buffer, start, end),
  });
}

for (const size of CRC_THRESHOLD_SIZES) {
  const buffer = filled(size + 16, size);
  const whole = filled(size, size);
  const group = "crc32 threshold";
  bench({
    group,
    name: `js slicing-by-8 ${size} B`,
    bytesPerIteration: size,
    fn: () => crc32Table(buffer, 8, 8 + size),
  });
  bench({
    group,
    name: `zlib whole array ${size} B`,
    bytesPerIteration: size,
    fn: () => crc32Zlib(whole, 0, size),
  });
  bench({
    group,
    name: `zlib subarray ${size} B`,
    bytesPerIteration: size,
    fn: () => crc32Zlib(buffer, 8, 8 + size),
  });
}

// The body CRCs of a batch: 1000 bodies, each after its 4-byte CRC field.

const BATCH_BODIES = 1000;

/** Per-body FFI calls `crc32(0, bytes, length)` of a library, where it loads. */
type PerCallCrc = (bytes: Uint8Array) => number;

async function ffiCrc(library: string, symbol: string): Promise<PerCallCrc | undefined> {
  const host = globalThis as {
    Deno?: {
      dlopen(
        path: string,
        symbols: Record<string, { parameters: string[]; result: string }>,
      ): { symbols: Record<string, (crc: number, bytes: Uint8Array, length: number) => number> };
    };
    Bun?: unknown;
  };
  try {
    if (host.Deno !== undefined) {
      // u32 lengths keep the call on V8's fast path (a usize parameter
      // took it off: 300-480 ns a call); the value is zero-extended.
      const f = host.Deno.dlopen(library, {
        [symbol]: { parameters: ["u32", "buffer", "u32"], result: "u32" },
      }).symbols[symbol]!;
      return (bytes) => f(0, bytes, bytes.length);
    }
    if (host.Bun !== undefined) {
      const specifier = "bun:ffi";
      const ffi = await import(specifier) as {
        dlopen(
          path: string,
          symbols: Record<string, { args: string[]; returns: string }>,
        ): { symbols: Record<string, (crc: number, bytes: Uint8Array, length: number) => number> };
      };
      const f = ffi.dlopen(library, { [symbol]: { args: ["u32", "ptr", "usize"], returns: "u32" } })
        .symbols[symbol]!;
      return (bytes) => f(0, bytes, bytes.length);
    }
  } catch {
    // Not on this host: no row.
  }
  return undefined;
}

async function nativeWriter(): Promise<BodyCrcWriter | undefined> {
  if ((globalThis as { Bun?: unknown }).Bun === undefined) return undefined;
  try {
    return await (await import("../src/runtime/_bun_crc32.ts")).loadBunBodyCrcWriter();
  } catch {
    return undefined;
  }
}

const perCall: [string, PerCallCrc | undefined][] = [
  ["system zlib (libz.so.1) per body, FFI", await ffiCrc("libz.so.1", "crc32")],
  ["libdeflate per body, FFI", await ffiCrc("libdeflate.so.0", "libdeflate_crc32")],
];
const writer = await nativeWriter();

for (const [label, size] of [["128 B", 128], ["1 KiB", 1024]] as const) {
  const bodies = Array.from({ length: BATCH_BODIES }, (_, i) => filled(size, i + 1));
  const stride = 4 + size;
  const bytes = new Uint8Array(BATCH_BODIES * stride);
  const ranges = new Int32Array(3 * BATCH_BODIES);
  for (let i = 0; i < BATCH_BODIES; i++) {
    bytes.set(bodies[i]!, i * stride + 4);
    ranges.set([i * stride + 4, size, i * stride], 3 * i);
  }
  const view = new DataView(bytes.buffer);
  const group = `crc32 batch 1000 × ${label}`;
  const bytesPerIteration = BATCH_BODIES * size;
  bench({
    group,
    name: `wholeBodyCrc() per body (the encoder without a native writer) 1000 × ${label}`,
    bytesPerIteration,
    baseline: true,
    fn: () => {
      for (let i = 0; i < BATCH_BODIES; i++) view.setInt32(i * stride, wholeBodyCrc(bodies[i]!));
    },
  });
  bench({
    group,
    name: `writeBodyCrcs() JavaScript 1000 × ${label}`,
    bytesPerIteration,
    fn: () => writeBodyCrcs(bytes, ranges, BATCH_BODIES),
  });
  if (writer !== undefined) {
    bench({
      group,
      name: `${writer.name} 1000 × ${label}`,
      bytesPerIteration,
      fn: () => writer.write(bytes, ranges, BATCH_BODIES),
    });
  }
  for (const [name, f] of perCall) {
    if (f === undefined) continue;
    bench({
      group,
      name: `${name} 1000 × ${label}`,
      bytesPerIteration,
      fn: () => {
        for (let i = 0; i < BATCH_BODIES; i++) {
          view.setInt32(i * stride, f(bodies[i]!) & BODY_CRC_MASK);
        }
      },
    });
  }
}

// ---------------------------------------------------------------------------
// Encode

const TAGGED = { TAGS: "TagA", KEYS: "order-1 customer-7" } as const;

function message(bodySize: number, tagged: boolean): MessageInput {
  const input: MessageInput = {
    topic: "TopicTest",
    queueId: 3,
    body: filled(bodySize, bodySize + 1),
    bornTimestamp: 1_700_000_000_000,
    bornHost: "127.0.0.1:50000",
    storeHost: "127.0.0.1:10911",
  };
  if (tagged) input.properties = TAGGED;
  return input;
}

const encoder = new MessageEncoder();
const scratch = new Uint8Array(256 * 1024);

for (const [label, size] of SIZES) {
  for (const tagged of [false, true]) {
    const input = message(size, tagged);
    const recordBytes = encoder.measure(input) as number;
    let queueOffset = 0;
    bench({
      group: `encode ${label}`,
      name: `encode+patch ${label}${tagged ? " TAGS+KEYS" : ""}`,
      bytesPerIteration: recordBytes,
      fn: () => {
        const written = encoder.encode(input, scratch, 0) as number;
        patchRecord(scratch, 0, queueOffset, queueOffset * written, 1_700_000_000_001);
        queueOffset++;
        return written;
      },
    });
  }
}

// A new properties object per message, as a producer builds them: TAGS the
// same string each time, KEYS a different one (so they must be encoded).
const VARIED_MESSAGES = 0x1000;

for (const [label, size] of SIZES) {
  const body = filled(size, size + 1);
  const inputs: MessageInput[] = [];
  for (let i = 0; i < VARIED_MESSAGES; i++) {
    inputs.push({
      topic: "TopicTest",
      queueId: 3,
      body,
      bornTimestamp: 1_700_000_000_000,
      bornHost: "127.0.0.1:50000",
      storeHost: "127.0.0.1:10911",
      properties: { TAGS: "TagA", KEYS: `order-${i} customer-${i % 97}` },
    });
  }
  const recordBytes = encoder.measure(inputs[0]!) as number;
  let next = 0;
  bench({
    group: `encode ${label}`,
    name: `encode+patch ${label} TAGS+KEYS, new object each`,
    bytesPerIteration: recordBytes,
    fn: () => {
      const written = encoder.encode(inputs[next]!, scratch, 0) as number;
      patchRecord(scratch, 0, next, next * written, 1_700_000_000_001);
      next = (next + 1) & (VARIED_MESSAGES - 1);
      return written;
    },
  });
}

// ---------------------------------------------------------------------------
// Check and decode, over records laid out one after another

const SEGMENT_BYTES = 8 * 1024 * 1024;

function segmentOf(input: MessageInput): { bytes: Uint8Array; positions: number[] } {
  const bytes = new Uint8Array(SEGMENT_BYTES);
  const positions: number[] = [];
  let position = 0;
  while (true) {
    const size = encoder.measure(input) as number;
    if (position + size > SEGMENT_BYTES) break;
    encoder.encode(input, bytes, position);
    patchRecord(bytes, position, positions.length, position, 1_700_000_000_001);
    positions.push(position);
    position += size;
  }
  return { bytes, positions };
}

const checker = new RecordChecker({ checkCrc: true });

for (const [label, size] of SIZES) {
  for (const tagged of [false, true]) {
    const input = message(size, tagged);
    const { bytes, positions } = segmentOf(input);
    const recordBytes = encoder.measure(input) as number;
    const suffix = tagged ? " TAGS+KEYS" : "";
    let next = 0;
    bench({
      group: `decode ${label}`,
      name: `check+crc ${label}${suffix}`,
      bytesPerIteration: recordBytes,
      fn: () => {
        const position = positions[next]!;
        next = next + 1 === positions.length ? 0 : next + 1;
        return checker.check(bytes, position, position).size;
      },
    });
    let nextFull = 0;
    bench({
      group: `decode ${label}`,
      name: `check+crc+decode ${label}${suffix}`,
      bytesPerIteration: recordBytes,
      fn: () => {
        const position = positions[nextFull]!;
        nextFull = nextFull + 1 === positions.length ? 0 : nextFull + 1;
        return decodeMessageView(bytes, checker.check(bytes, position, position));
      },
    });
  }
}

runStandalone(import.meta.main);
