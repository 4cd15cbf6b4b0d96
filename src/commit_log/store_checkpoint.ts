/**
 * The `checkpoint` file (SPEC §7): 4096 bytes, big-endian.
 *
 * ```
 * 0x00 int64 physicMsgTimestamp   store timestamp of the last flushed record
 * 0x08 int64 logicsMsgTimestamp   (consume queues)
 * 0x10 int64 indexMsgTimestamp    (index files)
 * ---- RocketMQ reads nothing past here; mqstore's own block: ----
 * 0x18 uint32 magic "MQSC"  0x1C uint32 version
 * 0x20 int64 commitLogOffset      flushed commit-log offset
 * 0x28 int64 consumeQueueOffset   commit-log offset dispatched into durable consume queues
 * 0x30 int64 indexOffset          commit-log offset dispatched into durable index files
 * 0x38 uint32 CRC-32 of [0x18, 0x38)
 * ---- the writer's bounds (added later; a block of its own): ----
 * 0x40 uint32 magic "MQSB"  0x44 uint32 version
 * 0x48 int64 unflushedBytesMax    the writer's bound on appended, unflushed bytes
 * 0x50 int64 putBytesMax          the most bytes one put appends (maxMessageSize)
 * 0x58 uint32 CRC-32 of [0x40, 0x58)
 * ```
 *
 * Each block has its own magic and CRC so that a checkpoint written by
 * RocketMQ (zeros there), by an mqstore without the second block, or a
 * torn one is recognised and ignored: the offsets are then unknown and
 * recovery falls back to timestamps; the bounds are unknown and recovery
 * looks for stale bytes through the whole tail of the last segment.
 *
 * @module
 */

import { MqStoreError } from "../errors.ts";
import { crc32 } from "../record/mod.ts";
import type { RuntimePort } from "../runtime/port.ts";
import {
  CHECKPOINT_BOUNDS_CRC_POSITION,
  CHECKPOINT_BOUNDS_MAGIC,
  CHECKPOINT_BOUNDS_POSITION,
  CHECKPOINT_BOUNDS_VERSION,
  CHECKPOINT_COMMIT_LOG_OFFSET_POSITION,
  CHECKPOINT_CONSUME_QUEUE_OFFSET_POSITION,
  CHECKPOINT_EXTENSION_CRC_POSITION,
  CHECKPOINT_EXTENSION_MAGIC,
  CHECKPOINT_EXTENSION_POSITION,
  CHECKPOINT_EXTENSION_VERSION,
  CHECKPOINT_INDEX_OFFSET_POSITION,
  CHECKPOINT_INDEX_TIMESTAMP_POSITION,
  CHECKPOINT_LOGICS_TIMESTAMP_POSITION,
  CHECKPOINT_PHYSIC_TIMESTAMP_POSITION,
  CHECKPOINT_PUT_BYTES_MAX_POSITION,
  CHECKPOINT_SIZE_BYTES,
  CHECKPOINT_UNFLUSHED_BYTES_MAX_POSITION,
} from "./constants.ts";

const TWO_POW_32 = 0x1_0000_0000;

function readInt64(view: DataView, position: number): number {
  return view.getInt32(position) * TWO_POW_32 + view.getUint32(position + 4);
}

function writeInt64(view: DataView, position: number, value: number): void {
  const high = Math.floor(value / TWO_POW_32);
  view.setInt32(position, high);
  view.setUint32(position + 4, value - high * TWO_POW_32);
}

/**
 * The checkpoint's values in memory, and their durable file.
 *
 * @example
 * ```ts
 * import { createPort } from "../runtime/mod.ts";
 * import { StoreCheckpoint } from "./store_checkpoint.ts";
 *
 * const port = await createPort({ adapter: "memory" });
 * await port.makeDirectory("/store");
 * const checkpoint = await StoreCheckpoint.load(port, "/store/checkpoint");
 * checkpoint.physicMsgTimestamp = Date.now();
 * await checkpoint.flush();
 * ```
 */
export class StoreCheckpoint {
  /** Path of the file. */
  readonly path: string;
  /** Store timestamp of the last flushed commit-log record, ms. */
  physicMsgTimestamp = 0;
  /** Store timestamp of the last record in durable consume queues, ms. */
  logicsMsgTimestamp = 0;
  /** Store timestamp of the last record in durable index files, ms. */
  indexMsgTimestamp = 0;
  /** Flushed commit-log offset; -1 when unknown (no valid mqstore block). */
  commitLogOffset: number = -1;
  /** Commit-log offset covered by durable consume queues; -1 when unknown. */
  consumeQueueOffset: number = -1;
  /** Commit-log offset covered by durable index files; -1 when unknown. */
  indexOffset: number = -1;
  /**
   * The writer's `unflushedBytesMax`: how far appends may run ahead of the
   * flushed offset. -1 when unknown (no valid bounds block).
   */
  unflushedBytesMax: number = -1;
  /** The most bytes one put of the writer appends (`maxMessageSize`); -1 when unknown. */
  putBytesMax: number = -1;
  #port: RuntimePort;
  /** The file image, reused by every flush. */
  #bytes = new Uint8Array(CHECKPOINT_SIZE_BYTES);
  /** The last write started (the next one waits for it). */
  #writing: Promise<void> = Promise.resolve();

  private constructor(port: RuntimePort, path: string) {
    this.#port = port;
    this.path = path;
  }

  /**
   * Reads the checkpoint at `path`; a missing file gives zeros and unknown
   * offsets.
   *
   * @throws {MqStoreError} `INVALID_FILE` when the file is not 4096 bytes.
   */
  static async load(port: RuntimePort, path: string): Promise<StoreCheckpoint> {
    const checkpoint = new StoreCheckpoint(port, path);
    const bytes = await port.readFile(path);
    if (bytes === undefined) return checkpoint;
    if (bytes.length !== CHECKPOINT_SIZE_BYTES) {
      throw new MqStoreError(
        "INVALID_FILE",
        `Checkpoint ${path} is ${bytes.length} bytes; a checkpoint is ${CHECKPOINT_SIZE_BYTES}`,
      );
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    checkpoint.physicMsgTimestamp = readInt64(view, CHECKPOINT_PHYSIC_TIMESTAMP_POSITION);
    checkpoint.logicsMsgTimestamp = readInt64(view, CHECKPOINT_LOGICS_TIMESTAMP_POSITION);
    checkpoint.indexMsgTimestamp = readInt64(view, CHECKPOINT_INDEX_TIMESTAMP_POSITION);
    const crc = crc32(bytes, CHECKPOINT_EXTENSION_POSITION, CHECKPOINT_EXTENSION_CRC_POSITION);
    if (
      view.getUint32(CHECKPOINT_EXTENSION_POSITION) === CHECKPOINT_EXTENSION_MAGIC &&
      view.getUint32(CHECKPOINT_EXTENSION_CRC_POSITION) === crc >>> 0
    ) {
      checkpoint.commitLogOffset = readInt64(view, CHECKPOINT_COMMIT_LOG_OFFSET_POSITION);
      checkpoint.consumeQueueOffset = readInt64(view, CHECKPOINT_CONSUME_QUEUE_OFFSET_POSITION);
      checkpoint.indexOffset = readInt64(view, CHECKPOINT_INDEX_OFFSET_POSITION);
    }
    const boundsCrc = crc32(bytes, CHECKPOINT_BOUNDS_POSITION, CHECKPOINT_BOUNDS_CRC_POSITION);
    if (
      view.getUint32(CHECKPOINT_BOUNDS_POSITION) === CHECKPOINT_BOUNDS_MAGIC &&
      view.getUint32(CHECKPOINT_BOUNDS_CRC_POSITION) === boundsCrc >>> 0
    ) {
      checkpoint.unflushedBytesMax = readInt64(view, CHECKPOINT_UNFLUSHED_BYTES_MAX_POSITION);
      checkpoint.putBytesMax = readInt64(view, CHECKPOINT_PUT_BYTES_MAX_POSITION);
    }
    return checkpoint;
  }

  /** The minimum of the timestamps recovery starts from (RocketMQ's `getMinTimestamp`). */
  get minTimestamp(): number {
    return Math.min(this.physicMsgTimestamp, this.logicsMsgTimestamp);
  }

  /** The file image of the current values. */
  encode(): Uint8Array {
    const bytes = this.#bytes;
    const view = new DataView(bytes.buffer);
    writeInt64(view, CHECKPOINT_PHYSIC_TIMESTAMP_POSITION, this.physicMsgTimestamp);
    writeInt64(view, CHECKPOINT_LOGICS_TIMESTAMP_POSITION, this.logicsMsgTimestamp);
    writeInt64(view, CHECKPOINT_INDEX_TIMESTAMP_POSITION, this.indexMsgTimestamp);
    view.setUint32(CHECKPOINT_EXTENSION_POSITION, CHECKPOINT_EXTENSION_MAGIC);
    view.setUint32(CHECKPOINT_EXTENSION_POSITION + 4, CHECKPOINT_EXTENSION_VERSION);
    writeInt64(view, CHECKPOINT_COMMIT_LOG_OFFSET_POSITION, Math.max(this.commitLogOffset, -1));
    writeInt64(view, CHECKPOINT_CONSUME_QUEUE_OFFSET_POSITION, this.consumeQueueOffset);
    writeInt64(view, CHECKPOINT_INDEX_OFFSET_POSITION, this.indexOffset);
    view.setUint32(
      CHECKPOINT_EXTENSION_CRC_POSITION,
      crc32(bytes, CHECKPOINT_EXTENSION_POSITION, CHECKPOINT_EXTENSION_CRC_POSITION) >>> 0,
    );
    view.setUint32(CHECKPOINT_BOUNDS_POSITION, CHECKPOINT_BOUNDS_MAGIC);
    view.setUint32(CHECKPOINT_BOUNDS_POSITION + 4, CHECKPOINT_BOUNDS_VERSION);
    writeInt64(view, CHECKPOINT_UNFLUSHED_BYTES_MAX_POSITION, Math.max(this.unflushedBytesMax, -1));
    writeInt64(view, CHECKPOINT_PUT_BYTES_MAX_POSITION, Math.max(this.putBytesMax, -1));
    view.setUint32(
      CHECKPOINT_BOUNDS_CRC_POSITION,
      crc32(bytes, CHECKPOINT_BOUNDS_POSITION, CHECKPOINT_BOUNDS_CRC_POSITION) >>> 0,
    );
    return bytes;
  }

  /**
   * Writes the file atomically and durably (temporary file, sync, rename,
   * sync directory). Calls are serialised: the commit-log flusher and the
   * consume-queue flusher both write it, and two writes of one temporary
   * file at once would fail.
   */
  flush(): Promise<void> {
    const write = this.#writing.catch(() => {}).then(() =>
      this.#port.writeFileAtomic(this.path, this.encode().slice())
    );
    this.#writing = write;
    return write;
  }
}
