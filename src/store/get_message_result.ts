/**
 * What the read API answers (RocketMQ's `GetMessageResult` and
 * `QueryMessageResult`, with decoded messages instead of buffers).
 *
 * @module
 */

import type { DecodedMessage } from "../record/mod.ts";

/**
 * A message read back: every field of the record (SPEC §3).
 *
 * The store hands out `LazyMessage`s (`src/record/lazy_message.ts`),
 * decoded on access: the numbers (`queueOffset`, `physicalOffset`,
 * `storeSize`, timestamps, ...) are plain properties; `body`,
 * `propertiesRaw`, `topic`, the hosts, `pairs`, `properties`, `tagsCode`
 * and `msgId` are getters on the prototype that decode once, on first
 * access (each has a setter too). So `{ ...message }` and
 * `structuredClone(message)` carry the numbers only, while
 * `JSON.stringify(message)` lists every field (`toJSON()`).
 *
 * `body` and `propertiesRaw` are views into a copy, never into a segment
 * that retention may delete: one copy of the records per `getMessages`
 * page (each `subscribe` page too), one per `getMessage`. The messages of a
 * page share that buffer (`body.buffer`; mind `body.byteOffset`), so a
 * message kept alive keeps its page's bytes alive (a page is bounded by
 * the transfer limits or `maxBytes`): `body.slice()` keeps a body alone.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * await store.putMessage({
 *   topic: "Orders",
 *   queueId: 0,
 *   body: new TextEncoder().encode("hi"),
 *   properties: { TAGS: "created", KEYS: "order-1" },
 * });
 * await store.whenDispatched(store.maxOffset);
 * const message = await store.getMessage(0);
 * console.log(message?.topic, message?.properties.get("TAGS"), message?.msgId);
 * await store.close();
 * ```
 */
export type StoredMessage = DecodedMessage;

/**
 * The outcome of `getMessages`, RocketMQ's `GetMessageStatus` spellings.
 *
 * - `FOUND`: at least one message.
 * - `NO_MESSAGE_IN_QUEUE`: the queue exists but holds nothing.
 * - `OFFSET_OVERFLOW_ONE`: the offset is the queue's end (wait for more).
 * - `OFFSET_OVERFLOW_BADLY`: the offset is past the end.
 * - `OFFSET_TOO_SMALL`: the offset is below the queue's first kept unit.
 * - `NO_MATCHED_MESSAGE`: units were read but none matched the tags.
 * - `MESSAGE_WAS_REMOVING`: the units point into deleted commit-log bytes.
 * - `OFFSET_FOUND_NULL`: no unit could be read at the offset (file gone).
 * - `NO_MATCHED_LOGIC_QUEUE`: no such topic/queue.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * const page = await store.getMessages("Orders", 0, 0, 32);
 * console.log(page.status); // "NO_MATCHED_LOGIC_QUEUE": nothing was put yet
 * await store.close();
 * ```
 */
export type GetMessageStatus =
  | "FOUND"
  | "NO_MESSAGE_IN_QUEUE"
  | "OFFSET_OVERFLOW_ONE"
  | "OFFSET_OVERFLOW_BADLY"
  | "OFFSET_TOO_SMALL"
  | "NO_MATCHED_MESSAGE"
  | "MESSAGE_WAS_REMOVING"
  | "OFFSET_FOUND_NULL"
  | "NO_MATCHED_LOGIC_QUEUE";

/**
 * Options of `getMessages`.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * await store.putMessage({
 *   topic: "Orders",
 *   queueId: 0,
 *   body: new TextEncoder().encode("hi"),
 *   properties: { TAGS: "created", KEYS: "order-1" },
 * });
 * await store.whenDispatched(store.maxOffset);
 * const page = await store.getMessages("Orders", 0, 0, 32, { tags: ["created", "paid"] });
 * console.log(page.messages.length); // 1
 * await store.close();
 * ```
 */
export interface GetMessagesOptions {
  /**
   * Keep only messages with one of these TAGS (matched on tagsCode, then on
   * the TAGS text, so a hash collision is not served).
   *
   * @default {undefined}
   */
  tags?: readonly string[];
  /**
   * Record bytes this call returns at most (one message always goes, however
   * large). When given, the call is bounded by `maxCount` and `maxBytes`
   * only: the store's in-memory and on-disk transfer limits
   * (`maxTransferBytesOnMessageInMemory`, …) do not apply.
   *
   * @default {undefined}
   */
  maxBytes?: number;
}

/**
 * The answer of `getMessages`.
 *
 * @example Reading a queue page by page
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * await store.putMessage({
 *   topic: "Orders",
 *   queueId: 0,
 *   body: new TextEncoder().encode("hi"),
 *   properties: { TAGS: "created", KEYS: "order-1" },
 * });
 * await store.whenDispatched(store.maxOffset);
 * let queueOffset = 0;
 * for (;;) {
 *   const page = await store.getMessages("Orders", 0, queueOffset, 32);
 *   if (page.status !== "FOUND") break;
 *   for (const message of page.messages) console.log(message.queueOffset);
 *   queueOffset = page.nextQueueOffset;
 * }
 * await store.close();
 * ```
 */
export interface GetMessageResult {
  /** See {@link GetMessageStatus}. */
  status: GetMessageStatus;
  /** The messages, in queue order. */
  messages: StoredMessage[];
  /** Where the next read of this queue starts (RocketMQ's nextBeginOffset rules). */
  nextQueueOffset: number;
  /** The queue's first readable queue offset. */
  minQueueOffset: number;
  /** The queue offset the queue's next message gets. */
  maxQueueOffset: number;
}

/**
 * Options of `queryMessages`.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * await store.putMessage({
 *   topic: "Orders",
 *   queueId: 0,
 *   body: new TextEncoder().encode("hi"),
 *   properties: { TAGS: "created", KEYS: "order-1" },
 * });
 * await store.whenDispatched(store.maxOffset);
 * const beginTimestamp = Date.now() - 3_600_000;
 * const found = await store.queryMessages("Orders", "order-1", { maxCount: 8, beginTimestamp });
 * console.log(found.messages.length); // 1
 * await store.close();
 * ```
 */
export interface QueryMessagesOptions {
  /**
   * Most messages returned (capped at 64, RocketMQ's maxMsgsNumBatch).
   *
   * @default {64}
   */
  maxCount?: number;
  /**
   * Earliest storeTimestamp, ms.
   *
   * @default {0}
   */
  beginTimestamp?: number;
  /**
   * Latest storeTimestamp, ms.
   *
   * @default {Number.MAX_SAFE_INTEGER}
   */
  endTimestamp?: number;
}

/**
 * The answer of `queryMessages`.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "./message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * await store.putMessage({
 *   topic: "Orders",
 *   queueId: 0,
 *   body: new TextEncoder().encode("hi"),
 *   properties: { TAGS: "created", KEYS: "order-1" },
 * });
 * await store.whenDispatched(store.maxOffset);
 * const found = await store.queryMessages("Orders", "order-1");
 * for (const message of found.messages) console.log(message.physicalOffset, message.msgId);
 * await store.close();
 * ```
 */
export interface QueryMessageResult {
  /** Messages of the topic carrying the key, newest first. */
  messages: StoredMessage[];
  /** endTimestamp of the newest index file (0 without one). */
  indexLastUpdateTimestamp: number;
  /** endPhyOffset of the newest index file (0 without one). */
  indexLastUpdatePhyoffset: number;
}
