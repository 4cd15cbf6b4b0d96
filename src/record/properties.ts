/**
 * The properties field of a record: `name 0x01 value` pairs joined by
 * `0x02`, UTF-8, at most 32767 bytes.
 *
 * - Written in the 4.9.1+ form, without a trailing `0x02`; read in both
 *   forms (4.0–4.9.0 wrote one after the last pair).
 * - Names and values must not contain `0x01` or `0x02`; names must not be
 *   empty. Values may be empty: the raw pairs keep them, while the decoded
 *   map drops them as RocketMQ's `string2messageProperties` does (a later
 *   duplicate name wins there too).
 * - Pairs are written in the caller's order: a `Map` or a `[name, value][]`
 *   keeps it; a plain object lists its integer-like keys first, as JS does.
 *
 * @module
 */

import { utf8Text } from "./_text.ts";
import { NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR } from "./constants.ts";

/**
 * Properties as a caller gives them: a plain object, or a `Map` or an
 * array of pairs when the order of the pairs matters.
 *
 * @example
 * ```ts
 * import type { PropertiesInput } from "./properties.ts";
 *
 * const asObject: PropertiesInput = { TAGS: "created", KEYS: "order-1" };
 * const inOrder: PropertiesInput = [["KEYS", "order-1"], ["TAGS", "created"]];
 * console.log(asObject, new Map(inOrder));
 * ```
 */
export type PropertiesInput =
  | Readonly<Record<string, string>>
  | ReadonlyMap<string, string>
  | ReadonlyArray<readonly [string, string]>;

/** Why {@link encodePropertiesInto} refused the properties. */
export type PropertiesProblem =
  | "SEPARATOR_IN_NAME"
  | "SEPARATOR_IN_VALUE"
  | "EMPTY_NAME"
  | "LONE_SURROGATE";

const NAME_VALUE_SEPARATOR_CHAR = String.fromCharCode(NAME_VALUE_SEPARATOR);
const PROPERTY_SEPARATOR_CHAR = String.fromCharCode(PROPERTY_SEPARATOR);

/** Failure codes of {@link encodePropertiesInto}; a length is never negative. */
const SEPARATOR_IN_NAME = -1;
const SEPARATOR_IN_VALUE = -2;
const EMPTY_NAME = -3;
const LONE_SURROGATE = -4;

const PROBLEMS: Readonly<Record<number, PropertiesProblem>> = {
  [SEPARATOR_IN_NAME]: "SEPARATOR_IN_NAME",
  [SEPARATOR_IN_VALUE]: "SEPARATOR_IN_VALUE",
  [EMPTY_NAME]: "EMPTY_NAME",
  [LONE_SURROGATE]: "LONE_SURROGATE",
};

/** {@link writeString} result: the string holds 0x01 or 0x02. */
const HAS_SEPARATOR = -1;
/** {@link writeString} result: the string holds a lone surrogate. */
const HAS_LONE_SURROGATE = -2;
/** First ASCII char that is neither 0x00 nor a separator. */
const ASCII_PLAIN_MIN = PROPERTY_SEPARATOR + 1;
/** `c - ASCII_PLAIN_MIN` of the last ASCII char (0x7F). */
const ASCII_PLAIN_SPAN = 0x7F - ASCII_PLAIN_MIN;

/**
 * Writes `text` as UTF-8 at `into[position]` in the same pass that looks for
 * the separators and lone surrogates, and returns the position after it (or
 * a negative code). Bytes past the end of `into` are counted, not written,
 * so an oversized input still gets its true length.
 */
function writeString(text: string, into: Uint8Array, position: number): number {
  const length = text.length;
  const limit = into.length - 4;
  let p = position;
  let i = 0;
  // ASCII fast path while the worst case (3 bytes a char) surely fits. One
  // unsigned comparison per character tells the common one (0x03–0x7F)
  // from the rest: 0x00, the two separators, and non-ASCII.
  if (p + 3 * length <= limit) {
    for (; i < length; i++) {
      const c = text.charCodeAt(i);
      if (((c - ASCII_PLAIN_MIN) >>> 0) > ASCII_PLAIN_SPAN) {
        if (c >= 0x80) break;
        if (c !== 0) return HAS_SEPARATOR;
      }
      into[p++] = c;
    }
  }
  for (; i < length; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      if (c === NAME_VALUE_SEPARATOR || c === PROPERTY_SEPARATOR) return HAS_SEPARATOR;
      if (p < limit) into[p] = c;
      p += 1;
    } else if (c < 0x800) {
      if (p < limit) {
        into[p] = 0xC0 | (c >>> 6);
        into[p + 1] = 0x80 | (c & 0x3F);
      }
      p += 2;
    } else if (c < 0xD800 || c > 0xDFFF) {
      if (p < limit) {
        into[p] = 0xE0 | (c >>> 12);
        into[p + 1] = 0x80 | ((c >>> 6) & 0x3F);
        into[p + 2] = 0x80 | (c & 0x3F);
      }
      p += 3;
    } else {
      // A high surrogate followed by a low one is one 4-byte code point.
      const next = i + 1 < length ? text.charCodeAt(i + 1) : 0;
      if (c > 0xDBFF || next < 0xDC00 || next > 0xDFFF) return HAS_LONE_SURROGATE;
      c = 0x10000 + ((c - 0xD800) << 10) + (next - 0xDC00);
      i++;
      if (p < limit) {
        into[p] = 0xF0 | (c >>> 18);
        into[p + 1] = 0x80 | ((c >>> 12) & 0x3F);
        into[p + 2] = 0x80 | ((c >>> 6) & 0x3F);
        into[p + 3] = 0x80 | (c & 0x3F);
      }
      p += 4;
    }
  }
  return p;
}

/**
 * Writes one pair at `position` and returns the position after it, or a
 * negative code (internal: for the encoder's properties cache).
 *
 * @param name The name (a `TypeError` unless a string).
 * @param value The value (a `TypeError` unless a string).
 * @param into The destination; bytes past its end are counted, not written.
 * @param position Where the pair starts.
 * @returns The position after the pair, or a negative code.
 */
export function writePair(
  name: unknown,
  value: unknown,
  into: Uint8Array,
  position: number,
): number {
  const valueStart = writePairName(name, value, into, position);
  return valueStart < 0 ? valueStart : writePairValue(name as string, value, into, valueStart);
}

/**
 * The first half of {@link writePair}: checks both types, writes the name
 * and its `0x01` at `position`, and returns where the value starts, or a
 * negative code (internal: for the encoder's properties cache).
 *
 * @param name The name (a `TypeError` unless a string).
 * @param value The value (a `TypeError` unless a string; not written).
 * @param into The destination; bytes past its end are counted, not written.
 * @param position Where the pair starts.
 * @returns The position of the value, or a negative code.
 */
export function writePairName(
  name: unknown,
  value: unknown,
  into: Uint8Array,
  position: number,
): number {
  if (typeof name !== "string") {
    throw new TypeError(`Property names must be strings, not ${typeof name}`);
  }
  if (typeof value !== "string") {
    throw new TypeError(`Property "${name}" must have a string value, not ${typeof value}`);
  }
  if (name.length === 0) return EMPTY_NAME;
  const p = writeString(name, into, position);
  if (p < 0) return p === HAS_SEPARATOR ? SEPARATOR_IN_NAME : LONE_SURROGATE;
  if (p < into.length) into[p] = NAME_VALUE_SEPARATOR;
  return p + 1;
}

/**
 * Writes the value of a pair at `position` (after its name and `0x01`,
 * already in place) and returns the position after it, or a negative code
 * (internal: for the encoder's properties cache, which rewrites only the
 * value when the name is unchanged).
 *
 * @param name The pair's name, for the error message.
 * @param value The value (a `TypeError` unless a string).
 * @param into The destination; bytes past its end are counted, not written.
 * @param position Where the value starts.
 * @returns The position after the value, or a negative code.
 */
export function writePairValue(
  name: string,
  value: unknown,
  into: Uint8Array,
  position: number,
): number {
  if (typeof value !== "string") {
    throw new TypeError(`Property "${name}" must have a string value, not ${typeof value}`);
  }
  const p = writeString(value, into, position);
  if (p < 0) return p === HAS_SEPARATOR ? SEPARATOR_IN_VALUE : LONE_SURROGATE;
  return p;
}

/** {@link writeKeysValue} result: not plain ASCII or no room; write it with {@link writePairValue}. */
export const KEYS_NOT_PLAIN = -0x100;
/** The KEYS token separator (a space: one code unit, one byte). */
const KEYS_TOKEN_SEPARATOR = 0x20;

/**
 * {@link writePairValue} for a KEYS value of plain ASCII (0x03–0x7F), with
 * the Java hash of each non-empty token between spaces taken in the same
 * pass (the tokens `indexKeysOf` gives) (internal: the index needs `hash(topic + "#" + token)`, which
 * is `hash(topic + "#") * 31^length + hash(token)`). The two multiply
 * chains run beside the byte stores, where a second pass over the string
 * would wait on them (about 4 ns a character on Deno).
 *
 * `tokens` receives the token count at 0 (-1 past `maxTokens`), then per
 * token its hash from 0 and 31 to the power of its length.
 *
 * @param value The value (a string; its name was checked).
 * @param into The destination.
 * @param position Where the value starts.
 * @param tokens Receives the count and the (hash, power) pairs: `1 + 2 * maxTokens` elements.
 * @param maxTokens Most tokens recorded.
 * @returns The position after the value, or {@link KEYS_NOT_PLAIN} (nothing
 *   usable written: another character, or the value may not fit).
 */
export function writeKeysValue(
  value: string,
  into: Uint8Array,
  position: number,
  tokens: Int32Array,
  maxTokens: number,
): number {
  const length = value.length;
  if (position + length > into.length - 4) return KEYS_NOT_PLAIN;
  let p = position;
  let count = 0;
  let hash = 0;
  let power = 1;
  // First character of the current token.
  let from = 0;
  for (let i = 0; i < length; i++) {
    const c = value.charCodeAt(i);
    if (((c - ASCII_PLAIN_MIN) >>> 0) > ASCII_PLAIN_SPAN) return KEYS_NOT_PLAIN;
    into[p++] = c;
    if (c !== KEYS_TOKEN_SEPARATOR) {
      hash = (Math.imul(hash, 31) + c) | 0;
      power = Math.imul(power, 31);
      continue;
    }
    if (i > from) {
      if (count < maxTokens) {
        tokens[1 + 2 * count] = hash;
        tokens[2 + 2 * count] = power;
      }
      count++;
      hash = 0;
      power = 1;
    }
    from = i + 1;
  }
  if (length > from) {
    if (count < maxTokens) {
      tokens[1 + 2 * count] = hash;
      tokens[2 + 2 * count] = power;
    }
    count++;
  }
  tokens[0] = count > maxTokens ? -1 : count;
  return p;
}

function writeSeparator(into: Uint8Array, position: number): number {
  if (position < into.length) into[position] = PROPERTY_SEPARATOR;
  return position + 1;
}

/**
 * Encodes `input` in the 4.9.1+ form into `into` from index 0, in one pass
 * that also checks every name and value, and returns the encoded length, or
 * a negative code when a name or value cannot be stored
 * ({@link describePropertiesProblem} says which and why). When the length
 * exceeds `into.length` it is still exact but `into` holds only a prefix:
 * size `into` for the largest properties you accept (32767 bytes + 4).
 *
 * @param input The properties; `undefined` = none.
 * @param into Scratch that receives the bytes.
 * @returns Bytes, or a negative code.
 * @throws {TypeError} When `input` is not an object, `Map` or array of
 * pairs, or a name or value is not a string.
 */
export function encodePropertiesInto(
  input: PropertiesInput | undefined,
  into: Uint8Array,
): number {
  if (input === undefined) return 0;
  let p = 0;
  if (Array.isArray(input)) {
    const pairs = input as ReadonlyArray<readonly [string, string]>;
    for (let i = 0; i < pairs.length; i++) {
      const pair = pairs[i];
      if (!Array.isArray(pair)) {
        throw new TypeError(`Property pair ${i} must be a [name, value] array`);
      }
      if (i > 0) p = writeSeparator(into, p);
      p = writePair(pair[0], pair[1], into, p);
      if (p < 0) return p;
    }
  } else if (input instanceof Map) {
    let first = true;
    for (const [name, value] of input as ReadonlyMap<string, string>) {
      if (!first) p = writeSeparator(into, p);
      first = false;
      p = writePair(name, value, into, p);
      if (p < 0) return p;
    }
  } else if (typeof input === "object" && input !== null) {
    const record = input as Readonly<Record<string, string>>;
    let first = true;
    for (const name in record) {
      if (!first) p = writeSeparator(into, p);
      first = false;
      p = writePair(name, record[name], into, p);
      if (p < 0) return p;
    }
  } else {
    throw new TypeError(
      `Properties must be an object, a Map or an array of pairs, not ${typeof input}`,
    );
  }
  return p;
}

/**
 * Names the first property {@link encodePropertiesInto} refused, for an
 * error message.
 *
 * @param input The properties.
 * @returns `{ problem, name }`, or `undefined` if all can be stored.
 */
export function describePropertiesProblem(
  input: PropertiesInput | undefined,
): { problem: PropertiesProblem; name: string } | undefined {
  const scratch = new Uint8Array(0);
  for (const [name, value] of propertyEntries(input)) {
    const code = writePair(name, value, scratch, 0);
    if (code < 0) return { problem: PROBLEMS[code]!, name };
  }
  return undefined;
}

/**
 * The pairs of `input` in the order they are written.
 *
 * @param input The properties.
 * @returns `[name, value]` pairs.
 */
export function propertyEntries(input: PropertiesInput | undefined): [string, string][] {
  if (input === undefined) return [];
  if (Array.isArray(input)) {
    return (input as ReadonlyArray<readonly [string, string]>).map(([n, v]) => [n, v]);
  }
  if (input instanceof Map) return [...(input as ReadonlyMap<string, string>)];
  const record = input as Readonly<Record<string, string>>;
  const entries: [string, string][] = [];
  for (const name in record) entries.push([name, record[name]!]);
  return entries;
}

/**
 * Encodes properties into a new array (4.9.1+ form, no trailing `0x02`).
 *
 * @example
 * ```ts
 * import { encodeProperties } from "./properties.ts";
 *
 * encodeProperties({ TAGS: "a", KEYS: "k" }); // "TAGS\x01a\x02KEYS\x01k" as bytes
 * ```
 *
 * @param input The properties.
 * @returns The bytes.
 * @throws {RangeError} When a name or value cannot be stored.
 */
export function encodeProperties(input: PropertiesInput | undefined): Uint8Array {
  const length = encodePropertiesInto(input, new Uint8Array(0));
  if (length < 0) {
    const problem = describePropertiesProblem(input)!;
    throw new RangeError(`Property "${problem.name}" cannot be stored: ${problem.problem}`);
  }
  const bytes = new Uint8Array(length + 4);
  encodePropertiesInto(input, bytes);
  return bytes.subarray(0, length);
}

/**
 * Whether `bytes[start, end)` is a well-formed properties field: each pair
 * has a non-empty name, one `0x01`, no second `0x01`; pairs are separated by
 * single `0x02`s; one trailing `0x02` (the pre-4.9.1 form) is allowed. Empty
 * input is well-formed. Scans bytes only: no strings are made.
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @returns Whether the field is well-formed.
 */
export function checkPropertiesBytes(bytes: Uint8Array, start: number, end: number): boolean {
  // Per pair: position of its first byte, and whether its 0x01 was seen.
  let pairStart = start;
  let separatorSeen = false;
  for (let i = start; i < end; i++) {
    const b = bytes[i]!;
    if (b > PROPERTY_SEPARATOR) continue;
    if (b === NAME_VALUE_SEPARATOR) {
      if (separatorSeen || i === pairStart) return false;
      separatorSeen = true;
    } else if (b === PROPERTY_SEPARATOR) {
      if (!separatorSeen) return false;
      pairStart = i + 1;
      separatorSeen = false;
    }
  }
  // Ends after a complete pair, after a trailing 0x02, or is empty.
  return separatorSeen || pairStart === end;
}

/**
 * The raw pairs of a well-formed properties field, in stored order, empty
 * values included (a trailing `0x02` adds no pair).
 *
 * @example
 * ```ts
 * import { parsePropertyPairs } from "./properties.ts";
 *
 * const raw = new TextEncoder().encode("emptyVal\x01\x02TAGS\x01EV");
 * parsePropertyPairs(raw, 0, raw.length); // [["emptyVal", ""], ["TAGS", "EV"]]
 * ```
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @returns `[name, value]` pairs.
 */
export function parsePropertyPairs(
  bytes: Uint8Array,
  start: number,
  end: number,
): [string, string][] {
  return parsePropertiesText(utf8Text(bytes, start, end));
}

/**
 * The raw pairs of a properties string (as Java would hold it): segments
 * between `\x02`s, each split at its first `\x01`; a segment without one
 * (only in malformed input) is skipped.
 *
 * @param text The properties as a string.
 * @returns `[name, value]` pairs.
 */
export function parsePropertiesText(text: string): [string, string][] {
  const pairs: [string, string][] = [];
  const length = text.length;
  let index = 0;
  while (index < length) {
    let next = text.indexOf(PROPERTY_SEPARATOR_CHAR, index);
    if (next < 0) next = length;
    const separator = text.indexOf(NAME_VALUE_SEPARATOR_CHAR, index);
    if (separator >= 0 && separator < next) {
      pairs.push([text.slice(index, separator), text.slice(separator + 1, next)]);
    }
    index = next + 1;
  }
  return pairs;
}

/**
 * The decoded properties map, as RocketMQ's `string2messageProperties`
 * builds it from raw pairs: pairs with an empty name or value are dropped; a
 * later duplicate name wins.
 *
 * @param pairs Raw pairs, in stored order.
 * @returns The map.
 */
export function propertiesMapOf(
  pairs: ReadonlyArray<readonly [string, string]>,
): Map<string, string> {
  const map = new Map<string, string>();
  // An indexed loop: destructuring through the iterator protocol cost Bun
  // more than the map itself (the dispatcher decodes every record).
  for (let i = 0; i < pairs.length; i++) {
    const pair = pairs[i]!;
    const name = pair[0];
    const value = pair[1];
    if (name.length > 0 && value.length > 0) map.set(name, value);
  }
  return map;
}

/**
 * The decoded properties map straight from the bytes of a properties field:
 * what `propertiesMapOf(parsePropertyPairs(bytes, start, end))` gives,
 * without making the pairs (the read path's `properties`, where most
 * consumers want the map only).
 *
 * @example
 * ```ts
 * import { parsePropertiesMap } from "./properties.ts";
 *
 * const raw = new TextEncoder().encode("emptyVal\x01\x02TAGS\x01EV");
 * parsePropertiesMap(raw, 0, raw.length); // Map { "TAGS" => "EV" }
 * ```
 *
 * @param bytes The buffer.
 * @param start First byte.
 * @param end One past the last byte.
 * @returns The map: empty names and values dropped, a later duplicate wins.
 */
export function parsePropertiesMap(
  bytes: Uint8Array,
  start: number,
  end: number,
): Map<string, string> {
  const map = new Map<string, string>();
  const text = utf8Text(bytes, start, end);
  const length = text.length;
  let index = 0;
  // Bounded by the text: each round moves past one separator.
  while (index < length) {
    let next = text.indexOf(PROPERTY_SEPARATOR_CHAR, index);
    if (next < 0) next = length;
    const separator = text.indexOf(NAME_VALUE_SEPARATOR_CHAR, index);
    // A non-empty name before the 0x01, a non-empty value after it.
    if (separator > index && separator < next - 1) {
      map.set(text.slice(index, separator), text.slice(separator + 1, next));
    }
    index = next + 1;
  }
  return map;
}
