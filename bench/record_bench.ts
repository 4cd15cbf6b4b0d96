/**
 * Record-format benchmarks:
 * - CRC-32 implementations (node:zlib, JS slicing-by-8, hash-wasm, and the
 *   one `crc32()` picked for this runtime) at 128 B, 1 KiB and 64 KiB, plus
 *   the small sizes that set the per-runtime threshold;
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
import { crc32, crc32Table, crc32Zlib } from "../src/record/crc32.ts";
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
