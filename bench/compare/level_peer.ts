/**
 * classic-level (LevelDB) as a comparison peer.
 *
 * - `async`: `batch()` of 1000 puts without options (`sync` off: the log
 *   is written, not synced).
 * - `sync`: every `put()` with `sync: true`. Concurrent producers' writes
 *   are merged by LevelDB's writer queue into shared log writes and syncs.
 *
 * @module
 */

import { type Durability, indexKey, packageVersion, type Peer, type PeerModule } from "./_peer.ts";
import { reasonOf } from "./_peer.ts";

interface BatchOperation {
  type: "put";
  key: Uint8Array;
  value: Uint8Array;
}

interface LevelDatabase {
  open(): Promise<void>;
  put(key: Uint8Array, value: Uint8Array, options?: { sync?: boolean }): Promise<void>;
  batch(operations: BatchOperation[], options?: { sync?: boolean }): Promise<void>;
  close(): Promise<void>;
}

interface LevelModule {
  ClassicLevel: new (location: string, options: Record<string, unknown>) => LevelDatabase;
}

async function load(): Promise<LevelModule> {
  return await import("classic-level") as unknown as LevelModule;
}

/**
 * The options of a synced write. Asynchronous writes pass no options at
 * all: on Node, classic-level 3's batch() with an options object, even
 * `{ sync: false }`, measured about 5× slower than without one.
 */
const SYNC = Object.freeze({ sync: true });

class LevelPeer implements Peer {
  #db: LevelDatabase;
  #sync: boolean;
  #next = 0;

  constructor(db: LevelDatabase, durability: Durability) {
    this.#db = db;
    this.#sync = durability === "sync";
  }

  put(payload: Uint8Array): Promise<void> {
    const key = indexKey(this.#next++);
    return this.#sync ? this.#db.put(key, payload, SYNC) : this.#db.put(key, payload);
  }

  putBatch(payloads: readonly Uint8Array[]): Promise<void> {
    const operations: BatchOperation[] = payloads.map((value) => ({
      type: "put",
      key: indexKey(this.#next++),
      value,
    }));
    return this.#sync ? this.#db.batch(operations, SYNC) : this.#db.batch(operations);
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}

/** The classic-level peer. */
export const levelPeer: PeerModule = {
  name: "level",
  async probe() {
    try {
      await load();
      return { version: `classic-level ${packageVersion("classic-level")}` };
    } catch (error) {
      return { reason: reasonOf(error) };
    }
  },
  settings(durability) {
    return durability === "async"
      ? "keyEncoding/valueEncoding view, batch() of 1000 puts without options (sync off)"
      : "keyEncoding/valueEncoding view, put() with sync: true; concurrent puts grouped by LevelDB";
  },
  supportsProducers() {
    return true;
  },
  async open(directory, durability) {
    const { ClassicLevel } = await load();
    const db = new ClassicLevel(`${directory}/level`, {
      keyEncoding: "view",
      valueEncoding: "view",
    });
    await db.open();
    return new LevelPeer(db, durability);
  },
};
