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
 * What the put path then needs from the pairs is worked out here too, as
 * they are written, not looked up again for every message: the kind of
 * each recorded name (TAGS, KEYS, UNIQ_KEY, DELAY, WAIT: a batch member's
 * checks and the dispatch hints read a small integer instead of comparing
 * strings) and, for a plain-ASCII KEYS value, the Java hash of each token
 * taken in the pass that writes its bytes (the index keys' hashes follow
 * from them with one multiply-add each).
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
  PROPERTY_DELAY,
  PROPERTY_KEYS,
  PROPERTY_SEPARATOR,
  PROPERTY_TAGS,
  PROPERTY_UNIQ_KEY,
  PROPERTY_WAIT,
  TOPIC_LENGTH_MAX_BYTES,
  TOPIC_LENGTH_SIZE_BYTES,
} from "./constants.ts";
import {
  KEYS_NOT_PLAIN,
  type PropertiesInput,
  writeKeysValue,
  writePairName,
  writePairValue,
} from "./properties.ts";

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
 * KEYS tokens whose hashes are kept (the dispatch hints hold as many key
 * hashes a record: HINT_KEYS_MAX); with more the hints hash them again.
 */
export const KEYS_TOKENS_MAX = 0x8;

/** {@link RecordTail.pairKinds}: a name the put path does not look for. */
export const PAIR_OTHER = 0x0;
/** {@link RecordTail.pairKinds}: TAGS. */
export const PAIR_TAGS = 0x1;
/** {@link RecordTail.pairKinds}: KEYS. */
export const PAIR_KEYS = 0x2;
/** {@link RecordTail.pairKinds}: UNIQ_KEY. */
export const PAIR_UNIQ_KEY = 0x3;
/** {@link RecordTail.pairKinds}: DELAY. */
export const PAIR_DELAY = 0x4;
/** {@link RecordTail.pairKinds}: WAIT. */
export const PAIR_WAIT = 0x5;

/** {@link RecordTail.batchFlags}: a pair is named DELAY. */
export const TAIL_HAS_DELAY = 0x1;
/** {@link RecordTail.batchFlags}: a pair is named WAIT. */
export const TAIL_HAS_WAIT = 0x2;

/** The kind of a property name (see {@link RecordTail.pairKinds}). */
function pairKindOf(name: string): number {
  return name === PROPERTY_TAGS
    ? PAIR_TAGS
    : name === PROPERTY_KEYS
    ? PAIR_KEYS
    : name === PROPERTY_UNIQ_KEY
    ? PAIR_UNIQ_KEY
    : name === PROPERTY_DELAY
    ? PAIR_DELAY
    : name === PROPERTY_WAIT
    ? PAIR_WAIT
    : PAIR_OTHER;
}

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
   * The recorded pair whose value {@link keysTokens} describes (a KEYS
   * pair written by `writeKeysValue`), or -1.
   */
  #keysPair = -1;
  /** See {@link keysTokens}. */
  readonly #keysTokens = new Int32Array(1 + 2 * KEYS_TOKENS_MAX);
  /** See {@link pairKinds}. */
  readonly #kinds = new Int32Array(CACHED_PAIRS_MAX);

  /**
   * The kind of each recorded pair's name (PAIR_TAGS, PAIR_KEYS, ...;
   * the first {@link pairCount} when {@link pairsKnown}), worked out when
   * the name is recorded: the put path then tells the names it looks for
   * without comparing strings for every message.
   */
  get pairKinds(): Int32Array {
    return this.#kinds;
  }

  /**
   * For the properties last set, with {@link pairsKnown}: TAIL_HAS_DELAY
   * when a pair is named DELAY, TAIL_HAS_WAIT when one is named WAIT (a
   * batch member's checks: without either, no lookup in its object).
   */
  batchFlags(): number {
    const kinds = this.#kinds;
    const count = this.#count;
    let flags = 0;
    for (let i = 0; i < count; i++) {
      const kind = kinds[i]!;
      if (kind === PAIR_DELAY) flags |= TAIL_HAS_DELAY;
      else if (kind === PAIR_WAIT) flags |= TAIL_HAS_WAIT;
    }
    return flags;
  }

  /**
   * The pair whose KEYS tokens {@link keysTokens} holds, or -1: the
   * dispatch hints take the key hashes from there instead of hashing the
   * string again.
   */
  get keysPair(): number {
    return this.#keysPair;
  }

  /**
   * For pair {@link keysPair}: the token count at 0 (-1: more than
   * {@link KEYS_TOKENS_MAX}), then per token its Java hash (from 0) and
   * 31 to the power of its length, so that `hash(prefix + token)` is
   * `prefixHash * power + hash`.
   */
  get keysTokens(): Int32Array {
    return this.#keysTokens;
  }

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
        if (i === this.#same && i < this.#valid && name === names[i]) {
          // The unchanged leading pairs, inline (see #pair): no call for them.
          if (value === values[i]) {
            p = ends[i]!;
            this.#same = i + 1;
            continue;
          }
          const end = this.#rewriteValue(i, name, value);
          if (end >= 0) {
            p = end;
            continue;
          }
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
        if (i === this.#same && i < this.#valid && name === names[i]) {
          // The unchanged leading pairs, inline (see #pair): no call for them.
          if (value === values[i]) {
            p = ends[i]!;
            this.#same = ++i;
            continue;
          }
          const end = this.#rewriteValue(i, name, value);
          if (end >= 0) {
            p = end;
            i++;
            continue;
          }
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
   * The common change in a batch, without {@link #pair}'s general
   * bookkeeping: recorded pair `i`, in place (every pair before it
   * unchanged) and of the same name, gets a new string value. Returns the
   * position after it, or -1 to leave the pair to {@link #pair} (a value
   * it must check, encode or refuse itself: not a string, a KEYS value
   * that is not plain ASCII, a refused or oversized value).
   */
  #rewriteValue(i: number, name: string, value: unknown): number {
    if (typeof value !== "string") return -1;
    const valueStart = this.#valueStarts[i]!;
    let end: number;
    if (this.#kinds[i] === PAIR_KEYS) {
      if (i !== this.#keysPair) return -1;
      end = writeKeysValue(value, this.bytes, valueStart, this.#keysTokens, KEYS_TOKENS_MAX);
      if (end === KEYS_NOT_PLAIN) {
        // The tokens may be half overwritten: #pair hashes the value again or drops them.
        return -1;
      }
    } else {
      end = writePairValue(name, value, this.bytes, valueStart);
      if (end < 0) return -1;
    }
    if (end - PROPERTIES_START > PROPERTIES_LENGTH_MAX_BYTES) return -1;
    this.#values[i] = value;
    if (end === this.#ends[i]) {
      // Same length: the recorded pairs after it are where they were.
      this.#same = i + 1;
    } else {
      this.#ends[i] = end;
      this.#valid = i + 1;
    }
    this.#count = i + 1;
    return end;
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
    if (this.#keysPair === i) this.#keysPair = -1;
    const into = this.bytes;
    let valueStart: number;
    if (inPlace && name === names[i]) {
      // The separator, the name and its 0x01 are in place.
      valueStart = this.#valueStarts[i]!;
    } else {
      if (i > 0) {
        if (p < into.length) into[p] = PROPERTY_SEPARATOR;
        p++;
      }
      valueStart = writePairName(name, value, into, p);
      if (valueStart < 0) return valueStart;
    }
    p = KEYS_NOT_PLAIN;
    if (name === PROPERTY_KEYS && typeof value === "string" && i < CACHED_PAIRS_MAX) {
      p = writeKeysValue(value, into, valueStart, this.#keysTokens, KEYS_TOKENS_MAX);
      // Kept only if the pair is recorded below (else #valid says the pairs are unknown).
      if (p !== KEYS_NOT_PLAIN) this.#keysPair = i;
    }
    if (p === KEYS_NOT_PLAIN) p = writePairValue(name as string, value, into, valueStart);
    if (p < 0) return p;
    if (
      i === this.#valid && i < CACHED_PAIRS_MAX &&
      p - PROPERTIES_START <= PROPERTIES_LENGTH_MAX_BYTES
    ) {
      // writePairName checked both are strings.
      if (names[i] !== name) this.#kinds[i] = pairKindOf(name as string);
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
