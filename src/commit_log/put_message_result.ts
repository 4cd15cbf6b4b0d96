/**
 * What a put answers (SPEC §4): a {@link PutMessageResult} with RocketMQ's
 * status spellings, an {@link MqStoreError} when the status is not
 * `PUT_OK`, and the {@link AppendMessageResult} of the append when the
 * message reached the log.
 *
 * @module
 */

import type { MqStoreError } from "../errors.ts";
import { offsetMsgIdOf, parseHostAddress } from "../record/mod.ts";

/**
 * The outcome of a put, RocketMQ's `PutMessageStatus`.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "../store/message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * const body = new Uint8Array(1);
 * const result = await store.putMessage({ topic: "bad topic", queueId: 0, body });
 * if (result.status !== "PUT_OK") console.log(result.status, result.error?.message);
 * await store.close();
 * ```
 */
export type PutMessageStatus =
  | "PUT_OK"
  | "FLUSH_DISK_TIMEOUT"
  | "FLUSH_SLAVE_TIMEOUT"
  | "SLAVE_NOT_AVAILABLE"
  | "SERVICE_NOT_AVAILABLE"
  | "CREATE_MAPEDFILE_FAILED"
  | "MESSAGE_ILLEGAL"
  | "PROPERTIES_SIZE_EXCEEDED"
  | "OS_PAGECACHE_BUSY"
  | "UNKNOWN_ERROR";

/**
 * The outcome of placing records in a segment, RocketMQ's `AppendMessageStatus`.
 *
 * @example
 * ```ts
 * import { AppendMessageResult, type AppendMessageStatus } from "./put_message_result.ts";
 *
 * const result = new AppendMessageResult(0, 95, 1700000000000, 0, 1, "127.0.0.1:10911");
 * const status: AppendMessageStatus = result.status;
 * console.log(status); // "PUT_OK"
 * ```
 */
export type AppendMessageStatus =
  | "PUT_OK"
  | "END_OF_FILE"
  | "MESSAGE_SIZE_EXCEEDED"
  | "PROPERTIES_SIZE_EXCEEDED"
  | "UNKNOWN_ERROR";

/**
 * Where a message (or a batch) was appended. `msgId` is computed on first
 * read: most producers never look at it. A batch keeps its record sizes
 * only; each member's offset (and id) follows from them when read.
 *
 * @example
 * ```ts
 * import { AppendMessageResult } from "./put_message_result.ts";
 *
 * const result = new AppendMessageResult(176, 95, 1700000000000, 3, 1, "127.0.0.1:10911");
 * console.log(result.msgId); // "7F00000100002A9F00000000000000B0"
 * ```
 */
export class AppendMessageResult {
  /** Always `PUT_OK` on a result a put hands out. */
  readonly status: AppendMessageStatus;
  /** Commit-log offset of the first record. */
  readonly wroteOffset: number;
  /** Bytes of the record(s). */
  readonly wroteBytes: number;
  /** Store timestamp written into the record(s), ms. */
  readonly storeTimestamp: number;
  /** Queue offset of the (first) message; 0 for PREPARED and ROLLBACK. */
  readonly queueOffset: number;
  /** Number of messages (1, or the batch size). */
  readonly messageCount: number;
  /** The store host as written, `"ip:port"`. */
  readonly #storeHost: string;
  /**
   * Until {@link msgId} is first read: the sizes of the records of a batch,
   * in order, or their one size (undefined for one message); from then on
   * the msgId (a string), which needs them no more. One field for both
   * keeps an instance at 8 fields, which JavaScriptCore allocates in 80
   * bytes against 112 for 9 (`estimateShallowMemoryUsageOf`, Bun 1.4.5).
   * Every single put allocates one: on Bun, in a store's process, the
   * heap keeps taking fresh blocks, whose pages JSC's warm-up thread (or,
   * without it, the JavaScript thread) faults in, at several microseconds
   * a page on this VM. Merged, 1 KiB single puts into a warm store took
   * half the warm-up thread's CPU on Bun (medians 588 → 296 ns a put) and
   * 17 % less of the JavaScript thread's (1208 → 1005 ns; 12 rounds each,
   * 4 alternated processes); the row (fresh processes) 6.5 % less process
   * CPU a message (median ratio of 18 alternated pairs, 13 lower, a busy
   * machine). V8 saw no difference.
   */
  #sizesOrMsgId: ArrayLike<number> | number | string | undefined;

  /**
   * Describes an append that succeeded; the commit log builds it.
   *
   * @param wroteOffset Offset of the first record.
   * @param wroteBytes Bytes written.
   * @param storeTimestamp Store timestamp, ms.
   * @param queueOffset Queue offset of the first message.
   * @param messageCount Messages written.
   * @param storeHost Store host text, for the msgId.
   * @param batchSizes Sizes of every record of a batch, in order (kept, not
   *   copied: the caller hands over an array it no longer changes), or the
   *   one size of them all.
   */
  constructor(
    wroteOffset: number,
    wroteBytes: number,
    storeTimestamp: number,
    queueOffset: number,
    messageCount: number,
    storeHost: string,
    batchSizes?: ArrayLike<number> | number,
  ) {
    this.status = "PUT_OK";
    this.wroteOffset = wroteOffset;
    this.wroteBytes = wroteBytes;
    this.storeTimestamp = storeTimestamp;
    this.queueOffset = queueOffset;
    this.messageCount = messageCount;
    this.#storeHost = storeHost;
    this.#sizesOrMsgId = batchSizes;
  }

  /**
   * The offsetMsgId (store host + offset, uppercase hex); for a batch the
   * ids of every message joined by commas, as RocketMQ does.
   */
  get msgId(): string {
    const sizes = this.#sizesOrMsgId;
    if (typeof sizes === "string") return sizes;
    const host = parseHostAddress(this.#storeHost);
    // The host was validated when the record was encoded.
    const field = new Uint8Array(host!.ip.length + 4);
    field.set(host!.ip, 0);
    new DataView(field.buffer).setInt32(host!.ip.length, host!.port);
    let msgId: string;
    if (sizes === undefined) {
      msgId = offsetMsgIdOf(field, 0, field.length, this.wroteOffset);
    } else {
      const ids = new Array<string>(this.messageCount);
      let offset = this.wroteOffset;
      for (let i = 0; i < ids.length; i++) {
        ids[i] = offsetMsgIdOf(field, 0, field.length, offset);
        offset += typeof sizes === "number" ? sizes : sizes[i]!;
      }
      msgId = ids.join(",");
    }
    this.#sizesOrMsgId = msgId;
    return msgId;
  }

  /** A plain object with every field (msgId included), for logs and JSON. */
  toJSON(): Record<string, unknown> {
    return {
      status: this.status,
      wroteOffset: this.wroteOffset,
      wroteBytes: this.wroteBytes,
      msgId: this.msgId,
      storeTimestamp: this.storeTimestamp,
      queueOffset: this.queueOffset,
      messageCount: this.messageCount,
    };
  }
}

/**
 * What `putMessage` and `putMessages` resolve with.
 *
 * @example
 * ```ts
 * import { MemoryPort } from "../runtime/mod.ts";
 * import { MessageStore } from "../store/message_store.ts";
 *
 * const store = await MessageStore.open("/store", { port: new MemoryPort("node") });
 * const result = await store.putMessage({ topic: "Orders", queueId: 0, body: new Uint8Array(1) });
 * if (result.status === "PUT_OK") {
 *   console.log(result.appendResult?.wroteOffset, result.appendResult?.msgId);
 * } else {
 *   console.error(result.error);
 * }
 * await store.close();
 * ```
 */
export interface PutMessageResult {
  /** The outcome. */
  status: PutMessageStatus;
  /** Why, when the status is not `PUT_OK`. */
  error?: MqStoreError;
  /**
   * Where the message went: present when it reached the log (also with
   * `FLUSH_DISK_TIMEOUT`, where it stays stored but was not confirmed
   * durable in time).
   */
  appendResult?: AppendMessageResult;
}
