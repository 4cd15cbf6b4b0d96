/**
 * Index file names: the creation time as `yyyyMMddHHmmssSSS` in local
 * time, as RocketMQ's `UtilAll.timeMillisToHumanString` writes it (Java's
 * default time zone; here the host's).
 *
 * @module
 */

import { INDEX_FILE_NAME_PATTERN } from "./_index_file_constants.ts";

function pad(value: number, digits: number): string {
  return String(value).padStart(digits, "0");
}

/** `yyyyMMddHHmmssSSS` of `timestampMs` in local time. */
export function indexFileNameOf(timestampMs: number): string {
  const date = new Date(timestampMs);
  return pad(date.getFullYear(), 4) + pad(date.getMonth() + 1, 2) + pad(date.getDate(), 2) +
    pad(date.getHours(), 2) + pad(date.getMinutes(), 2) + pad(date.getSeconds(), 2) +
    pad(date.getMilliseconds(), 3);
}

/**
 * A name for a new file created at `timestampMs` that sorts after `last`
 * (files load in name order, so a clock stepped back, or two files in one
 * millisecond, must not reorder them): the time's name, or `last` + 1.
 */
export function nextIndexFileName(timestampMs: number, last: string | undefined): string {
  const name = indexFileNameOf(timestampMs);
  if (last === undefined || name > last || !INDEX_FILE_NAME_PATTERN.test(last)) return name;
  return (BigInt(last) + 1n).toString().padStart(last.length, "0");
}
