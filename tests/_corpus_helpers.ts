/**
 * Helpers of the tests that open the RocketMQ 4.9.8 corpus stores
 * (`../shared/testdata/rocketmq-4.9.8` beside the repository): writable copies, the corpus
 * parameters, its JSON files, and its manifest records as messages to put again.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import fs from "node:fs";
import path from "node:path";
import { type MessageInput, parsePropertyPairs } from "../src/record/mod.ts";
import { makeTempDirectory, PROJECT_ROOT } from "./_helpers.ts";

/** The corpus root: the shared test data beside the repository, wherever it is cloned. */
export const CORPUS: string = path.join(PROJECT_ROOT, "..", "shared", "testdata", "rocketmq-4.9.8");

/** Whether the corpus is here (tests skip otherwise). */
export const CORPUS_PRESENT: boolean = fs.existsSync(CORPUS);

/** Skip reason for `test(..., { skip })`. */
export const CORPUS_SKIP: string | undefined = CORPUS_PRESENT ? undefined : `${CORPUS} is not here`;

/** The corpus's parameters (README.txt). */
export const CORPUS_OPTIONS = {
  mappedFileSizeCommitLog: 0x1_0000,
  mappedFileSizeConsumeQueue: 600,
  maxHashSlotNum: 64,
  maxIndexNum: 256,
  flushDiskType: "SYNC_FLUSH",
} as const;

// deno-lint-ignore no-explicit-any
export type Json = Record<string, any>;

/** Copies a corpus store into a fresh, writable temp directory. */
export function copyCorpusStore(profile: string): { root: string; directory: string } {
  const root = makeTempDirectory();
  const directory = path.join(root, "store");
  try {
    fs.cpSync(path.join(CORPUS, profile, "store"), directory, { recursive: true });
  } catch (error) {
    // A missing corpus (no ../shared beside the checkout) fails the test,
    // and leaves no directory behind.
    fs.rmSync(root, { recursive: true, force: true });
    throw error;
  }
  const makeWritable = (at: string) => {
    const directoryEntry = fs.statSync(at).isDirectory();
    fs.chmodSync(at, directoryEntry ? 0o755 : 0o644);
    if (directoryEntry) {
      for (const name of fs.readdirSync(at)) {
        makeWritable(path.join(at, name));
      }
    }
  };
  makeWritable(directory);
  return { root, directory };
}

/** The objects of a corpus `.jsonl` file. */
export function readJsonLines<T = Json>(profile: string, name: string): T[] {
  return fs.readFileSync(path.join(CORPUS, profile, name), "utf8").trim().split("\n")
    .map((line) => JSON.parse(line) as T);
}

/** A corpus `.json` file. */
export function readJson<T = Json>(profile: string, name: string): T {
  return JSON.parse(fs.readFileSync(path.join(CORPUS, profile, name), "utf8")) as T;
}

/** The property pairs of a manifest record, in their stored order. */
export function manifestPropertyPairs(entry: Json): [string, string][] {
  const raw = new Uint8Array(Buffer.from(entry.propertiesRaw, "base64"));
  return parsePropertyPairs(raw, 0, raw.length);
}

/**
 * A manifest record (`manifest.jsonl`, kind `message`) as the message that
 * writes it again: every field a producer sets, the properties as their
 * stored pairs; `overrides` replaces some (a replay puts a delayed record
 * under its real topic, for one).
 */
export function manifestMessageInput(
  entry: Json,
  overrides: Partial<MessageInput> = {},
): MessageInput {
  return {
    topic: entry.topic,
    queueId: entry.queueId,
    body: new Uint8Array(Buffer.from(entry.body, "base64")),
    properties: manifestPropertyPairs(entry),
    flag: entry.flag,
    sysFlag: entry.sysFlag,
    bornTimestamp: entry.bornTimestamp,
    bornHost: entry.bornHost,
    storeHost: entry.storeHost,
    reconsumeTimes: entry.reconsumeTimes,
    preparedTransactionOffset: entry.preparedTransactionOffset,
    ...overrides,
  };
}
