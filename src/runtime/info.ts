/**
 * Which runtime this process runs on, for the few choices the core makes by
 * measurement per runtime (e.g. the CRC-32 implementation).
 *
 * @module
 */

import os from "node:os";
import type { RuntimeName } from "./port.ts";

/**
 * The runtime this process runs on.
 *
 * @example
 * ```ts
 * import { runtimeName } from "./info.ts";
 *
 * console.log(runtimeName()); // "deno", "bun" or "node"
 * ```
 *
 * @returns `"deno"`, `"bun"` or `"node"`.
 */
export function runtimeName(): RuntimeName {
  const host = globalThis as Record<string, unknown>;
  if (host.Deno !== undefined) return "deno";
  if (host.Bun !== undefined) return "bun";
  return "node";
}

/**
 * The machine's memory, or undefined where it cannot be read (Deno without
 * the `sys` permission, a host that reports nothing).
 *
 * @example
 * ```ts
 * import { totalMemoryBytes } from "./info.ts";
 *
 * console.log(totalMemoryBytes()); // 25769803776 on a 24 GiB machine
 * ```
 *
 * @returns Bytes of memory, or undefined.
 */
export function totalMemoryBytes(): number | undefined {
  try {
    const bytes = os.totalmem();
    return Number.isSafeInteger(bytes) && bytes > 0 ? bytes : undefined;
  } catch {
    return undefined;
  }
}
