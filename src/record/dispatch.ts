/**
 * What the store derives from a decoded record when it dispatches it to the
 * consume queue and the index (RocketMQ's `DispatchRequest`): transaction
 * type, whether it gets a consume-queue unit, its tagsCode (the delivery
 * time for the schedule topic) and its index keys.
 *
 * @module
 */

import {
  DELAY_LEVELS_DEFAULT_MS,
  INT32_MAX,
  INT32_MIN,
  PROPERTY_DELAY,
  PROPERTY_KEYS,
  PROPERTY_TAGS,
  PROPERTY_UNIQ_KEY,
  SCHEDULE_TOPIC,
  SYS_FLAG_TRANSACTION_MASK,
  TRANSACTION_COMMIT_TYPE,
  TRANSACTION_NOT_TYPE,
  TRANSACTION_PREPARED_TYPE,
  TRANSACTION_ROLLBACK_TYPE,
} from "./constants.ts";
import { tagsCodeOf } from "./hash_code.ts";

/** A transaction type, by RocketMQ's name. */
export type TransactionType = "NOT_TYPE" | "PREPARED" | "COMMIT" | "ROLLBACK";

/**
 * The transaction type in sysFlag bits 2–3.
 *
 * @example
 * ```ts
 * import { transactionTypeOf } from "./dispatch.ts";
 *
 * transactionTypeOf(0xC); // "ROLLBACK"
 * ```
 *
 * @param sysFlag The record's sysFlag.
 * @returns The type.
 */
export function transactionTypeOf(sysFlag: number): TransactionType {
  switch (sysFlag & SYS_FLAG_TRANSACTION_MASK) {
    case TRANSACTION_NOT_TYPE:
      return "NOT_TYPE";
    case TRANSACTION_PREPARED_TYPE:
      return "PREPARED";
    case TRANSACTION_COMMIT_TYPE:
      return "COMMIT";
    default:
      return "ROLLBACK";
  }
}

/**
 * Whether a record gets a consume-queue unit: NOT_TYPE and COMMIT do,
 * PREPARED and ROLLBACK do not.
 *
 * @param sysFlag The record's sysFlag.
 * @returns Whether it is dispatched to its queue.
 */
export function hasConsumeQueueEntry(sysFlag: number): boolean {
  const type = sysFlag & SYS_FLAG_TRANSACTION_MASK;
  return type === TRANSACTION_NOT_TYPE || type === TRANSACTION_COMMIT_TYPE;
}

/**
 * Java's `Integer.parseInt` (optional sign, decimal digits, int32 range),
 * or `undefined` where Java throws.
 */
function parseJavaInt(text: string): number | undefined {
  if (!/^[+-]?[0-9]+$/.test(text)) return undefined;
  const value = Number(text);
  return value >= INT32_MIN && value <= INT32_MAX ? value : undefined;
}

/**
 * The tagsCode a record is dispatched with: the Java hashCode of TAGS (0
 * without), except under the schedule topic with a DELAY level L > 0, where
 * it is the delivery time: `storeTimestamp + delay of level min(L, max)`.
 * A DELAY that Java's `Integer.parseInt` rejects makes RocketMQ 4.9.8 drop
 * the record from dispatch; here it keeps the TAGS hash.
 *
 * @example
 * ```ts
 * import { dispatchTagsCode } from "./dispatch.ts";
 *
 * const properties = new Map([["DELAY", "3"]]);
 * dispatchTagsCode("SCHEDULE_TOPIC_XXXX", properties, 1795954493785); // 1795954503785
 * ```
 *
 * @param topic The record's topic.
 * @param properties Its decoded properties.
 * @param storeTimestamp Its storeTimestamp.
 * @param delayLevelsMs Delay of each level, in ms (level L at index L-1).
 * @returns The tagsCode (an int64 as a number).
 */
export function dispatchTagsCode(
  topic: string,
  properties: ReadonlyMap<string, string>,
  storeTimestamp: number,
  delayLevelsMs: readonly number[] = DELAY_LEVELS_DEFAULT_MS,
): number {
  const tagsCode = tagsCodeOf(properties.get(PROPERTY_TAGS));
  if (topic !== SCHEDULE_TOPIC) return tagsCode;
  return scheduleTagsCode(tagsCode, properties.get(PROPERTY_DELAY), storeTimestamp, delayLevelsMs);
}

/**
 * The schedule topic's part of {@link dispatchTagsCode}, shared with the
 * dispatcher's lean decode (`DispatchView`): the delivery time for a DELAY
 * level L > 0, else `tagsCode` unchanged.
 *
 * @example
 * ```ts
 * import { scheduleTagsCode } from "./dispatch.ts";
 *
 * scheduleTagsCode(0, "3", 1795954493785); // 1795954503785
 * scheduleTagsCode(42, undefined, 1795954493785); // 42
 * ```
 *
 * @param tagsCode The TAGS hash (kept when there is no valid level).
 * @param delay The DELAY property, if any.
 * @param storeTimestamp The record's storeTimestamp.
 * @param delayLevelsMs Delay of each level, in ms (level L at index L-1).
 * @returns The tagsCode.
 */
export function scheduleTagsCode(
  tagsCode: number,
  delay: string | undefined,
  storeTimestamp: number,
  delayLevelsMs: readonly number[] = DELAY_LEVELS_DEFAULT_MS,
): number {
  if (delay === undefined) return tagsCode;
  const delayMs = scheduleDelayMsOf(delay, delayLevelsMs);
  return delayMs < 0 ? tagsCode : storeTimestamp + delayMs;
}

/**
 * The delay a DELAY value gives a schedule-topic record: that of level
 * `min(L, max)` for a level L > 0, or -1 when the value is no level
 * (the record keeps its TAGS hash). The put path's dispatch hints compute
 * it before the storeTimestamp is known.
 *
 * @example
 * ```ts
 * import { scheduleDelayMsOf } from "./dispatch.ts";
 *
 * scheduleDelayMsOf("3"); // 10000
 * scheduleDelayMsOf("0"); // -1
 * ```
 *
 * @param delay The DELAY property.
 * @param delayLevelsMs Delay of each level, in ms (level L at index L-1).
 * @returns The delay in ms, or -1.
 */
export function scheduleDelayMsOf(
  delay: string,
  delayLevelsMs: readonly number[] = DELAY_LEVELS_DEFAULT_MS,
): number {
  const parsed = parseJavaInt(delay);
  if (parsed === undefined) return -1;
  const level = Math.min(parsed, delayLevelsMs.length);
  if (level <= 0) return -1;
  // RocketMQ adds 1 s for a level missing from its table.
  return delayLevelsMs[level - 1] ?? 1_000;
}

/**
 * The keys the index gets for a record, in the order RocketMQ's
 * `IndexService.buildIndex` adds them: UNIQ_KEY first, then each non-empty
 * KEYS token split on single spaces (duplicates kept). ROLLBACK records are
 * not indexed.
 *
 * @example
 * ```ts
 * import { indexKeysOf } from "./dispatch.ts";
 *
 * indexKeysOf(0, new Map([["KEYS", "  lead  mid"]])); // ["lead", "mid"]
 * ```
 *
 * @param sysFlag The record's sysFlag.
 * @param properties Its decoded properties.
 * @returns The keys, without the `topic#` prefix.
 */
export function indexKeysOf(sysFlag: number, properties: ReadonlyMap<string, string>): string[] {
  if ((sysFlag & SYS_FLAG_TRANSACTION_MASK) === TRANSACTION_ROLLBACK_TYPE) return [];
  const keys: string[] = [];
  const uniqKey = properties.get(PROPERTY_UNIQ_KEY);
  if (uniqKey !== undefined) keys.push(uniqKey);
  const keysProperty = properties.get(PROPERTY_KEYS);
  if (keysProperty !== undefined) {
    // Tokens between single spaces, without split()'s array of empty ones:
    // the dispatcher asks this for every record.
    let from = 0;
    for (;;) {
      const space = keysProperty.indexOf(" ", from);
      const to = space < 0 ? keysProperty.length : space;
      if (to > from) keys.push(keysProperty.slice(from, to));
      if (space < 0) break;
      from = space + 1;
    }
  }
  return keys;
}
