/**
 * Helpers of the segment-layer tests: one environment (port + empty store
 * directory) per test on each adapter this host offers.
 *
 * @module
 */

import { MqStoreError } from "../src/errors.ts";
import { availableAdapters, createPort, MemoryPort } from "../src/runtime/mod.ts";
import type {
  AdapterName,
  FileHandle,
  Mapping,
  PopulateOptions,
  RuntimePort,
} from "../src/runtime/port.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { makeTempDirectory, removeDirectory } from "./_helpers.ts";

/** An adapter to run the tests on, or the reason it is skipped. */
export interface AdapterCase {
  adapter: AdapterName;
  /** Why the adapter cannot run here; undefined when it can. */
  skip: string | undefined;
}

/** A port and an empty directory, removed by {@link SegmentEnv.cleanup}. */
export interface SegmentEnv {
  port: RuntimePort;
  /** Set on the memory adapter: the port that can crash. */
  memory: MemoryPort | undefined;
  directory: string;
  cleanup(): void;
}

const probed = new Map<AdapterName, RuntimePort>();

/** Probes every available adapter once. */
export async function adapterCases(): Promise<AdapterCase[]> {
  const cases: AdapterCase[] = [];
  for (const adapter of availableAdapters()) {
    try {
      const port = await createPort({ adapter, onNotice: () => {} });
      probed.set(adapter, port);
      cases.push({ adapter, skip: undefined });
    } catch (error) {
      cases.push({
        adapter,
        skip: `createPort({ adapter: "${adapter}" }) failed: ${
          error instanceof Error ? error.message : String(error)
        }`,
      });
    }
  }
  return cases;
}

let memoryDirectories = 0;

/** A fresh environment: a new port on the memory adapter, a temp directory elsewhere. */
export async function segmentEnv(adapter: AdapterName): Promise<SegmentEnv> {
  if (adapter === "memory") {
    const memory = new MemoryPort(runtimeName());
    const directory = `/mqstore-${++memoryDirectories}`;
    await memory.makeDirectory(directory);
    return { port: memory, memory, directory, cleanup: () => {} };
  }
  const port = probed.get(adapter) ?? await createPort({ adapter, onNotice: () => {} });
  const directory = makeTempDirectory();
  return { port, memory: undefined, directory, cleanup: () => removeDirectory(directory) };
}

/** Runs `body` in a fresh environment, cleaned up afterwards. */
export async function withSegmentEnv(
  adapter: AdapterName,
  body: (env: SegmentEnv) => Promise<void>,
): Promise<void> {
  const env = await segmentEnv(adapter);
  try {
    await body(env);
  } finally {
    env.cleanup();
  }
}

/** Awaits `promise` and checks that it rejects with an MqStoreError of `code`. */
export async function rejectsWithCode(promise: Promise<unknown>, code: string): Promise<void> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof MqStoreError && error.code === code) return;
    throw new Error(`Expected MqStoreError ${code}, got ${String(error)}`, { cause: error });
  }
  throw new Error(`Expected MqStoreError ${code}, but it resolved`);
}

/** Lets every queued callback and I/O completion run (to check that something did NOT happen). */
export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** A 20-digit segment name. */
export function segmentName(offset: number): string {
  return String(offset).padStart(20, "0");
}

/** What {@link spyPort} can change. */
export interface SpyOverrides {
  /** Replaces `Mapping.lock()`'s answer. */
  lockResult?: boolean;
  /** Called instead of `rename()` before the real one runs. */
  beforeRename?: (from: string, to: string) => void;
  /** Called with the name of every port, file and mapping method before it runs; throwing aborts it. */
  beforeCall?: (operation: string) => void;
}

/**
 * Wraps a port so that calls on its files and mappings are logged as
 * `"map"`, `"advise:random"`, `"populate"`, `"sync"`, `"lock"`, `"unmap"`,
 * `"datasync"`, `"write"`, `"rename"`, `"syncDirectory"`.
 */
export function spyPort(
  inner: RuntimePort,
  log: string[],
  overrides: SpyOverrides = {},
): RuntimePort {
  const wrapMapping = (mapping: Mapping): Mapping =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          log.push(key === "advise" ? `advise:${String(args[2])}` : String(key));
          overrides.beforeCall?.(String(key));
          if (key === "lock" && overrides.lockResult !== undefined) return overrides.lockResult;
          return value.apply(target, args);
        };
      },
    });
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (typeof value !== "function") return value;
        if (key === "map") {
          return async (...args: unknown[]) => {
            log.push("map");
            overrides.beforeCall?.("map");
            return wrapMapping(await value.apply(target, args));
          };
        }
        return (...args: unknown[]) => {
          if (key === "datasync" || key === "write") log.push(String(key));
          overrides.beforeCall?.(String(key));
          return value.apply(target, args);
        };
      },
    });
  return new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "createFile" || key === "openFile") {
        return async (...args: unknown[]) => {
          log.push(String(key));
          overrides.beforeCall?.(String(key));
          return wrapHandle(await value.apply(target, args));
        };
      }
      if (key === "rename") {
        return (from: string, to: string) => {
          log.push("rename");
          overrides.beforeCall?.("rename");
          overrides.beforeRename?.(from, to);
          return value.call(target, from, to);
        };
      }
      return (...args: unknown[]) => {
        if (key === "syncDirectory") log.push("syncDirectory");
        overrides.beforeCall?.(String(key));
        return value.apply(target, args);
      };
    },
  });
}

/**
 * Around-hooks for a mapping's pre-faults and syncs: each gets the call's
 * range and `run`, the real call (a pre-fault also its options).
 */
export interface MappingHooks {
  populate?(
    position: number,
    length: number,
    run: () => Promise<void>,
    options?: PopulateOptions,
  ): Promise<void>;
  sync?(position: number, length: number, run: () => Promise<void>): Promise<void>;
}

/**
 * {@link mappingsPort} with `Mapping.populate` and `Mapping.sync` going
 * through `hooks` (the other calls as they are).
 */
export function hookedMappingsPort(
  inner: RuntimePort,
  hooks: MappingHooks,
  only?: (path: string) => boolean,
): RuntimePort {
  const wrapMapping = (mapping: Mapping): Mapping =>
    new Proxy(mapping, {
      get(target, key) {
        const value = Reflect.get(target, key);
        const hook = key === "populate" ? hooks.populate : key === "sync" ? hooks.sync : undefined;
        if (hook !== undefined) {
          return (position: number, length: number, options?: PopulateOptions) =>
            hook(position, length, () => value.call(target, position, length, options), options);
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  return mappingsPort(inner, wrapMapping, only);
}

/**
 * `inner`, with every mapping of the files it creates or opens (awaited or
 * synchronous calls) passed through `wrapMapping`; with `only`, just the
 * files whose path it accepts.
 */
export function mappingsPort(
  inner: RuntimePort,
  wrapMapping: (mapping: Mapping) => Mapping,
  only: (path: string) => boolean = () => true,
): RuntimePort {
  const wrapHandle = (handle: FileHandle): FileHandle =>
    new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "map") {
          return async (offset?: number, length?: number) =>
            wrapMapping(await target.map(offset, length));
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  return handlesPort(inner, wrapHandle, only);
}

/**
 * `inner`, with every file handle it creates or opens (awaited or
 * synchronous calls) passed through `wrapHandle`; with `only`, just the
 * files whose path it accepts.
 */
export function handlesPort(
  inner: RuntimePort,
  wrapHandle: (handle: FileHandle) => FileHandle,
  only: (path: string) => boolean = () => true,
): RuntimePort {
  const wrapIf = (path: unknown, handle: FileHandle): FileHandle =>
    only(String(path)) ? wrapHandle(handle) : handle;
  return new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key);
      if (typeof value !== "function") return value;
      if (key === "createFile" || key === "openFile") {
        return async (...args: unknown[]) => wrapIf(args[0], await value.apply(target, args));
      }
      if (key === "createFileSync" || key === "openFileSync") {
        return (...args: unknown[]) => wrapIf(args[0], value.apply(target, args));
      }
      return value.bind(target);
    },
  });
}
