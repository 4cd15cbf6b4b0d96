/**
 * Dispatch from the put path's hints (src/commit_log/dispatch_hints.ts)
 * must write exactly what the decode writes. Two ways to see it:
 *
 * - a store fed random mixes of messages dispatches them from hints;
 *   its consume-queue and index files are kept, deleted, and rebuilt by
 *   the re-dispatch at reopen (which decodes every record): the bytes
 *   must be the same;
 * - a commit log and a dispatcher built by hand, with and without a hint
 *   ring, take the same puts: the files must be the same, and the
 *   dispatcher's counters show which records came from a hint (every one
 *   a put describes; the rest — a full ring, a queued put, a refused put,
 *   a hint that does not match — decoded).
 *
 * @module
 */

import assert from "node:assert/strict";
import fs from "node:fs";
import { describe, test } from "node:test";
import { CommitLog } from "../src/commit_log/commit_log.ts";
import { DispatchHints, HINT_KEYS_MAX } from "../src/commit_log/dispatch_hints.ts";
import { StoreCheckpoint } from "../src/commit_log/store_checkpoint.ts";
import { StoreStats } from "../src/commit_log/store_stats.ts";
import type { MessageInput, PropertiesInput } from "../src/record/mod.ts";
import { MemoryPort } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { ManualClock } from "../src/segment/clock.ts";
import { ConsumeQueueTable } from "../src/store/consume_queue_table.ts";
import { Dispatcher } from "../src/store/dispatcher.ts";
import { IndexService } from "../src/store/index_service.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { type MessageStoreOptions, resolveOptions } from "../src/store/options.ts";
import { prng } from "./_prng.ts";
import {
  body,
  dispatchFiles,
  openMemoryStore,
  removeFiles,
  withStoreDirectory,
} from "./_store_helpers.ts";

const TOPICS = ["Orders", "%RETRY%group_a", "T"];
const TAGS = ["TagA", "", "créé", "标签", "tag with space", "😀"];
const KEY_WORDS = ["order-1", "k", "clé", "键", "x😀y", "customer-7"];

/** A random message of the mix (sysFlag: transaction types; DELAY levels). */
function randomMessage(next: () => number, i: number, single: boolean): MessageInput {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const pairs: [string, string][] = [];
  if (next() < 0.8) pairs.push(["TAGS", pick(TAGS)]);
  if (next() < 0.7) {
    // One to six tokens, some separated by two spaces (an empty token).
    // Now and then more keys than a hint holds: that record is decoded.
    const length = next() < 0.03 ? HINT_KEYS_MAX + 2 : 1 + Math.floor(next() * 6);
    const tokens = Array.from({ length }, () => pick(KEY_WORDS) + i);
    pairs.push(["KEYS", tokens.join(next() < 0.2 ? "  " : " ")]);
  }
  if (next() < 0.5) pairs.push(["UNIQ_KEY", `UNIQ${i.toString(16).padStart(8, "0")}`]);
  if (next() < 0.05) pairs.push(["TAGS", ""]); // an empty later pair: the earlier one stays
  if (next() < 0.05) pairs.push(["KEYS", "late-key"]); // a later pair wins
  let sysFlag = 0;
  if (single) {
    if (next() < 0.15) pairs.push(["DELAY", String(Math.floor(next() * 22))]);
    if (next() < 0.2) sysFlag = pick([0x4, 0x8, 0xC]);
  }
  const shape = next();
  const properties: PropertiesInput = shape < 0.4
    ? pairs
    : shape < 0.7
    ? new Map(pairs)
    : Object.fromEntries(pairs);
  return {
    topic: pick(TOPICS),
    queueId: Math.floor(next() * 4),
    body: body(1 + Math.floor(next() * 300), i),
    properties,
    sysFlag,
  };
}

/** Puts `count` random messages (some in batches) and returns the records put. */
async function putMix(
  put: (message: MessageInput) => Promise<{ status: string }>,
  putBatch: (messages: MessageInput[]) => Promise<{ status: string }>,
  seed: number,
  count: number,
): Promise<number> {
  const next = prng(seed);
  let records = 0;
  for (let i = 0; i < count;) {
    if (next() < 0.2) {
      const first = randomMessage(next, i, false);
      const batch = Array.from({ length: 1 + Math.floor(next() * 5) }, (_, k) => ({
        ...randomMessage(next, i + k, false),
        topic: first.topic,
        queueId: first.queueId,
      }));
      assert.equal((await putBatch(batch)).status, "PUT_OK");
      i += batch.length;
      records += batch.length;
    } else {
      assert.equal((await put(randomMessage(next, i, true))).status, "PUT_OK");
      i++;
      records++;
    }
  }
  return records;
}

function assertSameFiles(actual: Map<string, Uint8Array>, expected: Map<string, Uint8Array>): void {
  assert.deepEqual([...actual.keys()].sort(), [...expected.keys()].sort());
  for (const [path, bytes] of expected) {
    const other = actual.get(path)!;
    const differs = bytes.findIndex((b, i) => b !== other[i]);
    assert.equal(differs, -1, `${path} differs at byte ${differs}`);
  }
}

describe("MessageStore dispatch hints", () => {
  const cases = [
    { seed: 1, messageIndexEnable: true },
    { seed: 2, messageIndexEnable: true },
    { seed: 3, messageIndexEnable: false },
    // Records reach the file by positional writes: hints taken without a
    // look at the records' headers in the mapping (see the dispatcher).
    { seed: 4, messageIndexEnable: true, flushDiskType: "SYNC_FLUSH" as const },
  ];
  for (const c of cases) {
    const flush = c.flushDiskType === undefined ? "" : `, ${c.flushDiskType}`;
    test(`putMessage() dispatch from hints writes the files a decoding re-dispatch writes (seed ${c.seed}, index ${c.messageIndexEnable}${flush})`, async () => {
      const { messageIndexEnable, flushDiskType } = c;
      const env = await openMemoryStore({ messageIndexEnable, flushDiskType });
      const { store, port, directory } = env;
      let reopened: MessageStore | undefined;
      try {
        // 64 KiB segments: about 200 records each, so several rolls.
        const records = await putMix(
          (m) => store.putMessage(m),
          (b) => store.putMessages(b),
          c.seed,
          1_500,
        );
        assert.ok(records >= 1_500);
        assert.ok(store.maxOffset > 4 * 0x1_0000, "segments rolled");
        await store.whenDispatched(store.maxOffset);
        // Most records were dispatched from their hints.
        assert.ok(store.stats().dispatchHintedCount > records / 2);
        await store.close();
        const hinted = await dispatchFiles(port, directory);
        assert.ok(hinted.size > 4);
        await removeFiles(port, `${directory}/consumequeue`);
        await removeFiles(port, `${directory}/index`);
        reopened = await env.reopen();
        await reopened.whenDispatched(reopened.maxOffset);
        await reopened.close();
        assertSameFiles(await dispatchFiles(port, directory), hinted);
      } finally {
        await store.close();
        await reopened?.close();
      }
    });
  }

  test("stats() counts the messages dispatched from hints and those decoded", async () => {
    const env = await openMemoryStore();
    const { store, port, directory } = env;
    let reopened: MessageStore | undefined;
    try {
      const count = 600;
      for (let i = 0; i < count; i++) {
        const result = await store.putMessage({
          topic: "Counted",
          queueId: i & 3,
          body: body(200, i),
          properties: { TAGS: "t", KEYS: `k-${i}` },
        });
        assert.equal(result.status, "PUT_OK");
      }
      assert.ok(store.maxOffset > 0x1_0000, "a segment rolled");
      await store.whenDispatched(store.maxOffset);
      const live = store.stats();
      assert.equal(live.dispatchHintedCount + live.dispatchDecodedCount, count);
      // Every record but a segment's first came with its hint.
      assert.ok(live.dispatchHintedCount >= count - 4, `${live.dispatchHintedCount} hinted`);
      await store.close();
      await removeFiles(port, `${directory}/consumequeue`);
      reopened = await env.reopen();
      await reopened.whenDispatched(reopened.maxOffset);
      const again = reopened.stats();
      assert.equal(again.dispatchHintedCount, 0);
      assert.equal(again.dispatchDecodedCount, count, "re-dispatch at open decodes");
    } finally {
      await store.close();
      await reopened?.close();
    }
  });

  test("putMessage() dispatch from hints on the runtime's file system matches the decode", async () => {
    await withStoreDirectory(async (directory) => {
      const options: MessageStoreOptions = {
        mappedFileSizeCommitLog: 0x1_0000,
        maxMessageSize: 0x2000,
        mappedFileSizeConsumeQueue: 20 * 1024,
        maxHashSlotNum: 256,
        maxIndexNum: 1024,
        clock: new ManualClock(1_700_000_000_000),
        onWarning: () => {},
      };
      const store = await MessageStore.open(directory, options);
      let reopened: MessageStore | undefined;
      try {
        await putMix((m) => store.putMessage(m), (b) => store.putMessages(b), 7, 600);
        await store.whenDispatched(store.maxOffset);
        await store.close();
        const read = (root: string): Map<string, Uint8Array> => {
          const files = new Map<string, Uint8Array>();
          const walk = (path: string) => {
            if (!fs.existsSync(path)) return;
            for (const entry of fs.readdirSync(path, { withFileTypes: true })) {
              const child = `${path}/${entry.name}`;
              if (entry.isDirectory()) walk(child);
              else files.set(child.slice(root.length), new Uint8Array(fs.readFileSync(child)));
            }
          };
          walk(`${root}/consumequeue`);
          walk(`${root}/index`);
          return files;
        };
        const hinted = read(directory);
        fs.rmSync(`${directory}/consumequeue`, { recursive: true });
        fs.rmSync(`${directory}/index`, { recursive: true });
        reopened = await MessageStore.open(directory, options);
        await reopened.whenDispatched(reopened.maxOffset);
        await reopened.close();
        assertSameFiles(read(directory), hinted);
      } finally {
        await store.close();
        await reopened?.close();
      }
    });
  });
});

// ---------------------------------------------------------------------------
// A commit log and a dispatcher by hand: the dispatcher's counters tell
// hinted records from decoded ones.

interface Parts {
  commitLog: CommitLog;
  dispatcher: Dispatcher;
  consumeQueues: ConsumeQueueTable;
  /** While set, the dispatcher's limit is 0 (it dispatches nothing). */
  gate: { held: boolean };
  /** Puts one message and dispatches in step, as the store does. */
  put(message: MessageInput): Promise<string>;
  putBatch(messages: MessageInput[]): Promise<string>;
  /** Dispatches everything and closes; returns the dispatch files. */
  finish(): Promise<Map<string, Uint8Array>>;
  /** The parts' clock. */
  clock: ManualClock;
}

async function openParts(hints: DispatchHints | undefined, indexed = true): Promise<Parts> {
  const port = new MemoryPort(runtimeName());
  const clock = new ManualClock(1_700_000_000_000);
  const directory = "/parts";
  const resolved = resolveOptions({
    mappedFileSizeCommitLog: 0x1_0000,
    maxMessageSize: 0x2000,
    mappedFileSizeConsumeQueue: 20 * 1024,
    maxHashSlotNum: 256,
    maxIndexNum: 1024,
    messageIndexEnable: indexed,
    onWarning: () => {},
    clock,
  });
  await port.makeDirectory(directory);
  const checkpoint = await StoreCheckpoint.load(port, `${directory}/checkpoint`);
  const consumeQueues = new ConsumeQueueTable({
    port,
    rootDirectory: directory,
    mappedFileSizeConsumeQueue: resolved.mappedFileSizeConsumeQueue,
    clock,
  });
  await consumeQueues.load();
  await consumeQueues.recover();
  const index = indexed
    ? new IndexService({
      port,
      rootDirectory: directory,
      maxHashSlotNum: 256,
      maxIndexNum: 1024,
      clock,
    })
    : undefined;
  await index?.load({ lastExitOK: true, indexMsgTimestamp: 0 });
  const commitLog = new CommitLog({
    ...resolved,
    port,
    directory: `${directory}/commitlog`,
    delayLevelCount: resolved.delayLevelsMs.length,
    checkpoint,
    stats: new StoreStats(),
    dispatchHints: hints,
  });
  await commitLog.loadAndRecover(true);
  commitLog.start();
  const gate = { held: false };
  const errors: unknown[] = [];
  const dispatcher = new Dispatcher({
    commitLog: commitLog.queue,
    limit: () => gate.held ? 0 : commitLog.readableOffset,
    consumeQueues,
    index,
    delayLevelsMs: resolved.delayLevelsMs,
    fromOffset: 0,
    windowBytes: 0x80_0000,
    hints,
    onError: (error) => errors.push(error),
  });
  dispatcher.start();
  // The log's first record waits for its segment to be made (a queued
  // put, described by no hint: decoded); its keys make the first index
  // file. Every test starts after it: one decoded record.
  assert.equal((await commitLog.putMessage(primer)).status, "PUT_OK");
  await dispatcher.dispatchUpTo(commitLog.maxOffset);
  assert.equal(dispatcher.decodedRecordCount, 1);
  return {
    commitLog,
    dispatcher,
    consumeQueues,
    gate,
    clock,
    async put(message) {
      const r = await commitLog.putMessage(message);
      dispatcher.dispatchNow();
      return r.status;
    },
    async putBatch(messages) {
      const r = await commitLog.putMessages(messages);
      dispatcher.dispatchNow();
      return r.status;
    },
    async finish() {
      gate.held = false;
      await dispatcher.dispatchUpTo(commitLog.readableOffset);
      assert.equal(dispatcher.dispatchedOffset, commitLog.maxOffset);
      await dispatcher.close();
      await commitLog.close();
      await consumeQueues.close();
      await index?.close();
      assert.deepEqual(errors, []);
      return await dispatchFiles(port, directory);
    },
  };
}

const primer: MessageInput = {
  topic: "Orders",
  queueId: 0,
  body: body(10),
  properties: { KEYS: "primer" },
};

const message = (i: number, extra: Partial<MessageInput> = {}): MessageInput => ({
  topic: "Orders",
  queueId: i % 3,
  body: body(40, i),
  properties: { TAGS: `tag${i % 5}`, KEYS: `k${i} o${i}`, UNIQ_KEY: `U${i}` },
  ...extra,
});

describe("Dispatcher with dispatch hints", () => {
  test("Dispatcher dispatches each record a put describes from its hint, as the decode would", async () => {
    const hints = new DispatchHints({ withKeys: true });
    const hinted = await openParts(hints);
    const decoded = await openParts(undefined);
    for (const parts of [hinted, decoded]) {
      const records = await putMix(
        (m) => parts.put(m).then((status) => ({ status })),
        (b) => parts.putBatch(b).then((status) => ({ status })),
        11,
        800,
      );
      assert.ok(records >= 800);
    }
    const total = hinted.dispatcher.hintedRecordCount + hinted.dispatcher.decodedRecordCount;
    // Decoded: records with more than HINT_KEYS_MAX keys, and the first
    // record of each segment (queued behind the BLANK, appended later).
    assert.ok(
      hinted.dispatcher.hintedRecordCount > 0.8 * total,
      `${hinted.dispatcher.hintedRecordCount} of ${total} from hints`,
    );
    assert.equal(decoded.dispatcher.hintedRecordCount, 0);
    assert.equal(decoded.dispatcher.decodedRecordCount, total);
    assertSameFiles(await hinted.finish(), await decoded.finish());
  });

  test("Dispatcher dispatches a batch's run from its hints, up to its last record's timestamp", async () => {
    const hints = new DispatchHints({ withKeys: true });
    const parts = await openParts(hints);
    parts.clock.advance(0x10_0000);
    const batch = Array.from({ length: 40 }, (_, i) => message(3 * i));
    const hintedBefore = parts.dispatcher.hintedRecordCount;
    const r = await parts.commitLog.putMessages(batch);
    assert.equal(r.status, "PUT_OK");
    parts.dispatcher.dispatchNow();
    assert.equal(parts.dispatcher.dispatchedOffset, parts.commitLog.maxOffset);
    assert.equal(parts.dispatcher.hintedRecordCount - hintedBefore, batch.length);
    // The batch's store timestamp (the primer's is the clock's start).
    assert.equal(parts.dispatcher.lastTimestampMs, 1_700_000_000_000 + 0x10_0000);
    const cq = parts.consumeQueues.find("Orders", 0)!;
    assert.equal(cq.maxOffsetInQueue, batch.length + 1);
    await parts.finish();
  });

  test("Dispatcher decodes the records whose hints a full ring dropped", async () => {
    const hints = new DispatchHints({ withKeys: true, capacity: 4 });
    const hinted = await openParts(hints);
    const decoded = await openParts(undefined);
    for (const parts of [hinted, decoded]) {
      parts.gate.held = true;
      const before = parts.dispatcher.dispatchedOffset;
      for (let i = 0; i < 10; i++) assert.equal(await parts.put(message(i)), "PUT_OK");
      assert.equal(parts.dispatcher.dispatchedOffset, before);
    }
    assert.equal(hints.length, 4);
    assert.equal(hints.committedCount, 4);
    const files = await hinted.finish();
    assert.equal(hinted.dispatcher.hintedRecordCount, 4);
    assert.equal(hinted.dispatcher.decodedRecordCount, 1 + 6);
    assertSameFiles(files, await decoded.finish());
  });

  test("Dispatcher finds no hint of a refused put, and hints of the puts around it", async () => {
    const hints = new DispatchHints({ withKeys: true });
    const hinted = await openParts(hints);
    const decoded = await openParts(undefined);
    for (const parts of [hinted, decoded]) {
      parts.gate.held = true;
      assert.equal(await parts.put(message(0)), "PUT_OK");
      // Refused while encoding into the segment (the direct path) ...
      assert.equal(await parts.put(message(1, { topic: "bad topic" })), "MESSAGE_ILLEGAL");
      // ... and in a batch, after its first record was staged.
      assert.equal(
        await parts.putBatch([message(2), message(3, { properties: { TAGS: "a\u0001b" } })]),
        "MESSAGE_ILLEGAL",
      );
      assert.equal(
        await parts.putBatch([message(4, { queueId: 0 }), message(5, { queueId: 0 })]),
        "PUT_OK",
      );
      assert.equal(await parts.put(message(6)), "PUT_OK");
    }
    assert.equal(hints.committedCount, 4);
    const files = await hinted.finish();
    assert.equal(hinted.dispatcher.hintedRecordCount, 4);
    assert.equal(hinted.dispatcher.decodedRecordCount, 1);
    assertSameFiles(files, await decoded.finish());
  });

  test("Dispatcher decodes a record whose hint does not match its header", async () => {
    const hints = new DispatchHints({ withKeys: true });
    const hinted = await openParts(hints);
    const decoded = await openParts(undefined);
    for (const parts of [hinted, decoded]) {
      parts.gate.held = true;
      assert.equal(await parts.put(message(0)), "PUT_OK");
      if (parts === hinted) {
        // A hint for the next record's offset with another size and tagsCode.
        hints.beginStage();
        hints.stage("Orders", 1, {
          pairCount: 0,
          pairsKnown: true,
          pairName: () => "",
          pairValue: () => "",
        });
        hints.publish(0, parts.commitLog.maxOffset, 123, 1, 5, 0, undefined);
        hints.commit(1);
      }
      assert.equal(await parts.put(message(1)), "PUT_OK");
      assert.equal(await parts.put(message(2)), "PUT_OK");
    }
    const files = await hinted.finish();
    assert.equal(hinted.dispatcher.hintedRecordCount, 2);
    assert.equal(hinted.dispatcher.decodedRecordCount, 1 + 1);
    assert.equal(hints.length, 0);
    assertSameFiles(files, await decoded.finish());
  });

  test("Dispatcher dispatches the first record of a new queue from its hint", async () => {
    const hints = new DispatchHints({ withKeys: true });
    const parts = await openParts(hints);
    assert.equal(parts.consumeQueues.find("Orders", 7), undefined);
    assert.equal(await parts.put(message(1, { queueId: 7 })), "PUT_OK");
    // Dispatched in step, into a queue made in memory while its file is created.
    assert.equal(parts.dispatcher.dispatchedOffset, parts.commitLog.maxOffset);
    assert.equal(parts.consumeQueues.find("Orders", 7)?.maxOffsetInQueue, 1);
    assert.equal(await parts.put(message(2, { queueId: 7 })), "PUT_OK");
    await parts.finish();
    assert.equal(parts.dispatcher.hintedRecordCount, 2);
    assert.equal(parts.dispatcher.decodedRecordCount, 1);
  });

  test("Dispatcher writes no index entry from hints when the index is off", async () => {
    const hints = new DispatchHints({ withKeys: false });
    const hinted = await openParts(hints, false);
    const decoded = await openParts(undefined, false);
    for (const parts of [hinted, decoded]) {
      for (let i = 0; i < 20; i++) assert.equal(await parts.put(message(i)), "PUT_OK");
    }
    const files = await hinted.finish();
    assert.equal(hinted.dispatcher.hintedRecordCount, 20);
    assert.equal(hinted.dispatcher.decodedRecordCount, 1);
    assert.ok([...files.keys()].every((path) => path.startsWith("/consumequeue/")));
    assertSameFiles(files, await decoded.finish());
  });
});

describe("DispatchHints", () => {
  const noPairs = { pairCount: 0, pairsKnown: true, pairName: () => "", pairValue: () => "" };
  const pairsOf = (pairs: [string, string][]) => ({
    pairCount: pairs.length,
    pairsKnown: true,
    pairName: (i: number) => pairs[i]![0],
    pairValue: (i: number) => pairs[i]![1],
  });

  test("DispatchHints.find() drops hints behind the offset and finds none past a gap", () => {
    const hints = new DispatchHints({ withKeys: false });
    for (const offset of [0, 100, 300]) {
      hints.beginStage();
      hints.stage("T", 0, noPairs);
      hints.publish(0, offset, 100, 0, 1, 0, undefined);
      hints.commit(1);
    }
    assert.equal(hints.find(100) >= 0, true);
    assert.equal(hints.droppedCount, 1);
    hints.consume();
    assert.equal(hints.find(200), -1); // a gap: the record at 200 is decoded
    assert.equal(hints.length, 1);
    assert.equal(hints.find(400), -1);
    assert.equal(hints.length, 0);
  });

  test("DispatchHints.commit() publishes nothing for a put that staged another count", () => {
    const hints = new DispatchHints({ withKeys: false });
    hints.beginStage();
    hints.stage("T", 0, noPairs);
    hints.publish(0, 0, 100, 0, 1, 0, undefined);
    // The append threw: no commit. The next put stages over the slot.
    hints.beginStage();
    hints.stage("T", 0, noPairs);
    hints.publish(0, 0, 90, 0, 1, 0, undefined);
    hints.commit(2);
    assert.equal(hints.length, 0);
    hints.beginStage();
    hints.stage("T", 0, noPairs);
    hints.publish(0, 0, 90, 0, 1, 0, undefined);
    hints.commit(1);
    assert.equal(hints.sizes[hints.find(0)], 90);
  });

  test("DispatchHints.stage() hashes keys as the decode does, and leaves records with too many keys to it", () => {
    const hints = new DispatchHints({ withKeys: true });
    const keys = Array.from({ length: HINT_KEYS_MAX + 1 }, (_, i) => `k${i}`).join(" ");
    hints.beginStage();
    hints.stage("T", 0, pairsOf([["UNIQ_KEY", "u"], ["KEYS", " a  é "], ["TAGS", "x"]]));
    hints.stage("T", 0, pairsOf([["KEYS", keys]]));
    hints.publish(0, 0, 100, 0, 1, 0, undefined);
    hints.publish(1, 100, 100, 1, 1, 0, undefined);
    hints.commit(2);
    const slot = hints.find(0);
    assert.equal(hints.keyCounts[slot], 3);
    const javaHash = (text: string) => {
      let h = 0;
      for (let i = 0; i < text.length; i++) h = (Math.imul(h, 31) + text.charCodeAt(i)) | 0;
      return h;
    };
    assert.deepEqual(
      [...hints.keyHashes.subarray(slot * HINT_KEYS_MAX, slot * HINT_KEYS_MAX + 3)],
      ["T#u", "T#a", "T#é"].map(javaHash),
    );
    assert.equal(hints.tagsCodes[slot], javaHash("x"));
    hints.consume();
    assert.equal(hints.find(100), -1);
  });

  test("DispatchHints.stage() hashes a KEYS string it saw before as the first time, whatever the topic and UNIQ_KEY", () => {
    const hints = new DispatchHints({ withKeys: true });
    const javaHash = (text: string) => {
      let h = 0;
      for (let i = 0; i < text.length; i++) h = (Math.imul(h, 31) + text.charCodeAt(i)) | 0;
      return h;
    };
    // More strings than the cache holds, several of one length and last
    // character (one set), the longest right at the key limit.
    const keys = [
      ...Array.from({ length: 40 }, (_, i) => `key-${i % 10} order-${i}`),
      Array.from({ length: HINT_KEYS_MAX }, (_, i) => `k${i}`).join(" "),
      "  a  b ",
    ];
    let offset = -100;
    // Rounds of repeated strings, and one of keys that never repeat (the
    // cache is then skipped, and tried again now and then).
    for (let round = 0; round < 5; round++) {
      const count = round === 2 ? 1000 : keys.length * 2;
      for (let i = 0; i < count; i++) {
        offset += 100;
        const topic = (i + round) % 3 === 0 ? "Orders" : "T";
        // The same KEYS, a copy of it (another string object), or with a UNIQ_KEY.
        const key = round === 2 ? `once-${i} k${i % 7}` : keys[(i * 17) % keys.length]!;
        const value = i % 4 === 1 ? [...key].join("") : key;
        const pairs: [string, string][] = [["TAGS", i % 2 === 0 ? "A" : "B"], ["KEYS", value]];
        if (i % 5 === 0) pairs.unshift(["UNIQ_KEY", `U${i}`]);
        hints.beginStage();
        hints.stage(topic, 0, pairsOf(pairs));
        hints.publish(0, offset, 100, i, 1, 0, undefined);
        hints.commit(1);
        const slot = hints.find(offset);
        const expected = [
          ...(i % 5 === 0 ? [`U${i}`] : []),
          ...value.split(" ").filter((token) => token !== ""),
        ].map((key) => javaHash(`${topic}#${key}`));
        if (expected.length > HINT_KEYS_MAX) {
          // A UNIQ_KEY and a full KEYS: too many, the record is decoded.
          assert.equal(slot, -1, `round ${round} message ${i}`);
          continue;
        }
        assert.equal(hints.keyCounts[slot], expected.length, `round ${round} message ${i}`);
        assert.deepEqual(
          [...hints.keyHashes.subarray(
            slot * HINT_KEYS_MAX,
            slot * HINT_KEYS_MAX + expected.length,
          )],
          expected,
          `round ${round} message ${i}`,
        );
        assert.equal(hints.tagsCodes[slot], javaHash(i % 2 === 0 ? "A" : "B"));
        hints.consume();
      }
    }
  });
});
