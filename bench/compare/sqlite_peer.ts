/**
 * SQLite in WAL mode as a comparison peer, through the runtime's driver:
 * better-sqlite3 on Node, `bun:sqlite` on Bun, `node:sqlite` on Deno.
 *
 * - `async`: synchronous=NORMAL (in WAL mode a commit does not sync; the
 *   WAL is synced at checkpoints) and 1000 rows per transaction.
 * - `sync`: synchronous=FULL (every commit syncs the WAL) and one row per
 *   transaction, so every acknowledged row is durable.
 *
 * The drivers are synchronous, so concurrent producers on one thread
 * would only take turns: the peer serves one producer.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { type Durability, packageVersion, type Peer, type PeerModule, reasonOf } from "./_peer.ts";

interface Statement {
  run(...values: unknown[]): unknown;
  get(...values: unknown[]): unknown;
}

interface Connection {
  exec(sql: string): unknown;
  prepare(sql: string): Statement;
  close(): unknown;
}

interface Driver {
  /** `better-sqlite3 12.x`, `bun:sqlite`, `node:sqlite`. */
  name: string;
  connect(path: string): Connection;
  /** The value bound for a blob (better-sqlite3 wants a Buffer). */
  blob(payload: Uint8Array): unknown;
}

let driverPromise: Promise<Driver> | undefined;

async function loadDriver(): Promise<Driver> {
  const host = globalThis as { Bun?: unknown; Deno?: unknown };
  if (host.Bun !== undefined) {
    // A non-literal specifier: deno check must not try to resolve it.
    const specifier = "bun:sqlite";
    const mod = await import(specifier) as { Database: new (path: string) => Connection };
    return { name: "bun:sqlite", connect: (path) => new mod.Database(path), blob: (p) => p };
  }
  if (host.Deno !== undefined) {
    const specifier = "node:sqlite";
    const mod = await import(specifier) as { DatabaseSync: new (path: string) => Connection };
    return { name: "node:sqlite", connect: (path) => new mod.DatabaseSync(path), blob: (p) => p };
  }
  const specifier = "better-sqlite3";
  const mod = await import(specifier) as { default: new (path: string) => Connection };
  return {
    name: `better-sqlite3 ${packageVersion("better-sqlite3")}`,
    connect: (path) => new mod.default(path),
    blob: (p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength),
  };
}

function driver(): Promise<Driver> {
  driverPromise ??= loadDriver();
  return driverPromise;
}

class SqlitePeer implements Peer {
  #connection: Connection;
  #insert: Statement;
  #driver: Driver;

  constructor(connection: Connection, driver: Driver) {
    this.#connection = connection;
    this.#driver = driver;
    this.#insert = connection.prepare("INSERT INTO messages (body) VALUES (?)");
  }

  put(payload: Uint8Array): Promise<void> {
    this.#insert.run(this.#driver.blob(payload));
    return Promise.resolve();
  }

  putBatch(payloads: readonly Uint8Array[]): Promise<void> {
    this.#connection.exec("BEGIN");
    try {
      for (const payload of payloads) this.#insert.run(this.#driver.blob(payload));
      this.#connection.exec("COMMIT");
    } catch (error) {
      this.#connection.exec("ROLLBACK");
      throw error;
    }
    return Promise.resolve();
  }

  close(): Promise<void> {
    this.#connection.close();
    return Promise.resolve();
  }
}

/** The SQLite peer. */
export const sqlitePeer: PeerModule = {
  name: "sqlite",
  async probe() {
    try {
      const d = await driver();
      const connection = d.connect(":memory:");
      const row = connection.prepare("SELECT sqlite_version() AS v").get() as { v: string };
      connection.close();
      return { version: `${d.name} (SQLite ${row.v})` };
    } catch (error) {
      return { reason: reasonOf(error) };
    }
  },
  settings(durability) {
    return durability === "async"
      ? "journal_mode=WAL, synchronous=NORMAL, 1000 rows per transaction, INTEGER PRIMARY KEY + BLOB"
      : "journal_mode=WAL, synchronous=FULL, one row per transaction (autocommit)";
  },
  supportsProducers(producers) {
    return producers === 1;
  },
  async open(directory, durability: Durability) {
    const d = await driver();
    const connection = d.connect(`${directory}/bench.sqlite`);
    connection.exec("PRAGMA journal_mode = WAL");
    connection.exec(`PRAGMA synchronous = ${durability === "async" ? "NORMAL" : "FULL"}`);
    connection.exec("CREATE TABLE messages (id INTEGER PRIMARY KEY, body BLOB NOT NULL)");
    return new SqlitePeer(connection, d);
  },
};
