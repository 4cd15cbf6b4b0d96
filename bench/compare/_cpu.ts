/**
 * CPU time of a throughput case, split between the JavaScript thread and
 * the process's other threads (a store's background work: pre-faulting,
 * flushing, compaction; and the runtime's garbage collector and compiler
 * threads), so that a reader sees what a record costs beside how fast the
 * one thread that puts goes. On a machine with few cores the two compete:
 * a store whose other threads take a core's worth of CPU slows the
 * JavaScript thread down too.
 *
 * The process's CPU comes from `process.cpuUsage()` (every thread, also
 * the ones that ended during the case), the JavaScript thread's from
 * Linux's `/proc/thread-self/schedstat`, read by a synchronous read on the
 * JavaScript thread itself (on Deno, Bun and Node; under `deno test` that
 * thread is not the process's main one). Elsewhere there is no split.
 *
 * @module
 */

import fs from "node:fs";
import process from "node:process";

/** CPU used so far. */
export interface CpuSample {
  /** The whole process, ns. */
  processNs: number;
  /** The JavaScript thread (the one that took the sample), ns. */
  jsThreadNs: number;
}

/** CPU a record, over a case. */
export interface CpuPerRecord {
  /** The JavaScript thread's CPU a record, ns. */
  jsCpuNs: number;
  /** The other threads' CPU a record, ns. */
  otherCpuNs: number;
}

/**
 * The CPU used so far, or undefined where the JavaScript thread's own
 * time cannot be read (not Linux).
 */
export function sampleCpu(): CpuSample | undefined {
  // The process's clock first: reading it brings the calling thread's run
  // time up to date, which schedstat alone does only at a scheduler tick
  // (up to 4–10 ms late for a thread that is running).
  const usage = process.cpuUsage();
  let stat: string;
  try {
    stat = fs.readFileSync("/proc/thread-self/schedstat", "utf8");
  } catch {
    return undefined;
  }
  const jsThreadNs = Number(stat.split(" ")[0]);
  // A thread that ran has run time: zeros are a kernel without the figure.
  if (!(jsThreadNs > 0)) return undefined;
  return { processNs: (usage.user + usage.system) * 1000, jsThreadNs };
}

/**
 * The CPU a record between two samples. The other threads' share is the
 * process's less the JavaScript thread's, never below 0 (the process's
 * clock counts microseconds, the thread's nanoseconds).
 *
 * @param before The sample before the case.
 * @param after The sample after it.
 * @param records Records the case put.
 * @returns The split, or undefined without both samples or records.
 */
export function cpuPerRecord(
  before: CpuSample | undefined,
  after: CpuSample | undefined,
  records: number,
): CpuPerRecord | undefined {
  if (before === undefined || after === undefined || !(records > 0)) return undefined;
  const js = after.jsThreadNs - before.jsThreadNs;
  const all = after.processNs - before.processNs;
  return { jsCpuNs: js / records, otherCpuNs: Math.max(0, all - js) / records };
}
