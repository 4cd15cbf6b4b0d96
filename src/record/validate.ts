/**
 * Validation of a {@link MessageInput} before it is encoded. Pure: it reads
 * the message and writes nothing but the caller's layout object.
 *
 * Wrong types (not an object, body not a `Uint8Array`, a number field that
 * is not a number) throw `TypeError`. Everything a message may contain
 * wrongly is returned as an {@link MqStoreError}: `MESSAGE_ILLEGAL` (topic,
 * queueId, ranges, hosts, separators in properties, body or record over
 * `maxMessageSize`) or `PROPERTIES_SIZE_EXCEEDED` (properties over 32767
 * bytes), with a message naming the value and the limit.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import {
  HOST_V6_EXTRA_BYTES,
  INT32_MAX,
  INT32_MIN,
  MAX_MESSAGE_SIZE_DEFAULT_BYTES,
  PROPERTIES_LENGTH_MAX_BYTES,
  RECORD_FIXED_SIZE_BYTES,
  SYS_FLAG_BORN_HOST_V6,
  SYS_FLAG_HOSTS_V6_MASK,
  SYS_FLAG_STORE_HOST_V6,
  TOPIC_LENGTH_MAX_BYTES,
} from "./constants.ts";
import { type HostAddress, parseHostAddress } from "./host_address.ts";
import type { MessageInput } from "./message.ts";
import { describePropertiesProblem } from "./properties.ts";
import { RecordTail } from "./_record_tail.ts";

// What the commit log's batch encoder and dispatch hints read from a
// layout's tail (RecordTail.pairKinds, RecordTail.batchFlags).
export {
  PAIR_DELAY,
  PAIR_KEYS,
  PAIR_OTHER,
  PAIR_TAGS,
  PAIR_UNIQ_KEY,
  PAIR_WAIT,
  TAIL_HAS_DELAY,
  TAIL_HAS_WAIT,
} from "./_record_tail.ts";

/** Topic names RocketMQ accepts (TopicValidator). */
export const TOPIC_PATTERN: RegExp = /^[%|a-zA-Z0-9_-]+$/;

/** Options of {@link validateMessage}. */
export interface ValidateOptions {
  /**
   * Largest body, and largest whole record, in bytes (RocketMQ 4.9.8 refuses
   * a record longer than `maxMessageSize` too).
   *
   * @default {4194304}
   */
  maxMessageSizeBytes?: number;
  /**
   * Born host used when a message has none.
   *
   * @default {"127.0.0.1:10911"}
   */
  defaultBornHost?: string;
  /**
   * Store host used when a message has none.
   *
   * @default {"127.0.0.1:10911"}
   */
  defaultStoreHost?: string;
}

/** What validation learned about a valid message, for the encoder. */
export interface MessageLayout {
  /**
   * The record's tail (topicLength, topic, propertiesLength, properties),
   * encoded: validation encodes it once (or finds it already encoded), the
   * encoder copies it.
   */
  readonly tail: RecordTail;
  /** The born host to write. */
  bornHost: HostAddress;
  /** The store host to write. */
  storeHost: HostAddress;
  /** sysFlag with 0x10/0x20 set from the hosts. */
  sysFlag: number;
  /** Whole record size in bytes. */
  recordSize: number;
}

/** Default host of both born and store host. */
export const DEFAULT_HOST = "127.0.0.1:10911";

/** Creates an empty layout for {@link checkMessage} to fill. */
export function createLayout(): MessageLayout {
  const host = parseHostAddress(DEFAULT_HOST)!;
  return {
    tail: new RecordTail(),
    bornHost: host,
    storeHost: host,
    sysFlag: 0,
    recordSize: 0,
  };
}

/** Options resolved once, so validation in a hot loop parses nothing. */
export interface ResolvedValidateOptions {
  /** Largest body and record. */
  maxMessageSizeBytes: number;
  /** Parsed default born host. */
  defaultBornHost: HostAddress;
  /** Parsed default store host. */
  defaultStoreHost: HostAddress;
}

/**
 * Resolves and checks {@link ValidateOptions}.
 *
 * @param options The options.
 * @returns Resolved options.
 * @throws {RangeError} For a malformed default host or a bad size.
 */
export function resolveValidateOptions(options: ValidateOptions = {}): ResolvedValidateOptions {
  const maxMessageSizeBytes = options.maxMessageSizeBytes ?? MAX_MESSAGE_SIZE_DEFAULT_BYTES;
  if (!Number.isSafeInteger(maxMessageSizeBytes) || maxMessageSizeBytes <= 0) {
    throw new RangeError(
      `maxMessageSizeBytes must be a positive integer, not ${maxMessageSizeBytes}`,
    );
  }
  const host = (name: string, text: string): HostAddress => {
    const parsed = parseHostAddress(text);
    if (parsed === undefined) throw new RangeError(`${name} "${text}" is not "ip:port"`);
    return parsed;
  };
  return {
    maxMessageSizeBytes,
    defaultBornHost: host("defaultBornHost", options.defaultBornHost ?? DEFAULT_HOST),
    defaultStoreHost: host("defaultStoreHost", options.defaultStoreHost ?? DEFAULT_HOST),
  };
}

// One-entry caches: producers mostly repeat the same topic and hosts, and a
// repeated string compares in a few nanoseconds where a regex or a parse
// costs tens.
let lastValidTopic: string | undefined;
let lastBornHostText: string | undefined;
let lastBornHost: HostAddress | undefined;
let lastStoreHostText: string | undefined;
let lastStoreHost: HostAddress | undefined;

/** Whether `value` is an int32 number (no call, no allocation). */
export function isInt32(value: unknown): value is number {
  return typeof value === "number" && (value | 0) === value;
}

function illegal(message: string): MqStoreError {
  return new MqStoreError("MESSAGE_ILLEGAL", message);
}

function typeName(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

function checkInteger(
  name: string,
  value: unknown,
  min: number,
  max: number,
  rangeText: string,
): MqStoreError | undefined {
  if (typeof value !== "number") {
    throw new TypeError(`${name} must be a number, not ${typeName(value)}`);
  }
  if (!Number.isInteger(value) || value < min || value > max) {
    return illegal(`${name} is ${value}, it must be ${rangeText}`);
  }
  return undefined;
}

function checkInt32(name: string, value: unknown): MqStoreError | undefined {
  return value === undefined
    ? undefined
    : checkInteger(name, value, INT32_MIN, INT32_MAX, "an int32 (-2147483648 to 2147483647)");
}

function checkInt64(name: string, value: unknown): MqStoreError | undefined {
  return value === undefined ? undefined : checkInteger(
    name,
    value,
    Number.MIN_SAFE_INTEGER,
    Number.MAX_SAFE_INTEGER,
    "an integer within ±2^53-1 (stored as an int64)",
  );
}

function checkTopic(topic: unknown): MqStoreError | undefined {
  if (typeof topic !== "string") {
    throw new TypeError(`topic must be a string, not ${typeName(topic)}`);
  }
  if (topic === lastValidTopic) return undefined;
  if (topic.length === 0) return illegal("Topic is empty, it must have 1 to 127 characters");
  if (topic.length > TOPIC_LENGTH_MAX_BYTES) {
    return illegal(
      `Topic is ${topic.length} characters, the limit is ${TOPIC_LENGTH_MAX_BYTES}`,
    );
  }
  if (!TOPIC_PATTERN.test(topic)) {
    return illegal(`Topic "${topic}" has characters outside [%|a-zA-Z0-9_-]`);
  }
  lastValidTopic = topic;
  return undefined;
}

function bornHostOf(text: unknown, fallback: HostAddress): HostAddress | MqStoreError {
  if (text === undefined) return fallback;
  if (typeof text !== "string") {
    throw new TypeError(`bornHost must be an "ip:port" string, not ${typeName(text)}`);
  }
  if (text === lastBornHostText) return lastBornHost!;
  const host = parseHostAddress(text);
  if (host === undefined) {
    return illegal(`bornHost "${text}" is not "ipv4:port" or "[ipv6]:port"`);
  }
  lastBornHostText = text;
  lastBornHost = host;
  return host;
}

function storeHostOf(text: unknown, fallback: HostAddress): HostAddress | MqStoreError {
  if (text === undefined) return fallback;
  if (typeof text !== "string") {
    throw new TypeError(`storeHost must be an "ip:port" string, not ${typeName(text)}`);
  }
  if (text === lastStoreHostText) return lastStoreHost!;
  const host = parseHostAddress(text);
  if (host === undefined) {
    return illegal(`storeHost "${text}" is not "ipv4:port" or "[ipv6]:port"`);
  }
  lastStoreHostText = text;
  lastStoreHost = host;
  return host;
}

/**
 * Validates `message` and fills `layout` with its size, hosts and encoded
 * tail (topic and properties). Writes nothing else.
 *
 * @param message The message.
 * @param options Resolved options.
 * @param layout Filled when the message is valid.
 * @param header Where sysFlag, reconsumeTimes, bornTimestamp and the hosts
 * come from: the message itself, or the first message of a batch (whose
 * records share them), so a batch needs no merged copy of each message.
 * @returns `undefined` when valid, else the error.
 * @throws {TypeError} For wrong argument types.
 */
export function checkMessage(
  message: MessageInput,
  options: ResolvedValidateOptions,
  layout: MessageLayout,
  header: MessageInput = message,
): MqStoreError | undefined {
  if (typeof message !== "object" || message === null) {
    throw new TypeError(`A message must be an object, not ${typeName(message)}`);
  }
  const body = message.body;
  if (!(body instanceof Uint8Array)) {
    throw new TypeError(`body must be a Uint8Array, not ${typeName(body)}`);
  }
  // Fast path: a cached topic and int32 fields need no call; anything else
  // goes through the checks that build the error.
  const flag = message.flag;
  const sysFlag = header.sysFlag;
  const reconsumeTimes = header.reconsumeTimes;
  const bornTimestamp = header.bornTimestamp;
  const queueId = message.queueId;
  const topic = message.topic;
  const common = typeof topic === "string" && topic === lastValidTopic && isInt32(queueId) &&
    queueId >= 0 &&
    (flag === undefined || isInt32(flag)) &&
    (sysFlag === undefined || isInt32(sysFlag)) &&
    (reconsumeTimes === undefined || isInt32(reconsumeTimes)) &&
    (bornTimestamp === undefined || Number.isSafeInteger(bornTimestamp)) &&
    (message.preparedTransactionOffset === undefined ||
      Number.isSafeInteger(message.preparedTransactionOffset));
  if (!common) {
    const error = checkTopic(topic) ??
      checkInteger("queueId", queueId, 0, INT32_MAX, "a non-negative int32") ??
      checkInt32("flag", flag) ??
      checkInt32("sysFlag", sysFlag) ??
      checkInt32("reconsumeTimes", reconsumeTimes) ??
      checkInt64("bornTimestamp", bornTimestamp) ??
      checkInt64("preparedTransactionOffset", message.preparedTransactionOffset);
    if (error !== undefined) return error;
  }

  const max = options.maxMessageSizeBytes;
  if (body.length > max) {
    return illegal(`Body is ${body.length} bytes, maxMessageSize is ${max} bytes`);
  }

  const born = bornHostOf(header.bornHost, options.defaultBornHost);
  if (born instanceof MqStoreError) return born;
  const store = storeHostOf(header.storeHost, options.defaultStoreHost);
  if (store instanceof MqStoreError) return store;

  const tail = layout.tail;
  const propertiesBytes = tail.setProperties(message.properties);
  if (propertiesBytes < 0) {
    const problem = describePropertiesProblem(message.properties)!;
    const why = problem.problem === "EMPTY_NAME"
      ? "its name is empty"
      : problem.problem === "LONE_SURROGATE"
      ? "it holds a lone UTF-16 surrogate, which has no UTF-8 form"
      : `its ${problem.problem === "SEPARATOR_IN_NAME" ? "name" : "value"} contains ` +
        "the separator 0x01 or 0x02";
    return illegal(`Property "${problem.name}" cannot be stored: ${why}`);
  }
  if (propertiesBytes > PROPERTIES_LENGTH_MAX_BYTES) {
    return new MqStoreError(
      "PROPERTIES_SIZE_EXCEEDED",
      `Properties are ${propertiesBytes} bytes, the limit is ${PROPERTIES_LENGTH_MAX_BYTES} bytes`,
    );
  }

  const bornV6 = born.ip.length === 16;
  const storeV6 = store.ip.length === 16;
  const extra = (bornV6 ? HOST_V6_EXTRA_BYTES : 0) + (storeV6 ? HOST_V6_EXTRA_BYTES : 0);
  const topicBytes = topic.length;
  const recordSize = RECORD_FIXED_SIZE_BYTES + extra + body.length + topicBytes +
    propertiesBytes;
  if (recordSize > max) {
    return illegal(`Record is ${recordSize} bytes, maxMessageSize is ${max} bytes`);
  }

  tail.setTopic(topic);
  layout.bornHost = born;
  layout.storeHost = store;
  layout.sysFlag = ((sysFlag ?? 0) & ~SYS_FLAG_HOSTS_V6_MASK) |
    (bornV6 ? SYS_FLAG_BORN_HOST_V6 : 0) | (storeV6 ? SYS_FLAG_STORE_HOST_V6 : 0);
  layout.recordSize = recordSize;
  return undefined;
}

const scratchLayout = createLayout();
const defaultOptions = resolveValidateOptions();

/**
 * Validates a message without encoding it.
 *
 * @example
 * ```ts
 * import { validateMessage } from "./validate.ts";
 *
 * const error = validateMessage({ topic: "bad topic", queueId: 0, body: new Uint8Array() });
 * error?.code; // "MESSAGE_ILLEGAL"
 * ```
 *
 * @param message The message.
 * @param options Limits and default hosts.
 * @returns `undefined` when valid, else an {@link MqStoreError}.
 * @throws {TypeError} For wrong argument types.
 */
export function validateMessage(
  message: MessageInput,
  options?: ValidateOptions,
): MqStoreError | undefined {
  const resolved = options === undefined ? defaultOptions : resolveValidateOptions(options);
  return checkMessage(message, resolved, scratchLayout);
}
