/**
 * mqstore: an embedded, durable message store for Deno, Bun and Node that
 * reads and writes Apache RocketMQ 4.x store directories byte for byte.
 *
 * @module
 */

export { MqStoreError } from "./src/errors.ts";
export type { MqStoreErrorCode } from "./src/errors.ts";
export { availableAdapters, createPort, runtimeName } from "./src/runtime/mod.ts";
export type {
  AdapterName,
  Advice,
  CreateFileOptions,
  CreatePortOptions,
  DirectoryLock,
  DiskSpace,
  FileHandle,
  FileRange,
  FileStat,
  LockedBuffer,
  Mapping,
  OpenFileOptions,
  PageCacheState,
  PopulateOptions,
  RuntimeName,
  RuntimePort,
} from "./src/runtime/mod.ts";
export { MessageStore } from "./src/store/message_store.ts";
export type { QueueInfo, RecoveryReport, SubscribeOptions } from "./src/store/message_store.ts";
export type {
  GetMessageResult,
  GetMessagesOptions,
  GetMessageStatus,
  QueryMessageResult,
  QueryMessagesOptions,
  StoredMessage,
} from "./src/store/get_message_result.ts";
export type { RetentionReport } from "./src/store/retention_service.ts";
export type { FlushDiskType, MessageStoreOptions } from "./src/store/options.ts";
export { AppendMessageResult } from "./src/commit_log/put_message_result.ts";
export type {
  AppendMessageStatus,
  PutMessageResult,
  PutMessageStatus,
} from "./src/commit_log/put_message_result.ts";
export type { StoreStatsSnapshot, TopicPutStats } from "./src/commit_log/store_stats.ts";
export type { MessageInput, PropertiesInput } from "./src/record/mod.ts";
export { validateMessage } from "./src/record/mod.ts";
export type { ValidateOptions } from "./src/record/mod.ts";
export type { StoreCheckpoint } from "./src/commit_log/store_checkpoint.ts";
export { ManualClock, systemClock } from "./src/segment/clock.ts";
export type { Clock } from "./src/segment/clock.ts";
