/**
 * `mqstore get <dir>`: messages of a store, opened read-only, by commit-log
 * offset, by topic/queue/queue offset, by key, or by offsetMsgId; a table
 * or, with `--json`, one JSON object per message.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import type { StoredMessage } from "../store/get_message_result.ts";
import type { MessageStore } from "../store/message_store.ts";

/** What to look up. */
export type GetQuery =
  | { kind: "offset"; offset: number }
  | { kind: "queue"; topic: string; queueId: number; queueOffset: number; count: number }
  | { kind: "key"; topic: string; key: string; count: number }
  | { kind: "msgId"; msgId: string };

/** A message as `--json` prints it. */
export function messageJson(message: StoredMessage): Record<string, unknown> {
  return {
    physicalOffset: message.physicalOffset,
    storeSize: message.storeSize,
    msgId: message.msgId,
    topic: message.topic,
    queueId: message.queueId,
    queueOffset: message.queueOffset,
    flag: message.flag,
    sysFlag: message.sysFlag,
    bornTimestamp: message.bornTimestamp,
    bornHost: message.bornHost,
    storeTimestamp: message.storeTimestamp,
    storeHost: message.storeHost,
    reconsumeTimes: message.reconsumeTimes,
    preparedTransactionOffset: message.preparedTransactionOffset,
    bodyCRC: message.bodyCRC,
    tagsCode: String(message.tagsCode),
    properties: Object.fromEntries(message.properties),
    body: Buffer.from(message.body).toString("base64"),
  };
}

/** Header of the table rows. */
export const GET_TABLE_HEADER =
  "offset\tsize\ttopic\tqueue\tqueueOffset\tstoreTimestamp\tmsgId\tproperties";

/** A message as a table row. */
export function messageRow(message: StoredMessage): string {
  const properties = [...message.properties].map(([name, value]) => `${name}=${value}`).join(" ");
  return [
    message.physicalOffset,
    message.storeSize,
    message.topic,
    message.queueId,
    message.queueOffset,
    new Date(message.storeTimestamp).toISOString(),
    message.msgId,
    properties,
  ].join("\t");
}

/**
 * Runs one query.
 *
 * @returns The messages found (none: an empty list).
 */
export async function getMessages(store: MessageStore, query: GetQuery): Promise<StoredMessage[]> {
  switch (query.kind) {
    case "offset": {
      const message = await store.getMessage(query.offset);
      return message === undefined ? [] : [message];
    }
    case "msgId": {
      const message = await store.getMessageByMsgId(query.msgId);
      return message === undefined ? [] : [message];
    }
    case "key":
      return (await store.queryMessages(query.topic, query.key, { maxCount: query.count }))
        .messages;
    case "queue": {
      const found: StoredMessage[] = [];
      let next = query.queueOffset;
      // Bounded by count: each round adds messages or stops.
      while (found.length < query.count) {
        const page = await store.getMessages(
          query.topic,
          query.queueId,
          next,
          query.count - found.length,
        );
        if (page.status !== "FOUND") break;
        found.push(...page.messages);
        next = page.nextQueueOffset;
      }
      return found;
    }
  }
}
