/**
 * Dispatch hints: what the put path knows of each record it appends,
 * handed to the dispatcher so that it need not decode the record again
 * (the header, a properties scan, the key hashes: about half a
 * microsecond a record).
 *
 * ```
 * put:      encode ─► stage(topic, queueId, the encoder's pairs)   slots past the tail
 *           append ─► publish(i, offset, size, queueOffset, ...)  fills in the placement
 *           append returned ─► commit(count)                      tail += count
 * dispatch: find(offset) ─► the slot, or -1 (none, a gap: decode) head moves on
 *           consume()                                             head++
 * ```
 *
 * A ring of struct-of-arrays slots (typed arrays and two arrays of
 * references), from `head` (oldest, next for the dispatcher) to `tail`
 * (next to publish). Slots past the tail hold what the put in progress
 * staged: a put that fails, or an append that throws, never commits them,
 * and the next put stages over them. Hints are a cache, never the truth:
 * the dispatcher takes one only when its offset is the record it is at and
 * its size and the record's header agree (the header is not read where the
 * record reached the file by a positional write: see the dispatcher's
 * `checksHeaders`), and decodes every record that has none (a full ring, a
 * BLANK, a queued put, a re-dispatch at open).
 *
 * A batch's members without properties are staged a range at a time
 * ({@link DispatchHints.stageBare}) and, when they all have one size,
 * published as a uniform run ({@link DispatchHints.runCounts}): the
 * dispatcher then writes their consume-queue units from one slot, with
 * no per-record hint to read.
 *
 * This lives in the commit log (it fills the ring) and the store's
 * dispatcher reads it: arrows point down.
 *
 * @module
 */

import { assert } from "../assert.ts";
import {
  DELAY_LEVELS_DEFAULT_MS,
  PROPERTY_DELAY,
  PROPERTY_KEYS,
  PROPERTY_TAGS,
  PROPERTY_UNIQ_KEY,
  SCHEDULE_TOPIC,
  SYS_FLAG_TRANSACTION_MASK,
  TRANSACTION_ROLLBACK_TYPE,
} from "../record/constants.ts";
import { scheduleDelayMsOf } from "../record/dispatch.ts";
import { PAIR_KEYS, PAIR_OTHER, PAIR_TAGS, PAIR_UNIQ_KEY, PAIR_WAIT } from "../record/validate.ts";
import type { QueueCounter } from "./topic_queue_table.ts";

/** The pairs of the message the encoder encoded last (its record tail). */
export interface EncodedPairs {
  /** Pairs of the properties. */
  readonly pairCount: number;
  /** Whether {@link pairName} and {@link pairValue} hold every pair. */
  readonly pairsKnown: boolean;
  /** Name of pair `i`. */
  pairName(i: number): string;
  /** Value of pair `i`. */
  pairValue(i: number): string;
  /**
   * The pair whose KEYS tokens {@link keysTokens} describes, or -1 (or
   * absent): the key hashes are then taken from there.
   */
  readonly keysPair?: number;
  /**
   * For pair {@link keysPair}: the token count at 0 (-1: too many), then
   * per token its Java hash from 0 and 31 to the power of its length.
   */
  readonly keysTokens?: Int32Array;
  /**
   * The kind of each pair's name (`PAIR_TAGS`, `PAIR_KEYS`, ... of
   * record/validate.ts), when known: no string compares.
   */
  readonly pairKinds?: Int32Array;
}

/** Options of {@link DispatchHints}. */
export interface DispatchHintsOptions {
  /**
   * Most hints held (a power of two); past it new hints are dropped and
   * the dispatcher decodes those records.
   *
   * @default {DISPATCH_HINTS_CAPACITY_DEFAULT}
   */
  capacity?: number;
  /** Whether records are indexed (`messageIndexEnable`): key hashes are computed. */
  withKeys: boolean;
  /**
   * Delay of each level, ms (the schedule topic's tagsCode).
   *
   * @default {DELAY_LEVELS_DEFAULT_MS}
   */
  delayLevelsMs?: readonly number[];
}

/**
 * Default {@link DispatchHintsOptions.capacity}: under SYNC_FLUSH dispatch
 * waits for a group's flush, and a group of up to 8 MiB of small records
 * (128 B bodies: about 260 bytes a record) is about 32 k records.
 */
export const DISPATCH_HINTS_CAPACITY_DEFAULT = 0x1_0000;
/** Slots allocated at first; the ring doubles up to its capacity as needed. */
const INITIAL_SLOTS = 0x100;
/** Key hashes a hint holds; a record with more is decoded. */
export const HINT_KEYS_MAX = 0x8;
/** `keyCounts` of a slot whose record must be decoded (too many keys, pairs unknown). */
const NO_HINT = -1;
/** The KEYS separator (a code unit: a space is one in UTF-16 and one byte in UTF-8). */
const KEYS_SEPARATOR = 0x20;
/** Code unit between topic and key in an index key (`topic#key`). */
const INDEX_KEY_SEPARATOR = 0x23;
/**
 * Entries of the KEYS hash cache: producers that repeat their KEYS strings
 * (a few properties objects sent again and again) hash each once; keys
 * that never repeat soon skip the cache (see KEYS_CACHE_MISS_RUN_MAX).
 */
const KEYS_CACHE_ENTRIES = 0x20;
/** The set of two entries is the top 4 bits of a Fibonacci hash (16 sets). */
const KEYS_CACHE_SET_SHIFT = 28;
/** Misses in a row after which KEYS are hashed without the cache. */
const KEYS_CACHE_MISS_RUN_MAX = 0x20;
/** Without the cache, it is tried again once every this many + 1 KEYS. */
const KEYS_CACHE_RETRY_MASK = 0xFF;
/** 2^32 / the golden ratio: multiplying spreads close inputs over the top bits. */
const FIBONACCI_HASH = 0x9E37_79B1;

assert(
  (DISPATCH_HINTS_CAPACITY_DEFAULT & (DISPATCH_HINTS_CAPACITY_DEFAULT - 1)) === 0,
  "a power of two",
);
assert(INITIAL_SLOTS <= DISPATCH_HINTS_CAPACITY_DEFAULT, "the ring starts below its capacity");
assert(KEYS_CACHE_ENTRIES === 2 << (32 - KEYS_CACHE_SET_SHIFT), "two entries per set");

/** Java's hash carried on from `hash` over `text[from, to)`'s code units. */
function continueHash(hash: number, text: string, from: number, to: number): number {
  for (let i = from; i < to; i++) hash = (Math.imul(hash, 31) + text.charCodeAt(i)) | 0;
  return hash;
}

/**
 * Puts at `into[at]` on the Java hashes of `prefix` followed by each
 * non-empty token of `keys` between single spaces (as indexKeysOf).
 *
 * @returns How many, or {@link NO_HINT} for more than `room`.
 */
function hashKeys(
  keys: string,
  prefix: number,
  into: Int32Array,
  at: number,
  room: number,
): number {
  let count = 0;
  let from = 0;
  const length = keys.length;
  for (let i = 0; i <= length; i++) {
    if (i < length && keys.charCodeAt(i) !== KEYS_SEPARATOR) continue;
    if (i > from) {
      if (count === room) return NO_HINT;
      into[at + count++] = continueHash(prefix, keys, from, i);
    }
    from = i + 1;
  }
  return count;
}

/**
 * The ring of dispatch hints of one store: filled by the commit log's put
 * path, read by the dispatcher. Fields of slot `s` are element `s` of each
 * array (`keyHashes`: `s * HINT_KEYS_MAX` on).
 *
 * @example
 * ```ts ignore
 * const hints = new DispatchHints({ withKeys: true });
 * hints.beginStage();
 * hints.stage("Orders", 0, encoder.lastTail);          // after encode
 * hints.publish(0, offset, size, queueOffset, nowMs, sysFlag, counter); // after patch
 * hints.commit(1);                                     // after the append
 * const slot = hints.find(offset);                     // the dispatcher
 * if (slot >= 0) hints.consume();
 * ```
 */
export class DispatchHints {
  /** Record offset. */
  offsets!: Float64Array;
  /** Record size (0: decode this record). */
  sizes!: Int32Array;
  /** queueOffset field. */
  queueOffsets!: Float64Array;
  /** storeTimestamp, ms. */
  storeTimestamps!: Float64Array;
  /** The consume-queue tagsCode (staged: the TAGS hash). */
  tagsCodes!: Float64Array;
  /** Staged only: the schedule topic's delay, ms (-1: none). */
  delaysMs!: Float64Array;
  /** sysFlag's transaction bits. */
  transactionTypes!: Int32Array;
  /** queueId field. */
  queueIds!: Int32Array;
  /** Key hashes in `keyHashes` from `slot * HINT_KEYS_MAX` (0 when not indexed). */
  keyCounts!: Int32Array;
  /** `javaHashCode(topic + "#" + key)` of each index key, `indexKeysOf` order. */
  keyHashes!: Int32Array;
  /** The topic (the caller's string). */
  topics!: string[];
  /** The queue's counter (its `dispatchCache` holds the consume queue); unset without a unit. */
  counters!: (QueueCounter | undefined)[];
  /**
   * In a uniform run (see {@link publishRun}): the run's records from this
   * slot on; 0 outside one. Slots `[s, s + n)` then hold consecutive
   * records of one size (`sizes[s]`), one queue (`counters[s]`) with
   * consecutive queue offsets, one storeTimestamp, transaction type and
   * tagsCode, none with keys: the dispatcher writes their units from slot
   * `s` alone, wherever in the run it starts.
   */
  runCounts!: Int32Array;

  readonly #capacity: number;
  readonly #withKeys: boolean;
  readonly #delayLevelsMs: readonly number[];
  /** `slots - 1` (slots is a power of two). */
  #mask: number;
  /** Oldest hint (monotonic: slot = head & mask). */
  #head = 0;
  /** One past the newest committed hint. */
  #tail = 0;
  /** Records staged past the tail by the put in progress. */
  #staged = 0;
  /** A record of the put in progress found no slot: commit none of them. */
  #stageFull = false;
  /**
   * Every record the put in progress staged has no keys, no delay and a
   * tagsCode of 0 (members without properties): a uniform run may be marked.
   */
  #stagedPlain = true;
  /** Last topic staged, and the Java hash of `topic#`. */
  #topic = "";
  #prefixHash = 0;
  /** Last TAGS staged, and its hash. */
  #tags = "";
  #tagsCode = 0;
  /**
   * A two-way set-associative cache of KEYS strings (found by identity:
   * the producer's own strings), the prefix hash they were hashed with, their
   * token count ({@link NO_HINT}: too many) and hashes (`entry *
   * HINT_KEYS_MAX` on).
   */
  readonly #keysCacheStrings: string[] = new Array<string>(KEYS_CACHE_ENTRIES).fill("");
  readonly #keysCachePrefixes = new Int32Array(KEYS_CACHE_ENTRIES);
  readonly #keysCacheCounts = new Int32Array(KEYS_CACHE_ENTRIES);
  readonly #keysCacheHashes = new Int32Array(KEYS_CACHE_ENTRIES * HINT_KEYS_MAX);
  /** Per set, the way the last miss replaced. */
  readonly #keysCacheVictims = new Int32Array(KEYS_CACHE_ENTRIES / 2);
  /** Cache misses in a row, up to {@link KEYS_CACHE_MISS_RUN_MAX}. */
  #keysMissRun = 0;
  /** Past that many misses: KEYS hashed without the cache since it was last tried, mod 256. */
  #keysRetryClock = 0;
  /** Hints committed and hints dropped behind the dispatcher (tests, stats). */
  #committedCount = 0;
  #droppedCount = 0;

  /** @param options Capacity, whether keys are hashed, delay levels. */
  constructor(options: DispatchHintsOptions) {
    const capacity = options.capacity ?? DISPATCH_HINTS_CAPACITY_DEFAULT;
    if (!(Number.isSafeInteger(capacity) && capacity >= 1 && (capacity & (capacity - 1)) === 0)) {
      throw new RangeError(`Dispatch hint capacity is ${capacity}; it must be a power of two`);
    }
    this.#capacity = capacity;
    this.#withKeys = options.withKeys;
    this.#delayLevelsMs = options.delayLevelsMs ?? DELAY_LEVELS_DEFAULT_MS;
    const slots = Math.min(INITIAL_SLOTS, capacity);
    this.#mask = slots - 1;
    this.#allocate(slots);
  }

  /** Gives every per-slot array `slots` empty slots (construction, {@link #grow}). */
  #allocate(slots: number): void {
    this.offsets = new Float64Array(slots);
    this.sizes = new Int32Array(slots);
    this.queueOffsets = new Float64Array(slots);
    this.storeTimestamps = new Float64Array(slots);
    this.tagsCodes = new Float64Array(slots);
    this.delaysMs = new Float64Array(slots);
    this.transactionTypes = new Int32Array(slots);
    this.queueIds = new Int32Array(slots);
    this.keyCounts = new Int32Array(slots);
    this.keyHashes = new Int32Array(slots * HINT_KEYS_MAX);
    this.topics = new Array<string>(slots).fill("");
    this.counters = new Array<QueueCounter | undefined>(slots).fill(undefined);
    this.runCounts = new Int32Array(slots);
  }

  /** Hints waiting for the dispatcher. */
  get length(): number {
    return this.#tail - this.#head;
  }

  /** Hints committed so far. */
  get committedCount(): number {
    return this.#committedCount;
  }

  /** Hints the dispatcher found behind it (the record was decoded instead). */
  get droppedCount(): number {
    return this.#droppedCount;
  }

  /** Records staged by the put in progress. */
  get stagedCount(): number {
    return this.#staged;
  }

  // -------------------------------------------------------------------
  // The put path

  /** Starts the records of one put: whatever was staged before is dropped. */
  beginStage(): void {
    this.#staged = 0;
    this.#stageFull = false;
    this.#stagedPlain = true;
    // An empty ring starts again at slot 0: a dispatcher in step with the
    // puts then reuses the first slots, which stay in cache, instead of
    // walking through every slot of a ring that once grew (megabytes).
    if (this.#head === this.#tail) {
      this.#head = 0;
      this.#tail = 0;
    }
  }

  /**
   * Stages the next record of the put in progress from the pairs the
   * encoder just encoded for it: its TAGS hash, the schedule delay, its
   * key hashes. The dispatcher would find the same in the record: the
   * decoded map keeps a name's last non-empty value, the record's UTF-8
   * decodes to the very strings (lone surrogates are refused).
   *
   * @param topic The record's topic (after a delay rewrite).
   * @param queueId Its queue.
   * @param pairs The encoder's pairs of this record.
   */
  stage(topic: string, queueId: number, pairs: EncodedPairs): void {
    const index = this.#tail + this.#staged++;
    if (this.#stageFull) return;
    if (index - this.#head > this.#mask && !this.#grow(index)) {
      this.#stageFull = true;
      return;
    }
    const slot = index & this.#mask;
    this.topics[slot] = topic;
    this.queueIds[slot] = queueId;
    this.runCounts[slot] = 0;
    const count = pairs.pairCount;
    if (count === 0 && pairs.pairsKnown) {
      // No properties (a bare batch member): no tags, delay or keys.
      this.tagsCodes[slot] = 0;
      this.delaysMs[slot] = -1;
      this.keyCounts[slot] = 0;
      return;
    }
    this.#stagedPlain = false;
    if (!pairs.pairsKnown) {
      this.keyCounts[slot] = NO_HINT;
      return;
    }
    let tags: string | undefined;
    let keys: string | undefined;
    let keysAt = -1;
    let uniqKey: string | undefined;
    let delay: string | undefined;
    const kinds = pairs.pairKinds;
    if (kinds !== undefined) {
      for (let i = 0; i < count; i++) {
        const kind = kinds[i]!;
        if (kind === PAIR_OTHER || kind === PAIR_WAIT) continue;
        const value = pairs.pairValue(i);
        // The decoded map drops a pair with an empty value; a later one wins.
        if (value.length === 0) continue;
        if (kind === PAIR_TAGS) tags = value;
        else if (kind === PAIR_KEYS) {
          keys = value;
          keysAt = i;
        } else if (kind === PAIR_UNIQ_KEY) uniqKey = value;
        else delay = value;
      }
    } else {
      for (let i = 0; i < count; i++) {
        const value = pairs.pairValue(i);
        // The decoded map drops a pair with an empty value; a later one wins.
        if (value.length === 0) continue;
        const name = pairs.pairName(i);
        if (name === PROPERTY_TAGS) tags = value;
        else if (name === PROPERTY_KEYS) {
          keys = value;
          keysAt = i;
        } else if (name === PROPERTY_UNIQ_KEY) uniqKey = value;
        else if (name === PROPERTY_DELAY) delay = value;
      }
    }
    if (tags === undefined) {
      this.tagsCodes[slot] = 0;
    } else {
      // Producers repeat their TAGS strings: the very string hashes as last time.
      if (tags !== this.#tags) {
        this.#tags = tags;
        this.#tagsCode = continueHash(0, tags, 0, tags.length);
      }
      this.tagsCodes[slot] = this.#tagsCode;
    }
    this.delaysMs[slot] = delay !== undefined && topic === SCHEDULE_TOPIC
      ? scheduleDelayMsOf(delay, this.#delayLevelsMs)
      : -1;
    let keyCount = 0;
    if (this.#withKeys && (uniqKey !== undefined || keys !== undefined)) {
      if (topic !== this.#topic) {
        this.#topic = topic;
        this.#prefixHash = (Math.imul(continueHash(0, topic, 0, topic.length), 31) +
          INDEX_KEY_SEPARATOR) | 0;
      }
      const prefix = this.#prefixHash;
      const hashes = this.keyHashes;
      const base = slot * HINT_KEYS_MAX;
      if (uniqKey !== undefined) {
        hashes[base + keyCount++] = continueHash(prefix, uniqKey, 0, uniqKey.length);
      }
      if (keys !== undefined) {
        keyCount = keysAt === pairs.keysPair
          ? this.#stageTokens(pairs.keysTokens!, prefix, base, keyCount)
          : this.#stageKeys(keys, prefix, base, keyCount);
      }
    }
    this.keyCounts[slot] = keyCount;
  }

  /**
   * {@link stage} for the next `count` records of the put in progress when
   * none has properties (members of a batch without any): no tags, delay
   * or keys. Fills the slots a range at a time instead of a call a record.
   *
   * @param topic The records' topic.
   * @param queueId Their queue.
   * @param count Records (≥ 0).
   */
  stageBare(topic: string, queueId: number, count: number): void {
    if (count <= 0) return;
    const from = this.#tail + this.#staged;
    this.#staged += count;
    if (this.#stageFull) return;
    const last = from + count - 1;
    // Bounded: each round doubles the ring, up to its capacity.
    while (last - this.#head > this.#mask) {
      if (!this.#grow(from)) {
        this.#stageFull = true;
        return;
      }
    }
    const mask = this.#mask;
    const start = from & mask;
    // Two ranges when the records wrap around the ring's end.
    const firstEnd = Math.min(start + count, mask + 1);
    this.#fillBare(topic, queueId, start, firstEnd);
    if (firstEnd - start < count) this.#fillBare(topic, queueId, 0, count - (firstEnd - start));
  }

  /** Slots `[from, to)` as {@link stageBare} stages them. */
  #fillBare(topic: string, queueId: number, from: number, to: number): void {
    this.topics.fill(topic, from, to);
    this.queueIds.fill(queueId, from, to);
    this.tagsCodes.fill(0, from, to);
    this.delaysMs.fill(-1, from, to);
    this.keyCounts.fill(0, from, to);
    this.runCounts.fill(0, from, to);
  }

  /**
   * Puts the hashes of the KEYS tokens at `keyHashes[base + keyCount]` on
   * from what the encoder took while writing them (see
   * {@link EncodedPairs.keysTokens}): `hash(prefix + token)` is
   * `prefix * 31^length + hash(token)` in 32-bit arithmetic.
   *
   * @returns The slot's key count, or {@link NO_HINT} past {@link HINT_KEYS_MAX}.
   */
  #stageTokens(tokens: Int32Array, prefix: number, base: number, keyCount: number): number {
    const count = tokens[0]!;
    if (count < 0 || keyCount + count > HINT_KEYS_MAX) return NO_HINT;
    const hashes = this.keyHashes;
    for (let t = 0; t < count; t++) {
      hashes[base + keyCount + t] = (Math.imul(prefix, tokens[2 + 2 * t]!) + tokens[1 + 2 * t]!) |
        0;
    }
    return keyCount + count;
  }

  /**
   * Puts the hashes of the KEYS tokens at `keyHashes[base + keyCount]` on,
   * from the cache when the very string was hashed with the same prefix.
   *
   * @returns The slot's key count, or {@link NO_HINT} past {@link HINT_KEYS_MAX}.
   */
  #stageKeys(keys: string, prefix: number, base: number, keyCount: number): number {
    // Keys that do not repeat (an order id per message) would only pay for
    // the lookups and the stores: after a run of misses they are hashed
    // straight into the slot, and the cache is tried again now and then.
    if (
      this.#keysMissRun >= KEYS_CACHE_MISS_RUN_MAX &&
      (this.#keysRetryClock = (this.#keysRetryClock + 1) & KEYS_CACHE_RETRY_MASK) !== 0
    ) {
      const count = hashKeys(
        keys,
        prefix,
        this.keyHashes,
        base + keyCount,
        HINT_KEYS_MAX - keyCount,
      );
      return count === NO_HINT ? NO_HINT : keyCount + count;
    }
    const length = keys.length;
    // Two ways per set; the set spreads the producers' few repeating
    // strings cheaply (length and last code unit; keys is not empty).
    const set = Math.imul(Math.imul(length, 31) + keys.charCodeAt(length - 1), FIBONACCI_HASH) >>>
      KEYS_CACHE_SET_SHIFT;
    const strings = this.#keysCacheStrings;
    const prefixes = this.#keysCachePrefixes;
    let entry = set * 2;
    const first = strings[entry]!;
    // A length compare first: a miss on this way then costs no string compare.
    if (first.length !== length || keys !== first || prefixes[entry] !== prefix) entry++;
    const cached = this.#keysCacheHashes;
    if (keys !== strings[entry] || prefixes[entry] !== prefix) {
      // A miss: the way not replaced last time in this set takes it.
      entry = set * 2 + (this.#keysCacheVictims[set]! ^= 1);
      strings[entry] = keys;
      prefixes[entry] = prefix;
      this.#keysCacheCounts[entry] = hashKeys(
        keys,
        prefix,
        cached,
        entry * HINT_KEYS_MAX,
        HINT_KEYS_MAX,
      );
      if (this.#keysMissRun < KEYS_CACHE_MISS_RUN_MAX) this.#keysMissRun++;
    } else {
      this.#keysMissRun = 0;
    }
    const count = this.#keysCacheCounts[entry]!;
    if (count === NO_HINT || keyCount + count > HINT_KEYS_MAX) return NO_HINT;
    const hashes = this.keyHashes;
    const from = entry * HINT_KEYS_MAX;
    for (let i = 0; i < count; i++) hashes[base + keyCount + i] = cached[from + i]!;
    return keyCount + count;
  }

  /**
   * Fills in the placement of staged record `i` (0 = the put's first),
   * once it is patched into the log.
   *
   * @param i The record's index within the put.
   * @param offset Its commit-log offset.
   * @param size Its size.
   * @param queueOffset Its queueOffset field.
   * @param storeTimestamp Its storeTimestamp.
   * @param sysFlag Its sysFlag (the transaction bits count).
   * @param counter Its queue's counter, when it gets a consume-queue unit.
   */
  publish(
    i: number,
    offset: number,
    size: number,
    queueOffset: number,
    storeTimestamp: number,
    sysFlag: number,
    counter: QueueCounter | undefined,
  ): void {
    if (this.#stageFull || i >= this.#staged) return;
    const slot = (this.#tail + i) & this.#mask;
    this.offsets[slot] = offset;
    const transactionType = sysFlag & SYS_FLAG_TRANSACTION_MASK;
    const keyCount = this.keyCounts[slot]!;
    // A hint the record cannot have: size 0 sends the dispatcher to the decode.
    this.sizes[slot] = keyCount === NO_HINT ? 0 : size;
    // ROLLBACK records are not indexed.
    if (transactionType === TRANSACTION_ROLLBACK_TYPE && keyCount > 0) this.keyCounts[slot] = 0;
    this.queueOffsets[slot] = queueOffset;
    this.storeTimestamps[slot] = storeTimestamp;
    const delayMs = this.delaysMs[slot]!;
    if (delayMs >= 0) this.tagsCodes[slot] = storeTimestamp + delayMs;
    this.transactionTypes[slot] = transactionType;
    this.counters[slot] = counter;
  }

  /**
   * {@link publish} for the `count` staged records of a batch at once:
   * consecutive records of one queue with consecutive queue offsets, one
   * store timestamp and one sysFlag.
   *
   * @param count Records of the batch (from the put's first).
   * @param offset The first record's commit-log offset.
   * @param sizes The records' sizes (the first `count`).
   * @param queueOffset The first record's queueOffset field.
   * @param storeTimestamp Their storeTimestamp.
   * @param sysFlag Their sysFlag (the transaction bits count).
   * @param counter The queue's counter, when the records get consume-queue units.
   * @param uniformSize The size of every record when they all have one
   *   (the batch encoder's `uniformSize`), else -1. With it, a batch whose
   *   members were all staged without properties is marked as a uniform
   *   run ({@link runCounts}).
   */
  publishRun(
    count: number,
    offset: number,
    sizes: Int32Array,
    queueOffset: number,
    storeTimestamp: number,
    sysFlag: number,
    counter: QueueCounter | undefined,
    uniformSize = -1,
  ): void {
    if (this.#stageFull) return;
    const n = Math.min(count, this.#staged);
    const transactionType = sysFlag & SYS_FLAG_TRANSACTION_MASK;
    if (uniformSize > 0 && this.#stagedPlain && n > 0) {
      this.#publishUniform(
        n,
        offset,
        uniformSize,
        queueOffset,
        storeTimestamp,
        transactionType,
        counter,
      );
      return;
    }
    const rollback = transactionType === TRANSACTION_ROLLBACK_TYPE;
    const mask = this.#mask;
    const tail = this.#tail;
    const keyCounts = this.keyCounts;
    let at = offset;
    for (let i = 0; i < n; i++) {
      const slot = (tail + i) & mask;
      const size = sizes[i]!;
      this.offsets[slot] = at;
      const keyCount = keyCounts[slot]!;
      // A hint the record cannot have: size 0 sends the dispatcher to the decode.
      this.sizes[slot] = keyCount === NO_HINT ? 0 : size;
      if (rollback && keyCount > 0) keyCounts[slot] = 0;
      this.queueOffsets[slot] = queueOffset + i;
      this.storeTimestamps[slot] = storeTimestamp;
      const delayMs = this.delaysMs[slot]!;
      if (delayMs >= 0) this.tagsCodes[slot] = storeTimestamp + delayMs;
      this.transactionTypes[slot] = transactionType;
      this.counters[slot] = counter;
      at += size;
    }
  }

  /**
   * {@link publishRun} for `n` records of one size, staged without
   * properties (no keys, no delay, tagsCode 0): range fills, and the run
   * marked at its first slot.
   */
  #publishUniform(
    n: number,
    offset: number,
    size: number,
    queueOffset: number,
    storeTimestamp: number,
    transactionType: number,
    counter: QueueCounter | undefined,
  ): void {
    const mask = this.#mask;
    const start = this.#tail & mask;
    // Two ranges when the records wrap around the ring's end.
    const firstCount = Math.min(n, mask + 1 - start);
    this.#fillPlaced(
      start,
      firstCount,
      n,
      offset,
      size,
      queueOffset,
      storeTimestamp,
      transactionType,
      counter,
    );
    if (firstCount < n) {
      this.#fillPlaced(
        0,
        n - firstCount,
        n - firstCount,
        offset + firstCount * size,
        size,
        queueOffset + firstCount,
        storeTimestamp,
        transactionType,
        counter,
      );
    }
  }

  /**
   * The placement of `count` uniform records from slot `from` (see
   * {@link #publishUniform}), `runLeft` records of the run from the first.
   */
  #fillPlaced(
    from: number,
    count: number,
    runLeft: number,
    offset: number,
    size: number,
    queueOffset: number,
    storeTimestamp: number,
    transactionType: number,
    counter: QueueCounter | undefined,
  ): void {
    const to = from + count;
    const offsets = this.offsets;
    const queueOffsets = this.queueOffsets;
    const runCounts = this.runCounts;
    let at = offset;
    for (let slot = from; slot < to; slot++) {
      offsets[slot] = at;
      queueOffsets[slot] = queueOffset + slot - from;
      runCounts[slot] = runLeft - (slot - from);
      at += size;
    }
    this.sizes.fill(size, from, to);
    this.storeTimestamps.fill(storeTimestamp, from, to);
    this.transactionTypes.fill(transactionType, from, to);
    this.counters.fill(counter, from, to);
  }

  /**
   * Makes the `count` records of the put visible to the dispatcher, once
   * they are appended; nothing when the put staged another number of
   * records (it did not stage them all) or a record found no slot.
   *
   * @param count Records the put appended.
   */
  commit(count: number): void {
    if (!this.#stageFull && this.#staged === count) {
      this.#tail += count;
      this.#committedCount += count;
    }
    this.#staged = 0;
    this.#stageFull = false;
  }

  // -------------------------------------------------------------------
  // The dispatcher

  /**
   * The slot of the hint for the record at `offset`, or -1 when there is
   * none. Hints of records before `offset` are dropped (they were
   * dispatched by the decode).
   *
   * @param offset The record the dispatcher is at.
   * @returns A slot, valid until the next call on the ring.
   */
  find(offset: number): number {
    const offsets = this.offsets;
    const mask = this.#mask;
    // Bounded by the hints held.
    while (this.#head < this.#tail) {
      const slot = this.#head & mask;
      const at = offsets[slot]!;
      if (at === offset) return this.sizes[slot] === 0 ? -1 : slot;
      if (at > offset) return -1;
      this.#head++;
      this.#droppedCount++;
    }
    return -1;
  }

  /** Drops the oldest hint (the one {@link find} returned, now dispatched or copied). */
  consume(): void {
    if (this.#head < this.#tail) this.#head++;
  }

  /**
   * The slot of the `k`-th hint from the oldest (0: the one {@link find}
   * returned), for `k` below {@link length}.
   */
  slotAt(k: number): number {
    return (this.#head + k) & this.#mask;
  }

  /** Drops the `count` oldest hints (a run the dispatcher dispatched). */
  consumeRun(count: number): void {
    this.#head = Math.min(this.#head + count, this.#tail);
  }

  /**
   * Doubles the slots, up to the capacity, keeping those in use up to
   * index `to` (exclusive: the committed hints and those staged so far);
   * false when at the capacity.
   */
  #grow(to: number): boolean {
    const slots = this.#mask + 1;
    if (slots >= this.#capacity) return false;
    const larger = slots * 2;
    const mask = larger - 1;
    const from = this.#head;
    const old = {
      offsets: this.offsets,
      sizes: this.sizes,
      queueOffsets: this.queueOffsets,
      storeTimestamps: this.storeTimestamps,
      tagsCodes: this.tagsCodes,
      delaysMs: this.delaysMs,
      transactionTypes: this.transactionTypes,
      queueIds: this.queueIds,
      keyCounts: this.keyCounts,
      keyHashes: this.keyHashes,
      topics: this.topics,
      counters: this.counters,
      runCounts: this.runCounts,
    };
    this.#allocate(larger);
    // Every slot in use: the committed hints and those staged so far.
    for (let index = from; index < to; index++) {
      const a = index & this.#mask;
      const b = index & mask;
      this.offsets[b] = old.offsets[a]!;
      this.sizes[b] = old.sizes[a]!;
      this.queueOffsets[b] = old.queueOffsets[a]!;
      this.storeTimestamps[b] = old.storeTimestamps[a]!;
      this.tagsCodes[b] = old.tagsCodes[a]!;
      this.delaysMs[b] = old.delaysMs[a]!;
      this.transactionTypes[b] = old.transactionTypes[a]!;
      this.queueIds[b] = old.queueIds[a]!;
      this.keyCounts[b] = old.keyCounts[a]!;
      this.keyHashes.set(
        old.keyHashes.subarray(a * HINT_KEYS_MAX, (a + 1) * HINT_KEYS_MAX),
        b * HINT_KEYS_MAX,
      );
      this.topics[b] = old.topics[a]!;
      this.counters[b] = old.counters[a];
      this.runCounts[b] = old.runCounts[a]!;
    }
    this.#mask = mask;
    return true;
  }
}
