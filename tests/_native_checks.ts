/**
 * Checks of a {@link NativeLibc} binding that read the same on every
 * runtime; each `runtime_<name>_test.ts` runs them against its own binding.
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import { LINUX, type NativeLibc } from "../src/runtime/_native.ts";

/**
 * A second open file description of the lock file is refused the OFD lock,
 * sees the holder as pid -1 (OFD locks have no owning process), and gets the
 * lock once the first releases it.
 */
export function assertOfdLockExcludesSecondDescription(
  libc: NativeLibc,
  directory: string,
): void {
  const path = `${directory}/lock`;
  const first = fs.openSync(path, "w+");
  const second = fs.openSync(path, "r+");
  try {
    assert.equal(libc.fcntlLock(first, LINUX.F_OFD_SETLK, LINUX.F_WRLCK).errno, 0);
    const refused = libc.fcntlLock(second, LINUX.F_OFD_SETLK, LINUX.F_WRLCK);
    assert.ok(refused.errno === LINUX.EAGAIN || refused.errno === LINUX.EACCES);
    // An OFD holder is reported with pid -1.
    const holder = libc.fcntlLock(second, LINUX.F_OFD_GETLK, LINUX.F_WRLCK);
    assert.deepEqual(holder, { errno: 0, type: LINUX.F_WRLCK, pid: -1 });
    assert.equal(libc.fcntlLock(first, LINUX.F_OFD_SETLK, LINUX.F_UNLCK).errno, 0);
    assert.equal(libc.fcntlLock(second, LINUX.F_OFD_SETLK, LINUX.F_WRLCK).errno, 0);
  } finally {
    fs.closeSync(first);
    fs.closeSync(second);
  }
}
