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
  CreatePortOptions,
  RuntimeName,
  RuntimePort,
} from "./src/runtime/mod.ts";
