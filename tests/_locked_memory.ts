/**
 * Helpers of the locked-memory tests: how much memory this process has
 * locked (`VmLck`), and whether the kernel lets it lock more.
 *
 * @module
 */

import fs from "node:fs";

/** `CAP_IPC_LOCK`: locking ignores `RLIMIT_MEMLOCK`. */
const CAP_IPC_LOCK = 14;

function status(): string | undefined {
  try {
    return fs.readFileSync("/proc/self/status", "utf8");
  } catch {
    return undefined;
  }
}

/** Bytes this process has locked (`VmLck` of `/proc/self/status`), or undefined off Linux. */
export function lockedBytes(): number | undefined {
  const match = /^VmLck:\s+(\d+) kB$/m.exec(status() ?? "");
  return match === null ? undefined : Number(match[1]) * 0x400;
}

/** Whether this process holds `CAP_IPC_LOCK` (in its effective set). */
export function hasIpcLock(): boolean {
  const match = /^CapEff:\s+([0-9a-f]+)$/m.exec(status() ?? "");
  return match !== null && (BigInt(`0x${match[1]}`) >> BigInt(CAP_IPC_LOCK) & 1n) === 1n;
}

/** The `RLIMIT_MEMLOCK` soft limit in bytes (Infinity when unlimited), or undefined. */
export function memlockLimitBytes(): number | undefined {
  let limits: string;
  try {
    limits = fs.readFileSync("/proc/self/limits", "utf8");
  } catch {
    return undefined;
  }
  const match = /^Max locked memory\s+(\S+)/m.exec(limits);
  if (match === null) return undefined;
  return match[1] === "unlimited" ? Infinity : Number(match[1]);
}

/** Whether the kernel lets this process lock `sizeBytes` more. */
export function canLock(sizeBytes: number): boolean {
  if (hasIpcLock()) return true;
  const limit = memlockLimitBytes();
  const locked = lockedBytes();
  return limit !== undefined && locked !== undefined && locked + sizeBytes <= limit;
}
