/**
 * Which runtime this process runs on, for the few choices the core makes by
 * measurement per runtime (e.g. the CRC-32 implementation).
 *
 * @module
 */

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
