/**
 * The split threshold of the group commit, tuned by measurement: whether
 * two flushes in flight (each carrying half of the load) make more bytes
 * durable per ms than one flush carrying all of it depends on the device
 * and on the runtime. Session-3 figures at 64 producers (72 KiB a group):
 * two flushes were 0.8× one on Deno and 1.17× on Bun, on the same device.
 * So the tuner tries.
 *
 * ```
 *  epoch (32 flushes, the threshold's choice) ── rate r ─┐
 *  after 7 such epochs: a probe (the other choice) ── rate p
 *  p > best of the last 3 r × 1.05, once → probe again after one epoch
 *                                  twice → move the threshold past the
 *                 probe's mean load: below it when splitting won, above
 *                 it when one flush won
 *  else         → wait twice as long before the next probe (at most 112)
 * ```
 *
 * The rate is the bytes the flushes of an epoch made durable over its
 * duration, so that the choice compared is what producers feel. A probe
 * runs only for a load within the tuned bounds, where moving the threshold
 * can change the choice; the threshold never leaves them.
 *
 * One slow `fdatasync` (a journal commit, the consume queues' flush) costs
 * an epoch of about 30 ms a tenth of its rate, more than the margin. So a
 * probe is held against the best of the last three epochs, not the last
 * one, and must win twice in a row: at 64 producers on this device a
 * probe that split once won against one such epoch, and the runs that
 * then split ran 30–50 % slower (issue 5, session 6).
 *
 * @module
 */

import {
  GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
  GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES,
  GROUP_COMMIT_TUNE_BASELINE_EPOCHS,
  GROUP_COMMIT_TUNE_EPOCH_FLUSHES,
  GROUP_COMMIT_TUNE_MARGIN,
  GROUP_COMMIT_TUNE_PROBE_EVERY,
  GROUP_COMMIT_TUNE_PROBE_EVERY_MAX,
} from "./constants.ts";

/**
 * Decides, at each settled flush, whether the next ones split the load
 * over two flushes in flight.
 *
 * @example
 * ```ts ignore
 * const tuner = new SplitTuner(0x2_0000);
 * // When a flush settles:
 * const split = tuner.decide(loadBytes, queue.flushedWhere, clock.nowMs());
 * ```
 */
export class SplitTuner {
  /** Loads at or above this split (within the tuned bounds). */
  #thresholdBytes: number;
  /** flushedWhere when the epoch began; -1 before the first settle. */
  #startOffset = -1;
  /** Clock ms when the epoch began. */
  #startMs = 0;
  /** Decisions made in the epoch (one per settle). */
  #decisions = 0;
  /** Of {@link SplitTuner.#decisions}, those that split. */
  #splits = 0;
  /** Sum of the loads the epoch's decisions saw, bytes. */
  #loadBytesSum = 0;
  /** The choice a probe epoch forces; undefined outside a probe. */
  #probe: boolean | undefined;
  /** Epochs measured since the last probe. */
  #epochs = 0;
  /** Epochs between probes now (doubled by each probe that loses). */
  #probeEvery = GROUP_COMMIT_TUNE_PROBE_EVERY;
  /** The mean load of the last probe, bytes (0: none yet). */
  #probedLoadBytes = 0;
  /**
   * Durable bytes per ms of the last epochs that followed the threshold,
   * in a ring (0: none); a probe is held against the best of them.
   */
  #rates = new Float64Array(GROUP_COMMIT_TUNE_BASELINE_EPOCHS);
  /** Where the next rate goes in {@link SplitTuner.#rates}. */
  #rateAt = 0;
  /** Whether the last probe won: the next one, if it wins too, moves the threshold. */
  #won = false;

  /** @param thresholdBytes The starting threshold (clamped to the tuned bounds). */
  constructor(thresholdBytes: number) {
    this.#thresholdBytes = clamp(thresholdBytes);
  }

  /** The load, bytes, from which the threshold's choice is to split. */
  get thresholdBytes(): number {
    return this.#thresholdBytes;
  }

  /** Whether a probe epoch runs now (tests). */
  get probing(): boolean {
    return this.#probe !== undefined;
  }

  /**
   * Called when a flush settles: measures, and decides for the flushes
   * that begin next.
   *
   * @param loadBytes What the flush carried plus what waits behind it.
   * @param flushedWhere The flushed offset now.
   * @param nowMs Clock ms now.
   * @returns Whether the load is split over two flushes in flight.
   */
  decide(loadBytes: number, flushedWhere: number, nowMs: number): boolean {
    if (this.#startOffset < 0) {
      this.#begin(flushedWhere, nowMs);
    } else if (this.#decisions >= GROUP_COMMIT_TUNE_EPOCH_FLUSHES) {
      this.#endEpoch(flushedWhere, nowMs);
      this.#begin(flushedWhere, nowMs);
    }
    const split = this.#probe ?? loadBytes >= this.#thresholdBytes;
    this.#decisions++;
    if (split) this.#splits++;
    this.#loadBytesSum += loadBytes;
    return split;
  }

  #begin(flushedWhere: number, nowMs: number): void {
    this.#startOffset = flushedWhere;
    this.#startMs = nowMs;
    this.#decisions = 0;
    this.#splits = 0;
    this.#loadBytesSum = 0;
  }

  #endEpoch(flushedWhere: number, nowMs: number): void {
    const elapsedMs = nowMs - this.#startMs;
    // A clock that did not move measures nothing.
    const rate = elapsedMs > 0 ? (flushedWhere - this.#startOffset) / elapsedMs : 0;
    const meanLoadBytes = this.#loadBytesSum / this.#decisions;
    const split = this.#splits * 2 > this.#decisions;
    if (this.#probe !== undefined) {
      const best = Math.max(...this.#rates);
      const won = rate > 0 && best > 0 && rate > best * GROUP_COMMIT_TUNE_MARGIN;
      if (won && this.#won) {
        // The other choice won twice at this load: move the threshold past
        // it, with an eighth to spare for the load's jitter.
        this.#thresholdBytes = clamp(
          split ? Math.floor(meanLoadBytes * 7 / 8) : Math.ceil(meanLoadBytes * 9 / 8),
        );
        this.#probeEvery = GROUP_COMMIT_TUNE_PROBE_EVERY;
        this.#won = false;
      } else if (won) {
        // Once may be a slow flush in the epochs it was held against:
        // look again after one epoch of the threshold's choice.
        this.#probeEvery = 1;
        this.#won = true;
      } else {
        this.#probeEvery = Math.min(
          GROUP_COMMIT_TUNE_PROBE_EVERY_MAX,
          (this.#won ? GROUP_COMMIT_TUNE_PROBE_EVERY : this.#probeEvery) * 2,
        );
        this.#won = false;
      }
      this.#probedLoadBytes = meanLoadBytes;
      this.#probe = undefined;
      this.#rates.fill(0);
      return;
    }
    this.#rates[this.#rateAt] = rate;
    this.#rateAt = (this.#rateAt + 1) % this.#rates.length;
    this.#epochs++;
    const probed = this.#probedLoadBytes;
    if (meanLoadBytes > probed * 2 || meanLoadBytes * 2 < probed) {
      // Another load: what the last probes found may not hold.
      this.#probeEvery = GROUP_COMMIT_TUNE_PROBE_EVERY;
    }
    if (
      this.#epochs >= this.#probeEvery && rate > 0 &&
      meanLoadBytes >= GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES &&
      meanLoadBytes < GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES
    ) {
      this.#epochs = 0;
      this.#probe = !split;
    }
  }
}

function clamp(bytes: number): number {
  return Math.min(
    GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
    Math.max(GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES, bytes),
  );
}
