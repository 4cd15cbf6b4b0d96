import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import path from "node:path";
/**
 * Helpers of the commit-log and message-store tests: stores on a memory
 * port with a manual clock, reading the records back from the files, file
 * snapshots, and a port whose flushes can be held.
 *
 * @module
 */

import { MessageStore } from "../src/store/message_store.ts";
import type { MessageStoreOptions } from "../src/store/options.ts";
import { type DecodedMessage, decodeRecord } from "../src/record/mod.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import type { FileHandle, Mapping, RuntimePort } from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { withTempDirectory } from "./_helpers.ts";

/** 64 KiB segments: small enough to roll often. */
export const SEGMENT_BYTES = 0x1_0000;

/** A test store on a memory port. */
export interface MemoryStoreEnv {
  store: MessageStore;
  port: MemoryPort;
  clock: ManualClock;
  directory: string;
  options: MessageStoreOptions;
  /** Opens the same directory again (after close or crash) with the same options plus `extra`. */
  reopen(extra?: MessageStoreOptions): Promise<MessageStore>;
}

let storeCount = 0;

/**
 * Opens a store on a fresh MemoryPort with a ManualClock and 64 KiB
 * segments. `options.port` may wrap `port` (a gated port); `port` stays the
 * one that can crash.
 */
export async function openMemoryStore(
  options: MessageStoreOptions = {},
  port: MemoryPort = new MemoryPort(runtimeName()),
): Promise<MemoryStoreEnv> {
  const clock = options.clock instanceof ManualClock
    ? options.clock
    : new ManualClock(1_700_000_000_000);
  const directory = `/store-${++storeCount}`;
  const full: MessageStoreOptions = {
    mappedFileSizeCommitLog: SEGMENT_BYTES,
    maxMessageSize: 0x2000,
    // Small consume-queue and index files: every open recovers them, and
    // the defaults (6 MB, 420 MB) would dominate a test's time.
    mappedFileSizeConsumeQueue: 20 * 1024,
    maxHashSlotNum: 256,
    maxIndexNum: 1024,
    onWarning: () => {},
    ...options,
    port: options.port ?? port,
    clock,
  };
  const store = await MessageStore.open(directory, full);
  return {
    store,
    port,
    clock,
    directory,
    options: full,
    reopen: (extra = {}) => MessageStore.open(directory, { ...full, ...extra }),
  };
}

/** A body of `length` bytes derived from `seed`. */
export function body(length: number, seed = 1): Uint8Array {
  const bytes = new Uint8Array(length);
  let x = seed | 1;
  for (let i = 0; i < length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) | 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

/** A record read back from the commit-log files. */
export interface StoredRecord {
  offset: number;
  message: DecodedMessage;
}

/** Names of the segments of `<directory>/commitlog`, sorted. */
export async function segmentNames(port: RuntimePort, directory: string): Promise<string[]> {
  const names = await port.list(`${directory}/commitlog`).catch(() => [] as string[]);
  return names.filter((name) => /^[0-9]{20}$/.test(name));
}

/**
 * Decodes every record of the commit log from the files (through the
 * port's reads, not the store), following BLANKs, until the end of data.
 *
 * @throws When an invalid record is found before the end.
 */
export async function readRecords(port: RuntimePort, directory: string): Promise<StoredRecord[]> {
  const records: StoredRecord[] = [];
  for (const name of await segmentNames(port, directory)) {
    const bytes = await port.readFile(`${directory}/commitlog/${name}`);
    if (bytes === undefined) throw new Error(`segment ${name} vanished`);
    const start = Number(name);
    let position = 0;
    while (position < bytes.length) {
      const result = decodeRecord(bytes, position, { expectedOffset: start + position });
      if (result.kind === "message") {
        // Copy: the buffer is reused by nothing, but keep records independent.
        records.push({ offset: start + position, message: result.message });
        position += result.size;
      } else if (result.kind === "blank") {
        position = bytes.length;
      } else if (result.kind === "end") {
        return records;
      } else {
        throw new Error(`invalid record at ${start + position}: ${result.reason} ${result.detail}`);
      }
    }
  }
  return records;
}

/** Every file under `directory` with its bytes (copies), keyed by path. */
export async function snapshotFiles(
  port: RuntimePort,
  directory: string,
): Promise<Map<string, Uint8Array>> {
  const files = new Map<string, Uint8Array>();
  const walk = async (path: string) => {
    for (const name of await port.list(path)) {
      const child = `${path}/${name}`;
      const stat = await port.stat(child);
      if (stat?.isDirectory === true) await walk(child);
      else files.set(child, (await port.readFile(child))!.slice());
    }
  };
  await walk(directory);
  return files;
}

/** Removes every file under `path` (the memory port keeps the emptied directories). */
export async function removeFiles(port: RuntimePort, path: string): Promise<void> {
  if ((await port.stat(path)) === undefined) return;
  for (const name of await port.list(path)) {
    const child = `${path}/${name}`;
    if ((await port.stat(child))?.isDirectory === true) await removeFiles(port, child);
    else await port.remove(child);
  }
}

/** The consume-queue and index files under `directory`, by path below it. */
export async function dispatchFiles(
  port: RuntimePort,
  directory: string,
): Promise<Map<string, Uint8Array>> {
  const files = new Map<string, Uint8Array>();
  for (const folder of ["consumequeue", "index"]) {
    if ((await port.stat(`${directory}/${folder}`)) === undefined) continue;
    for (const [path, bytes] of await snapshotFiles(port, `${directory}/${folder}`)) {
      files.set(path.slice(directory.length), bytes);
    }
  }
  return files;
}

/** A port from {@link heldCreations}, with the creations it holds. */
export interface HeldCreations {
  port: RuntimePort;
  /** Creations waiting for {@link HeldCreations.release}. */
  readonly waiting: number;
  /** Lets the waiting creations and every later one go on. */
  release(): void;
}

/**
 * Wraps `inner` so that `createFile` of a path `holds` picks waits until
 * `release()`: a file whose creation is slow. The wrapper has no
 * `createFileSync` (a synchronous creation cannot be held), so consume-queue
 * files take the awaited creation path under it.
 */
export function heldCreations(
  inner: RuntimePort,
  holds: (path: string) => boolean,
): HeldCreations {
  let held = true;
  let waiters: Array<() => void> = [];
  const port = new Proxy(inner, {
    get(target, key) {
      if (key === "createFileSync") return undefined;
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "createFile") {
        return async (...args: unknown[]) => {
          if (held && holds(String(args[0]))) {
            await new Promise<void>((resolve) => waiters.push(resolve));
          }
          return await value.apply(target, args);
        };
      }
      return value.bind(target);
    },
  });
  return {
    port,
    get waiting() {
      return waiters.length;
    },
    release() {
      held = false;
      const released = waiters;
      waiters = [];
      for (const resolve of released) resolve();
    },
  };
}

/**
 * Asserts that a rejected operation changed no file: every file of `before`
 * is byte-identical in `after`, and a file that appeared since is all zeros
 * (allocation ahead may pre-create the next segment at any moment). Compares
 * with `Buffer.equals` and reports the first differing byte, never a diff of
 * whole segments.
 */
export function assertFilesUnchanged(
  before: Map<string, Uint8Array>,
  after: Map<string, Uint8Array>,
): void {
  for (const [path, bytes] of before) {
    const now = after.get(path);
    assert.ok(now !== undefined, `${path} disappeared`);
    if (!Buffer.from(now.buffer, now.byteOffset, now.byteLength).equals(bytes)) {
      let at = 0;
      while (at < bytes.length && bytes[at] === now[at]) at++;
      assert.fail(`${path} changed at byte ${at} (size ${bytes.length} -> ${now.length})`);
    }
  }
  for (const [path, bytes] of after) {
    if (before.has(path)) continue;
    assert.ok(bytes.every((byte) => byte === 0), `${path} appeared with content`);
  }
}

/** A port whose commit-log flushes (`Mapping.sync`, `FileHandle.datasync`) wait while held. */
export interface GatedPort {
  port: RuntimePort;
  /** Flushes started from now on wait. */
  hold(): void;
  /** Lets waiting and later flushes run. */
  release(): void;
  /** Flushes waiting now. */
  readonly waiting: number;
}

/**
 * `inner`, with every commit-log file handle it creates or opens passed
 * through `wrapHandle` (consume-queue, index and checkpoint files are
 * left as they are: the dispatcher flushes them on its own schedule).
 */
export function commitLogHandlesPort(
  inner: RuntimePort,
  wrapHandle: (handle: FileHandle) => FileHandle,
): RuntimePort {
  return new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "createFile" || key === "openFile") {
        return async (...args: unknown[]) => {
          const handle = await value.apply(target, args);
          return String(args[0]).includes("/commitlog/") ? wrapHandle(handle) : handle;
        };
      }
      return value.bind(target);
    },
  });
}

/** Wraps `inner` so its flushes can be held (to simulate a slow disk). */
export function gatedPort(inner: RuntimePort): GatedPort {
  let held = false;
  let waiters: Array<() => void> = [];
  const gate = (): Promise<void> =>
    held ? new Promise<void>((resolve) => waiters.push(resolve)) : Promise.resolve();
  const wrapMapping = (mapping: Mapping): Mapping =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "sync") {
          return async (...args: unknown[]) => {
            await gate();
            return value.apply(target, args);
          };
        }
        return value.bind(target);
      },
    });
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "map") {
          return async (...args: unknown[]) => wrapMapping(await value.apply(target, args));
        }
        if (key === "datasync") {
          return async () => {
            await gate();
            return value.apply(target, []);
          };
        }
        // A flush on the thread cannot be held: without it the store
        // flushes through datasync() only.
        if (key === "datasyncSync") return undefined;
        return value.bind(target);
      },
    });
  const port = commitLogHandlesPort(inner, wrapHandle);
  return {
    port,
    hold: () => {
      held = true;
    },
    release: () => {
      held = false;
      const list = waiters;
      waiters = [];
      for (const wake of list) wake();
    },
    get waiting() {
      return waiters.length;
    },
  };
}

/**
 * Runs `body` with a store directory on real files: `<tmp>/store` inside a
 * fresh temporary directory (not yet created, as a new store's would be),
 * removed afterwards.
 */
export function withStoreDirectory(body: (directory: string) => Promise<void>): Promise<void> {
  return withTempDirectory((root) => body(path.join(root, "store")));
}

/** Lets queued callbacks and I/O completions run (to check something did NOT happen). */
export async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * Waits (on observable progress, bounded) until `<directory>/commitlog`
 * holds `count` segments: the allocator's segment prepared ahead is done,
 * so a fault armed now hits the put path and not the allocation.
 */
export async function waitForSegments(
  port: RuntimePort,
  directory: string,
  count: number,
): Promise<void> {
  for (let turn = 0; turn < 10_000; turn++) {
    if ((await segmentNames(port, directory)).length >= count) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`${directory} never reached ${count} segments`);
}

/**
 * The KEYS of every message of one queue, as numbers, in queue order;
 * checks each page's queue offsets run on without a gap.
 */
export async function queueKeyNumbers(
  store: MessageStore,
  topic: string,
  queueId: number,
): Promise<number[]> {
  const seen: number[] = [];
  let next = store.getMinQueueOffset(topic, queueId);
  for (let round = 0; round < 1000; round++) {
    const page = await store.getMessages(topic, queueId, next, 32);
    if (page.status !== "FOUND") break;
    for (const [i, message] of page.messages.entries()) {
      assert.equal(message.queueOffset, next + i);
      seen.push(Number(message.properties.get("KEYS")));
    }
    next = page.nextQueueOffset;
  }
  return seen;
}

/** A port that can be killed: after {@link KillablePort.kill} every call fails, as in a dead process. */
export interface KillablePort {
  port: RuntimePort;
  /** Makes every later call on the port, its files and mappings throw. */
  kill(): void;
}

/**
 * Wraps `inner` so a crashed store cannot keep writing to the "rebooted"
 * memory port (a real crash ends the process; here its promises live on).
 */
export function killablePort(inner: RuntimePort): KillablePort {
  let dead = false;
  const check = (name: string) => {
    if (dead) throw new Error(`${name}: the process is dead (simulated crash)`);
  };
  const wrap = <T extends object>(target: T): T =>
    new Proxy(target, {
      get(object, key) {
        const value = Reflect.get(object, key);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          check(String(key));
          const result = value.apply(object, args);
          if (result instanceof Promise) {
            return result.then((resolved: unknown) => {
              check(String(key));
              return typeof resolved === "object" && resolved !== null &&
                  !(resolved instanceof Uint8Array) && !Array.isArray(resolved)
                ? wrap(resolved)
                : resolved;
            });
          }
          // The handles the synchronous creation calls answer die too.
          if (key === "createFileSync" || key === "openFileSync") return wrap(result as object);
          return result;
        };
      },
    });
  return {
    port: wrap(inner),
    kill: () => {
      dead = true;
    },
  };
}

/**
 * Puts messages `from` … `from + count − 1` into `topic` (queue `i % 3`),
 * each with the keys `key-<i>` and `shared-<i % 5>`; returns their
 * offsets.
 */
export async function putKeyed(
  store: MessageStore,
  topic: string,
  from: number,
  count: number,
): Promise<number[]> {
  const offsets: number[] = [];
  for (let i = from; i < from + count; i++) {
    const r = await store.putMessage({
      topic,
      queueId: i % 3,
      body: body(60 + (i % 7) * 20, i),
      properties: { KEYS: `key-${i} shared-${i % 5}` },
    });
    assert.equal(r.status, "PUT_OK");
    offsets.push(r.appendResult!.wroteOffset);
  }
  return offsets;
}

/** Checks that message `from + i`'s own key finds it in `topic`, once, at `offsets[i]`. */
export async function assertKeysFound(
  store: MessageStore,
  topic: string,
  offsets: readonly number[],
  from = 0,
): Promise<void> {
  for (const [i, offset] of offsets.entries()) {
    const found = await store.queryMessages(topic, `key-${from + i}`);
    assert.deepEqual(found.messages.map((m) => m.physicalOffset), [offset], `key-${from + i}`);
  }
}
