/**
 * Atomic segment creation: a crash never leaves a segment of the wrong size
 * under a segment name.
 *
 * The file is created under `<name>.tmp`, sized (with `posix_fallocate`
 * unless sparse), made durable, renamed, and the directory synced. A crash
 * before the rename leaves only a `.tmp` file, which loading removes; after
 * the directory sync the segment exists with its full size.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import type { FileHandle, RuntimePort } from "../runtime/port.ts";
import { TEMPORARY_SUFFIX } from "./constants.ts";
import { directoryOf } from "./_file_name.ts";

/** Options of {@link createSegmentFile}. */
export interface CreateSegmentOptions {
  /**
   * Create a sparse file (tests and the portable adapter only).
   *
   * @default {false}
   */
  sparse?: boolean;
  /**
   * A creation whose rename this one's must follow: awaited (its outcome
   * ignored) just before the rename, so that files created in parallel
   * still appear in order and a crash cannot leave a gap between them.
   *
   * @default {undefined}
   */
  renameAfter?: Promise<unknown>;
}

/**
 * Creates the segment `path` of exactly `sizeBytes`, atomically.
 *
 * @returns The open segment (opened under its final name).
 * @throws {MqStoreError} `ALREADY_EXISTS` if the segment exists; `NO_SPACE`
 *   when the disk cannot hold it.
 */
export async function createSegmentFile(
  port: RuntimePort,
  path: string,
  sizeBytes: number,
  options: CreateSegmentOptions = {},
): Promise<FileHandle> {
  // rename() replaces its target silently, so an existing segment must be
  // refused here rather than overwritten.
  if (await port.stat(path) !== undefined) {
    throw new MqStoreError("ALREADY_EXISTS", `Cannot create segment ${path}: it exists`);
  }
  const temporary = `${path}${TEMPORARY_SUFFIX}`;
  await port.remove(temporary);
  const handle = await port.createFile(temporary, sizeBytes, { sparse: options.sparse === true });
  try {
    // The size (and, with fallocate, the blocks) must be durable before the
    // name appears, or a crash could leave a short segment under its name.
    await handle.datasync();
    await handle.close();
    await options.renameAfter?.catch(() => {});
    await port.rename(temporary, path);
  } catch (error) {
    await handle.close();
    await port.remove(temporary);
    throw error;
  }
  await port.syncDirectory(directoryOf(path));
  return await port.openFile(path);
}
