/**
 * mqstore itself, plugged into the comparison through the same interface as
 * its peers. `MessageStore` is loaded from the package entry (`mod.ts`) at
 * run time, so the comparison still runs, with mqstore marked pending,
 * while the store facade is missing or broken.
 *
 * - `async`: ASYNC_FLUSH; a batch is 1000 `putMessage()` calls issued
 *   together and awaited together (the `mqstore-batch` variant sends them
 *   as one `putMessages()` batch: consecutive records of one queue).
 * - `sync`: SYNC_FLUSH; every `putMessage()` settles once the group commit
 *   has flushed its record, and concurrent producers share flushes.
 *
 * @module
 */

import { type Durability, type Peer, type PeerModule, reasonOf } from "./_peer.ts";

const TOPIC = "BenchTopic";
/** Commit-log segment size: RocketMQ's default (1 GiB), named for the report. */
const SEGMENT_BYTES = 0x4000_0000;
/**
 * SYNC_FLUSH segment size: 256 MiB, warmed at open (`warmMapedFileEnable`:
 * pre-faulted and its zeros written through, RocketMQ's warm-up), so that
 * flushes overwrite written blocks — a running store's steady state, where
 * segments are prepared ahead in idle time, and SQLite's WAL's, which is
 * overwritten after each checkpoint. A 1 GiB warm-up would add seconds to
 * every case's open.
 */
const SYNC_SEGMENT_BYTES = 0x1000_0000;

interface PutResult {
  status: string;
  error?: Error;
}

interface StoreMessage {
  topic: string;
  queueId: number;
  body: Uint8Array;
}

interface Store {
  putMessage(message: StoreMessage): Promise<PutResult>;
  putMessages(messages: readonly StoreMessage[]): Promise<PutResult>;
  close(): Promise<void>;
}

interface StoreClass {
  open(directory: string, options: Record<string, unknown>): Promise<Store>;
}

async function loadStore(): Promise<StoreClass> {
  // Not a literal: the facade may not exist yet while the rest is built.
  const specifier = new URL("../../mod.ts", import.meta.url).href;
  const mod = await import(specifier) as { MessageStore?: unknown };
  const store = mod.MessageStore as Partial<StoreClass> | undefined;
  if (typeof store?.open !== "function") {
    throw new Error("mod.ts does not export MessageStore.open yet");
  }
  return store as StoreClass;
}

function check(result: PutResult): void {
  if (result.status !== "PUT_OK") {
    throw new Error(`mqstore put failed: ${result.status} ${result.error?.message ?? ""}`);
  }
}

class MqStorePeer implements Peer {
  #store: Store;
  #batched: boolean;

  constructor(store: Store, batched: boolean) {
    this.#store = store;
    this.#batched = batched;
  }

  async put(payload: Uint8Array): Promise<void> {
    check(await this.#store.putMessage({ topic: TOPIC, queueId: 0, body: payload }));
  }

  async putBatch(payloads: readonly Uint8Array[]): Promise<void> {
    if (this.#batched) {
      const messages = payloads.map((body) => ({ topic: TOPIC, queueId: 0, body }));
      check(await this.#store.putMessages(messages));
      return;
    }
    const pending: Promise<PutResult>[] = [];
    for (const body of payloads) {
      pending.push(this.#store.putMessage({ topic: TOPIC, queueId: 0, body }));
    }
    for (const result of await Promise.all(pending)) check(result);
  }

  close(): Promise<void> {
    return this.#store.close();
  }
}

function mqstorePeerModule(name: string, batched: boolean): PeerModule {
  return {
    name,
    async probe() {
      try {
        await loadStore();
        const text = await import("node:fs").then((fs) =>
          fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8")
        );
        return { version: `mqstore ${(JSON.parse(text) as { version: string }).version}` };
      } catch (error) {
        return { reason: `pending: ${reasonOf(error)}` };
      }
    },
    settings(durability) {
      const how = batched
        ? "putMessages() of 1000 records (one batch, one queue)"
        : "putMessage() per record, 1000 in flight per batch";
      return durability === "async"
        ? `ASYNC_FLUSH (flushIntervalCommitLog 500 ms, flushCommitLogLeastPages 4), 1 GiB segments, ${how}`
        : "SYNC_FLUSH (group commit, syncFlushTimeout 5 s), 256 MiB segments warmed at open (warmMapedFileEnable: zeros written through), putMessage() per record awaited";
    },
    supportsProducers() {
      return !batched;
    },
    async open(directory: string, durability: Durability) {
      const MessageStore = await loadStore();
      const store = await MessageStore.open(directory, {
        ...(durability === "async"
          ? { flushDiskType: "ASYNC_FLUSH", mappedFileSizeCommitLog: SEGMENT_BYTES }
          : {
            flushDiskType: "SYNC_FLUSH",
            mappedFileSizeCommitLog: SYNC_SEGMENT_BYTES,
            warmMapedFileEnable: true,
          }),
      });
      const peer = new MqStorePeer(store, batched);
      // The first put waits for the warm-up: done here, before the clock runs.
      if (durability !== "async") await peer.put(new Uint8Array(1));
      return peer;
    },
  };
}

/** mqstore, one `putMessage()` per record. */
export const mqstorePeer: PeerModule = mqstorePeerModule("mqstore", false);
/** mqstore, `putMessages()` batches (throughput workloads only). */
export const mqstoreBatchPeer: PeerModule = mqstorePeerModule("mqstore-batch", true);
