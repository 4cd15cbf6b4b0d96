/**
 * The native {@link BodyCrcWriter} on Bun: libdeflate's CRC-32 (PCLMUL on
 * x86_64, the ARMv8 CRC instructions on arm64), looped over a batch's
 * bodies by {@link BODY_CRCS_SOURCE}, which `bun:ffi`'s built-in TinyCC
 * compiles at load (no compiler or network needed; 13–15 ms, once per
 * process, in the first `createPort()`). The C source is a string here, not
 * a `.c` file, so that it ships with every build of the package (the npm
 * build emits only `.js`); TinyCC reads it from a temporary file.
 *
 * Why (`bench/record_bench.ts`, group "crc32 batch"; Bun 1.4.5, this
 * machine, medians of 7 rounds): `node:zlib`'s `crc32` of a 128 B body is
 * 65–75 ns, nearly all of it the call's fixed cost; a `bun:ffi` call to
 * libdeflate by address is 45–52 ns; the loop below, one crossing per
 * 1000 bodies, is 23–27 ns a body. TinyCC does not optimise, so the CRC
 * itself stays in libdeflate: the slicing-by-8 table compiled by TinyCC
 * took 175–180 ns for 128 B. The system zlib's `crc32` has no SIMD (about
 * 150 ns for 128 B) and is not used.
 *
 * Where libdeflate (`libdeflate.so.0`, Debian's `libdeflate0`) or TinyCC is
 * missing, or the temporary file cannot be written, {@link loadBunBodyCrcWriter} throws and the store
 * computes CRCs in JavaScript, as before.
 *
 * @module
 */

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import type { BodyCrcWriter } from "../record/crc32.ts";
import { isAlive } from "./_fs_port.ts";

/** The library, by soname (libdeflate 1.x keeps ABI 0). */
const LIBDEFLATE_PATH = "libdeflate.so.0";

/**
 * The batch loop. Each call of a native CRC from JavaScript has a fixed
 * cost that dominates a 128 B body; this pays one crossing per batch.
 * TinyCC does not optimise, so the CRC itself is never written here: the
 * loop only walks the triples `(bodyPosition, bodyLength, crcPosition)`,
 * checks each lies inside `base[0, length)` (returning the index of the
 * first that does not, before touching memory), and stores the CRC-32 of
 * the body `& 0x7FFFFFFF` (RocketMQ's bodyCrc) big-endian at crcPosition.
 */
const BODY_CRCS_SOURCE = `#include <stdint.h>
#include <stddef.h>

typedef uint32_t (*crc32_function)(uint32_t crc, const void *bytes, size_t length);

int32_t mqstore_body_crcs(void *crc32, uint8_t *base, int64_t length, const int32_t *ranges,
                          int32_t count) {
  crc32_function f = (crc32_function)crc32;
  for (int32_t i = 0; i < count; i++) {
    int64_t body = ranges[3 * i];
    int64_t bytes = ranges[3 * i + 1];
    int64_t at = ranges[3 * i + 2];
    if (body < 0 || bytes < 0 || body + bytes > length || at < 0 || at + 4 > length) return i;
    uint32_t crc = f(0, base + body, (size_t)bytes) & 0x7FFFFFFFu;
    uint8_t *out = base + at;
    out[0] = (uint8_t)(crc >> 24);
    out[1] = (uint8_t)(crc >> 16);
    out[2] = (uint8_t)(crc >> 8);
    out[3] = (uint8_t)crc;
  }
  return -1;
}
`;

/** The part of `bun:ffi` this file uses. */
interface BunCrcFfi {
  dlopen(
    path: string,
    symbols: Record<string, { args: string[]; returns: string }>,
  ): { symbols: { libdeflate_crc32: { readonly ptr: number } } };
  cc(options: {
    source: string;
    symbols: Record<string, { args: string[]; returns: string }>;
  }): {
    symbols: {
      mqstore_body_crcs(
        crc32: number,
        bytes: Uint8Array,
        length: number,
        ranges: Int32Array,
        count: number,
      ): number;
    };
  };
}

/**
 * Compiles the batch CRC loop and binds it to libdeflate.
 *
 * @example
 * ```ts ignore
 * import { loadBunBodyCrcWriter } from "./_bun_crc32.ts";
 *
 * const writer = await loadBunBodyCrcWriter(); // Bun only
 * console.log(writer.name);
 * ```
 *
 * @returns The writer.
 * @throws {Error} Off Bun, or where libdeflate, TinyCC or the C source is missing.
 */
export async function loadBunBodyCrcWriter(): Promise<BodyCrcWriter> {
  if ((globalThis as { Bun?: unknown }).Bun === undefined) {
    throw new Error("The bun:ffi CRC writer needs Bun");
  }
  // A variable specifier keeps deno check (which has no Bun types) from
  // resolving bun:ffi.
  const specifier = "bun:ffi";
  const ffi = await import(specifier) as BunCrcFfi;
  const libdeflate = ffi.dlopen(LIBDEFLATE_PATH, {
    libdeflate_crc32: { args: ["u32", "ptr", "usize"], returns: "u32" },
  });
  const crc32Address = libdeflate.symbols.libdeflate_crc32.ptr;
  if (!(typeof crc32Address === "number" && crc32Address !== 0)) {
    throw new Error(`${LIBDEFLATE_PATH}: libdeflate_crc32 has no address`);
  }
  removeOrphanedCompileDirectories(os.tmpdir());
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), `${CC_DIRECTORY_PREFIX}${process.pid}-`));
  let compiled: ReturnType<BunCrcFfi["cc"]>;
  try {
    const source = path.join(directory, "body_crcs.c");
    fs.writeFileSync(source, BODY_CRCS_SOURCE);
    compiled = ffi.cc({
      source,
      symbols: {
        mqstore_body_crcs: { args: ["ptr", "ptr", "i64", "ptr", "i32"], returns: "i32" },
      },
    });
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
  const bodyCrcs = compiled.symbols.mqstore_body_crcs;
  return {
    name: `${LIBDEFLATE_PATH} libdeflate_crc32, one bun:ffi call a batch`,
    write(bytes: Uint8Array, ranges: Int32Array, count: number): number {
      // The library and the compiled code stay reachable through this
      // closure for as long as the writer is installed.
      void libdeflate;
      void compiled;
      // An empty array may be passed as a null pointer: no triple fits in
      // it, and the C side checks each one before touching memory.
      return count === 0 ? -1 : bodyCrcs(crc32Address, bytes, bytes.length, ranges, count);
    },
  };
}

/** Start of the name of the directory a process compiles in: its pid and a dash follow. */
export const CC_DIRECTORY_PREFIX = "mqstore-cc-";

/**
 * Removes the compile directories in `parent` of processes that no longer
 * run: a process killed while TinyCC compiled never reached the removal
 * of its own. A directory whose process runs (or whose pid was reused
 * since) is left for it.
 *
 * @example Usage
 * ```ts ignore
 * removeOrphanedCompileDirectories(os.tmpdir());
 * ```
 *
 * @param parent The directory the compile directories are made in.
 * @returns How many were removed.
 */
export function removeOrphanedCompileDirectories(parent: string): number {
  let removed = 0;
  for (const name of fs.readdirSync(parent)) {
    if (!name.startsWith(CC_DIRECTORY_PREFIX)) continue;
    const pid = Number(/^(\d+)-/.exec(name.slice(CC_DIRECTORY_PREFIX.length))?.[1]);
    if (!(pid > 0) || isAlive(pid)) continue;
    fs.rmSync(path.join(parent, name), { recursive: true, force: true });
    removed++;
  }
  return removed;
}
