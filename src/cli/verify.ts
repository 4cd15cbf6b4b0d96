/**
 * `mqstore verify <dir>`: a raw scan of a store directory that modifies
 * nothing (plain reads, no lock, no mapping): every commit-log record is
 * checked (body CRC included), every consume-queue unit is matched with
 * the record it points at, and the report says where an open would cut
 * the log and why.
 *
 * ```
 * commitlog/ segments ─► records until the end (zeros) or the first
 *                        invalid one ─► cut offset; data past it?
 * consumequeue/       ─► each unit: a record of that size at that offset,
 *                        or past the cut (an open truncates it)
 * ```
 *
 * An invalid record with nothing valid after it is a torn tail (a crash
 * mid-write: an open cuts it); with data after it, corruption.
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";
import { dumpFile } from "./dump.ts";

/** What `verify` found. */
export interface VerifyReport {
  /** The store directory. */
  directory: string;
  /** `ok`; `torn-tail` (an open cuts the log at `cutOffset`); `corrupt`. */
  status: "ok" | "torn-tail" | "corrupt";
  /** Whether the last close was clean (no `abort` file). */
  cleanShutdown: boolean;
  /** Commit-log segments. */
  segments: number;
  /** Valid MESSAGE records. */
  messages: number;
  /** BLANK records. */
  blanks: number;
  /** Offset of the first commit-log byte. */
  minOffset: number;
  /** Where an open would end (cut) the log. */
  cutOffset: number;
  /** The first invalid record, if any. */
  invalid?: { offset: number; reason: string; detail: string };
  /** Consume-queue units checked. */
  consumeQueueUnits: number;
  /** Units past the cut (an open truncates them). */
  consumeQueueUnitsPastCut: number;
  /** Index files. */
  indexFiles: number;
  /** Each problem found, in words (at most {@link PROBLEMS_MAX}). */
  problems: string[];
}

/** Options of {@link verifyStore}. */
export interface VerifyOptions {
  /**
   * Verify body CRCs.
   *
   * @default {true}
   */
  checkCrc?: boolean;
}

/** Problems listed at most (the counts stay exact). */
export const PROBLEMS_MAX = 50;

const SEGMENT_NAME = /^[0-9]{20}$/;
const CQ_UNIT_BYTES = 20;
const CQ_PAD_SIZE = 0x7FFF_FFFF;
const ZERO_CHUNK_BYTES = 0x10000;

/** Whether `file` holds a non-zero byte at or after `position`. */
function hasDataFrom(file: string, position: number): boolean {
  const fd = fs.openSync(file, "r");
  try {
    const size = fs.fstatSync(fd).size;
    const chunk = new Uint8Array(ZERO_CHUNK_BYTES);
    for (let at = position; at < size; at += ZERO_CHUNK_BYTES) {
      const n = fs.readSync(fd, chunk, 0, Math.min(ZERO_CHUNK_BYTES, size - at), at);
      for (let i = 0; i < n; i++) if (chunk[i] !== 0) return true;
    }
    return false;
  } finally {
    fs.closeSync(fd);
  }
}

function listSorted(directory: string, pattern: RegExp): string[] {
  try {
    return fs.readdirSync(directory).filter((name) => pattern.test(name)).sort();
  } catch {
    return [];
  }
}

/**
 * Scans `directory`; see the module doc. Reads only.
 *
 * @example
 * ```ts ignore
 * const report = verifyStore("./store");
 * if (report.status !== "ok") console.log(report.problems.join("\n"));
 * ```
 */
export function verifyStore(directory: string, options: VerifyOptions = {}): VerifyReport {
  const commitLog = path.join(directory, "commitlog");
  const names = listSorted(commitLog, SEGMENT_NAME);
  const report: VerifyReport = {
    directory,
    status: "ok",
    cleanShutdown: !fs.existsSync(path.join(directory, "abort")),
    segments: names.length,
    messages: 0,
    blanks: 0,
    minOffset: names.length > 0 ? Number(names[0]) : 0,
    cutOffset: names.length > 0 ? Number(names[0]) : 0,
    consumeQueueUnits: 0,
    consumeQueueUnitsPastCut: 0,
    indexFiles: listSorted(path.join(directory, "index"), /^[0-9]{17}$/).length,
    problems: [],
  };
  let problemCount = 0;
  const problem = (text: string) => {
    problemCount++;
    if (report.problems.length < PROBLEMS_MAX) report.problems.push(text);
  };
  const sizes = new Map<number, number>();
  const segmentSize = names.length > 0 ? fs.statSync(path.join(commitLog, names[0]!)).size : 0;
  let ended = false;
  let dataAfterCut = false;
  for (const [index, name] of names.entries()) {
    const file = path.join(commitLog, name);
    const size = fs.statSync(file).size;
    const start = Number(name);
    if (ended) {
      if (size > 0 && hasDataFrom(file, 0)) {
        dataAfterCut = true;
        problem(`segment ${name} holds data past the cut at ${report.cutOffset}`);
      }
      continue;
    }
    if (size !== segmentSize) {
      problem(`segment ${name} is ${size} bytes; the first segment is ${segmentSize}`);
    }
    if (index > 0 && start !== report.cutOffset) {
      problem(`segment ${name} does not start where the previous one ends (${report.cutOffset})`);
    }
    const entries = dumpFile(file, options.checkCrc === false ? { checkCrc: false } : {});
    let step = entries.next();
    let lastPosition = 0;
    while (step.done !== true) {
      const entry = step.value;
      if (entry.kind === "message") {
        report.messages++;
        sizes.set(entry.physicalOffset, entry.storeSize);
        lastPosition = entry.filePosition + entry.storeSize;
      } else if (entry.kind === "blank") {
        report.blanks++;
        lastPosition = size;
      } else {
        report.invalid = {
          offset: entry.physicalOffset,
          reason: entry.reason,
          detail: entry.detail,
        };
        lastPosition = entry.filePosition;
      }
      step = entries.next();
    }
    const end = step.value;
    if (end === "blank" || end === "eof") {
      report.cutOffset = start + size;
      continue;
    }
    report.cutOffset = start + lastPosition;
    ended = true;
    if (end === "end") {
      // Zeros where the next record would start: data after them means a
      // crash kept a later page and lost an earlier one.
      if (hasDataFrom(file, lastPosition)) {
        dataAfterCut = true;
        problem(
          `zeros at offset ${report.cutOffset} are followed by data in segment ${name}: an open cuts the log there and zeroes the rest`,
        );
      }
    } else {
      problem(
        `invalid record at offset ${report.cutOffset}: ${report.invalid!.reason} (${
          report.invalid!.detail
        }); an open cuts the log there`,
      );
    }
  }
  const laterData = dataAfterCut;
  verifyConsumeQueues(directory, report, sizes, problem);
  if (report.invalid !== undefined || laterData || problemCount > 0) {
    const corruptMiddle = names.some((name) =>
      Number(name) > report.cutOffset && fs.statSync(path.join(commitLog, name)).size > 0 &&
      hasDataFrom(path.join(commitLog, name), 0)
    );
    const onlyTail = report.problems.every((text) =>
      text.startsWith("invalid record") || text.startsWith("zeros at offset")
    );
    report.status = corruptMiddle || !onlyTail ? "corrupt" : "torn-tail";
  }
  if (problemCount > report.problems.length) {
    report.problems.push(`... and ${problemCount - report.problems.length} more problems`);
  }
  return report;
}

function verifyConsumeQueues(
  directory: string,
  report: VerifyReport,
  sizes: ReadonlyMap<number, number>,
  problem: (text: string) => void,
): void {
  const base = path.join(directory, "consumequeue");
  for (const topic of listSorted(base, /./)) {
    for (const queueId of listSorted(path.join(base, topic), /^[0-9]+$/)) {
      const queueDirectory = path.join(base, topic, queueId);
      let stopped = false;
      for (const name of listSorted(queueDirectory, SEGMENT_NAME)) {
        if (stopped) break;
        const bytes = fs.readFileSync(path.join(queueDirectory, name));
        if (bytes.length % CQ_UNIT_BYTES !== 0) {
          problem(
            `consume queue ${topic}/${queueId} file ${name} is ${bytes.length} bytes, not a whole number of ${CQ_UNIT_BYTES}-byte units`,
          );
        }
        const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
        for (let at = 0; at + CQ_UNIT_BYTES <= bytes.length; at += CQ_UNIT_BYTES) {
          const offset = view.getInt32(at) * 0x1_0000_0000 + view.getUint32(at + 4);
          const size = view.getInt32(at + 8);
          // RocketMQ's stop rule: the queue ends at the first such unit.
          if (offset < 0 || size <= 0) {
            stopped = true;
            break;
          }
          if (offset === 0 && size === CQ_PAD_SIZE) continue;
          report.consumeQueueUnits++;
          const queueOffset = (Number(name) + at) / CQ_UNIT_BYTES;
          if (offset + size > report.cutOffset) {
            report.consumeQueueUnitsPastCut++;
            continue;
          }
          if (offset < report.minOffset) continue;
          if (sizes.get(offset) !== size) {
            problem(
              `consume queue ${topic}/${queueId} unit ${queueOffset} points at offset ${offset} (${size} bytes), where no such record starts`,
            );
          }
        }
      }
    }
  }
}

/** The report as text lines. */
export function formatVerifyReport(report: VerifyReport): string {
  const lines = [
    `store        ${report.directory}`,
    `status       ${report.status}`,
    `last close   ${report.cleanShutdown ? "clean" : "not clean (abort present)"}`,
    `segments     ${report.segments}`,
    `messages     ${report.messages} (+${report.blanks} BLANK)`,
    `offsets      ${report.minOffset} .. ${report.cutOffset}`,
    `cq units     ${report.consumeQueueUnits} (${report.consumeQueueUnitsPastCut} past the cut)`,
    `index files  ${report.indexFiles}`,
  ];
  for (const text of report.problems) lines.push(`problem      ${text}`);
  return `${lines.join("\n")}\n`;
}
