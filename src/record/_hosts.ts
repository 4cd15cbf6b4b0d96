/**
 * How many bytes a record's host fields take, given its sysFlag: each is
 * 8 bytes (IPv4 address + port) or 20 (IPv6) as its sysFlag bit says. The
 * one place this arithmetic lives, for every reader and writer of the
 * record layout in this folder.
 *
 * @module
 */

import {
  HOST_V4_SIZE_BYTES,
  HOST_V6_SIZE_BYTES,
  SYS_FLAG_BORN_HOST_V6,
  SYS_FLAG_STORE_HOST_V6,
} from "./constants.ts";

/** Bytes of the bornHost field: 8, or 20 when the born host is IPv6. */
export function bornHostSizeBytes(sysFlag: number): number {
  return (sysFlag & SYS_FLAG_BORN_HOST_V6) === 0 ? HOST_V4_SIZE_BYTES : HOST_V6_SIZE_BYTES;
}

/** Bytes of the storeHost field: 8, or 20 when the store host is IPv6. */
export function storeHostSizeBytes(sysFlag: number): number {
  return (sysFlag & SYS_FLAG_STORE_HOST_V6) === 0 ? HOST_V4_SIZE_BYTES : HOST_V6_SIZE_BYTES;
}

/**
 * Bytes the host fields add to a record beyond two IPv4 hosts (0, 12 or
 * 24): every field after the hosts sits this much further on.
 */
export function hostsExtraBytes(sysFlag: number): number {
  return bornHostSizeBytes(sysFlag) + storeHostSizeBytes(sysFlag) - 2 * HOST_V4_SIZE_BYTES;
}
