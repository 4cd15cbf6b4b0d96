/**
 * Byte formats of the commit log: MESSAGE and BLANK records (RocketMQ
 * 4.9.8, byte for byte), properties, offsetMsgId, CRC-32, tagsCode, and the
 * validation of a message before it is written. See `constants.ts` for the
 * record diagram.
 *
 * @example Encode, place and decode one record
 * ```ts
 * import { decodeRecord, MessageEncoder, patchRecord } from "./mod.ts";
 *
 * const encoder = new MessageEncoder();
 * const scratch = new Uint8Array(1024);
 * const size = encoder.encode(
 *   { topic: "Orders", queueId: 0, body: new TextEncoder().encode("hi"), properties: { TAGS: "new" } },
 *   scratch,
 *   0,
 * );
 * if (typeof size !== "number") throw size; // an MqStoreError
 * patchRecord(scratch, 0, 0, 0, Date.now());
 * const result = decodeRecord(scratch, 0, { expectedOffset: 0 });
 * console.log(result.kind === "message" && result.message.properties.get("TAGS")); // "new"
 * ```
 *
 * @module
 */

export * from "./constants.ts";
export { DataViewCache, readInt32, setInt64, writeInt32, writeInt64 } from "./_bytes.ts";
export {
  bodyCrc,
  crc32,
  crc32Implementation,
  crc32Table,
  crc32Zlib,
  nativeBodyCrcs,
  wholeBodyCrc,
  writeBodyCrcs,
} from "./crc32.ts";
export {
  checkRecord,
  decodeMessageView,
  decodeRecord,
  RecordChecker,
  RecordView,
} from "./decoder.ts";
export type {
  DecodeResult,
  ReadRecordOptions,
  RecordInvalidReason,
  RecordKind,
} from "./decoder.ts";
export {
  dispatchTagsCode,
  hasConsumeQueueEntry,
  indexKeysOf,
  scheduleTagsCode,
  transactionTypeOf,
} from "./dispatch.ts";
export type { TransactionType } from "./dispatch.ts";
export { DispatchView } from "./dispatch_view.ts";
export type { DispatchViewOptions } from "./dispatch_view.ts";
export {
  encodeMessage,
  MessageEncoder,
  patchRecord,
  recordSizeOf,
  storeTimestampPositionOf,
  writeBlankRecord,
} from "./encoder.ts";
export type { MessageEncoderOptions } from "./encoder.ts";
export { javaHashCode, tagsCodeOf } from "./hash_code.ts";
export { formatHostAddress, formatHostField, parseHostAddress } from "./host_address.ts";
export type { HostAddress } from "./host_address.ts";
export type { DecodedMessage, MessageInput } from "./message.ts";
export { hexOf, offsetMsgIdOf, parseOffsetMsgId } from "./msg_id.ts";
export type { ParsedOffsetMsgId } from "./msg_id.ts";
export {
  checkPropertiesBytes,
  describePropertiesProblem,
  encodeProperties,
  encodePropertiesInto,
  parsePropertiesText,
  parsePropertyPairs,
  propertiesMapOf,
  propertyEntries,
} from "./properties.ts";
export type { PropertiesInput, PropertiesProblem } from "./properties.ts";
export { TOPIC_PATTERN, validateMessage } from "./validate.ts";
export type { ValidateOptions } from "./validate.ts";
