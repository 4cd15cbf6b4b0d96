/**
 * Host addresses of a record (bornHost, storeHost): `"ip:port"` strings in
 * the API, 8 bytes (IPv4 + int32 port) or 20 bytes (IPv6 + int32 port) on
 * disk.
 *
 * Text forms accepted: `"a.b.c.d:port"` and `"[ipv6]:port"` (with `::`
 * compression and an optional dotted IPv4 tail). As in Java's
 * `InetAddress.getByAddress`, an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`)
 * is an IPv4 address and is stored in 8 bytes. Text forms produced:
 * dotted IPv4, and IPv6 as Java prints it (`[0:0:0:0:0:0:0:1]:port`: eight
 * lowercase groups, no compression), so they match RocketMQ's tools.
 *
 * @module
 */

import { readInt32 } from "./_bytes.ts";
import { PORT_MAX } from "./constants.ts";

/** A parsed host address. */
export interface HostAddress {
  /** The address: 4 bytes (IPv4) or 16 bytes (IPv6). */
  readonly ip: Uint8Array;
  /** The port, 0–65535. */
  readonly port: number;
}

const IPV4_PART = /^(?:0|[1-9][0-9]{0,2})$/;
const IPV6_GROUP = /^[0-9a-fA-F]{1,4}$/;
const PORT = /^(?:0|[1-9][0-9]{0,4})$/;

function parseIpv4(text: string, into: Uint8Array, at: number): boolean {
  const parts = text.split(".");
  if (parts.length !== 4) return false;
  for (let i = 0; i < 4; i++) {
    const part = parts[i]!;
    if (!IPV4_PART.test(part)) return false;
    const value = Number(part);
    if (value > 0xFF) return false;
    into[at + i] = value;
  }
  return true;
}

function parseIpv6(text: string): Uint8Array | undefined {
  const ip = new Uint8Array(16);
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const groupsOf = (part: string): string[] => part === "" ? [] : part.split(":");
  const head = groupsOf(halves[0]!);
  const tail = halves.length === 2 ? groupsOf(halves[1]!) : [];
  // A dotted IPv4 tail stands for the last two groups.
  const last = halves.length === 2 ? tail : head;
  let dotted: Uint8Array | undefined;
  if (last.length > 0 && last[last.length - 1]!.includes(".")) {
    dotted = new Uint8Array(4);
    if (!parseIpv4(last.pop()!, dotted, 0)) return undefined;
  }
  const groupCount = head.length + tail.length + (dotted === undefined ? 0 : 2);
  if (halves.length === 2 ? groupCount > 7 : groupCount !== 8) return undefined;
  const write = (groups: string[], firstGroup: number): boolean => {
    for (let i = 0; i < groups.length; i++) {
      const group = groups[i]!;
      if (!IPV6_GROUP.test(group)) return false;
      const value = parseInt(group, 16);
      ip[(firstGroup + i) * 2] = value >>> 8;
      ip[(firstGroup + i) * 2 + 1] = value & 0xFF;
    }
    return true;
  };
  if (!write(head, 0)) return undefined;
  const tailGroups = tail.length + (dotted === undefined ? 0 : 2);
  if (!write(tail, 8 - tailGroups)) return undefined;
  if (dotted !== undefined) ip.set(dotted, 12);
  return ip;
}

function isIpv4Mapped(ip: Uint8Array): boolean {
  for (let i = 0; i < 10; i++) if (ip[i] !== 0) return false;
  return ip[10] === 0xFF && ip[11] === 0xFF;
}

/**
 * Parses `"a.b.c.d:port"` or `"[ipv6]:port"`.
 *
 * @example
 * ```ts
 * import { parseHostAddress } from "./host_address.ts";
 *
 * parseHostAddress("127.0.0.1:10911")?.port; // 10911
 * parseHostAddress("[::1]:50000")?.ip.length; // 16
 * parseHostAddress("localhost:80"); // undefined
 * ```
 *
 * @param text The address.
 * @returns The address, or `undefined` when `text` is not one.
 */
export function parseHostAddress(text: string): HostAddress | undefined {
  const colon = text.lastIndexOf(":");
  if (colon <= 0) return undefined;
  const portText = text.slice(colon + 1);
  if (!PORT.test(portText)) return undefined;
  const port = Number(portText);
  if (port > PORT_MAX) return undefined;
  const host = text.slice(0, colon);
  if (host.startsWith("[")) {
    if (!host.endsWith("]")) return undefined;
    const ip = parseIpv6(host.slice(1, -1));
    if (ip === undefined) return undefined;
    return isIpv4Mapped(ip) ? { ip: ip.slice(12), port } : { ip, port };
  }
  const ip = new Uint8Array(4);
  return parseIpv4(host, ip, 0) ? { ip, port } : undefined;
}

/**
 * Formats a host field read from a record (`length` 8 or 20 bytes at
 * `position`) as `"ip:port"` the way Java prints it.
 *
 * @param bytes The record bytes.
 * @param position First byte of the host field.
 * @param length 8 (IPv4) or 20 (IPv6).
 * @returns E.g. `"127.0.0.1:10911"` or `"[0:0:0:0:0:0:0:1]:50000"`.
 */
export function formatHostField(bytes: Uint8Array, position: number, length: number): string {
  const ipLength = length - 4;
  const port = readInt32(bytes, position + ipLength);
  if (ipLength === 4) {
    return `${bytes[position]}.${bytes[position + 1]}.${bytes[position + 2]}.${
      bytes[position + 3]
    }:${port}`;
  }
  const ip = bytes.subarray(position, position + 16);
  if (isIpv4Mapped(ip)) return `${ip[12]}.${ip[13]}.${ip[14]}.${ip[15]}:${port}`;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((ip[i]! << 8) | ip[i + 1]!).toString(16));
  return `[${groups.join(":")}]:${port}`;
}

/**
 * Formats a parsed address as {@link formatHostField} would print it after a
 * round trip through a record.
 *
 * @param address The address.
 * @returns `"ip:port"`.
 */
export function formatHostAddress(address: HostAddress): string {
  const field = new Uint8Array(address.ip.length + 4);
  field.set(address.ip);
  const port = address.port;
  field[address.ip.length] = port >>> 24;
  field[address.ip.length + 1] = port >>> 16;
  field[address.ip.length + 2] = port >>> 8;
  field[address.ip.length + 3] = port;
  return formatHostField(field, 0, field.length);
}
