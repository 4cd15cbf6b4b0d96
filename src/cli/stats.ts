/**
 * `mqstore stats <dir>`: what a store holds, opened read-only: offsets,
 * segments, queues with their queue-offset ranges, index files and the
 * checkpoint.
 *
 * @module
 */

import type { MessageStore, QueueInfo } from "../store/message_store.ts";

/** What `stats` prints. */
export interface StoreSummary {
  /** The store directory. */
  directory: string;
  /** Whether the last close was clean. */
  cleanShutdown: boolean;
  /** Oldest commit-log offset kept. */
  minOffset: number;
  /** Offset after the last record. */
  maxOffset: number;
  /** Records found by the open's scan. */
  messagesScanned: number;
  /** Consume queues. */
  queues: QueueInfo[];
  /** Messages in the consume queues (sum of max − min). */
  queuedMessages: number;
  /** Index files. */
  indexFiles: number;
  /** The checkpoint's values. */
  checkpoint: {
    physicMsgTimestamp: number;
    logicsMsgTimestamp: number;
    indexMsgTimestamp: number;
    commitLogOffset: number;
    consumeQueueOffset: number;
    indexOffset: number;
  };
}

/** Summarises an open store. */
export function summarize(store: MessageStore): StoreSummary {
  const queues = store.queues().sort((a, b) =>
    a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.queueId - b.queueId
  );
  const checkpoint = store.checkpoint;
  return {
    directory: store.directory,
    cleanShutdown: store.recovery.clean,
    minOffset: store.minOffset,
    maxOffset: store.maxOffset,
    messagesScanned: store.recovery.messageCount,
    queues,
    queuedMessages: queues.reduce((sum, q) => sum + q.maxQueueOffset - q.minQueueOffset, 0),
    indexFiles: store.indexFileCount,
    checkpoint: {
      physicMsgTimestamp: checkpoint.physicMsgTimestamp,
      logicsMsgTimestamp: checkpoint.logicsMsgTimestamp,
      indexMsgTimestamp: checkpoint.indexMsgTimestamp,
      commitLogOffset: checkpoint.commitLogOffset,
      consumeQueueOffset: checkpoint.consumeQueueOffset,
      indexOffset: checkpoint.indexOffset,
    },
  };
}

/** The summary as text lines. */
export function formatSummary(summary: StoreSummary): string {
  const lines = [
    `store        ${summary.directory}`,
    `last close   ${summary.cleanShutdown ? "clean" : "not clean (abort present)"}`,
    `offsets      ${summary.minOffset} .. ${summary.maxOffset}`,
    `messages     ${summary.messagesScanned} scanned, ${summary.queuedMessages} in ${summary.queues.length} queues`,
    `index files  ${summary.indexFiles}`,
    `checkpoint   physic ${summary.checkpoint.physicMsgTimestamp} logics ${summary.checkpoint.logicsMsgTimestamp} index ${summary.checkpoint.indexMsgTimestamp}`,
    "topic\tqueue\tminQueueOffset\tmaxQueueOffset",
  ];
  for (const queue of summary.queues) {
    lines.push(
      `${queue.topic}\t${queue.queueId}\t${queue.minQueueOffset}\t${queue.maxQueueOffset}`,
    );
  }
  return `${lines.join("\n")}\n`;
}
