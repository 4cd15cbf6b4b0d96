/**
 * The one interface every store in the side-by-side comparison implements,
 * so the workloads in `workloads.ts` drive mqstore and its peers through the
 * same calls.
 *
 * Durability is held equal on both sides of each comparison:
 * - `async`: a put is acknowledged once the record is in the store; the
 *   store syncs to disk on its own schedule (mqstore ASYNC_FLUSH, lmdb's
 *   batched commits, SQLite WAL with synchronous=NORMAL, LevelDB without
 *   `sync`), never once per record.
 * - `sync`: a put is acknowledged only once the record is on disk
 *   (mqstore SYNC_FLUSH, lmdb's sync on commit, SQLite synchronous=FULL
 *   with one row per transaction, LevelDB `sync: true`).
 *
 * @module
 */

import { readFileSync } from "node:fs";

/** When a put is acknowledged; see the module doc. */
export type Durability = "async" | "sync";

/** A store opened for one measured run. */
export interface Peer {
  /**
   * Stores one record. With `sync` durability the promise settles once the
   * record is durable; concurrent calls are allowed (the 64-producer
   * workloads make them) and may be grouped by the store.
   */
  put(payload: Uint8Array): Promise<void>;
  /**
   * Stores the records as one unit (one transaction, one batch): the
   * throughput workloads call it with 1000 records.
   */
  putBatch(payloads: readonly Uint8Array[]): Promise<void>;
  /** Closes the store; the run's directory is removed by the caller. */
  close(): Promise<void>;
}

/** A store that may or may not exist on the running runtime. */
export interface PeerModule {
  /** Short name used in tables: `mqstore`, `lmdb`, `sqlite`, `level`. */
  readonly name: string;
  /**
   * Loads the store's package and answers its version (and driver), or
   * `undefined` with the reason in `reason` when it is not usable here.
   */
  probe(): Promise<PeerProbe>;
  /** How the store is set up for a durability level, for the report. */
  settings(durability: Durability): string;
  /** Whether the store can serve this many concurrent durable producers. */
  supportsProducers(producers: number): boolean;
  /** Opens a fresh store in the (empty, existing) directory. */
  open(directory: string, durability: Durability): Promise<Peer>;
}

/** What {@link PeerModule.probe} found. */
export interface PeerProbe {
  /** Version string, e.g. `lmdb 3.5.6`; undefined when unavailable. */
  version?: string;
  /** Why the store is unavailable (missing export, addon not loadable...). */
  reason?: string;
}

/** Big-endian 8-byte key of a record index, so keys sort in put order. */
export function indexKey(index: number): Uint8Array {
  const key = new Uint8Array(8);
  const view = new DataView(key.buffer);
  view.setUint32(0, Math.floor(index / 0x1_0000_0000));
  view.setUint32(4, index >>> 0);
  return key;
}

/** The short message of an error, for a probe's reason. */
export function reasonOf(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split("\n")[0]!.slice(0, 160);
}

/** The installed version of an npm package of this repository, or "?". */
export function packageVersion(name: string): string {
  try {
    const url = new URL(`../../node_modules/${name}/package.json`, import.meta.url);
    const text = readFileSync(url, "utf8");
    return (JSON.parse(text) as { version?: string }).version ?? "?";
  } catch {
    return "?";
  }
}
