/**
 * A {@link BodyCrcWriter} in WebAssembly, for Node: slicing-by-16 CRC-32
 * over a copy of the batch's records in the module's memory, one call per
 * batch.
 *
 * Why (Node 20.20, V8 11.3, this machine, `putMessages` of 1000 × 128 B
 * into a warmed segment): every native CRC on Node has a fixed cost per
 * call of about 190–250 ns (`node:zlib`'s `crc32`, its internal binding
 * and a koffi call to zlib's alike), more than the JavaScript table takes
 * for 128 B. The JavaScript table in turn ran at about 1 byte a
 * nanosecond inside the batch encoder: V8 11.3 checks every typed-array
 * load of the table for a detached buffer and for its bounds (seen with
 * `perf annotate`), and the CRCs took half the user CPU of the put.
 * WebAssembly's loads need neither check, and one call does the whole
 * batch: the records are copied in once (the region from the first body
 * to the end of the last, about 30 % more than the bodies at 128 B), the
 * module writes each CRC back into its range triple, and JavaScript
 * stores the CRCs into the records. All in, 90–110 ns of CPU a 128 B
 * body (the module's loop about 60 of them), and the put's user CPU went
 * from 0.65–0.70 to 0.30–0.39 µs a message. The loop is bound by its
 * instruction count (five a byte: it does not run faster with two bodies
 * interleaved, measured), so each table offset takes two instructions and
 * a body's last 4–15 bytes go a word at a time: a batch's CRCs then took
 * 7 % less CPU at 128 B, 11 % at 200 B, 16 % for lengths 126–128 and
 * 24 % at 40 B (`crcab.mts`, in one process, against the writer before).
 *
 * Deno uses `node:zlib` (SIMD, about 30 ns a call for 128 B) and Bun
 * libdeflate (`_bun_crc32.ts`), both faster: this writer is installed on
 * Node only. Bodies past {@link WASM_BODY_BYTES_MAX} are left to
 * `node:zlib` one by one (its fixed cost is then the smaller part): the
 * batch encoder does not give them to a writer, and {@link
 * WasmBodyCrcWriter.write} does them with `bodyCrc` between runs.
 *
 * The module is assembled here from its instructions (the text form is in
 * `crcsBody`'s comment), not shipped as a binary: there is no build step
 * for it, and the bytes can be read.
 *
 * @module
 */

import { bodyCrc, type BodyCrcWriter, crc32SliceTables } from "../record/crc32.ts";

/** Tables of slicing-by-16: 16 × 256 int32, table k at byte `k * 0x400`. */
const TABLE_COUNT = 0x10;
/** Bytes of one table. */
const TABLE_BYTES = 0x400;
/** Where the range triples are copied, after the tables. */
const RANGES_AT = TABLE_COUNT * TABLE_BYTES;
/** A WebAssembly page. */
const PAGE_BYTES = 0x10000;
/**
 * Longest body worth copying into the module. Measured on Node 20 (CPU a
 * body, a batch's CRCs through this writer against `wholeBodyCrc`, which
 * calls `node:zlib`): 256 B 175 against 333 ns, 384 B 254 / 393, 512 B
 * 330 / 481, 768 B 478 / 502, 1 KiB 642 / 640, 2 KiB 1291 / 995. Up to
 * 767 B the module wins; from 1 KiB `node:zlib`'s SIMD makes up for its
 * fixed cost a call.
 */
export const WASM_BODY_BYTES_MAX = 0x2FF;
/**
 * Most bytes one call copies in (records from the first body to the end of
 * the last); a batch with more is done in several calls.
 */
const REGION_BYTES_MAX = 0x40_0000;
/** Most triples one call takes (their copy precedes the region). */
const RUN_TRIPLES_MAX = 0x1_0000;

/** Stores `value` big-endian at `bytes[at]`. */
function writeInt32(bytes: Uint8Array, at: number, value: number): void {
  bytes[at] = value >>> 24;
  bytes[at + 1] = value >>> 16;
  bytes[at + 2] = value >>> 8;
  bytes[at + 3] = value;
}

/** Opcodes and types of the few WebAssembly instructions used. */
const OP = {
  block: 0x02,
  loop: 0x03,
  end: 0x0B,
  br: 0x0C,
  brIf: 0x0D,
  localGet: 0x20,
  localSet: 0x21,
  localTee: 0x22,
  i32Load: 0x28,
  i32Load8U: 0x2D,
  i32Store: 0x36,
  i32Const: 0x41,
  i32LtU: 0x49,
  i32GeU: 0x4F,
  i32Add: 0x6A,
  i32Sub: 0x6B,
  i32Mul: 0x6C,
  i32And: 0x71,
  i32Xor: 0x73,
  i32Shl: 0x74,
  i32ShrU: 0x76,
  blockVoid: 0x40,
  typeI32: 0x7F,
  typeFunction: 0x60,
} as const;

/** Unsigned LEB128. */
function uleb(value: number): number[] {
  const out: number[] = [];
  do {
    let byte = value & 0x7F;
    value >>>= 7;
    if (value !== 0) byte |= 0x80;
    out.push(byte);
  } while (value !== 0);
  return out;
}

/** Signed LEB128 of an int32. */
function sleb(value: number): number[] {
  const out: number[] = [];
  for (;;) {
    const byte = value & 0x7F;
    value >>= 7;
    if ((value === 0 && (byte & 0x40) === 0) || (value === -1 && (byte & 0x40) !== 0)) {
      out.push(byte);
      return out;
    }
    out.push(byte | 0x80);
  }
}

/** A section: its id, then its length-prefixed contents. */
function section(id: number, contents: number[]): number[] {
  return [id, ...uleb(contents.length), ...contents];
}

/** A length-prefixed name. */
function name(text: string): number[] {
  return [...uleb(text.length), ...Array.from(text, (c) => c.charCodeAt(0))];
}

// Locals of `crcs(ranges, count, bias)`: the parameters, then the rest.
const RANGES = 0, COUNT = 1, BIAS = 2, RANGES_END = 3, P = 4, END = 5, END16 = 6, CRC = 7;
const W0 = 8, W1 = 9, W2 = 10, W3 = 11;
/** Locals after the parameters (RANGES_END through W3). */
const EXTRA_LOCALS = 9;

const get = (local: number): number[] => [OP.localGet, local];
const set = (local: number) => [OP.localSet, local];
const i32 = (value: number) => [OP.i32Const, ...sleb(value)];
/** `i32.load offset=offset` (align 4; unaligned is allowed, only slower). */
const load = (offset: number) => [OP.i32Load, 2, ...uleb(offset)];

/** `table[k][index]` where the index is on the stack. */
function tableAt(k: number): number[] {
  // (i32.load offset=k*0x400 (i32.shl index 2))
  return [...i32(2), OP.i32Shl, ...load(k * TABLE_BYTES)];
}

/**
 * `table[k][(word >>> shift) & 0xFF]`, its byte offset computed as
 * `(word >>> (shift - 2)) & 0x3FC`: two instructions, not three (the
 * lookups are most of the loop's instructions; 3–4 % off a 128 B body).
 */
function lookup(k: number, word: number, shift: number): number[] {
  const index = shift === 0
    ? [...get(word), ...i32(2), OP.i32Shl, ...i32(0x3FC), OP.i32And]
    : shift === 24
    ? [...get(word), ...i32(24), OP.i32ShrU, ...i32(2), OP.i32Shl]
    : [...get(word), ...i32(shift - 2), OP.i32ShrU, ...i32(0x3FC), OP.i32And];
  return [...index, ...load(k * TABLE_BYTES)];
}

/** `block … end` (no result): `br 1` inside the loop below leaves it. */
function block(...body: number[][]): number[] {
  return [OP.block, OP.blockVoid, ...body.flat(), OP.end];
}

/** `loop … end` (no result): `br 0` inside goes back to its start. */
function loop(...body: number[][]): number[] {
  return [OP.loop, OP.blockVoid, ...body.flat(), OP.end];
}

/**
 * The body of `crcs(ranges, count, bias)`: for each of `count` triples at
 * `ranges` (body position, body length, CRC position; the positions plus
 * `bias` are the body's address here), the body's CRC-32 `& 0x7FFFFFFF`
 * replaces the triple's length. In the text form:
 *
 * ```
 * rangesEnd = ranges + count * 12
 * block loop                                  ;; each triple
 *   br_if 1 (ranges >= rangesEnd)
 *   p = load(ranges) + bias; end = p + load(ranges + 4)
 *   end16 = end - ((end - p) & 15); crc = -1
 *   block loop                                ;; 16 bytes a turn
 *     br_if 1 (p >= end16)
 *     w0 = load(p) ^ crc; w1 = load(p + 4); w2 = load(p + 8); w3 = load(p + 12)
 *     crc = T15[w0 & 0xFF] ^ T14[(w0 >>> 8) & 0xFF] ^ … ^ T0[w3 >>> 24]
 *     p += 16; br 0
 *   end end
 *   block loop                                ;; then 4 bytes a turn
 *     br_if 1 (end - p < 4)
 *     w0 = load(p) ^ crc
 *     crc = T3[w0 & 0xFF] ^ T2[(w0 >>> 8) & 0xFF] ^ T1[…] ^ T0[w0 >>> 24]
 *     p += 4; br 0
 *   end end
 *   block loop                                ;; the last 0–3 bytes
 *     br_if 1 (p >= end)
 *     crc = T0[(crc ^ load8_u(p)) & 0xFF] ^ (crc >>> 8); p += 1; br 0
 *   end end
 *   store(ranges + 4, ~crc & 0x7FFFFFFF); ranges += 12; br 0
 * end end
 * ```
 */
function crcsBody(): number[] {
  const words = [W0, W1, W2, W3];
  const fold: number[][] = [];
  for (let w = 0; w < 4; w++) {
    for (let b = 0; b < 4; b++) {
      fold.push(lookup(TABLE_COUNT - 1 - (4 * w + b), words[w]!, 8 * b));
      if (w + b > 0) fold.push([OP.i32Xor]);
    }
  }
  const exitIf = (a: number, b: number) => [...get(a), ...get(b), OP.i32GeU, OP.brIf, 1];
  const add = (
    local: number,
    value: number,
  ) => [...get(local), ...i32(value), OP.i32Add, ...set(local)];
  return [
    [...get(RANGES), ...get(COUNT), ...i32(12), OP.i32Mul, OP.i32Add, ...set(RANGES_END)],
    block(loop(
      exitIf(RANGES, RANGES_END),
      [...get(RANGES), ...load(0), ...get(BIAS), OP.i32Add, OP.localTee, P],
      [...get(RANGES), ...load(4), OP.i32Add, ...set(END)],
      [...get(END), ...get(END), ...get(P), OP.i32Sub, ...i32(15), OP.i32And, OP.i32Sub],
      [...set(END16), ...i32(-1), ...set(CRC)],
      block(loop(
        exitIf(P, END16),
        [...get(P), ...load(0), ...get(CRC), OP.i32Xor, ...set(W0)],
        [...get(P), ...load(4), ...set(W1), ...get(P), ...load(8), ...set(W2)],
        [...get(P), ...load(12), ...set(W3)],
        [...fold.flat(), ...set(CRC)],
        [...add(P, 16), OP.br, 0],
      )),
      // The last 0–15 bytes: whole words by 4 tables, then 0–3 bytes (a
      // 14–15-byte rest byte by byte, each lookup waiting for the one
      // before, took about 25 ns: a fifth of a 128 B body's CRC).
      block(loop(
        [...get(END), ...get(P), OP.i32Sub, ...i32(4), OP.i32LtU, OP.brIf, 1],
        [...get(P), ...load(0), ...get(CRC), OP.i32Xor, ...set(W0)],
        [...lookup(3, W0, 0), ...lookup(2, W0, 8), OP.i32Xor],
        [...lookup(1, W0, 16), ...lookup(0, W0, 24), OP.i32Xor, OP.i32Xor, ...set(CRC)],
        [...add(P, 4), OP.br, 0],
      )),
      block(loop(
        exitIf(P, END),
        [...get(CRC), ...get(P), OP.i32Load8U, 0, 0, OP.i32Xor, ...i32(0xFF), OP.i32And],
        [...tableAt(0), ...get(CRC), ...i32(8), OP.i32ShrU, OP.i32Xor, ...set(CRC)],
        [...add(P, 1), OP.br, 0],
      )),
      [...get(RANGES), ...get(CRC), ...i32(-1), OP.i32Xor, ...i32(0x7FFFFFFF), OP.i32And],
      [OP.i32Store, 2, 4],
      [...add(RANGES, 12), OP.br, 0],
    )),
    [OP.end],
  ].flat();
}

/** The module: one memory ("memory", 1 page) and `crcs(i32, i32, i32)`. */
function moduleBytes(): Uint8Array<ArrayBuffer> {
  const body = crcsBody();
  const locals = [1, ...uleb(EXTRA_LOCALS), OP.typeI32];
  const code = [...uleb(locals.length + body.length), ...locals, ...body];
  return new Uint8Array([
    0x00,
    0x61,
    0x73,
    0x6D,
    0x01,
    0x00,
    0x00,
    0x00, // "\0asm", version 1
    ...section(0x01, [1, OP.typeFunction, 3, OP.typeI32, OP.typeI32, OP.typeI32, 0]),
    ...section(0x03, [1, 0]),
    ...section(0x05, [1, 0x00, 1]),
    ...section(0x07, [2, ...name("memory"), 0x02, 0, ...name("crcs"), 0x00, 0]),
    ...section(0x0A, [1, ...code]),
  ]);
}

/** The writer over one instance of the module. */
class WasmBodyCrcWriter implements BodyCrcWriter {
  readonly name = "WebAssembly slicing-by-16 (batch) + node:zlib crc32";
  readonly bodyBytesMax = WASM_BODY_BYTES_MAX;
  readonly #memory: WebAssembly.Memory;
  readonly #crcs: (ranges: number, count: number, bias: number) => void;
  #bytes: Uint8Array;
  #words: Int32Array;

  constructor(
    memory: WebAssembly.Memory,
    crcs: (ranges: number, count: number, bias: number) => void,
  ) {
    this.#memory = memory;
    this.#crcs = crcs;
    this.#bytes = new Uint8Array(memory.buffer);
    this.#words = new Int32Array(memory.buffer);
    this.#words.set(crc32SliceTables(TABLE_COUNT));
  }

  write(bytes: Uint8Array, ranges: Int32Array, count: number): number {
    const length = bytes.length;
    // Runs of triples whose bodies are short and whose region fits one
    // call go to the module; a longer body is done here, between runs.
    let first = 0;
    let low = 0;
    let high = 0;
    for (let i = 0; i < count; i++) {
      const body = ranges[3 * i]!;
      const bodyBytes = ranges[3 * i + 1]!;
      const at = ranges[3 * i + 2]!;
      if (body < 0 || bodyBytes < 0 || body + bodyBytes > length || at < 0 || at + 4 > length) {
        if (i > first) this.#run(bytes, ranges, first, i, low, high);
        return i;
      }
      if (bodyBytes > WASM_BODY_BYTES_MAX) {
        if (i > first) this.#run(bytes, ranges, first, i, low, high);
        first = i + 1;
        writeInt32(bytes, at, bodyCrc(bytes, body, body + bodyBytes));
        continue;
      }
      if (i === first) {
        low = body;
        high = body + bodyBytes;
        continue;
      }
      const from = Math.min(low, body);
      const to = Math.max(high, body + bodyBytes);
      if (to - from > REGION_BYTES_MAX || i - first >= RUN_TRIPLES_MAX) {
        this.#run(bytes, ranges, first, i, low, high);
        first = i;
        low = body;
        high = body + bodyBytes;
      } else {
        low = from;
        high = to;
      }
    }
    if (count > first) this.#run(bytes, ranges, first, count, low, high);
    return -1;
  }

  /** Triples `[first, last)`, whose bodies lie in `bytes[low, high)`. */
  #run(
    bytes: Uint8Array,
    ranges: Int32Array,
    first: number,
    last: number,
    low: number,
    high: number,
  ): void {
    const count = last - first;
    const regionAt = RANGES_AT + 12 * count;
    const needBytes = regionAt + (high - low);
    if (needBytes > this.#bytes.length) {
      this.#memory.grow(Math.ceil((needBytes - this.#bytes.length) / PAGE_BYTES));
      this.#bytes = new Uint8Array(this.#memory.buffer);
      this.#words = new Int32Array(this.#memory.buffer);
    }
    const words = this.#words;
    words.set(ranges.subarray(3 * first, 3 * last), RANGES_AT / 4);
    this.#bytes.set(bytes.subarray(low, high), regionAt);
    this.#crcs(RANGES_AT, count, regionAt - low);
    // One checked store a CRC, not four.
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0, r = 3 * first + 2, w = RANGES_AT / 4 + 1; i < count; i++, r += 3, w += 3) {
      view.setInt32(ranges[r]!, words[w]!);
    }
  }
}

/**
 * Compiles the module and returns its writer.
 *
 * @returns The writer (one per process is enough).
 * @throws Where WebAssembly is missing or refuses the module.
 */
export function loadWasmBodyCrcWriter(): BodyCrcWriter {
  const module = new WebAssembly.Module(moduleBytes());
  const instance = new WebAssembly.Instance(module);
  const exports = instance.exports as {
    memory: WebAssembly.Memory;
    crcs: (ranges: number, count: number, bias: number) => void;
  };
  return new WasmBodyCrcWriter(exports.memory, exports.crcs);
}
