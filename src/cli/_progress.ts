/**
 * Progress of a long CLI phase: on a terminal one line redrawn in place
 * (`\r`, at most {@link BAR_REDRAW_INTERVAL_MS} apart); in a log or a pipe
 * a plain line every tenth of the phase; or nothing.
 *
 * ```
 * write  [###########·················]  38%    380,000/1,000,000  312,004 msg/s
 * ```
 *
 * `update()` is called once per item of a hot loop, so it does almost
 * nothing between checks: it compares the count with the next threshold.
 *
 * @module
 */

import { performance } from "node:perf_hooks";

/** How progress is shown. */
export type ProgressMode = "bar" | "lines" | "off";

/** The bar is redrawn at most this often (about ten times a second). */
const BAR_REDRAW_INTERVAL_MS = 100;
/** Plain lines: one per this fraction of the phase. */
const LINE_FRACTION = 0.1;
/** Characters of the bar between the brackets. */
const BAR_WIDTH_CHARS = 28;
/** The bar checks the clock about this many times over a phase. */
const BAR_CHECKS_PER_PHASE = 2000;
/** ANSI: erase from the cursor to the end of the line. */
const ERASE_LINE = "\x1b[K";

/** Formats an integer with thousands separators. */
export function formatCount(value: number): string {
  return Math.round(value).toLocaleString("en-US");
}

/**
 * One phase's progress (see the module doc).
 *
 * @example
 * ```ts
 * import { Progress } from "./_progress.ts";
 *
 * const progress = new Progress("lines", (text) => console.error(text.trimEnd()), "read", 100);
 * for (let i = 1; i <= 100; i++) progress.update(i);
 * progress.finish();
 * ```
 */
export class Progress {
  /** How it is shown. */
  readonly mode: ProgressMode;
  /** Receives the text (stderr). */
  #write: (text: string) => void;
  /** Phase name, padded. */
  #label: string;
  /** Items in the phase. */
  #total: number;
  /** When the phase started, ms (performance.now). */
  #startMs: number;
  /** The count at which update() next looks at the clock (bar) or prints (lines). */
  #nextCheck: number;
  /** Count step between two checks. */
  #step: number;
  /** When the bar was last drawn, ms. */
  #drawnAtMs = -Infinity;
  /** Whether a bar line is on screen (finish() ends it). */
  #drawn = false;

  /**
   * Starts a phase.
   *
   * @param mode How to show it.
   * @param write Receives the text.
   * @param label The phase name.
   * @param total Items in the phase, at least 1.
   */
  constructor(mode: ProgressMode, write: (text: string) => void, label: string, total: number) {
    if (!Number.isSafeInteger(total) || total < 1) {
      throw new RangeError(`Progress total is ${total}; it must be a positive integer`);
    }
    this.mode = mode;
    this.#write = write;
    this.#label = label.padEnd(6);
    this.#total = total;
    this.#startMs = performance.now();
    this.#step = mode === "lines"
      ? Math.max(1, Math.ceil(total * LINE_FRACTION))
      : Math.max(1, Math.floor(total / BAR_CHECKS_PER_PHASE));
    this.#nextCheck = mode === "off" ? Infinity : this.#step;
  }

  /** Reports `done` items finished (non-decreasing). */
  update(done: number): void {
    if (done < this.#nextCheck) return;
    if (this.mode === "lines") {
      // Thresholds at whole steps and at the total, so a log reads 10%,
      // 20%, ... 100% however the count jumps.
      this.#nextCheck = done >= this.#total
        ? Infinity
        : Math.min(this.#total, (Math.floor(done / this.#step) + 1) * this.#step);
      this.#write(`${this.#text(done)}\n`);
      return;
    }
    this.#nextCheck = done + this.#step;
    const now = performance.now();
    if (now - this.#drawnAtMs < BAR_REDRAW_INTERVAL_MS) return;
    this.#drawnAtMs = now;
    this.#drawn = true;
    this.#write(`\r${this.#text(done)}${ERASE_LINE}`);
  }

  /** Ends the phase: the bar is erased so the report starts on a clean line. */
  finish(): void {
    if (this.mode === "bar" && this.#drawn) this.#write(`\r${ERASE_LINE}`);
    this.#nextCheck = Infinity;
  }

  #text(done: number): string {
    const fraction = Math.min(1, done / this.#total);
    const seconds = (performance.now() - this.#startMs) / 1000;
    const rate = seconds > 0 ? `  ${formatCount(done / seconds)}/s` : "";
    const percent = `${Math.floor(fraction * 100)}%`.padStart(4);
    const counts = `${formatCount(done)}/${formatCount(this.#total)}`;
    if (this.mode === "lines") return `${this.#label} ${percent}  ${counts}${rate}`;
    const filled = Math.round(fraction * BAR_WIDTH_CHARS);
    const bar = "#".repeat(filled) + "·".repeat(BAR_WIDTH_CHARS - filled);
    return `${this.#label} [${bar}] ${percent}  ${counts}${rate}`;
  }
}
