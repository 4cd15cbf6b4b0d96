/**
 * The tail of a MESSAGE record — `topicLength`, topic, `propertiesLength`,
 * properties — encoded once and kept, with the exact strings it came from.
 *
 * Producers send the same topic and often the same properties object again
 * and again, or objects built from the same strings (the same TAGS, a
 * different KEYS). Encoding a string costs a few nanoseconds a character,
 * while checking that a pair is the very strings encoded last time costs one
 * pointer comparison per name and value; copying the kept tail into a record
 * four bytes at a time is cheaper still. So the leading pairs that are
 * unchanged are not encoded again, only those from the first change on. The
 * check is exact: the bytes of a pair depend only on its name and value and
 * on the pairs before it, all compared, so a mutated object (a value
 * replaced, a key added, removed or reordered) is encoded again from the
 * first difference.
 *
 * Layout of {@link RecordTail.bytes}: the topic ends at {@link TOPIC_END}
 * (its length byte just before it), the int16 properties length sits at
 * `TOPIC_END` and the properties follow at {@link PROPERTIES_START}, so a new
 * topic and new properties are each written without moving the other.
 *
 * @module
 */

import {
  PROPERTIES_LENGTH_MAX_BYTES,
  PROPERTIES_LENGTH_SIZE_BYTES,
  PROPERTY_SEPARATOR,
  TOPIC_LENGTH_MAX_BYTES,
  TOPIC_LENGTH_SIZE_BYTES,
} from "./constants.ts";
import { type PropertiesInput, writePairName, writePairValue } from "./properties.ts";

/** One past the topic's last byte (room for the longest topic and its length byte). */
const TOPIC_END = TOPIC_LENGTH_SIZE_BYTES + TOPIC_LENGTH_MAX_BYTES;
/** First properties byte. */
const PROPERTIES_START = TOPIC_END + PROPERTIES_LENGTH_SIZE_BYTES;
/**
 * Bytes `writePair` may write past the limit it counts to (the rest of a
 * multi-byte character), so the buffer ends 4 bytes after the longest field.
 */
const WRITE_SLACK_BYTES = 0x04;
/**
 * Most pairs remembered; pairs past this index are encoded every time (the
 * bound keeps the cache's arrays small).
 */
const CACHED_PAIRS_MAX = 0x40;

/**
 * The encoded tail of the record being encoded. Not a public class: each
 * encoder layout owns one.
 */
export class RecordTail {
  /** The encoded fields (see the module doc for the layout). */
  readonly bytes: Uint8Array = new Uint8Array(
    PROPERTIES_START + PROPERTIES_LENGTH_MAX_BYTES + WRITE_SLACK_BYTES,
  );
  /** A view of {@link bytes}, to copy the tail four bytes at a time. */
  readonly view: DataView = new DataView(this.bytes.buffer);
  /** The topic written before {@link TOPIC_END}; `undefined` before the first. */
  #topic: string | undefined;
  /** Where the tail starts: the topic length byte. */
  #start = TOPIC_END;
  /** Length of the current properties (what {@link end} and the length field say). */
  #propertiesBytes = 0;
  /**
   * Names of the pairs whose bytes follow {@link PROPERTIES_START}, in
   * order; the first {@link #valid} match the bytes.
   */
  readonly #names: string[] = [];
  /** Values of those pairs (the first {@link #valid}). */
  readonly #values: string[] = [];
  /** Position after each of those pairs' value (the first {@link #valid}). */
  readonly #ends: number[] = [];
  /** Position of each of those pairs' value, after its `0x01` (the first {@link #valid}). */
  readonly #valueStarts: number[] = [];
  /** Leading pairs whose bytes are in place and recorded. */
  #valid = 0;
  /** During {@link setProperties}: leading pairs found unchanged so far. */
  #same = 0;
  /** Pairs of the properties last set. */
  #count = 0;

  /**
   * Pairs of the properties last set (the dispatch hints read them with
   * {@link pairName} and {@link pairValue} instead of the record bytes).
   */
  get pairCount(): number {
    return this.#count;
  }

  /** Whether every pair of the properties last set is recorded (at most CACHED_PAIRS_MAX). */
  get pairsKnown(): boolean {
    return this.#valid >= this.#count;
  }

  /** Name of pair `i` of the properties last set (`i` below pairCount, pairsKnown). */
  pairName(i: number): string {
    return this.#names[i]!;
  }

  /** Value of pair `i` of the properties last set (`i` below pairCount, pairsKnown). */
  pairValue(i: number): string {
    return this.#values[i]!;
  }

  /** First byte of the tail in {@link bytes}. */
  get start(): number {
    return this.#start;
  }

  /** One past the tail's last byte in {@link bytes}. */
  get end(): number {
    return PROPERTIES_START + this.#propertiesBytes;
  }

  /**
   * Writes a topic that was checked (ASCII, 1–127 characters).
   *
   * @param topic The topic.
   */
  setTopic(topic: string): void {
    if (topic === this.#topic) return;
    const length = topic.length;
    const bytes = this.bytes;
    const start = TOPIC_END - length - TOPIC_LENGTH_SIZE_BYTES;
    bytes[start] = length;
    for (let i = 0; i < length; i++) bytes[start + 1 + i] = topic.charCodeAt(i);
    this.#start = start;
    this.#topic = topic;
  }

  /**
   * Encodes `input` after the topic and returns its length, with the same
   * result and checks as `encodePropertiesInto`. The leading pairs that are
   * the very strings encoded last time are not written again. A result over
   * 32767 is exact, but the tail then holds only a prefix and must not be
   * used.
   *
   * @param input The properties; `undefined` = none.
   * @returns Bytes, or a negative code (see `encodePropertiesInto`).
   * @throws {TypeError} For a malformed input (as `encodePropertiesInto`).
   */
  setProperties(input: PropertiesInput | undefined): number {
    let p = PROPERTIES_START;
    const names = this.#names;
    const values = this.#values;
    const ends = this.#ends;
    this.#same = 0;
    this.#count = 0;
    if (input === undefined) {
      // Nothing written: the bytes of the last pairs stay for the next message.
    } else if (Array.isArray(input)) {
      const pairs = input as ReadonlyArray<readonly [string, string]>;
      for (let i = 0; i < pairs.length; i++) {
        const pair = pairs[i];
        if (!Array.isArray(pair)) {
          throw new TypeError(`Property pair ${i} must be a [name, value] array`);
        }
        const name = pair[0];
        const value = pair[1];
        // The unchanged leading pairs, inline (see #pair): no call for them.
        if (i === this.#same && i < this.#valid && name === names[i] && value === values[i]) {
          p = ends[i]!;
          this.#same = i + 1;
          continue;
        }
        p = this.#pair(i, name, value, p);
        if (p < 0) return p;
      }
      this.#count = pairs.length;
    } else if (input instanceof Map) {
      let i = 0;
      for (const [name, value] of input as ReadonlyMap<string, string>) {
        p = this.#pair(i++, name, value, p);
        if (p < 0) return p;
      }
    } else if (typeof input === "object" && input !== null) {
      const record = input as Readonly<Record<string, string>>;
      let i = 0;
      for (const name in record) {
        const value = record[name];
        // The unchanged leading pairs, inline (see #pair): no call for them.
        if (i === this.#same && i < this.#valid && name === names[i] && value === values[i]) {
          p = ends[i]!;
          this.#same = ++i;
          continue;
        }
        p = this.#pair(i++, name, value, p);
        if (p < 0) return p;
      }
      this.#count = i;
    } else {
      throw new TypeError(
        `Properties must be an object, a Map or an array of pairs, not ${typeof input}`,
      );
    }
    const length = p - PROPERTIES_START;
    if (length <= PROPERTIES_LENGTH_MAX_BYTES) {
      this.#propertiesBytes = length;
      this.bytes[TOPIC_END] = length >>> 8;
      this.bytes[TOPIC_END + 1] = length;
    }
    return length;
  }

  /**
   * Pair `i` at `p`: skipped when it and every pair before it are unchanged,
   * else written (with its leading separator) and recorded. A pair in
   * place (every pair before it unchanged, or rewritten to the same
   * length) with the same name gets only its value written: in a batch
   * the pairs' names repeat and their values change. When its bytes then
   * end where they ended before, the recorded pairs after it stay in place
   * too (a fixed-width UNIQ_KEY before TAGS, say).
   */
  #pair(i: number, name: unknown, value: unknown, p: number): number {
    this.#count = i + 1;
    const names = this.#names;
    const values = this.#values;
    const valid = this.#valid;
    const inPlace = i === this.#same && i < valid;
    if (inPlace && name === names[i] && value === values[i]) {
      this.#same = i + 1;
      return this.#ends[i]!;
    }
    // From here on the bytes change: later records no longer describe them.
    if (valid > i) this.#valid = i;
    const into = this.bytes;
    let valueStart: number;
    if (inPlace && name === names[i]) {
      // The separator, the name and its 0x01 are in place.
      valueStart = this.#valueStarts[i]!;
      p = writePairValue(name as string, value, into, valueStart);
    } else {
      if (i > 0) {
        if (p < into.length) into[p] = PROPERTY_SEPARATOR;
        p++;
      }
      valueStart = writePairName(name, value, into, p);
      p = valueStart < 0 ? valueStart : writePairValue(name as string, value, into, valueStart);
    }
    if (p < 0) return p;
    if (
      i === this.#valid && i < CACHED_PAIRS_MAX &&
      p - PROPERTIES_START <= PROPERTIES_LENGTH_MAX_BYTES
    ) {
      // writePairName checked both are strings.
      names[i] = name as string;
      values[i] = value as string;
      this.#valueStarts[i] = valueStart;
      if (inPlace && p === this.#ends[i]) {
        // Same length: the recorded pairs after it are where they were.
        this.#valid = valid;
        this.#same = i + 1;
      } else {
        this.#ends[i] = p;
        this.#valid = i + 1;
      }
    }
    return p;
  }
}
