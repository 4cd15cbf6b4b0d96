/**
 * Property lookups the put path needs (DELAY, WAIT) on any
 * {@link PropertiesInput} shape, and RocketMQ's delay rewrite: a message
 * with DELAY level L > 0 goes to `SCHEDULE_TOPIC_XXXX`, queue L − 1, with
 * `REAL_TOPIC` and `REAL_QID` appended after the caller's pairs.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import {
  type MessageInput,
  type PropertiesInput,
  PROPERTY_DELAY,
  PROPERTY_REAL_QID,
  PROPERTY_REAL_TOPIC,
  propertyEntries,
  SCHEDULE_TOPIC,
} from "../record/mod.ts";

/** The value of property `name`, whatever shape the properties have. */
export function propertyOf(properties: PropertiesInput, name: string): string | undefined {
  if (Array.isArray(properties)) {
    const pairs = properties as ReadonlyArray<readonly [string, string]>;
    let value: string | undefined;
    // The last pair wins, as when RocketMQ parses repeated names into a map.
    for (let i = 0; i < pairs.length; i++) {
      const pair = pairs[i]!;
      if (pair[0] === name) value = pair[1];
    }
    return value;
  }
  if (properties instanceof Map) return (properties as ReadonlyMap<string, string>).get(name);
  const record = properties as Readonly<Record<string, string>>;
  // A property read (inline-cached) answers the usual miss; only a hit
  // pays for the own-property check (the read also sees the prototypes).
  const value = record[name];
  return value !== undefined && Object.hasOwn(record, name) ? value : undefined;
}

/** Java's `Integer.parseInt`, or undefined where Java throws. */
export function parseJavaInt(text: string): number | undefined {
  if (!/^[+-]?[0-9]+$/.test(text)) return undefined;
  const value = Number(text);
  return value >= -0x8000_0000 && value <= 0x7FFF_FFFF ? value : undefined;
}

/**
 * The delay level in a DELAY value, or an error when Java would not parse
 * it (RocketMQ's `getDelayTimeLevel` throws there).
 */
export function delayLevelOf(text: string): number | MqStoreError {
  const level = parseJavaInt(text);
  if (level === undefined) {
    return new MqStoreError(
      "MESSAGE_ILLEGAL",
      `Property DELAY is "${text}", it must be a delay level (an int32)`,
    );
  }
  return level;
}

/**
 * The message as stored after the delay rewrite, or the message itself
 * when `level ≤ 0`. A level above `maxLevel` is clamped and DELAY
 * rewritten.
 *
 * @param message The caller's message (a NOT_TYPE or COMMIT message).
 * @param level Its parsed DELAY level.
 * @param maxLevel The highest delay level.
 */
export function rewriteDelay(message: MessageInput, level: number, maxLevel: number): MessageInput {
  if (level <= 0) return message;
  const clamped = Math.min(level, maxLevel);
  const pairs: [string, string][] = [];
  for (const [name, value] of propertyEntries(message.properties)) {
    // RocketMQ's putProperty replaces an existing pair: drop the caller's.
    if (name === PROPERTY_REAL_TOPIC || name === PROPERTY_REAL_QID) continue;
    pairs.push([name, name === PROPERTY_DELAY && clamped !== level ? String(clamped) : value]);
  }
  pairs.push([PROPERTY_REAL_TOPIC, message.topic], [PROPERTY_REAL_QID, String(message.queueId)]);
  return { ...message, topic: SCHEDULE_TOPIC, queueId: clamped - 1, properties: pairs };
}
