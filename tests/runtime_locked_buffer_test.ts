import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, test } from "node:test";
import { availableAdapters, createPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { childCommand, FIXTURES, runCommand } from "./_helpers.ts";
import { canLock, hasIpcLock, lockedBytes } from "./_locked_memory.ts";

/** 4 MiB: below the usual 8 MiB RLIMIT_MEMLOCK, so it locks without privileges. */
const SIZE = 0x40_0000;
/** The limit the fallback child runs under, and the (larger) buffer it asks for. */
const CHILD_LIMIT_BYTES = 0x1_0000;
const CHILD_SIZE = 0x10_0000;

const nativeAdapter = availableAdapters().find((a) => a !== "portable" && a !== "memory");

function works(command: string): boolean {
  try {
    return spawnSync(command, ["--version"], { stdio: "ignore" }).status === 0;
  } catch {
    return false;
  }
}

/** Why the fallback child cannot run here, or undefined. */
function fallbackSkip(): string | undefined {
  if (nativeAdapter === undefined) return "no FFI adapter here";
  if (!works("prlimit")) return "prlimit(1) is not installed";
  if (hasIpcLock() && !works("setpriv")) {
    return "the process holds CAP_IPC_LOCK and setpriv(1) is not installed to drop it";
  }
  return undefined;
}

describe("RuntimePort.allocateLockedBuffer()", () => {
  for (const adapter of availableAdapters()) {
    const native = adapter === nativeAdapter;
    test(
      `allocateLockedBuffer() on ${adapter} gives zeroed memory, ${
        native ? "locked while the limit allows" : "never locked"
      }, and releases it`,
      async () => {
        const notices: string[] = [];
        const port = await createPort({ adapter, onNotice: (m) => notices.push(m) });
        const expectLocked = native && canLock(SIZE);
        const before = lockedBytes();
        const buffer = await port.allocateLockedBuffer(SIZE);
        assert.equal(buffer.locked, expectLocked);
        assert.equal(buffer.bytes.length, SIZE);
        assert.equal(buffer.bytes.every((b) => b === 0), true, "zero-filled");
        buffer.bytes.fill(0x5a, SIZE - 0x1000);
        assert.equal(buffer.bytes[SIZE - 1], 0x5a);
        if (before !== undefined) {
          // The kernel counts it: VmLck grew by the whole buffer (or not at all).
          assert.equal(lockedBytes()! - before, expectLocked ? SIZE : 0);
        }
        await buffer.release();
        await buffer.release(); // idempotent
        if (before !== undefined) assert.equal(lockedBytes(), before, "unlocked by release()");
        if (expectLocked) {
          // Never a dangling view: detached on Deno and Bun, zeros on Node.
          const view = buffer.bytes;
          assert.ok(
            view.length === 0 || (view[SIZE - 1] === 0 && view[0] === 0),
            `a released view has ${view.length} bytes reading ${view[SIZE - 1]}`,
          );
        }
        if (!native || expectLocked) assert.deepEqual(notices, []);
      },
    );

    test(`allocateLockedBuffer() on ${adapter} rejects sizes that are not positive integers`, async () => {
      const port = await createPort({ adapter, onNotice: () => {} });
      for (const size of [0, -1, 1.5, Number.NaN]) {
        await assert.rejects(port.allocateLockedBuffer(size), RangeError);
      }
    });
  }

  test(
    "allocateLockedBuffer() falls back to heap memory and warns once when mlock is refused",
    { skip: fallbackSkip() },
    async () => {
      const child = childCommand(path.join(FIXTURES, "locked_buffer_child.ts"), [
        String(CHILD_SIZE),
      ]);
      // Root with CAP_IPC_LOCK ignores RLIMIT_MEMLOCK: drop the capability
      // for the child (from its bounding set, so exec cannot grant it).
      const dropCapability = hasIpcLock()
        ? ["setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--"]
        : [];
      const result = await runCommand("prlimit", [
        `--memlock=${CHILD_LIMIT_BYTES}:${CHILD_LIMIT_BYTES}`,
        "--",
        ...dropCapability,
        child.command,
        ...child.args,
      ]);
      assert.equal(result.code, 0, `prlimit exited with ${result.code}: ${result.stderr.trim()}`);
      const report = JSON.parse(result.stdout.trim()) as {
        adapter: string;
        locked: boolean[];
        notices: string[];
        bytesWork: boolean;
      };
      assert.equal(report.adapter, nativeAdapter, `the child runs on ${runtimeName()}'s adapter`);
      assert.deepEqual(report.locked, [false, false]);
      assert.equal(report.bytesWork, true, "the heap fallback is usable");
      assert.equal(report.notices.length, 1, report.notices.join("\n"));
      const notice = report.notices[0]!;
      assert.match(notice, new RegExp(`${CHILD_SIZE}-byte write buffer`), "names the size");
      assert.match(notice, new RegExp(`RLIMIT_MEMLOCK is ${CHILD_LIMIT_BYTES} bytes`));
      assert.match(notice, /ENOMEM|EPERM/);
    },
  );
});
