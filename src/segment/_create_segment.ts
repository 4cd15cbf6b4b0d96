/**
 * Atomic segment creation: a crash never leaves a segment of the wrong size
 * under a segment name.
 *
 * The file is created under `<name>.tmp`, sized (with `posix_fallocate`
 * unless sparse), made durable, renamed, and the directory synced. A crash
 * before the rename leaves only a `.tmp` file, which loading removes; after
 * the directory sync the segment exists with its full size.
 *
 * Steps that do not depend on each other run together: each awaited step
 * completes only on a turn of the event loop, which a producer that never
 * yields gives rarely (the consume queues' creations run under one), so
 * the fewer the better. Five turns, where one step after the other took
 * nine:
 *
 * ```
 * stat(name) ∥ remove(tmp) ─► createFile(tmp) ─► datasync ─► close ∥ rename
 *   ─► syncDirectory ∥ openFile(name)      (createSegmentFile)
 *   ─► done, directory sync left to caller (createSegmentName, syncDirectory: false)
 * ```
 *
 * {@link createSegmentNow} is the consume queues' form: no awaited step
 * at all (the port's synchronous calls, 0.5–1.5 ms on the JavaScript
 * thread for 6 MB) and nothing made durable, which their owner does later.
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

/** Options of {@link createSegmentName}. */
export interface CreateSegmentNameOptions extends CreateSegmentOptions {
  /**
   * Sync the directory after the rename. False leaves the name's
   * durability to the caller: a crash may then undo the rename (the
   * `.tmp` comes back, or nothing), never leave a short segment.
   *
   * @default {true}
   */
  syncDirectory?: boolean;
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
  await createSegmentName(port, path, sizeBytes, { ...options, syncDirectory: false });
  const [synced, opened] = await Promise.allSettled([
    port.syncDirectory(directoryOf(path)),
    port.openFile(path),
  ]);
  if (synced.status === "rejected") {
    if (opened.status === "fulfilled") await opened.value.close();
    throw synced.reason;
  }
  if (opened.status === "rejected") throw opened.reason;
  return opened.value;
}

/**
 * Creates the segment `path` of exactly `sizeBytes` as
 * {@link createSegmentFile} does, without opening it; with
 * `syncDirectory: false`, without the directory sync either (the caller
 * syncs the directory before it counts on the name).
 *
 * @throws {MqStoreError} `ALREADY_EXISTS` if the segment exists; `NO_SPACE`
 *   when the disk cannot hold it.
 */
export async function createSegmentName(
  port: RuntimePort,
  path: string,
  sizeBytes: number,
  options: CreateSegmentNameOptions = {},
): Promise<void> {
  const temporary = `${path}${TEMPORARY_SUFFIX}`;
  // rename() replaces its target silently, so an existing segment must be
  // refused here rather than overwritten. A stale .tmp (a crash) goes.
  const [existing] = await Promise.all([port.stat(path), port.remove(temporary)]);
  if (existing !== undefined) {
    throw new MqStoreError("ALREADY_EXISTS", `Cannot create segment ${path}: it exists`);
  }
  const handle = await port.createFile(temporary, sizeBytes, { sparse: options.sparse === true });
  try {
    // The size (and, with fallocate, the blocks) must be durable before the
    // name appears, or a crash could leave a short segment under its name.
    await handle.datasync();
  } catch (error) {
    await handle.close();
    await port.remove(temporary);
    throw error;
  }
  // The rename does not need the handle closed: both in one turn. The
  // close is started in an async function so that a port that throws at
  // once (not through its promise) cannot leave the rename's rejection
  // without a handler.
  const renamed = (options.renameAfter ?? Promise.resolve()).catch(() => {})
    .then(() => port.rename(temporary, path));
  const closing = (async () => await handle.close())();
  const [closed, moved] = await Promise.allSettled([closing, renamed]);
  if (moved.status === "rejected") {
    await port.remove(temporary);
    throw moved.reason;
  }
  if (closed.status === "rejected") {
    await port.remove(path);
    throw closed.reason;
  }
  if (options.syncDirectory !== false) await port.syncDirectory(directoryOf(path));
}

/**
 * Creates the segment `path` of exactly `sizeBytes` on the JavaScript
 * thread, with no awaited step, where the port has the synchronous calls
 * (`stat`, `remove`, `create` + `posix_fallocate`, `rename`: about 0.1 ms
 * for a 6 MB file); undefined, doing nothing, where it lacks one (the
 * caller falls back to {@link createSegmentName}).
 *
 * Nothing is made durable: not the size, not the name. It is for derived
 * files only (consume queues, rebuilt from the commit log), whose owner
 * makes the file and its directory durable with the returned handle's
 * `datasync` and a directory sync before it counts on them. Until then a
 * crash may leave no name, the `.tmp`, a zero-length file or a full one
 * of zeros under the name.
 *
 * @returns The handle of the new file (its `.tmp` path; the file is under
 *   `path`), open for the caller's `datasync` and close; or undefined.
 * @throws {MqStoreError} `ALREADY_EXISTS` if the segment exists; `NO_SPACE`
 *   when the disk cannot hold it.
 */
export function createSegmentNow(
  port: RuntimePort,
  path: string,
  sizeBytes: number,
  options: { sparse?: boolean } = {},
): FileHandle | undefined {
  const { statSync, removeSync, createFileSync, renameSync } = port;
  if (
    statSync === undefined || removeSync === undefined || createFileSync === undefined ||
    renameSync === undefined
  ) {
    return undefined;
  }
  const temporary = `${path}${TEMPORARY_SUFFIX}`;
  // As createSegmentName: rename() replaces silently, a stale .tmp goes.
  if (statSync.call(port, path) !== undefined) {
    throw new MqStoreError("ALREADY_EXISTS", `Cannot create segment ${path}: it exists`);
  }
  removeSync.call(port, temporary);
  const handle = createFileSync.call(port, temporary, sizeBytes, {
    sparse: options.sparse === true,
  });
  try {
    renameSync.call(port, temporary, path);
  } catch (error) {
    // The close of a descriptor never written cannot fail in a way that
    // matters here; the rename's error is the one to report.
    handle.close().catch(() => {});
    removeSync.call(port, temporary);
    throw error;
  }
  return handle;
}
