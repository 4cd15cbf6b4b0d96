/**
 * The commit-log record format of RocketMQ 4.9.8, as constants.
 *
 * A MESSAGE record (big-endian; positions relative to the record's first byte,
 * shown for IPv4 born and store hosts):
 *
 * ```
 * 0x00  int32  totalSize            whole record, this field included
 * 0x04  int32  magic                0xDAA320A7
 * 0x08  int32  bodyCrc              CRC-32 (IEEE) of the body & 0x7FFFFFFF
 * 0x0C  int32  queueId
 * 0x10  int32  flag
 * 0x14  int64  queueOffset          patched in place when appended
 * 0x1C  int64  physicalOffset       patched in place when appended
 * 0x24  int32  sysFlag
 * 0x28  int64  bornTimestamp
 * 0x30  8|20   bornHost             IPv4 + int32 port, or IPv6 if sysFlag & 0x10
 * 0x38  int64  storeTimestamp       patched in place when appended (0x44 if born host is IPv6)
 * 0x40  8|20   storeHost            IPv6 if sysFlag & 0x20
 * 0x48  int32  reconsumeTimes
 * 0x4C  int64  preparedTransactionOffset
 * 0x54  int32  bodyLength, then the body
 *       int8   topicLength (1..127), then the topic (ASCII)
 *       int16  propertiesLength (0..32767), then the properties (UTF-8)
 * ```
 *
 * A BLANK record ends a segment: `int32 size` (bytes to the end of the
 * segment) and `int32 0xCBD43194`; the rest of the segment stays zero.
 *
 * Every relation between these numbers is asserted when the module loads, so
 * a wrong edit fails at import rather than on disk.
 *
 * @module
 */

import { assert } from "../assert.ts";

// ---------------------------------------------------------------------------
// Magic codes

/** Magic code of a MESSAGE record (`0xDAA320A7`), as the int32 read from disk. */
export const MESSAGE_MAGIC_CODE: number = 0xDAA320A7 | 0;

/** Magic code of a BLANK record (`0xCBD43194`), as the int32 read from disk. */
export const BLANK_MAGIC_CODE: number = 0xCBD43194 | 0;

/**
 * Size of a BLANK record: `int32 size` + `int32 magic`. A message is
 * appended to a segment only if `totalSize + BLANK_RECORD_SIZE_BYTES` is at
 * most the bytes left, so a BLANK always fits after the last message.
 */
export const BLANK_RECORD_SIZE_BYTES = 0x08;

// ---------------------------------------------------------------------------
// Field sizes

/** Size of an IPv4 host field: 4-byte address + int32 port. */
export const HOST_V4_SIZE_BYTES = 0x08;

/** Size of an IPv6 host field: 16-byte address + int32 port. */
export const HOST_V6_SIZE_BYTES = 0x14;

/** Bytes an IPv6 host adds to the record compared with an IPv4 one. */
export const HOST_V6_EXTRA_BYTES: number = HOST_V6_SIZE_BYTES - HOST_V4_SIZE_BYTES;

/** Size of the bodyLength field. */
export const BODY_LENGTH_SIZE_BYTES = 0x04;

/** Size of the topicLength field (one signed byte). */
export const TOPIC_LENGTH_SIZE_BYTES = 0x01;

/** Size of the propertiesLength field (a signed int16). */
export const PROPERTIES_LENGTH_SIZE_BYTES = 0x02;

// ---------------------------------------------------------------------------
// Field positions, relative to the first byte of a record

/** Position of `totalSize` (int32). */
export const TOTAL_SIZE_POSITION = 0x00;
/** Position of `magic` (int32). */
export const MAGIC_POSITION = 0x04;
/** Position of `bodyCrc` (int32). */
export const BODY_CRC_POSITION = 0x08;
/** Position of `queueId` (int32). */
export const QUEUE_ID_POSITION = 0x0C;
/** Position of `flag` (int32). */
export const FLAG_POSITION = 0x10;
/** Position of `queueOffset` (int64), patched in place when appended. */
export const QUEUE_OFFSET_POSITION = 0x14;
/** Position of `physicalOffset` (int64), patched in place when appended. */
export const PHYSICAL_OFFSET_POSITION = 0x1C;
/** Position of `sysFlag` (int32). */
export const SYS_FLAG_POSITION = 0x24;
/** Position of `bornTimestamp` (int64). */
export const BORN_TIMESTAMP_POSITION = 0x28;
/** Position of `bornHost` (8 or 20 bytes). */
export const BORN_HOST_POSITION = 0x30;

/** Position of `storeTimestamp` (int64) when the born host is IPv4. */
export const STORE_TIMESTAMP_POSITION_V4: number = BORN_HOST_POSITION + HOST_V4_SIZE_BYTES;
/** Position of `storeTimestamp` (int64) when the born host is IPv6. */
export const STORE_TIMESTAMP_POSITION_V6: number = BORN_HOST_POSITION + HOST_V6_SIZE_BYTES;
/** Position of `storeHost` when the born host is IPv4. */
export const STORE_HOST_POSITION_V4: number = STORE_TIMESTAMP_POSITION_V4 + 0x08;
/** Position of `storeHost` when the born host is IPv6. */
export const STORE_HOST_POSITION_V6: number = STORE_TIMESTAMP_POSITION_V6 + 0x08;
/** Position of `reconsumeTimes` (int32) with IPv4 born and store hosts. */
export const RECONSUME_TIMES_POSITION_V4: number = STORE_HOST_POSITION_V4 + HOST_V4_SIZE_BYTES;
/** Position of `preparedTransactionOffset` (int64) with IPv4 hosts. */
export const PREPARED_TRANSACTION_OFFSET_POSITION_V4: number = RECONSUME_TIMES_POSITION_V4 + 0x04;
/** Position of `bodyLength` (int32) with IPv4 hosts; add 12 per IPv6 host. */
export const BODY_LENGTH_POSITION_V4: number = PREPARED_TRANSACTION_OFFSET_POSITION_V4 + 0x08;
/** Position of the first body byte with IPv4 hosts; add 12 per IPv6 host. */
export const BODY_POSITION_V4: number = BODY_LENGTH_POSITION_V4 + BODY_LENGTH_SIZE_BYTES;

/**
 * Size of a record without its body, topic and properties bytes, with IPv4
 * born and store hosts: `totalSize = 91 + body + topic + properties`. Add
 * {@link HOST_V6_EXTRA_BYTES} per IPv6 host.
 */
export const RECORD_FIXED_SIZE_BYTES: number = BODY_POSITION_V4 + TOPIC_LENGTH_SIZE_BYTES +
  PROPERTIES_LENGTH_SIZE_BYTES;

/** The smallest possible MESSAGE record: IPv4 hosts, no body, 1-byte topic. */
export const RECORD_SIZE_MIN_BYTES: number = RECORD_FIXED_SIZE_BYTES + 1;

// ---------------------------------------------------------------------------
// sysFlag bits (MessageSysFlag)

/** sysFlag: the body is compressed (stored and CRC'd as given). */
export const SYS_FLAG_COMPRESSED = 0x1;
/** sysFlag: the TAGS property holds several tags (changes nothing in the store). */
export const SYS_FLAG_MULTI_TAGS = 0x2;
/** sysFlag: mask of the transaction type (bits 2–3). */
export const SYS_FLAG_TRANSACTION_MASK = 0xC;
/** Transaction type: not a transactional message. */
export const TRANSACTION_NOT_TYPE = 0x0;
/** Transaction type: half message (queueOffset 0, no consume-queue unit). */
export const TRANSACTION_PREPARED_TYPE = 0x4;
/** Transaction type: commit (takes the next queue offset). */
export const TRANSACTION_COMMIT_TYPE = 0x8;
/** Transaction type: rollback (queueOffset 0, no unit, not indexed). */
export const TRANSACTION_ROLLBACK_TYPE = 0xC;
/** sysFlag: the born host is IPv6 (20-byte host field). */
export const SYS_FLAG_BORN_HOST_V6 = 0x10;
/** sysFlag: the store host is IPv6 (20-byte host field). */
export const SYS_FLAG_STORE_HOST_V6 = 0x20;
/** sysFlag: the body must be unwrapped (RocketMQ's NEED_UNWRAP_FLAG). */
export const SYS_FLAG_NEED_UNWRAP = 0x40;
/** sysFlag: the record is an inner batch (RocketMQ's INNER_BATCH_FLAG). */
export const SYS_FLAG_INNER_BATCH = 0x80;
/** sysFlag: mask of the compression type (bits 8–10). */
export const SYS_FLAG_COMPRESSION_TYPE_MASK = 0x700;
/** Compression type LZ4 (bits 8–10 = 1). */
export const COMPRESSION_TYPE_LZ4 = 0x100;
/** Compression type ZSTD (bits 8–10 = 2). */
export const COMPRESSION_TYPE_ZSTD = 0x200;
/** Compression type ZLIB (bits 8–10 = 3; also what 0 means with the compressed bit). */
export const COMPRESSION_TYPE_ZLIB = 0x300;

/** Both host bits: the encoder derives them from the host addresses. */
export const SYS_FLAG_HOSTS_V6_MASK: number = SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6;

// ---------------------------------------------------------------------------
// Properties

/** Byte between a property name and its value. */
export const NAME_VALUE_SEPARATOR = 0x01;
/** Byte between two properties (4.9.1+ writes none after the last). */
export const PROPERTY_SEPARATOR = 0x02;

/** Property holding the tags (→ tagsCode). */
export const PROPERTY_TAGS = "TAGS";
/** Property holding space-separated keys, each indexed. */
export const PROPERTY_KEYS = "KEYS";
/** Property holding the client message id, indexed. */
export const PROPERTY_UNIQ_KEY = "UNIQ_KEY";
/** Property: `false` = the producer does not wait for a sync flush. */
export const PROPERTY_WAIT = "WAIT";
/** Property holding the delay level. */
export const PROPERTY_DELAY = "DELAY";
/** Property holding the original topic of a delayed message. */
export const PROPERTY_REAL_TOPIC = "REAL_TOPIC";
/** Property holding the original queue id of a delayed message. */
export const PROPERTY_REAL_QID = "REAL_QID";
/** The topic delayed messages are stored under. */
export const SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";

// ---------------------------------------------------------------------------
// Limits

/** Longest topic, in bytes (the topicLength field is a signed byte). */
export const TOPIC_LENGTH_MAX_BYTES = 0x7F;
/** Longest properties string, in bytes (the field is a signed int16). */
export const PROPERTIES_LENGTH_MAX_BYTES = 0x7FFF;
/** Default `maxMessageSize`: 4 MiB. */
export const MAX_MESSAGE_SIZE_DEFAULT_BYTES = 0x400000;
/** Largest int32. */
export const INT32_MAX = 0x7FFFFFFF;
/** Smallest int32. */
export const INT32_MIN: number = -0x80000000;
/** Largest TCP/UDP port. */
export const PORT_MAX = 0xFFFF;

/**
 * RocketMQ's default delay levels (`messageDelayLevel` = `1s 5s 10s 30s 1m
 * 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`), in ms; level L is index L-1.
 */
export const DELAY_LEVELS_DEFAULT_MS: readonly number[] = Object.freeze([
  1_000,
  5_000,
  10_000,
  30_000,
  60_000,
  120_000,
  180_000,
  240_000,
  300_000,
  360_000,
  420_000,
  480_000,
  540_000,
  600_000,
  1_200_000,
  1_800_000,
  3_600_000,
  7_200_000,
]);

// ---------------------------------------------------------------------------
// Load-time checks of the relations above

assert(MESSAGE_MAGIC_CODE === -626843481, "MESSAGE magic is RocketMQ's -626843481");
assert(BLANK_MAGIC_CODE === -875286124, "BLANK magic is RocketMQ's -875286124");
assert(QUEUE_OFFSET_POSITION === 20, "queueOffset @20 (SPEC §3)");
assert(
  PHYSICAL_OFFSET_POSITION === QUEUE_OFFSET_POSITION + 8,
  "physicalOffset follows queueOffset",
);
assert(PHYSICAL_OFFSET_POSITION === 28, "physicalOffset @28 (SPEC §3)");
assert(SYS_FLAG_POSITION === 36, "sysFlag @36 (SPEC §3)");
assert(BORN_TIMESTAMP_POSITION === SYS_FLAG_POSITION + 4, "bornTimestamp follows sysFlag");
assert(BORN_HOST_POSITION === 48, "bornHost @48 (SPEC §3)");
assert(STORE_TIMESTAMP_POSITION_V4 === 56, "storeTimestamp @56 with an IPv4 born host");
assert(
  STORE_TIMESTAMP_POSITION_V6 === STORE_TIMESTAMP_POSITION_V4 + HOST_V6_EXTRA_BYTES,
  "an IPv6 born host moves storeTimestamp by 12",
);
assert(RECORD_FIXED_SIZE_BYTES === 91, "fixed part is 91 bytes with IPv4 hosts");
assert(HOST_V6_EXTRA_BYTES === 12, "an IPv6 host adds 12 bytes");
assert(BLANK_RECORD_SIZE_BYTES === 4 + 4, "BLANK = int32 size + int32 magic");
assert(TOPIC_LENGTH_MAX_BYTES === 127, "topicLength is a signed byte");
assert(PROPERTIES_LENGTH_MAX_BYTES === 32767, "propertiesLength is a signed int16");
assert(
  (SYS_FLAG_COMPRESSED | SYS_FLAG_MULTI_TAGS | SYS_FLAG_TRANSACTION_MASK | SYS_FLAG_HOSTS_V6_MASK |
    SYS_FLAG_NEED_UNWRAP | SYS_FLAG_INNER_BATCH | SYS_FLAG_COMPRESSION_TYPE_MASK) === 0x7FF,
  "sysFlag bits 0–10 are all named",
);
assert(
  (SYS_FLAG_COMPRESSED & SYS_FLAG_MULTI_TAGS) === 0 &&
    (SYS_FLAG_TRANSACTION_MASK & (SYS_FLAG_COMPRESSED | SYS_FLAG_MULTI_TAGS)) === 0 &&
    (SYS_FLAG_HOSTS_V6_MASK & SYS_FLAG_TRANSACTION_MASK) === 0 &&
    ((SYS_FLAG_NEED_UNWRAP | SYS_FLAG_INNER_BATCH) & SYS_FLAG_HOSTS_V6_MASK) === 0 &&
    (SYS_FLAG_COMPRESSION_TYPE_MASK & 0xFF) === 0,
  "sysFlag fields do not overlap",
);
assert(
  [
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
  ]
    .every((type) => (type & ~SYS_FLAG_TRANSACTION_MASK) === 0),
  "transaction types lie inside their mask",
);
assert(
  [COMPRESSION_TYPE_LZ4, COMPRESSION_TYPE_ZSTD, COMPRESSION_TYPE_ZLIB]
    .every((type) => (type & ~SYS_FLAG_COMPRESSION_TYPE_MASK) === 0),
  "compression types lie inside their mask",
);
assert(DELAY_LEVELS_DEFAULT_MS.length === 18, "RocketMQ has 18 default delay levels");
assert(MAX_MESSAGE_SIZE_DEFAULT_BYTES === 4 * 1024 * 1024, "maxMessageSize defaults to 4 MiB");
