/**
 * A {@link BodyCrcWriter} in WebAssembly, for Node: CRC-32 over a copy of
 * the batch's records in the module's memory, 16 bodies side by side in
 * SIMD lanes and the rest by a slicing-by-16 table loop. A batch is done in
 * runs (split at a body past the limit, and where a run would hold more
 * records or triples than one call takes), each one copy and up to two
 * calls: the lanes, unless the run's bodies are too short for them, then
 * the table loop. Where WebAssembly has no SIMD (x64 without SSE4.1: QEMU's qemu64
 * and kvm64 CPU models), the module holds the table loop alone
 * ({@link WASM_TABLE_VARIANT}).
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
 * The 16-lane pass (`lanesBody`) takes the table loop's place for
 * whole groups of 16 bodies: byte j of the 16 bodies is one vector, and
 * each byte of CRC is 8 `i8x16.swizzle` lookups in nibble tables for all
 * 16 at once: about 1.5 operations a body byte against the table loop's
 * 5 instructions. The batch's CRCs, in one process against the table loop
 * alone (records 107 B longer than their bodies, 14 alternated rounds,
 * medians): 128 B 73.6 → 58.8 and 76.8 → 63.1 ns a body (two runs), 100 B
 * 60.1 → 51.6, 200 B 93.5 → 74.3, 256 B 119.9 → 90.4, 512 B 245 → 179,
 * 767 B 377 → 267, 64 B 42.2 → 39.6, lengths 128 ± 20 B 61.6 → 54.3;
 * from 40 B down the same within the spread (runs whose bodies average
 * under 32 B skip the pass). It is not faster still because V8 11.3
 * (Node 20) lowers each swizzle to two instructions and a constant's
 * address (`paddusb` then `pshufb`: the relaxed swizzle, one `pshufb`, is
 * not enabled there), and the 8 tables and 4 state vectors leave too few
 * of x64's 16 vector registers for the rest, so V8 spills (seen with
 * `--print-wasm-code`). Transposing each pair of columns just before its
 * steps (fewer vectors live) measured slower, 58 against 51 ns at 128 B,
 * and so did the nibble mask in a local instead of a constant each time,
 * 57–62 against 49–53 ns.
 *
 * Deno uses `node:zlib` (SIMD, about 30 ns a call for 128 B) and Bun
 * libdeflate (`_bun_crc32.ts`), both faster: this writer is installed on
 * Node only. Bodies past {@link WASM_BODY_BYTES_MAX} are left to
 * `node:zlib` one by one (its fixed cost is then the smaller part): the
 * batch encoder does not give them to a writer, and {@link
 * WasmBodyCrcWriter.write} does them with `bodyCrc` between runs.
 *
 * The module is assembled here from its instructions (their text form is
 * in the comments of `crcsBody` and `lanesBody`), not shipped as a binary:
 * there is no build step for it, and the bytes can be read.
 *
 * @module
 */

import { assert } from "../assert.ts";
import { bodyCrc, type BodyCrcWriter, crc32SliceTables } from "../record/crc32.ts";

/** Tables of slicing-by-16: 16 × 256 int32, table k at byte `k * 0x400`. */
const TABLE_COUNT = 0x10;
/** Bytes of one table. */
const TABLE_BYTES = 0x400;
/**
 * The nibble tables of the 16-lane pass (see {@link lanesBody}), after the
 * slicing tables: 8 × 16 bytes, `L0..L3` then `H0..H3`.
 */
const NIBBLES_AT = TABLE_COUNT * TABLE_BYTES;
/** Bytes of the nibble tables. */
const NIBBLES_BYTES = 0x80;
/**
 * Where the range triples are copied, after the nibble tables; a CRC state
 * a triple follows them, then the region.
 */
const RANGES_AT = NIBBLES_AT + NIBBLES_BYTES;
/** Bodies the 16-lane pass does side by side. */
const LANES = 0x10;
/** Least average body length for which a run takes the 16-lane pass. */
const LANES_BODY_BYTES_MIN = 0x20;
/** A WebAssembly page. */
const PAGE_BYTES = 0x10000;
// The pass puts body k in byte lane k of a v128 and transposes 16 rows in
// log2(16) = 4 rounds; the constructor writes the tables into the module's
// first page, before any growth.
assert(LANES === 0x10, "wasm crc32: the lanes must be a v128's 16 bytes");
assert(RANGES_AT <= PAGE_BYTES, "wasm crc32: the tables must fit the module's first page");
/**
 * Longest body worth copying into the module of the table loop alone
 * ({@link WASM_TABLE_VARIANT}). Measured on Node 20 (CPU a body, a
 * batch's CRCs through this writer against `wholeBodyCrc`, which calls
 * `node:zlib`): 256 B 175 against 333 ns, 384 B 254 / 393, 512 B 330 /
 * 481, 768 B 478 / 502, 1 KiB 642 / 640, 2 KiB 1291 / 995.
 */
export const WASM_TABLE_BODY_BYTES_MAX = 0x2FF;
/**
 * Longest body worth copying into the module with the 16-lane pass
 * ({@link WASM_LANES_VARIANT}). Measured on Node 20 (wall time a body,
 * records 107 B past their bodies, medians of 10 rounds, `node:zlib` given
 * each whole body): 767 B 265 / 294 and 312 / 392, 1 KiB 366 / 444, 373 / 416,
 * 403 / 491, 400 / 457, 1280 B 470 / 410, 474 / 419, 514 / 464, 508 / 468,
 * 1536 B 598 / 553, 2 KiB 774 / 652: the module wins up to about 1.15 KiB,
 * past which `node:zlib`'s SIMD makes up for its fixed cost a call.
 *
 * These are batches of one body length. The lanes take a group of 16
 * bodies only as far as its shortest body (rounded down to 16 B), and the
 * table loop does the rest of each, so in groups of mixed lengths the long
 * bodies cost about the table loop's figures above: about level with
 * `node:zlib` at 1 KiB and a little behind it up to this limit (not
 * measured on mixed groups).
 */
export const WASM_BODY_BYTES_MAX = 0x47F;
/**
 * Most bytes one call copies in (records from the first body to the end of
 * the last); a batch with more is done in several calls.
 */
export const REGION_BYTES_MAX = 0x40_0000;
/** Most triples one call takes (their copy precedes the region). */
export const RUN_TRIPLES_MAX = 0x1_0000;

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
  select: 0x1B,
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

/** Parameters of `crcs` and of `lanes` (the locals before the others). */
const PARAMS = 4;
// Locals of `crcs(ranges, count, bias, states)`: the parameters, then the rest.
const RANGES = 0, COUNT = 1, BIAS = 2, STATES = 3, RANGES_END = 4, P = 5, END = 6, END16 = 7;
const CRC = 8, W0 = 9, W1 = 10, W2 = 11, W3 = 12;
/** Locals after the parameters (RANGES_END through W3). */
const EXTRA_LOCALS = W3 + 1 - PARAMS;

/** `local.get` of a local index (a LEB128, one byte below 0x80). */
const get = (local: number): number[] => [OP.localGet, ...uleb(local)];
/** `local.set` of a local index. */
const set = (local: number) => [OP.localSet, ...uleb(local)];
/** `local.tee` of a local index. */
const tee = (local: number) => [OP.localTee, ...uleb(local)];
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
 * The body of `crcs(ranges, count, bias, states)`: for each of `count`
 * triples at `ranges` (body position, body length, CRC position; the
 * positions plus `bias` are the body's address here), going on from the
 * CRC state at `states` (one word a triple: -1 for a body not begun, or
 * where the 16-lane pass left it), the body's CRC-32 `& 0x7FFFFFFF`
 * replaces the triple's length. In the text form:
 *
 * ```
 * rangesEnd = ranges + count * 12
 * block loop                                  ;; each triple
 *   br_if 1 (ranges >= rangesEnd)
 *   p = load(ranges) + bias; end = p + load(ranges + 4)
 *   end16 = end - ((end - p) & 15); crc = load(states)
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
 *   store(ranges + 4, ~crc & 0x7FFFFFFF); ranges += 12; states += 4; br 0
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
      [...get(RANGES), ...load(0), ...get(BIAS), OP.i32Add, ...tee(P)],
      [...get(RANGES), ...load(4), OP.i32Add, ...set(END)],
      [...get(END), ...get(END), ...get(P), OP.i32Sub, ...i32(15), OP.i32And, OP.i32Sub],
      [...set(END16), ...get(STATES), ...load(0), ...set(CRC)],
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
      [...add(RANGES, 12), ...add(STATES, 4), OP.br, 0],
    )),
    [OP.end],
  ].flat();
}

// Locals of `lanes(ranges, groups, bias, states)`: the parameters, then
// i32 locals (a pointer a lane), then v128 locals.
const L_RANGES = 0, L_GROUPS = 1, L_BIAS = 2, L_STATES = 3, L_RANGES_END = 4, L_N = 5;
const L_OFF = 6, L_LEN = 7, L_P0 = 8;
/** i32 locals after the parameters (L_RANGES_END through the lane pointers). */
const L_I32_LOCALS = L_P0 + LANES - PARAMS;
/** The CRC state, byte-sliced: `C[j]`'s lane k is byte j of body k's state. */
const L_C0 = L_P0 + LANES;
/** Nibble tables: `L[j]` (low nibble) at L_T + j, `H[j]` at L_T + 4 + j. */
const L_T = L_C0 + 4, L_X = L_T + 8, L_LO = L_X + 1, L_HI = L_LO + 1;
/** Four sets of 16 (the loaded rows and three rounds of the transpose), then the columns. */
const L_ROWS = L_HI + 1;
const L_COLUMNS = L_ROWS + 4 * LANES;
/** v128 locals. */
const L_V128_LOCALS = L_COLUMNS + LANES - L_C0;

/** The SIMD instructions used (after the 0xFD prefix). */
const SIMD = {
  prefix: 0xFD,
  load: 0x00,
  store: 0x0B,
  const: 0x0C,
  shuffle: 0x0D,
  swizzle: 0x0E,
  and: 0x4E,
  xor: 0x51,
  i16x8ShrU: 0x8D,
  typeV128: 0x7B,
} as const;

/** A SIMD instruction: the prefix, the opcode (a LEB128), its immediates. */
const simd = (op: number, ...immediates: number[]) => [SIMD.prefix, ...uleb(op), ...immediates];
/** `v128.load offset=offset` (align 1: bodies start anywhere). */
const vload = (offset: number) => simd(SIMD.load, 0, ...uleb(offset));
/** `v128.store offset=offset` (align 1). */
const vstore = (offset: number) => simd(SIMD.store, 0, ...uleb(offset));
/** `i8x16.shuffle` of the locals `a` and `b` (lanes 16–31 are `b`'s). */
const shuffle = (a: number, b: number, lanes: number[]) => [
  ...get(a),
  ...get(b),
  ...simd(SIMD.shuffle, ...lanes),
];

/** `v128.const` of 16 bytes 0x0F. */
const NIBBLE_MASK = simd(SIMD.const, ...new Array(0x10).fill(0x0F));

/** Bytes 0–7 of a vector, for {@link interleave}. */
const LOW_HALF = 0;
/** Bytes 8–15 of a vector, for {@link interleave}. */
const HIGH_HALF = 1;

/**
 * Shuffle lanes interleaving one half (bytes 0–7 or 8–15) of two vectors
 * in units of `unit` bytes: `[a0, b0, a1, b1, …]`.
 */
function interleave(unit: number, half: typeof LOW_HALF | typeof HIGH_HALF): number[] {
  const lanes: number[] = [];
  for (let i = 0; i < 0x10 / (2 * unit); i++) {
    const from = half * 8 + i * unit;
    for (let k = 0; k < unit; k++) lanes.push(from + k);
    for (let k = 0; k < unit; k++) lanes.push(0x10 + from + k);
  }
  return lanes;
}

/**
 * The body of `lanes(ranges, groups, bias, states)`, a CRC pass over 16
 * bodies side by side: for each of `groups` runs of 16 triples at
 * `ranges` (as in {@link crcsBody}), the CRC-32 states of the 16 bodies
 * over their first `n` bytes, `n` the shortest body's length rounded down
 * to 16, go to `states` (16 words a group), and each triple is moved on by
 * `n` bytes (position + n, length - n) for `crcs` to finish.
 *
 * Lane k of a vector holds body k: the 16 bodies' next 16 bytes are
 * loaded (a row a body) and transposed by four rounds of interleaving
 * shuffles into 16 columns (column j: byte j of every body), and each
 * column steps the byte-sliced states `C0..C3` (`Cj`'s lane k is byte j
 * of body k's state) by one byte of CRC-32 as `crc = T[(crc ^ b) & 0xFF] ^
 * (crc >>> 8)` does, with `T[x] = T[x & 0x0F] ^ T[x & 0xF0]` (the table is
 * linear) looked up by `i8x16.swizzle` in 16-byte tables a nibble and a
 * byte of the result:
 *
 * ```
 * x = C0 ^ column; lo = x & 0x0F; hi = (x >>> 4) & 0x0F
 * C0 = C1 ^ swizzle(L0, lo) ^ swizzle(H0, hi)      ;; Lj[n] = byte j of T[n]
 * C1 = C2 ^ swizzle(L1, lo) ^ swizzle(H1, hi)      ;; Hj[n] = byte j of T[n << 4]
 * C2 = C3 ^ swizzle(L2, lo) ^ swizzle(H2, hi)
 * C3 = swizzle(L3, lo) ^ swizzle(H3, hi)
 * ```
 *
 * `x >>> 4` is `i16x8.shr_u` (WebAssembly has no byte shift): each byte
 * gets the low bits of its neighbour in its top nibble, which the 0x0F
 * mask then drops, so `hi` is right only because of the mask. The whole
 * function in the text form:
 *
 * ```
 * rangesEnd = ranges + groups * 192
 * T0..T7 = v128.load(NIBBLES_AT + 16 * t)       ;; L0..L3, then H0..H3
 * block loop                                    ;; each group of 16 triples
 *   br_if 1 (ranges >= rangesEnd)
 *   p0 = load(ranges) + bias; n = load(ranges + 4)
 *   p1 = load(ranges + 12) + bias; len = load(ranges + 16)
 *   n = select(n, len, n < len)                 ;; the running minimum
 *   …                                           ;; and so for bodies 2..15
 *   n &= -16                                    ;; whole columns of 16 only
 *   C0 = C1 = C2 = C3 = i8x16.splat(0xFF); off = 0
 *   block loop                                  ;; 16 bytes of each body a turn
 *     br_if 1 (off >= n)
 *     R0[k] = v128.load(pk + off)               ;; k = 0..15: row k is body k
 *     ;; the transpose, rounds r = 0..3 (unit u = 2^r bytes): each pair of
 *     ;; vectors (a, b) of round r becomes, in round r + 1, the shuffles
 *     ;; interleaving a's and b's low halves by u bytes and their high halves
 *     R1 = interleave(R0, 1); R2 = interleave(R1, 2); R3 = interleave(R2, 4)
 *     column[0..15] = interleave(R3, 8)         ;; column j: byte j of each body
 *     the step above, for column 0, then 1, …, 15
 *     off += 16; br 0
 *   end end
 *   ;; the state store: bytes j of each state side by side, then words
 *   A = shuffle(C0, C1: low halves by bytes); B = (C0, C1: high halves)
 *   C = shuffle(C2, C3: low halves by bytes); D = (C2, C3: high halves)
 *   v128.store(states, (A, C: low halves by 2 bytes))       ;; bodies 0–3
 *   v128.store(states + 16, (A, C: high halves by 2 bytes)) ;; bodies 4–7
 *   v128.store(states + 32, (B, D: low halves by 2 bytes))  ;; bodies 8–11
 *   v128.store(states + 48, (B, D: high halves by 2 bytes)) ;; bodies 12–15
 *   ;; the triple update, k = 0..15
 *   store(ranges + 12k, load(ranges + 12k) + n)
 *   store(ranges + 12k + 4, load(ranges + 12k + 4) - n)
 *   ranges += 192; states += 64; br 0
 * end end
 * ```
 *
 * With the loads and the transpose, about 24 operations a column of 16
 * body bytes, 1.5 a body byte, where the table loop takes 5 instructions
 * a byte (see {@link crcsBody}); V8 makes about 3.5 x64 instructions a
 * body byte of them (see the module doc).
 */
function lanesBody(): number[] {
  const rows = (stage: number, k: number) => L_ROWS + stage * LANES + k;
  const out: number[][] = [];
  // rangesEnd = ranges + groups * 16 * 12; the tables into locals.
  out.push([...get(L_RANGES), ...get(L_GROUPS), ...i32(LANES * 12), OP.i32Mul, OP.i32Add]);
  out.push(set(L_RANGES_END));
  for (let t = 0; t < 8; t++) {
    out.push([...i32(NIBBLES_AT + 0x10 * t), ...vload(0), ...set(L_T + t)]);
  }
  const group: number[][] = [];
  group.push([...get(L_RANGES), ...get(L_RANGES_END), OP.i32GeU, OP.brIf, 1]);
  // The lanes' body addresses and the shortest length, rounded down to 16.
  group.push([...get(L_RANGES), ...load(0), ...get(L_BIAS), OP.i32Add, ...set(L_P0)]);
  group.push([...get(L_RANGES), ...load(4), ...set(L_N)]);
  for (let k = 1; k < LANES; k++) {
    group.push([...get(L_RANGES), ...load(12 * k), ...get(L_BIAS), OP.i32Add, ...set(L_P0 + k)]);
    group.push([...get(L_RANGES), ...load(12 * k + 4), ...set(L_LEN)]);
    // n = n < len ? n : len
    group.push([...get(L_N), ...get(L_LEN), ...get(L_N), ...get(L_LEN), OP.i32LtU, OP.select]);
    group.push(set(L_N));
  }
  group.push([...get(L_N), ...i32(-0x10), OP.i32And, ...set(L_N)]);
  for (let j = 0; j < 4; j++) {
    group.push([...simd(SIMD.const, ...new Array(0x10).fill(0xFF)), ...set(L_C0 + j)]);
  }
  group.push([...i32(0), ...set(L_OFF)]);
  const block16: number[][] = [];
  block16.push([...get(L_OFF), ...get(L_N), OP.i32GeU, OP.brIf, 1]);
  for (let k = 0; k < LANES; k++) {
    block16.push([...get(L_P0 + k), ...get(L_OFF), OP.i32Add, ...vload(0), ...set(rows(0, k))]);
  }
  // Transpose: interleave rows 2i and 2i+1 by bytes, then by 2, 4, 8 bytes.
  // After round r, vector (i, h) of the 2^(r+1) rows of set i holds, for
  // each byte j of its part, those rows' bytes j side by side.
  for (let round = 0; round < 4; round++) {
    const unit = 1 << round;
    const sets = LANES >> (round + 1);
    const parts = 1 << round;
    for (let i = 0; i < sets; i++) {
      for (let h = 0; h < parts; h++) {
        const a = rows(round, (2 * i) * parts + h);
        const b = rows(round, (2 * i + 1) * parts + h);
        const target = i * 2 * parts + 2 * h;
        const to = (k: number) => round === 3 ? L_COLUMNS + k : rows(round + 1, k);
        block16.push([...shuffle(a, b, interleave(unit, LOW_HALF)), ...set(to(target))]);
        block16.push([...shuffle(a, b, interleave(unit, HIGH_HALF)), ...set(to(target + 1))]);
      }
    }
  }
  for (let j = 0; j < LANES; j++) {
    block16.push([...get(L_C0), ...get(L_COLUMNS + j), ...simd(SIMD.xor), ...tee(L_X)]);
    // The mask a constant each time, not a local: see the module doc.
    block16.push([...NIBBLE_MASK, ...simd(SIMD.and), ...set(L_LO)]);
    block16.push([...get(L_X), ...i32(4), ...simd(SIMD.i16x8ShrU), ...NIBBLE_MASK]);
    block16.push([...simd(SIMD.and), ...set(L_HI)]);
    for (let c = 0; c < 4; c++) {
      const looked = [
        ...get(L_T + c),
        ...get(L_LO),
        ...simd(SIMD.swizzle),
        ...get(L_T + 4 + c),
        ...get(L_HI),
        ...simd(SIMD.swizzle),
        ...simd(SIMD.xor),
      ];
      block16.push(c < 3 ? [...get(L_C0 + c + 1), ...looked, ...simd(SIMD.xor)] : looked);
      block16.push(set(L_C0 + c));
    }
  }
  block16.push([...get(L_OFF), ...i32(0x10), OP.i32Add, ...set(L_OFF), OP.br, 0]);
  group.push(block(loop(...block16)));
  // The states, a word a lane: interleave C0/C1 and C2/C3 by bytes, then
  // the two by 2 bytes (rows(0, …) are free now).
  group.push([...shuffle(L_C0, L_C0 + 1, interleave(1, LOW_HALF)), ...set(rows(0, 0))]);
  group.push([...shuffle(L_C0, L_C0 + 1, interleave(1, HIGH_HALF)), ...set(rows(0, 1))]);
  group.push([...shuffle(L_C0 + 2, L_C0 + 3, interleave(1, LOW_HALF)), ...set(rows(0, 2))]);
  group.push([...shuffle(L_C0 + 2, L_C0 + 3, interleave(1, HIGH_HALF)), ...set(rows(0, 3))]);
  for (let q = 0; q < 4; q++) {
    // States 4q..4q+3: words from rows(0, q >> 1) and rows(0, 2 + (q >> 1)).
    const from = q >> 1;
    const half = q % 2 === 0 ? LOW_HALF : HIGH_HALF;
    group.push([
      ...get(L_STATES),
      ...shuffle(rows(0, from), rows(0, 2 + from), interleave(2, half)),
      ...vstore(0x10 * q),
    ]);
  }
  // Each triple moves on by n bytes.
  for (let k = 0; k < LANES; k++) {
    group.push([...get(L_RANGES), ...get(L_RANGES), ...load(12 * k), ...get(L_N), OP.i32Add]);
    group.push([OP.i32Store, 2, ...uleb(12 * k)]);
    group.push([...get(L_RANGES), ...get(L_RANGES), ...load(12 * k + 4), ...get(L_N), OP.i32Sub]);
    group.push([OP.i32Store, 2, ...uleb(12 * k + 4)]);
  }
  group.push([...get(L_RANGES), ...i32(LANES * 12), OP.i32Add, ...set(L_RANGES)]);
  group.push([...get(L_STATES), ...i32(LANES * 4), OP.i32Add, ...set(L_STATES), OP.br, 0]);
  out.push(block(loop(...group)));
  out.push([OP.end]);
  return out.flat();
}

/** A function's code entry: its locals (count, type pairs), then its body. */
function functionCode(locals: number[][], body: number[]): number[] {
  const declared = [...uleb(locals.length), ...locals.flat()];
  return [...uleb(declared.length + body.length), ...declared, ...body];
}

/**
 * A function the module can hold, all `(ranges, count, bias, states)`:
 * `crcs` (the table loop, see {@link crcsBody}) and `lanes` (the 16-lane
 * pass, see {@link lanesBody}, which needs WebAssembly SIMD).
 */
export type WasmCrcPass = "crcs" | "lanes";

/** A build of the module: the passes it holds and its writer's figures. */
export interface WasmCrcVariant {
  /** The module's functions, exported under these names. */
  readonly passes: readonly WasmCrcPass[];
  /** The writer's name, as `crc32Implementation()` reports it. */
  readonly name: string;
  /** Longest body the writer takes (its `bodyBytesMax`). */
  readonly bodyBytesMax: number;
}

/**
 * The table loop alone, for hosts without WebAssembly SIMD (x64 without
 * SSE4.1, e.g. QEMU's qemu64 and kvm64 CPU models, or Node's
 * `--no-enable-sse4-1`), where the module with the lanes does not compile.
 */
export const WASM_TABLE_VARIANT: WasmCrcVariant = {
  passes: ["crcs"],
  name: "WebAssembly slicing-by-16 (batch) + node:zlib crc32",
  bodyBytesMax: WASM_TABLE_BODY_BYTES_MAX,
};

/** The 16-lane pass, then the table loop for the rest. */
export const WASM_LANES_VARIANT: WasmCrcVariant = {
  passes: ["crcs", "lanes"],
  name: "WebAssembly 16-lane SIMD + slicing-by-16 (batch) + node:zlib crc32",
  bodyBytesMax: WASM_BODY_BYTES_MAX,
};

/**
 * Modules assembled so far, by their passes joined with commas: the host
 * check ({@link wasmCrcVariant}) and the load then share one assembly.
 */
const assembled = new Map<string, Uint8Array<ArrayBuffer>>();

/**
 * The module holding `passes`: one memory ("memory", 1 page), then each
 * pass as a function `(i32, i32, i32, i32)` exported under its name.
 * Assembled once per list of passes (callers only read the bytes).
 */
function moduleBytes(passes: readonly WasmCrcPass[]): Uint8Array<ArrayBuffer> {
  const key = passes.join(",");
  let bytes = assembled.get(key);
  if (bytes === undefined) {
    bytes = assembleModule(passes);
    assembled.set(key, bytes);
  }
  return bytes;
}

/** Assembles the module of {@link moduleBytes}. */
function assembleModule(passes: readonly WasmCrcPass[]): Uint8Array<ArrayBuffer> {
  const code = passes.map((pass) =>
    pass === "crcs"
      ? functionCode([[...uleb(EXTRA_LOCALS), OP.typeI32]], crcsBody())
      : functionCode(
        [[...uleb(L_I32_LOCALS), OP.typeI32], [...uleb(L_V128_LOCALS), SIMD.typeV128]],
        lanesBody(),
      )
  );
  const type = [OP.typeFunction, PARAMS, OP.typeI32, OP.typeI32, OP.typeI32, OP.typeI32, 0];
  return new Uint8Array([
    0x00,
    0x61,
    0x73,
    0x6D,
    0x01,
    0x00,
    0x00,
    0x00, // "\0asm", version 1
    ...section(0x01, [1, ...type]),
    // Every function of type 0.
    ...section(0x03, [...uleb(passes.length), ...passes.map(() => 0)]),
    ...section(0x05, [1, 0x00, 1]),
    ...section(0x07, [
      ...uleb(1 + passes.length),
      ...name("memory"),
      0x02,
      0,
      ...passes.flatMap((pass, index) => [...name(pass), 0x00, ...uleb(index)]),
    ]),
    ...section(0x0A, [...uleb(passes.length), ...code.flat()]),
  ]);
}

/**
 * The variant this host runs: the lanes where `validate` accepts their
 * module (WebAssembly SIMD is there), else the table loop alone.
 *
 * @param validate Whether the host compiles a module (by default
 *   `WebAssembly.validate`; tests give their own).
 * @returns {@link WASM_LANES_VARIANT} or {@link WASM_TABLE_VARIANT}.
 */
export function wasmCrcVariant(
  validate: (bytes: Uint8Array<ArrayBuffer>) => boolean = (bytes) => WebAssembly.validate(bytes),
): WasmCrcVariant {
  return validate(moduleBytes(WASM_LANES_VARIANT.passes)) ? WASM_LANES_VARIANT : WASM_TABLE_VARIANT;
}

/**
 * `crcs` or `lanes` of the module: `(ranges, count, bias, states)`, with
 * `count` the triples for `crcs` and the groups of 16 for `lanes` (see
 * {@link crcsBody} and {@link lanesBody}).
 */
type WasmPass = (ranges: number, count: number, bias: number, states: number) => void;

/** The writer over one instance of the module. */
class WasmBodyCrcWriter implements BodyCrcWriter {
  /** The variant's name. */
  readonly name: string;
  /** The variant's longest body; longer ones are done by `bodyCrc`. */
  readonly bodyBytesMax: number;
  /** The module's memory: tables, then each call's triples, states and region. */
  readonly #memory: WebAssembly.Memory;
  /** The table loop. */
  readonly #crcs: WasmPass;
  /** The 16-lane pass, absent from the table-only variant. */
  readonly #lanes: WasmPass | undefined;
  /** Views of the memory, made again when it grows. */
  #bytes: Uint8Array;
  #words: Int32Array;

  constructor(
    variant: WasmCrcVariant,
    memory: WebAssembly.Memory,
    crcs: WasmPass,
    lanes: WasmPass | undefined,
  ) {
    this.name = variant.name;
    this.bodyBytesMax = variant.bodyBytesMax;
    this.#memory = memory;
    this.#crcs = crcs;
    this.#lanes = lanes;
    this.#bytes = new Uint8Array(memory.buffer);
    this.#words = new Int32Array(memory.buffer);
    const tables = crc32SliceTables(TABLE_COUNT);
    this.#words.set(tables);
    // Lj[n] = byte j of T[n], Hj[n] = byte j of T[n << 4] (see lanesBody).
    for (let j = 0; j < 4; j++) {
      for (let n = 0; n < 0x10; n++) {
        this.#bytes[NIBBLES_AT + 0x10 * j + n] = tables[n]! >>> (8 * j);
        this.#bytes[NIBBLES_AT + 0x40 + 0x10 * j + n] = tables[n << 4]! >>> (8 * j);
      }
    }
  }

  write(bytes: Uint8Array, ranges: Int32Array, count: number): number {
    const length = bytes.length;
    const bodyBytesMax = this.bodyBytesMax;
    // Runs of triples whose bodies are short and whose region fits one
    // call go to the module; a longer body is done here, between runs.
    let first = 0;
    let low = 0;
    let high = 0;
    // Body bytes of the run so far (see #run).
    let total = 0;
    for (let i = 0; i < count; i++) {
      const body = ranges[3 * i]!;
      const bodyBytes = ranges[3 * i + 1]!;
      const at = ranges[3 * i + 2]!;
      if (body < 0 || bodyBytes < 0 || body + bodyBytes > length || at < 0 || at + 4 > length) {
        if (i > first) this.#run(bytes, ranges, first, i, low, high, total);
        return i;
      }
      if (bodyBytes > bodyBytesMax) {
        if (i > first) this.#run(bytes, ranges, first, i, low, high, total);
        first = i + 1;
        writeInt32(bytes, at, bodyCrc(bytes, body, body + bodyBytes));
        continue;
      }
      if (i === first) {
        low = body;
        high = body + bodyBytes;
        total = bodyBytes;
        continue;
      }
      const from = Math.min(low, body);
      const to = Math.max(high, body + bodyBytes);
      if (to - from > REGION_BYTES_MAX || i - first >= RUN_TRIPLES_MAX) {
        this.#run(bytes, ranges, first, i, low, high, total);
        first = i;
        low = body;
        high = body + bodyBytes;
        total = bodyBytes;
      } else {
        low = from;
        high = to;
        total += bodyBytes;
      }
    }
    if (count > first) this.#run(bytes, ranges, first, count, low, high, total);
    return -1;
  }

  /**
   * Triples `[first, last)`, whose bodies lie in `bytes[low, high)` and
   * add up to `total` bytes.
   */
  #run(
    bytes: Uint8Array,
    ranges: Int32Array,
    first: number,
    last: number,
    low: number,
    high: number,
    total: number,
  ): void {
    const count = last - first;
    const statesAt = RANGES_AT + 12 * count;
    const regionAt = statesAt + 4 * count;
    const needBytes = regionAt + (high - low);
    if (needBytes > this.#bytes.length) {
      this.#memory.grow(Math.ceil((needBytes - this.#bytes.length) / PAGE_BYTES));
      this.#bytes = new Uint8Array(this.#memory.buffer);
      this.#words = new Int32Array(this.#memory.buffer);
    }
    const words = this.#words;
    words.set(ranges.subarray(3 * first, 3 * last), RANGES_AT / 4);
    this.#bytes.set(bytes.subarray(low, high), regionAt);
    // Whole groups of 16 bodies go through the 16-lane pass first, which
    // leaves their states; the others start from -1. Bodies under 32 B on
    // average are left to the table loop: the pass would take
    // at most one column block of them, and its cost a group (about 2 ns a
    // body) made 8–20 B bodies 1–2 ns slower than the table loop alone.
    const lanes = this.#lanes;
    const groups = lanes !== undefined && total >= LANES_BODY_BYTES_MIN * count
      ? Math.floor(count / LANES)
      : 0;
    const bias = regionAt - low;
    if (groups > 0) lanes!(RANGES_AT, groups, bias, statesAt);
    words.fill(-1, statesAt / 4 + groups * LANES, statesAt / 4 + count);
    this.#crcs(RANGES_AT, count, bias, statesAt);
    // One checked store a CRC, not four.
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0, r = 3 * first + 2, w = RANGES_AT / 4 + 1; i < count; i++, r += 3, w += 3) {
      view.setInt32(ranges[r]!, words[w]!);
    }
  }
}

/**
 * Compiles the module of a variant and returns its writer.
 *
 * @param variant The passes (by default the one {@link wasmCrcVariant}
 *   picks for this host).
 * @returns The writer (one per process is enough).
 * @throws Where WebAssembly is missing or refuses the module.
 */
export function loadWasmBodyCrcWriter(
  variant: WasmCrcVariant = wasmCrcVariant(),
): BodyCrcWriter {
  const module = new WebAssembly.Module(moduleBytes(variant.passes));
  const instance = new WebAssembly.Instance(module);
  const exports = instance.exports as {
    memory: WebAssembly.Memory;
    crcs: WasmPass;
    lanes?: WasmPass;
  };
  return new WasmBodyCrcWriter(variant, exports.memory, exports.crcs, exports.lanes);
}
