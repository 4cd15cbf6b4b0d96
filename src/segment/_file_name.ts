/**
 * Segment file names (the start offset, zero-padded to 20 digits) and the
 * few path operations the segment layer needs.
 *
 * @module
 */

import { FILE_NAME_DIGITS, TEMPORARY_SUFFIX } from "./constants.ts";

const SEGMENT_NAME = /^\d{20}$/;
const TEMPORARY_NAME = /^\d{20}\.tmp$/;

/** The file name of the segment starting at `offset`. */
export function segmentFileName(offset: number): string {
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new RangeError(`Segment start offset ${offset} must be a non-negative safe integer`);
  }
  return String(offset).padStart(FILE_NAME_DIGITS, "0");
}

/** The start offset named by a segment file name, or undefined if it is not one. */
export function parseSegmentFileName(name: string): number | undefined {
  if (!SEGMENT_NAME.test(name)) return undefined;
  const offset = Number(name);
  return Number.isSafeInteger(offset) ? offset : undefined;
}

/** Whether `name` is a segment left half-made by an interrupted creation. */
export function isTemporarySegmentName(name: string): boolean {
  return TEMPORARY_NAME.test(name) && name.endsWith(TEMPORARY_SUFFIX);
}

/** `directory/name`. */
export function joinPath(directory: string, name: string): string {
  return directory.endsWith("/") ? `${directory}${name}` : `${directory}/${name}`;
}

/** The last component of a path. */
export function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** The directory part of a path. */
export function directoryOf(path: string): string {
  const slash = path.lastIndexOf("/");
  if (slash < 0) return ".";
  return slash === 0 ? "/" : path.slice(0, slash);
}
