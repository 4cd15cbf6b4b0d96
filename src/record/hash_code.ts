/**
 * Java's `String.hashCode()` and the tagsCode RocketMQ derives from it.
 *
 * @module
 */

/**
 * Java `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code
 * units, with int32 wrap-around (JS strings are UTF-16 too, so surrogate
 * pairs count as two units exactly as in Java).
 *
 * @example
 * ```ts
 * import { javaHashCode } from "./hash_code.ts";
 *
 * javaHashCode("TagA"); // 2598919
 * ```
 *
 * @param text The string.
 * @returns An int32.
 */
export function javaHashCode(text: string): number {
  let hash = 0;
  for (let i = 0; i < text.length; i++) hash = (Math.imul(hash, 31) + text.charCodeAt(i)) | 0;
  return hash;
}

/**
 * The tagsCode of a TAGS value: Java `String.hashCode()` widened to int64
 * (a JS number, possibly negative), 0 without tags or for an empty value.
 * The MULTI_TAGS sysFlag bit changes nothing (RocketMQ 4.9.8).
 *
 * @example
 * ```ts
 * import { tagsCodeOf } from "./hash_code.ts";
 *
 * tagsCodeOf("tag with space"); // -1742848654
 * tagsCodeOf(undefined); // 0
 * ```
 *
 * @param tags The TAGS property, if any.
 * @returns The tagsCode.
 */
export function tagsCodeOf(tags: string | undefined): number {
  return tags === undefined || tags.length === 0 ? 0 : javaHashCode(tags);
}
