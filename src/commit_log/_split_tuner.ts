/**
 * The split threshold of the group commit, tuned by measurement: whether
 * two flushes in flight (each carrying half of the load) make more bytes
 * durable per ms than one flush carrying all of it depends on the device
 * and on the runtime. Session-3 figures at 64 producers (72 KiB a group):
 * two flushes were 0.8× one on Deno and 1.17× on Bun, on the same device.
 * So the tuner tries.
 *
 * ```
 *  epochs of the threshold's choice (64 flushes each) ── B0
 *  after 7 of them, a probe round, the other choice (P) against it (B):
 *      P1 B1            won?  P1 > mean(B0, B1) × 1.1
 *      G G  P2 B2       won?  P2 > mean(G, B2) × 1.1   (G: gap epochs, B's choice)
 *      G G  P3 B3 …     up to six pairs
 *  five won  → move the threshold past the probes' mean load: below it
 *              when splitting won, above it when one flush won
 *  the first lost, or two → the round ends; the next waits twice as long
 *              (at most 112)
 * ```
 *
 * Where the threshold starts is the port's guess (`overlapFlushes`): 128
 * KiB, or the upper bound where one flush at a time is expected to win at
 * every load (Deno). The rule below needs about a second of load for its
 * first decision and often several (with three pairs of three, its first
 * round ended after 150 k puts of 256 producers, and it moved Deno to one
 * flush within 400 k puts in 6 of 12 runs; five of six takes longer), so
 * a run of a few hundred thousand puts gains only from the start being
 * right. The rule is there for the device or load where the guess is
 * wrong, and must not move a right one.
 *
 * The rate of an epoch is the bytes its flushes made durable over its
 * duration, so that the choice compared is what producers feel. An epoch
 * is counted in flushes, its first {@link GROUP_COMMIT_TUNE_SETTLE_FLUSHES}
 * unmeasured: they carry the change from the other choice. A probe runs
 * only for a load within the tuned bounds, where moving the threshold can
 * change the choice; the threshold never leaves them.
 *
 * Why pairs, each held against the epochs either side of it, spaced, and
 * nearly all won: this device's rate drifts by ±25 % between 30 ms epochs
 * of one choice within a run (55–91 k acks/s at 64 producers), those of two
 * flushes in flight ranged 0.1–1.6× their run's mean, and the rate climbs
 * through the first second of a run (JIT, page cache). Held against one
 * epoch, or won twice against the best of the three before it, a probe
 * still moved the threshold to split in one of four runs at 64 producers
 * where splitting ran 30–50 % slower (issue 5, session 6), and three won
 * of three moved Bun and Node off two flushes at 256 producers in spells
 * where one flush won pair after pair (session 13; see
 * `GROUP_COMMIT_TUNE_PROBE_WINS`). The epochs either side of a probe share
 * its drift and cancel a climb; probes two epochs apart meet different
 * spells of the device. A round that loses costs one probe epoch, mostly.
 *
 * @module
 */

import {
  GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
  GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES,
  GROUP_COMMIT_TUNE_EPOCH_FLUSHES,
  GROUP_COMMIT_TUNE_MARGIN,
  GROUP_COMMIT_TUNE_PROBE_EVERY,
  GROUP_COMMIT_TUNE_PROBE_EVERY_MAX,
  GROUP_COMMIT_TUNE_PROBE_GAP,
  GROUP_COMMIT_TUNE_PROBE_PAIRS,
  GROUP_COMMIT_TUNE_PROBE_WINS,
  GROUP_COMMIT_TUNE_SETTLE_FLUSHES,
} from "./constants.ts";

/** Phase: epochs of the threshold's choice, counting toward the next probe round. */
const FOLLOW = 0;
/** Phase: a probe epoch of a round, the other choice. */
const PROBE = 1;
/** Phase: the epoch of the threshold's choice that closes a probe's pair. */
const PAIR = 2;
/** Phase: epochs of the threshold's choice between a round's pairs. */
const GAP = 3;

/**
 * Decides, at each settled flush, whether the next ones split the load
 * over two flushes in flight.
 *
 * @example
 * ```ts ignore
 * const tuner = new SplitTuner(0x2_0000);
 * // When a flush settles:
 * const split = tuner.decide(loadBytes, queue.flushedWhere, performance.now());
 * ```
 */
export class SplitTuner {
  /** Loads at or above this split (within the tuned bounds). */
  #thresholdBytes: number;
  /** Decisions made in the epoch (one per settle), the settling ones included. */
  #decisions = 0;
  /** flushedWhere when the epoch's measurement began. */
  #startOffset = 0;
  /** Clock ms when the epoch's measurement began. */
  #startMs = 0;
  /** Of the measured decisions of the epoch, those that split. */
  #splits = 0;
  /** Sum of the loads the epoch's measured decisions saw, bytes. */
  #loadBytesSum = 0;
  /** Where the tuner is in its cycle: FOLLOW, PROBE, PAIR or GAP. */
  #phase = FOLLOW;
  /** The choice of a round's probe epochs (meaningful outside FOLLOW). */
  #probeSplit = false;
  /** Durable bytes per ms of the last epoch of the threshold's choice (0: none). */
  #followRate = 0;
  /** Durable bytes per ms of the round's last probe epoch. */
  #probeRate = 0;
  /** Mean load of the round's probe epochs so far, summed, bytes. */
  #probeLoadBytesSum = 0;
  /** Pairs the round has judged. */
  #pairs = 0;
  /** Of {@link SplitTuner.#pairs}, those the probe won. */
  #wins = 0;
  /** Epochs of the threshold's choice left before the round's next probe. */
  #gap = 0;
  /** Epochs of the threshold's choice since the last round. */
  #epochs = 0;
  /** Epochs between rounds now (doubled by each round that loses). */
  #probeEvery = GROUP_COMMIT_TUNE_PROBE_EVERY;
  /** The mean load of the last round's probes, bytes (0: none yet). */
  #probedLoadBytes = 0;

  /**
   * @param thresholdBytes The starting threshold (clamped to the tuned
   *   bounds): GROUP_COMMIT_SPLIT_MIN_BYTES, or the upper bound where the
   *   port expects one flush at a time to win.
   */
  constructor(thresholdBytes: number) {
    this.#thresholdBytes = clamp(thresholdBytes);
  }

  /** The load, bytes, from which the threshold's choice is to split. */
  get thresholdBytes(): number {
    return this.#thresholdBytes;
  }

  /** Whether a probe epoch (the other choice) runs now (tests). */
  get probing(): boolean {
    return this.#phase === PROBE;
  }

  /**
   * Called when a flush settles: measures, and decides for the flushes
   * that begin next.
   *
   * @param loadBytes What the flush carried plus what waits behind it.
   * @param flushedWhere The flushed offset now.
   * @param nowMs A monotonic clock, ms (whole milliseconds would blur an
   *   epoch of about 60 ms by ±2 %).
   * @returns Whether the load is split over two flushes in flight.
   */
  decide(loadBytes: number, flushedWhere: number, nowMs: number): boolean {
    if (this.#decisions === GROUP_COMMIT_TUNE_SETTLE_FLUSHES + GROUP_COMMIT_TUNE_EPOCH_FLUSHES) {
      this.#endEpoch(flushedWhere, nowMs);
      this.#decisions = 0;
    }
    if (this.#decisions === GROUP_COMMIT_TUNE_SETTLE_FLUSHES) {
      this.#startOffset = flushedWhere;
      this.#startMs = nowMs;
      this.#splits = 0;
      this.#loadBytesSum = 0;
    }
    const split = this.#phase === PROBE ? this.#probeSplit : loadBytes >= this.#thresholdBytes;
    if (this.#decisions++ >= GROUP_COMMIT_TUNE_SETTLE_FLUSHES) {
      if (split) this.#splits++;
      this.#loadBytesSum += loadBytes;
    }
    return split;
  }

  #endEpoch(flushedWhere: number, nowMs: number): void {
    const elapsedMs = nowMs - this.#startMs;
    // A clock that did not move measures nothing.
    const rate = elapsedMs > 0 ? (flushedWhere - this.#startOffset) / elapsedMs : 0;
    const meanLoadBytes = this.#loadBytesSum / GROUP_COMMIT_TUNE_EPOCH_FLUSHES;
    if (this.#phase === PROBE) {
      this.#probeRate = rate;
      this.#probeLoadBytesSum += meanLoadBytes;
      this.#phase = PAIR;
      return;
    }
    const followRate = this.#followRate;
    this.#followRate = rate;
    if (this.#phase === PAIR) {
      this.#endPair(followRate, rate, meanLoadBytes);
      return;
    }
    if (this.#phase === GAP) {
      if (--this.#gap === 0) this.#phase = PROBE;
      return;
    }
    this.#epochs++;
    const probed = this.#probedLoadBytes;
    if (meanLoadBytes > probed * 2 || meanLoadBytes * 2 < probed) {
      // Another load: what the last rounds found may not hold.
      this.#probeEvery = GROUP_COMMIT_TUNE_PROBE_EVERY;
    }
    if (
      this.#epochs >= this.#probeEvery && rate > 0 &&
      meanLoadBytes >= GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES &&
      meanLoadBytes < GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES
    ) {
      this.#epochs = 0;
      this.#pairs = 0;
      this.#wins = 0;
      this.#probeLoadBytesSum = 0;
      this.#probeSplit = this.#splits * 2 <= GROUP_COMMIT_TUNE_EPOCH_FLUSHES;
      this.#phase = PROBE;
    }
  }

  /**
   * Judges a probe against the epochs of the threshold's choice either
   * side of it (`before`, `after`: their rates), and goes on with the
   * round, moves the threshold, or ends the round.
   */
  #endPair(before: number, after: number, meanLoadBytes: number): void {
    const probeLoadBytes = this.#probeLoadBytesSum / ++this.#pairs;
    this.#probedLoadBytes = probeLoadBytes;
    this.#phase = FOLLOW;
    if (meanLoadBytes > probeLoadBytes * 2 || meanLoadBytes * 2 < probeLoadBytes) {
      // The load changed under the round: it compared nothing.
      this.#probeEvery = GROUP_COMMIT_TUNE_PROBE_EVERY;
      return;
    }
    if (
      before > 0 && after > 0 &&
      this.#probeRate > (before + after) / 2 * GROUP_COMMIT_TUNE_MARGIN
    ) {
      this.#wins++;
    }
    if (this.#wins >= GROUP_COMMIT_TUNE_PROBE_WINS) {
      // The other choice won enough pairs at this load: move the threshold
      // past it, with an eighth to spare for the load's jitter.
      this.#thresholdBytes = clamp(
        this.#probeSplit ? Math.floor(probeLoadBytes * 7 / 8) : Math.ceil(probeLoadBytes * 9 / 8),
      );
      this.#probeEvery = GROUP_COMMIT_TUNE_PROBE_EVERY;
      return;
    }
    if (
      this.#wins === 0 ||
      this.#pairs - this.#wins > GROUP_COMMIT_TUNE_PROBE_PAIRS - GROUP_COMMIT_TUNE_PROBE_WINS
    ) {
      // Lost (the first pair, or too many to win): the next round waits
      // twice as long. Ending at a lost first pair keeps a right choice
      // probed about one epoch a round, as when every pair had to win.
      this.#probeEvery = Math.min(GROUP_COMMIT_TUNE_PROBE_EVERY_MAX, this.#probeEvery * 2);
      return;
    }
    // The next probe after a gap, so that it meets other weather.
    this.#gap = GROUP_COMMIT_TUNE_PROBE_GAP;
    this.#phase = this.#gap > 0 ? GAP : PROBE;
  }
}

function clamp(bytes: number): number {
  return Math.min(
    GROUP_COMMIT_SPLIT_TUNED_HIGH_BYTES,
    Math.max(GROUP_COMMIT_SPLIT_TUNED_LOW_BYTES, bytes),
  );
}
