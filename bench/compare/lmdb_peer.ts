/**
 * lmdb (npm `lmdb`, LMDB through lmdb-js) as a comparison peer.
 *
 * - `async`: `put()` calls are queued and lmdb-js commits each event
 *   turn's puts in one transaction on its writer thread; the workload
 *   awaits every 1000th put. Commits sync on lmdb's own schedule
 *   (overlappingSync), never once per record.
 * - `sync`: every put waits for its commit and then for `db.flushed` (the
 *   commit is on disk). One producer makes one commit per put; concurrent
 *   producers are batched into shared commits by lmdb-js itself.
 *
 * @module
 */

import { type Durability, indexKey, packageVersion, type Peer, type PeerModule } from "./_peer.ts";
import { reasonOf } from "./_peer.ts";

interface LmdbDatabase {
  put(key: Uint8Array, value: Uint8Array): Promise<boolean>;
  readonly flushed: Promise<boolean>;
  close(): Promise<void>;
}

interface LmdbModule {
  open(options: Record<string, unknown>): LmdbDatabase;
}

async function load(): Promise<LmdbModule> {
  return await import("lmdb") as unknown as LmdbModule;
}

class LmdbPeer implements Peer {
  #db: LmdbDatabase;
  #durability: Durability;
  #next = 0;

  constructor(db: LmdbDatabase, durability: Durability) {
    this.#db = db;
    this.#durability = durability;
  }

  async put(payload: Uint8Array): Promise<void> {
    await this.#db.put(indexKey(this.#next++), payload);
    if (this.#durability === "sync") await this.#db.flushed;
  }

  async putBatch(payloads: readonly Uint8Array[]): Promise<void> {
    let last: Promise<boolean> | undefined;
    for (const payload of payloads) last = this.#db.put(indexKey(this.#next++), payload);
    await last;
    if (this.#durability === "sync") await this.#db.flushed;
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}

/** The lmdb peer. */
export const lmdbPeer: PeerModule = {
  name: "lmdb",
  async probe() {
    try {
      await load();
      return { version: `lmdb ${packageVersion("lmdb")}` };
    } catch (error) {
      return { reason: reasonOf(error) };
    }
  },
  settings(durability) {
    return durability === "async"
      ? "binary values, 8-byte keys; put() batched per event turn by lmdb-js, await every 1000th; sync on commit (overlappingSync default)"
      : "binary values, 8-byte keys; each put awaits its commit and db.flushed (sync on commit); concurrent puts share commits";
  },
  supportsProducers() {
    return true;
  },
  async open(directory, durability) {
    const lmdb = await load();
    const db = lmdb.open({
      path: `${directory}/data.mdb`,
      encoding: "binary",
      keyEncoding: "binary",
      compression: false,
      cache: false,
    });
    return new LmdbPeer(db, durability);
  },
};
