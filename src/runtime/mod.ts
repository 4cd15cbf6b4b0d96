/**
 * Runtime detection and adapter selection: the only place that decides
 * which {@link RuntimePort} the core gets.
 *
 * `auto` picks the FFI adapter of the host runtime (`deno-ffi`, `bun-ffi`,
 * `node-koffi`) on glibc Linux (x86_64, arm64); where FFI is not permitted
 * or not covered (no `--allow-ffi`, macOS, musl) it falls back to
 * `portable` with a one-line notice.
 *
 * @module
 */

import process from "node:process";
import { MqStoreError } from "../errors.ts";
import { installBodyCrcWriter } from "../record/crc32.ts";
import { FsPort } from "./_fs_port.ts";
import type { NativeLibc } from "./_native.ts";
import { runtimeName } from "./info.ts";
import { MemoryPort } from "./memory.ts";
import type { AdapterName, RuntimeName, RuntimePort } from "./port.ts";

export type * from "./port.ts";
export { MemoryPort } from "./memory.ts";
export { runtimeName } from "./info.ts";
export type { CrashOptions, CrashReport, FaultOptions, MemoryPortOptions } from "./memory.ts";

/**
 * Options of {@link createPort}.
 *
 * @example
 * ```ts
 * import { createPort, type CreatePortOptions } from "./mod.ts";
 *
 * const options: CreatePortOptions = { adapter: "auto", onNotice: (line) => console.error(line) };
 * const port = await createPort(options);
 * console.log(port.adapter); // "deno-ffi", "bun-ffi", "node-koffi" or "portable"
 * ```
 */
export interface CreatePortOptions {
  /**
   * The adapter to use; `auto` picks the best one for the host.
   *
   * @default {"auto"}
   */
  adapter?: AdapterName | "auto";
  /**
   * Receives the one-line notices: `auto` falling back to the portable
   * adapter, and (once per process) a write buffer that could not be
   * locked in memory.
   *
   * @default {console.warn}
   */
  onNotice?: (message: string) => void;
}

const NATIVE_ADAPTER: Readonly<Record<RuntimeName, AdapterName>> = {
  deno: "deno-ffi",
  bun: "bun-ffi",
  node: "node-koffi",
};

/**
 * {@link nativePlatform}'s answer, worked out once: the process report it
 * reads cost 4–9 ms on Node and Deno, and every store open asked.
 */
let nativePlatformAnswer: { reason: string | undefined } | undefined;

/** Why the FFI adapters do not cover this platform (glibc Linux, x86_64/arm64), or undefined. */
function nativePlatform(): string | undefined {
  nativePlatformAnswer ??= { reason: nativePlatformNow() };
  return nativePlatformAnswer.reason;
}

function nativePlatformNow(): string | undefined {
  if (process.platform !== "linux") return `platform ${process.platform}`;
  if (process.arch !== "x64" && process.arch !== "arm64") {
    return `architecture ${process.arch}`;
  }
  const report = (process as { report?: { getReport?: () => unknown } }).report;
  let header: { glibcVersionRuntime?: string } | undefined;
  try {
    header = (report?.getReport?.() as {
      header?: { glibcVersionRuntime?: string };
    } | undefined)?.header;
  } catch {
    // Deno without --allow-sys cannot build a report: treat libc as unknown
    // and let loading the library decide.
    header = undefined;
  }
  if (header !== undefined && header.glibcVersionRuntime === undefined) {
    return "a libc other than glibc";
  }
  return undefined;
}

async function loadNative(runtime: RuntimeName): Promise<NativeLibc> {
  switch (runtime) {
    case "deno":
      return (await import("./deno.ts")).loadLibc();
    case "bun":
      return (await import("./bun.ts")).loadLibc();
    case "node":
      return (await import("./node.ts")).loadLibc();
  }
}

/** The native body-CRC writer's load, started by the first createPort(). */
let bodyCrcWriterLoad: Promise<void> | undefined;

/**
 * Installs the native body-CRC writer where one loads (Bun with
 * libdeflate, see `_bun_crc32.ts`; Node with WebAssembly, see
 * `_wasm_crc32.ts`), once per process. A failure is silent
 * by design: the JavaScript CRC is byte-for-byte the same, and
 * `crc32Implementation()` tells which one is in use.
 */
function loadBodyCrcWriter(runtime: RuntimeName): Promise<void> {
  if (runtime === "bun") {
    bodyCrcWriterLoad ??= import("./_bun_crc32.ts")
      .then((module) => module.loadBunBodyCrcWriter())
      .then(installBodyCrcWriter, () => undefined);
  } else if (runtime === "node") {
    bodyCrcWriterLoad ??= import("./_wasm_crc32.ts")
      .then((module) => module.loadWasmBodyCrcWriter())
      .then(installBodyCrcWriter, () => undefined);
  }
  return bodyCrcWriterLoad ?? Promise.resolve();
}

/**
 * The adapters that can run on this host (for tests and benches).
 *
 * @example
 * ```ts
 * import { availableAdapters } from "./mod.ts";
 *
 * console.log(availableAdapters()); // ["node-koffi", "portable", "memory"] on Node, glibc Linux
 * ```
 *
 * @returns The host's FFI adapter where it covers the platform, then `portable` and `memory`.
 */
export function availableAdapters(): AdapterName[] {
  const adapters: AdapterName[] = [];
  if (nativePlatform() === undefined) adapters.push(NATIVE_ADAPTER[runtimeName()]);
  adapters.push("portable", "memory");
  return adapters;
}

/**
 * Creates the port for this process.
 *
 * @example
 * ```ts
 * import { createPort } from "./mod.ts";
 *
 * const port = await createPort({ adapter: "memory" });
 * console.log(port.adapter);
 * ```
 *
 * @param options Which adapter, and where notices go.
 * @returns The port.
 */
export async function createPort(
  options: CreatePortOptions = {},
): Promise<RuntimePort> {
  const runtime = runtimeName();
  const wanted = options.adapter ?? "auto";
  const notice = options.onNotice ?? ((message) => console.warn(message));
  await loadBodyCrcWriter(runtime);
  if (wanted === "memory") return new MemoryPort(runtime);
  if (wanted === "portable") return new FsPort(runtime, undefined);
  const native = NATIVE_ADAPTER[runtime];
  if (wanted !== "auto" && wanted !== native) {
    throw new MqStoreError(
      "UNSUPPORTED",
      `Adapter ${wanted} needs another runtime; this is ${runtime} (use ${native}, portable or memory)`,
    );
  }
  const unsupported = nativePlatform();
  if (unsupported === undefined) {
    try {
      return new FsPort(runtime, await loadNative(runtime), notice);
    } catch (error) {
      if (wanted !== "auto") throw error;
      notice(
        `mqstore: ${native} unavailable (${
          error instanceof Error ? error.message : String(error)
        }); using the portable adapter (no mmap)`,
      );
      return new FsPort(runtime, undefined);
    }
  }
  if (wanted !== "auto") {
    throw new MqStoreError(
      "UNSUPPORTED",
      `Adapter ${wanted} does not support ${unsupported}`,
    );
  }
  notice(
    `mqstore: ${unsupported} is not covered by ${native}; using the portable adapter (no mmap)`,
  );
  return new FsPort(runtime, undefined);
}
