/**
 * The batch encoder (src/commit_log/_batch_encoder.ts) must write exactly
 * what encoding the members one by one with the single-message encoder
 * writes (the path batches took before it), stage and publish the same
 * dispatch hints, refuse the same batches with the same errors leaving
 * the bytes as they were; and a store fed random batches must dispatch
 * (in runs of units) the consume-queue and index files a decoding
 * re-dispatch writes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { BatchEncoder } from "../src/commit_log/_batch_encoder.ts";
import { TopicQueueTable } from "../src/commit_log/topic_queue_table.ts";
import { DispatchHints, HINT_KEYS_MAX } from "../src/commit_log/dispatch_hints.ts";
import { MqStoreError } from "../src/errors.ts";
import {
  MessageEncoder,
  type MessageInput,
  patchRecord,
  type PropertiesInput,
  readInt32,
  SYS_FLAG_POSITION,
} from "../src/record/mod.ts";
import type { MessageStore } from "../src/store/message_store.ts";
import {
  installBodyCrcWriter,
  nativeBodyCrcBytesMax,
  nativeBodyCrcs,
} from "../src/record/crc32.ts";
import { loadWasmBodyCrcWriter } from "../src/runtime/_wasm_crc32.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { prng } from "./_prng.ts";
import { dispatchFiles, openMemoryStore, removeFiles } from "./_store_helpers.ts";

const NOW_MS = 1_700_000_000_123;
const MAX_BYTES = 0x2000;
const TOPIC = "BatchTopic";
const HOSTS = ["127.0.0.1:10911", "10.1.2.3:4000", "[::1]:9876", "[fe80::1:2]:10911"];

type Next = () => number;

function pick<T>(next: Next, items: readonly T[]): T {
  return items[Math.floor(next() * items.length)]!;
}

function randomBody(next: Next, maxBytes: number): Uint8Array {
  const bytes = new Uint8Array(Math.floor(next() * (maxBytes + 1)));
  for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(next() * 0x100);
  return bytes;
}

/** Random properties in one of the three shapes, or none. */
function randomProperties(next: Next, i: number): PropertiesInput | undefined {
  if (next() < 0.45) return undefined;
  const pairs: [string, string][] = [];
  if (next() < 0.8) pairs.push(["TAGS", pick(next, ["TagA", "", "créé", "😀"])]);
  if (next() < 0.7) pairs.push(["KEYS", `key-${i} k${Math.floor(next() * 9)}`]);
  if (next() < 0.3) pairs.push(["UNIQ_KEY", `U${i.toString(16).padStart(8, "0")}`]);
  if (next() < 0.1) pairs.push(["WAIT", pick(next, ["false", "true"])]);
  const shape = next();
  return shape < 0.3 ? pairs : shape < 0.5 ? new Map(pairs) : Object.fromEntries(pairs);
}

/** A random batch: the first message carries the shared header fields. */
function randomBatch(next: Next, length: number, bodyMaxBytes: number): MessageInput[] {
  const batch: MessageInput[] = [];
  for (let i = 0; i < length; i++) {
    const previous = batch[i - 1];
    const message: MessageInput = {
      topic: TOPIC,
      queueId: 2,
      // Now and then the previous member's body or properties object again.
      body: previous !== undefined && next() < 0.2 ? previous.body : randomBody(next, bodyMaxBytes),
      properties: previous !== undefined && next() < 0.2
        ? previous.properties
        : randomProperties(next, i),
    };
    if (next() < 0.3) message.flag = Math.floor(next() * 0x1_0000_0000) | 0;
    if (next() < 0.1) message.preparedTransactionOffset = Math.floor(next() * 2 ** 40);
    // A member's own header fields are not its record's (the first's are).
    if (next() < 0.2) message.sysFlag = pick(next, [0, 0x1, 0x2, 0x40]);
    if (next() < 0.2) message.bornHost = pick(next, HOSTS);
    if (next() < 0.2) message.reconsumeTimes = 5;
    if (i === 0) {
      if (next() < 0.5) message.bornHost = pick(next, HOSTS);
      if (next() < 0.5) message.storeHost = pick(next, HOSTS);
      if (next() < 0.5) message.bornTimestamp = 1_600_000_000_000 + Math.floor(next() * 1e9);
      if (next() < 0.3) message.reconsumeTimes = Math.floor(next() * 16);
    }
    batch.push(message);
  }
  return batch;
}

interface Reference {
  /** The batch's size, or its error. */
  result: number | MqStoreError;
  bytes: Uint8Array;
  sizes: number[];
  wait: boolean;
  hints: DispatchHints;
}

/**
 * The batch encoded member by member with the single-message encoder and
 * patched record by record (what the commit log did before the batch
 * encoder), its hints staged and published one by one; `maxBytes` is the
 * encoder's maxMessageSize.
 */
function referenceEncode(
  messages: readonly MessageInput[],
  length: number,
  start: number,
  end: number,
  placement: { queueOffset: number; offset: number },
  maxBytes = MAX_BYTES,
): Reference {
  const encoder = new MessageEncoder({ maxMessageSizeBytes: maxBytes, now: () => NOW_MS });
  const bytes = new Uint8Array(length);
  const hints = new DispatchHints({ withKeys: true });
  hints.beginStage();
  const sizes: number[] = [];
  const first = messages[0]!;
  let wait = true;
  let position = start;
  const fail = (error: MqStoreError): Reference => ({
    result: error,
    bytes: new Uint8Array(length),
    sizes: [],
    wait,
    hints,
  });
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!;
    if (message.topic !== first.topic || message.queueId !== first.queueId) {
      return fail(
        new MqStoreError(
          "MESSAGE_ILLEGAL",
          `Message ${i} of the batch goes to ${message.topic}/${message.queueId}; a batch goes to one queue (${first.topic}/${first.queueId})`,
        ),
      );
    }
    const sysFlag = message.sysFlag;
    if (typeof sysFlag === "number" && (sysFlag & 0xC) !== 0) {
      return fail(
        new MqStoreError(
          "MESSAGE_ILLEGAL",
          `Message ${i} of the batch has transaction type 0x${
            (sysFlag & 0xC).toString(16)
          }; a batch cannot hold transaction messages`,
        ),
      );
    }
    const properties = message.properties;
    const get = (name: string): string | undefined =>
      properties === undefined || properties === null
        ? undefined
        : properties instanceof Map
        ? properties.get(name)
        : Array.isArray(properties)
        ? (properties as [string, string][]).findLast((pair) => pair[0] === name)?.[1]
        : Object.hasOwn(properties, name)
        ? (properties as Record<string, string>)[name]
        : undefined;
    const delay = get("DELAY");
    if (delay !== undefined) {
      return fail(
        new MqStoreError(
          "MESSAGE_ILLEGAL",
          `Message ${i} of the batch has DELAY "${delay}"; a batch cannot hold delayed messages`,
        ),
      );
    }
    if (get("WAIT") === "false") wait = false;
    const size = encoder.encodeBefore(message, bytes, position, end, first);
    if (typeof size !== "number") {
      return fail(new MqStoreError(size.code, `Message ${i} of the batch: ${size.message}`));
    }
    if (position + size > end) {
      return fail(
        new MqStoreError(
          "MESSAGE_ILLEGAL",
          `The batch is over ${
            position + size - start
          } bytes at message ${i}, maxMessageSize is ${maxBytes} bytes`,
        ),
      );
    }
    hints.stage(message.topic, message.queueId, encoder.lastTail);
    sizes.push(size);
    position += size;
  }
  let at = start;
  for (let i = 0; i < sizes.length; i++) {
    const offset = placement.offset + at - start;
    patchRecord(bytes, at, placement.queueOffset + i, offset, NOW_MS);
    hints.publish(
      i,
      offset,
      sizes[i]!,
      placement.queueOffset + i,
      NOW_MS,
      readInt32(bytes, at + SYS_FLAG_POSITION),
      undefined,
    );
    at += sizes[i]!;
  }
  hints.commit(sizes.length);
  return { result: position - start, bytes, sizes, wait, hints };
}

/**
 * The batch through the BatchEncoder, its hints published as the commit
 * log does: placed as it is encoded (`placed`: the queue's counter at
 * `placement.queueOffset`, left as it was), or patched after; `maxBytes`
 * is the encoder's maxMessageSize.
 */
function batchEncode(
  messages: readonly MessageInput[],
  length: number,
  start: number,
  end: number,
  placement: { queueOffset: number; offset: number },
  placed = false,
  shared?: { batch: BatchEncoder; table: TopicQueueTable },
  maxBytes = MAX_BYTES,
): Reference {
  const encoder = new MessageEncoder({ maxMessageSizeBytes: maxBytes, now: () => NOW_MS });
  const table = shared?.table ?? new TopicQueueTable();
  const first = messages[0]!;
  table.counter(first.topic, first.queueId).next = placement.queueOffset;
  const batch = shared?.batch ?? new BatchEncoder(encoder, table);
  const bytes = new Uint8Array(length);
  const hints = new DispatchHints({ withKeys: true });
  const result = placed
    ? batch.encode(messages, bytes, start, end, hints, true, placement.offset, NOW_MS)
    : batch.encode(messages, bytes, start, end, hints, true);
  const sizes = [...batch.sizes.subarray(0, batch.count)];
  // Placing reads the counter and never advances it.
  assert.equal(table.get(first.topic, first.queueId), placement.queueOffset);
  assert.equal(batch.placed, placed && typeof result === "number");
  if (typeof result === "number") {
    if (placed) assert.equal(batch.queueOffset, placement.queueOffset);
    else {
      const patched = batch.patch(bytes, start, placement.queueOffset, placement.offset, NOW_MS);
      assert.equal(patched, result);
    }
    hints.publishRun(
      batch.count,
      placement.offset,
      batch.sizes,
      placement.queueOffset,
      NOW_MS,
      readInt32(bytes, start + SYS_FLAG_POSITION),
      undefined,
    );
    hints.commit(batch.count);
  }
  return { result, bytes, sizes, wait: batch.wait, hints };
}

function assertSameHints(actual: DispatchHints, expected: DispatchHints, count: number): void {
  assert.equal(actual.length, expected.length);
  for (let k = 0; k < count; k++) {
    const a = actual.slotAt(k);
    const e = expected.slotAt(k);
    const where = `hint ${k}`;
    assert.equal(actual.offsets[a], expected.offsets[e], `${where} offset`);
    assert.equal(actual.sizes[a], expected.sizes[e], `${where} size`);
    assert.equal(actual.queueOffsets[a], expected.queueOffsets[e], `${where} queueOffset`);
    assert.equal(actual.storeTimestamps[a], expected.storeTimestamps[e], `${where} timestamp`);
    assert.equal(actual.tagsCodes[a], expected.tagsCodes[e], `${where} tagsCode`);
    assert.equal(actual.transactionTypes[a], expected.transactionTypes[e], `${where} type`);
    assert.equal(actual.queueIds[a], expected.queueIds[e], `${where} queueId`);
    assert.equal(actual.topics[a], expected.topics[e], `${where} topic`);
    const keyCount = expected.keyCounts[e]!;
    assert.equal(actual.keyCounts[a], keyCount, `${where} keyCount`);
    for (let i = 0; i < Math.min(keyCount, HINT_KEYS_MAX); i++) {
      assert.equal(
        actual.keyHashes[a * HINT_KEYS_MAX + i],
        expected.keyHashes[e * HINT_KEYS_MAX + i],
        `${where} key ${i}`,
      );
    }
  }
}

function assertSameEncoding(actual: Reference, expected: Reference, label: string): void {
  if (expected.result instanceof MqStoreError) {
    assert.ok(actual.result instanceof MqStoreError, `${label}: refused`);
    assert.equal(actual.result.code, expected.result.code, label);
    assert.equal(actual.result.message, expected.result.message, label);
    assert.equal(actual.bytes.findIndex((b) => b !== 0), -1, `${label}: the bytes stay zeros`);
    return;
  }
  assert.equal(actual.result, expected.result, `${label}: size`);
  assert.deepEqual(actual.sizes, expected.sizes, `${label}: record sizes`);
  assert.equal(actual.wait, expected.wait, `${label}: wait`);
  const differs = actual.bytes.findIndex((b, i) => b !== expected.bytes[i]);
  assert.equal(differs, -1, `${label}: bytes differ at ${differs}`);
  assertSameHints(actual.hints, expected.hints, expected.sizes.length);
}

/** Ways to make a member refused (or thrown at), with the single path's verdict. */
const SPOILERS: ReadonlyArray<(message: MessageInput) => MessageInput> = [
  (m) => ({ ...m, topic: "Other" }),
  (m) => ({ ...m, queueId: 3 }),
  (m) => ({ ...m, properties: { DELAY: "3" } }),
  (m) => ({ ...m, sysFlag: 0x4 }),
  (m) => ({ ...m, properties: [["TAGS", "a\u0001b"]] }),
  (m) => ({ ...m, body: new Uint8Array(MAX_BYTES + 1) }),
  (m) => ({ ...m, flag: 1.5 }),
  (m) => ({ ...m, preparedTransactionOffset: 2 ** 60 }),
  (m) => ({ ...m, properties: { KEYS: "k".repeat(0x8000) } }),
  (m) => ({ ...m, body: new Uint8Array(MAX_BYTES - 100) }),
];

describe("BatchEncoder", () => {
  for (const [seed, placed] of [[1, false], [2, true], [3, false], [4, true]] as const) {
    test(
      `encode() writes the bytes and hints of a member-by-member encode (seed ${seed}, ${
        placed ? "placed" : "patched"
      })`,
      () => {
        const next = prng(seed);
        for (let round = 0; round < 60; round++) {
          const batch = randomBatch(next, 1 + Math.floor(next() * 40), 120);
          const start = Math.floor(next() * 64);
          const length = start + 2 * MAX_BYTES;
          // Now and then a bound the batch may cross (a segment's end).
          const end = next() < 0.2 ? start + Math.floor(next() * 3000) : start + MAX_BYTES;
          const placement = {
            queueOffset: Math.floor(next() * 1e6),
            offset: Math.floor(next() * 2 ** 40),
          };
          const label = `round ${round}`;
          assertSameEncoding(
            batchEncode(batch, length, start, end, placement, placed),
            referenceEncode(batch, length, start, end, placement),
            label,
          );
        }
      },
    );
  }

  test("encode() writes the same bytes with a batch CRC writer, bodies on both sides of its bodyBytesMax", async () => {
    // The writer installed now (createPort's, if another test called it), to put back.
    const installed = !nativeBodyCrcs()
      ? undefined
      : runtimeName() === "bun"
      ? await (await import("../src/runtime/_bun_crc32.ts")).loadBunBodyCrcWriter()
      : loadWasmBodyCrcWriter();
    const writer = loadWasmBodyCrcWriter();
    // The writer, counting the triples of its calls: a call of 16 or more
    // short bodies runs the 16-lane pass (where the host has it).
    let mostTriples = 0;
    installBodyCrcWriter({
      name: writer.name,
      bodyBytesMax: writer.bodyBytesMax,
      write(bytes, ranges, count) {
        mostTriples = Math.max(mostTriples, count);
        return writer.write(bytes, ranges, count);
      },
    });
    try {
      assert.equal(nativeBodyCrcBytesMax(), writer.bodyBytesMax);
      const next = prng(21);
      // Batches of up to 80 bodies of up to 2.25 KiB: over MAX_BYTES.
      const maxBytes = 0x4_0000;
      for (let round = 0; round < 40; round++) {
        // Bodies of 0..2 × bodyBytesMax bytes, about half given to the
        // writer, and 32..80 members, so most batches give it 16 or more.
        const members = 32 + Math.floor(next() * 49);
        const batch = randomBatch(next, members, writer.bodyBytesMax! * 2);
        const placement = { queueOffset: round, offset: 0x10000 * round };
        const start = Math.floor(next() * 64);
        const length = start + 2 * maxBytes;
        const end = start + maxBytes;
        assertSameEncoding(
          batchEncode(batch, length, start, end, placement, true, undefined, maxBytes),
          referenceEncode(batch, length, start, end, placement, maxBytes),
          `round ${round}`,
        );
      }
      assert.ok(mostTriples >= 0x10, `most triples a call ${mostTriples}`);
    } finally {
      installBodyCrcWriter(installed);
    }
  });

  test("encode() writes each batch's topic with one encoder over many batches and topic changes", () => {
    const next = prng(11);
    const encoder = new MessageEncoder({ maxMessageSizeBytes: MAX_BYTES, now: () => NOW_MS });
    const table = new TopicQueueTable();
    const shared = { batch: new BatchEncoder(encoder, table), table };
    // Past the batches where the encoder sets its topic every time, and
    // back and forth between topics of other lengths.
    const topics = [...Array(24).fill(TOPIC), "T", "T", "AnotherTopic", TOPIC, "T", TOPIC];
    for (const [round, topic] of topics.entries()) {
      const batch = randomBatch(next, 2 + Math.floor(next() * 20), 120).map((m) => ({
        ...m,
        topic,
      }));
      const placement = { queueOffset: round * 100, offset: round * 0x10000 };
      const placed = round % 2 === 0;
      assertSameEncoding(
        batchEncode(batch, 2 * MAX_BYTES, 0, MAX_BYTES, placement, placed, shared),
        referenceEncode(batch, 2 * MAX_BYTES, 0, MAX_BYTES, placement),
        `round ${round} (${topic})`,
      );
    }
  });

  test("encode() refuses a batch with a bad member anywhere as the single path does, writing nothing", () => {
    const next = prng(7);
    for (let round = 0; round < 80; round++) {
      const batch = randomBatch(next, 2 + Math.floor(next() * 20), 100);
      const at = Math.floor(next() * batch.length);
      const spoil = SPOILERS[round % SPOILERS.length]!;
      batch[at] = spoil(batch[at]!);
      const placement = { queueOffset: round, offset: 0x1000 * round };
      const expected = referenceEncode(batch, 2 * MAX_BYTES, 0, MAX_BYTES, placement);
      const actual = batchEncode(batch, 2 * MAX_BYTES, 0, MAX_BYTES, placement, round % 2 === 1);
      assertSameEncoding(actual, expected, `round ${round}, member ${at}`);
    }
  });

  test("encode() throws the single path's TypeError for a member of a wrong type, writing nothing", () => {
    const next = prng(8);
    const batch = randomBatch(next, 12, 100);
    batch[7] = { ...batch[7]!, body: [1, 2, 3] as unknown as Uint8Array };
    const encoder = new BatchEncoder(new MessageEncoder({ maxMessageSizeBytes: MAX_BYTES }));
    const bytes = new Uint8Array(2 * MAX_BYTES);
    assert.throws(
      () => encoder.encode(batch, bytes, 0, MAX_BYTES, undefined, true),
      (error: unknown) =>
        error instanceof TypeError && /body must be a Uint8Array/.test(error.message),
    );
    assert.equal(bytes.findIndex((b) => b !== 0), -1);
  });
});

describe("MessageStore batches", () => {
  for (const messageIndexEnable of [true, false]) {
    test(`putMessages() dispatch in runs writes the files a decoding re-dispatch writes (index ${messageIndexEnable})`, async () => {
      const env = await openMemoryStore({ messageIndexEnable });
      const { store, port, directory } = env;
      let reopened: MessageStore | undefined;
      try {
        const next = prng(messageIndexEnable ? 11 : 12);
        let records = 0;
        for (let round = 0; round < 120; round++) {
          const batch = randomBatch(next, 1 + Math.floor(next() * 40), 80)
            .map((m) => ({ ...m, queueId: round % 3 }));
          const result = await store.putMessages(batch);
          assert.equal(result.status, "PUT_OK", result.error?.message);
          assert.equal(result.appendResult!.messageCount, batch.length);
          records += batch.length;
        }
        await store.whenDispatched(store.maxOffset);
        const stats = store.stats();
        assert.equal(stats.dispatchHintedCount + stats.dispatchDecodedCount, records);
        assert.ok(stats.dispatchHintedCount > records / 2, `${stats.dispatchHintedCount} hinted`);
        await store.close();
        const hinted = await dispatchFiles(port, directory);
        await removeFiles(port, `${directory}/consumequeue`);
        await removeFiles(port, `${directory}/index`);
        reopened = await env.reopen();
        await reopened.whenDispatched(reopened.maxOffset);
        await reopened.close();
        const decoded = await dispatchFiles(port, directory);
        assert.deepEqual([...hinted.keys()].sort(), [...decoded.keys()].sort());
        for (const [path, bytes] of decoded) {
          const other = hinted.get(path)!;
          const differs = bytes.findIndex((b, i) => b !== other[i]);
          assert.equal(differs, -1, `${path} differs at byte ${differs}`);
        }
      } finally {
        await store.close();
        await reopened?.close();
      }
    });
  }
});
