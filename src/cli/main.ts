/**
 * The `mqstore` command: argument parsing and subcommand dispatch.
 *
 * ```
 * mqstore bench [--messages <n>] [--size <bytes>] [--queues <q>]
 *               [--flush async|async-pool|sync] [--producers <k>] [--dir <path>]
 *               [--keep] [--json] [--runtime deno|bun|node] [--segment-size <bytes>]
 * mqstore dump [--json] [--no-crc] [--base-offset <n>] <commit-log file>...
 * mqstore verify [--json] [--no-crc] <store dir>
 * mqstore get [--json] <store dir> --offset <n> | --msg-id <id>
 *             | --topic <t> --queue <q> [--queue-offset <n>] [--count <n>]
 *             | --topic <t> --key <k> [--count <n>]
 * mqstore stats [--json] <store dir>
 * mqstore help
 * ```
 *
 * Run it with `deno task mqstore …`, `npm run mqstore -- …`, or
 * `deno run -A src/cli/main.ts …`. A user mistake (unknown command or flag,
 * missing or malformed value, invalid topic or queue id, a path that is not
 * a store) prints one line on stderr, never a stack trace. Exit codes: 0
 * success (bench: PASS), 1 a file could not be read or a store not opened
 * (bench: FAIL), 2 bad usage, 3 the dump stopped at an invalid record
 * (verify: the store has a torn or corrupt record; get, stats: a corrupt
 * one), 4 `get` found nothing. `verify`, `get` and `stats` never modify the
 * store (read-only: no lock, no write); `bench` only writes into a fresh
 * directory.
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { MqStoreError, systemError } from "../errors.ts";
import {
  DUMP_TABLE_HEADER,
  dumpEntryJson,
  dumpEntryRow,
  dumpFile,
  fileStartOffset,
} from "./dump.ts";
import { TOPIC_LENGTH_MAX_BYTES, TOPIC_PATTERN } from "../record/mod.ts";
import type { MessageStore } from "../store/message_store.ts";
import { BENCH_SYNC_PRODUCERS_DEFAULT, runBenchCommand } from "./bench.ts";
import { GET_TABLE_HEADER, getMessages, type GetQuery, messageJson, messageRow } from "./get.ts";
import {
  EXIT_INVALID_RECORD,
  EXIT_IO,
  EXIT_NOT_FOUND,
  EXIT_OK,
  EXIT_USAGE,
} from "./_exit_codes.ts";
import { checkStoreDirectory, type IndexSizes, openStoreReadOnly } from "./_open_store.ts";
import { UsageError } from "./_usage_error.ts";
import { formatSummary, summarize } from "./stats.ts";
import { formatVerifyReport, type VerifyReport, verifyStore } from "./verify.ts";

export {
  EXIT_BENCH_FAILED,
  EXIT_INVALID_RECORD,
  EXIT_IO,
  EXIT_NOT_FOUND,
  EXIT_OK,
  EXIT_USAGE,
} from "./_exit_codes.ts";

/** Where the command writes. */
export interface CliOutput {
  /** Receives standard output, in pieces. */
  stdout(text: string): void;
  /** Receives standard error, in pieces. */
  stderr(text: string): void;
  /**
   * Whether standard error is a terminal: `bench` then draws its progress
   * as one line redrawn in place, else as a plain line every 10%.
   *
   * @default {false}
   */
  stderrIsTerminal?: boolean;
}

const USAGE = `Usage:
  mqstore bench [--messages <n>] [--size <bytes>] [--queues <q>] [--flush <mode>]
                [--producers <k>] [--dir <path>] [--keep] [--json]
                [--runtime deno|bun|node] [--segment-size <bytes>]
      The main job: open a store in a fresh directory, write the messages,
      wait until they are durable and dispatched, read every queue back with
      getMessages and check every body; print throughput, put latency
      (p50/p99/p99.9), read rate and bytes on disk, then PASS (exit code 0)
      or FAIL: <reason> (exit code 1, the store is kept).
      --messages      messages to write (default 1000000; 100k, 1m, 1_000 work)
      --size          body bytes (default 1024; 128, 1k, 1KiB, 64KiB work)
      --queues        queues of the topic (default 4)
      --flush         async (default: ASYNC_FLUSH), async-pool (ASYNC_FLUSH
                      with the transient store pool, 256 MiB segments unless
                      --segment-size), sync (SYNC_FLUSH, group commit)
      --producers     concurrent producers, each awaiting its put (default 1,
                      ${BENCH_SYNC_PRODUCERS_DEFAULT} with --flush sync); latency is sampled on every
                      put under sync, on one put in 16 under async
      --dir           store directory; it must be missing or empty (default: a
                      fresh one under the temp directory); removed at the end
      --keep          keep the store directory
      --json          print one JSON object with every figure (no progress)
      --runtime       run under deno, bun or node (from node_modules/.bin)
      --segment-size  mappedFileSizeCommitLog (default: the store's, 1 GiB)
      --adapter       the runtime adapter (default auto; portable works anywhere)
      --progress      bar, lines or off (default: bar on a terminal, else lines)
  mqstore dump [--json] [--no-crc] [--base-offset <n>] <commit-log file>...
      Print every record of the files in physical order: a table, or with
      --json one JSON object per line (the golden manifest's fields). Stops at
      the end of the data or at the first invalid record (exit code 3).
      --no-crc        do not verify body CRCs
      --base-offset   physical offset of the first file, when its name is not
                      its 20-digit offset
  mqstore verify [--json] [--no-crc] <store dir>
      Check every commit-log record and consume-queue unit without modifying
      anything; report torn or corrupt records and where an open would cut
      the log (exit code 3 when there is one).
  mqstore get [--json] <store dir> --offset <n>
  mqstore get [--json] <store dir> --msg-id <offsetMsgId>
  mqstore get [--json] <store dir> --topic <t> --queue <q> [--queue-offset <n>] [--count <n>]
  mqstore get [--json] <store dir> --topic <t> --key <k> [--count <n>]
      Print messages (exit code 4 when none is found). The store is opened
      read-only; --max-hash-slot-num and --max-index-num give the index
      sizes when they are not RocketMQ's defaults.
  mqstore stats [--json] <store dir>
      Print offsets, queues, index files and the checkpoint.
  mqstore help
      Show this text.
`;

interface DumpArguments {
  json: boolean;
  checkCrc: boolean;
  baseOffset: number | undefined;
  files: string[];
}

function parseDumpArguments(argv: readonly string[]): DumpArguments {
  const parsed: DumpArguments = { json: false, checkCrc: true, baseOffset: undefined, files: [] };
  for (let i = 0; i < argv.length; i++) {
    const argument = argv[i]!;
    if (argument === "--") {
      parsed.files.push(...argv.slice(i + 1));
      break;
    }
    if (argument === "--json") {
      parsed.json = true;
    } else if (argument === "--no-crc") {
      parsed.checkCrc = false;
    } else if (argument === "--base-offset" || argument.startsWith("--base-offset=")) {
      const value = argument.includes("=") ? argument.slice(argument.indexOf("=") + 1) : argv[++i];
      if (value === undefined || !/^[0-9]+$/.test(value) || !Number.isSafeInteger(Number(value))) {
        throw new UsageError(
          `--base-offset needs a non-negative integer, not ${value ?? "nothing"}`,
        );
      }
      parsed.baseOffset = Number(value);
    } else if (argument.startsWith("-") && argument !== "-") {
      throw new UsageError(`dump: unknown flag ${argument}`);
    } else {
      parsed.files.push(argument);
    }
  }
  if (parsed.files.length === 0) throw new UsageError("dump: no commit-log file given");
  if (parsed.baseOffset !== undefined && parsed.files.length > 1) {
    throw new UsageError("dump: --base-offset applies to a single file");
  }
  return parsed;
}

function runDump(argv: readonly string[], output: CliOutput): number {
  const options = parseDumpArguments(argv);
  // Refuse missing or odd files before printing anything.
  for (const file of options.files) {
    let stat: fs.Stats;
    try {
      stat = fs.statSync(file);
    } catch (error) {
      throw systemError(error, "read", file);
    }
    if (!stat.isFile()) throw new MqStoreError("INVALID_FILE", `Cannot read ${file}: not a file`);
    try {
      fileStartOffset(file, options.baseOffset);
    } catch (error) {
      throw new UsageError(`dump: ${(error as Error).message}`);
    }
  }
  if (!options.json) output.stdout(`${DUMP_TABLE_HEADER}\n`);
  let lines: string[] = [];
  const flush = () => {
    if (lines.length > 0) output.stdout(`${lines.join("\n")}\n`);
    lines = [];
  };
  try {
    for (const file of options.files) {
      const iterator = dumpFile(file, {
        checkCrc: options.checkCrc,
        ...(options.baseOffset === undefined ? {} : { baseOffset: options.baseOffset }),
      });
      let step = iterator.next();
      while (!step.done) {
        lines.push(options.json ? dumpEntryJson(step.value) : dumpEntryRow(step.value));
        if (lines.length >= 1024) flush();
        step = iterator.next();
      }
      if (step.value === "invalid") {
        flush();
        return EXIT_INVALID_RECORD;
      }
      // Zero bytes where the next record would start: the end of the log.
      if (step.value === "end") break;
    }
  } catch (error) {
    flush();
    if (error instanceof RangeError) throw new UsageError(`dump: ${error.message}`);
    throw error;
  }
  flush();
  return EXIT_OK;
}

/** Flags of verify, get and stats, parsed. */
interface StoreArguments {
  directory: string;
  json: boolean;
  checkCrc: boolean;
  values: Map<string, string>;
}

const STORE_VALUE_FLAGS: Readonly<Record<string, readonly string[]>> = {
  verify: [],
  stats: ["--max-hash-slot-num", "--max-index-num"],
  get: [
    "--offset",
    "--msg-id",
    "--topic",
    "--queue",
    "--queue-offset",
    "--key",
    "--count",
    "--max-hash-slot-num",
    "--max-index-num",
  ],
};

function parseStoreArguments(command: string, argv: readonly string[]): StoreArguments {
  const valueFlags = STORE_VALUE_FLAGS[command]!;
  const parsed: StoreArguments = { directory: "", json: false, checkCrc: true, values: new Map() };
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const argument = argv[i]!;
    const name = argument.includes("=") ? argument.slice(0, argument.indexOf("=")) : argument;
    if (argument === "--json") {
      parsed.json = true;
    } else if (argument === "--no-crc" && command === "verify") {
      parsed.checkCrc = false;
    } else if (valueFlags.includes(name)) {
      const value = argument.includes("=") ? argument.slice(argument.indexOf("=") + 1) : argv[++i];
      // `--topic --queue 1`: the next flag is not the value (`--key=--x` still works).
      if (value === undefined || (value.startsWith("--") && !argument.includes("="))) {
        throw new UsageError(`${command}: ${name} needs a value`);
      }
      parsed.values.set(name, value);
    } else if (argument.startsWith("-") && argument !== "-") {
      throw new UsageError(`${command}: unknown flag ${argument}`);
    } else {
      positional.push(argument);
    }
  }
  if (positional.length !== 1) {
    throw new UsageError(
      positional.length === 0
        ? `${command}: no store directory given`
        : `${command}: one store directory, not ${positional.length} arguments`,
    );
  }
  parsed.directory = positional[0]!;
  let stat: fs.Stats;
  try {
    stat = fs.statSync(parsed.directory);
  } catch (error) {
    throw systemError(error, "read", parsed.directory);
  }
  if (!stat.isDirectory()) {
    throw new MqStoreError("INVALID_FILE", `${parsed.directory} is not a directory`);
  }
  return parsed;
}

function integerFlag(
  command: string,
  values: ReadonlyMap<string, string>,
  name: string,
  fallback?: number,
): number {
  const text = values.get(name);
  if (text === undefined) {
    if (fallback === undefined) throw new UsageError(`${command}: ${name} is missing`);
    return fallback;
  }
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(`${command}: ${name} needs a non-negative integer, not ${text}`);
  }
  return Number(text);
}

function indexSizes(
  command: string,
  values: ReadonlyMap<string, string>,
): IndexSizes | undefined {
  if (!values.has("--max-hash-slot-num") && !values.has("--max-index-num")) return undefined;
  return {
    maxHashSlotNum: integerFlag(command, values, "--max-hash-slot-num", 5_000_000),
    maxIndexNum: integerFlag(command, values, "--max-index-num", 20_000_000),
  };
}

function getQuery(values: ReadonlyMap<string, string>): GetQuery {
  const count = integerFlag("get", values, "--count", 1);
  if (count === 0) throw new UsageError("get: --count must be at least 1");
  if (values.has("--offset")) {
    return { kind: "offset", offset: integerFlag("get", values, "--offset") };
  }
  const msgId = values.get("--msg-id");
  if (msgId !== undefined) {
    if (!/^([0-9a-fA-F]{32}|[0-9a-fA-F]{56})$/.test(msgId)) {
      throw new UsageError(`get: --msg-id needs 32 or 56 hex characters, not ${msgId}`);
    }
    return { kind: "msgId", msgId };
  }
  const topic = values.get("--topic");
  if (topic === undefined) {
    throw new UsageError("get: give --offset, --msg-id, or --topic with --queue or --key");
  }
  checkTopic(topic);
  const key = values.get("--key");
  if (key !== undefined) return { kind: "key", topic, key, count };
  if (!values.has("--queue")) throw new UsageError("get: --topic needs --queue or --key");
  const queueId = integerFlag("get", values, "--queue");
  if (queueId > QUEUE_ID_MAX) {
    throw new UsageError(`get: --queue is ${queueId}; a queue id is at most ${QUEUE_ID_MAX}`);
  }
  return {
    kind: "queue",
    topic,
    queueId,
    queueOffset: integerFlag("get", values, "--queue-offset", 0),
    count,
  };
}

/** Largest queue id: an int32 in the record (SPEC §3). */
const QUEUE_ID_MAX = 0x7FFF_FFFF;

/** A topic no store can hold is a usage error, not "no such message". */
function checkTopic(topic: string): void {
  if (topic.length === 0 || topic.length > TOPIC_LENGTH_MAX_BYTES) {
    throw new UsageError(
      `get: --topic is ${topic.length} characters; a topic has 1 to ${TOPIC_LENGTH_MAX_BYTES}`,
    );
  }
  if (!TOPIC_PATTERN.test(topic)) {
    throw new UsageError(`get: --topic "${topic}" has characters outside [%|a-zA-Z0-9_-]`);
  }
}

function runVerify(argv: readonly string[], output: CliOutput): number {
  const options = parseStoreArguments("verify", argv);
  checkStoreDirectory(options.directory);
  let report: VerifyReport;
  try {
    report = verifyStore(options.directory, { checkCrc: options.checkCrc });
  } catch (error) {
    // A file the scan cannot read (a directory named like a segment): name the store.
    throw systemError(error, "verify", options.directory);
  }
  output.stdout(options.json ? `${JSON.stringify(report)}\n` : formatVerifyReport(report));
  return report.status === "ok" ? EXIT_OK : EXIT_INVALID_RECORD;
}

async function runGet(argv: readonly string[], output: CliOutput): Promise<number> {
  const options = parseStoreArguments("get", argv);
  const query = getQuery(options.values);
  const store = await openStoreReadOnly(options.directory, indexSizes("get", options.values));
  try {
    if (!checkRecovery(store, output)) return EXIT_INVALID_RECORD;
    const messages = await getMessages(store, query);
    if (messages.length === 0) {
      output.stderr("mqstore: get: no such message\n");
      return EXIT_NOT_FOUND;
    }
    const lines = options.json
      ? messages.map((message) => JSON.stringify(messageJson(message)))
      : [GET_TABLE_HEADER, ...messages.map(messageRow)];
    output.stdout(`${lines.join("\n")}\n`);
    return EXIT_OK;
  } finally {
    await store.close();
  }
}

async function runStats(argv: readonly string[], output: CliOutput): Promise<number> {
  const options = parseStoreArguments("stats", argv);
  const store = await openStoreReadOnly(options.directory, indexSizes("stats", options.values));
  try {
    if (!checkRecovery(store, output)) return EXIT_INVALID_RECORD;
    const summary = summarize(store);
    output.stdout(options.json ? `${JSON.stringify(summary)}\n` : formatSummary(summary));
    return EXIT_OK;
  } finally {
    await store.close();
  }
}

/**
 * What the read-only open's scan found, told in one line: an invalid
 * record in a store closed cleanly is corruption (get and stats refuse to
 * answer from it); after a crash it is most likely a torn tail, which an
 * open cuts (they answer, with a note).
 *
 * @returns Whether to go on.
 */
function checkRecovery(store: MessageStore, output: CliOutput): boolean {
  const recovery = store.recovery;
  if (recovery.endKind !== "invalid") return true;
  const where = `the commit log of ${store.directory} ends at offset ${recovery.maxOffset} ` +
    `with an invalid record${recovery.detail === "" ? "" : ` (${recovery.detail})`}`;
  if (recovery.clean) {
    output.stderr(
      `mqstore: ${where} although the store was closed cleanly: it is corrupt (see: mqstore verify ${store.directory})\n`,
    );
    return false;
  }
  output.stderr(
    `mqstore: note: ${where} after an unclean close; reading up to it (see: mqstore verify ${store.directory})\n`,
  );
  return true;
}

/** The one-line answer to an error; rethrows a bug. */
function reportError(error: unknown, output: CliOutput): number {
  if (error instanceof UsageError) {
    output.stderr(`mqstore: ${error.message} (see: mqstore help)\n`);
    return EXIT_USAGE;
  }
  if (error instanceof MqStoreError) {
    output.stderr(`mqstore: ${error.message}\n`);
    return EXIT_IO;
  }
  if (typeof error === "object" && error !== null && "code" in error) {
    const at = "path" in error && typeof error.path === "string" ? error.path : "the input";
    output.stderr(`mqstore: ${systemError(error, "read", at).message}\n`);
    return EXIT_IO;
  }
  if (error instanceof RangeError || error instanceof TypeError) {
    output.stderr(`mqstore: ${error.message}\n`);
    return EXIT_USAGE;
  }
  throw error;
}

/**
 * Runs the command line `argv` (without the runtime and script) and returns
 * the exit code. Never throws for a user mistake or an unreadable file.
 * `get` and `stats` open the store, which is asynchronous: run them with
 * {@link runCliAsync} (this answers them with a usage error).
 *
 * @example
 * ```ts
 * import { runCli } from "./main.ts";
 *
 * const code = runCli(["help"], { stdout: (t) => console.log(t), stderr: (t) => console.error(t) });
 * ```
 *
 * @param argv The arguments.
 * @param output Where to write.
 * @returns The exit code.
 */
export function runCli(argv: readonly string[], output: CliOutput): number {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "dump":
        return runDump(rest, output);
      case "verify":
        return runVerify(rest, output);
      case "get":
      case "stats":
      case "bench":
        throw new UsageError(`${command} is asynchronous: call runCliAsync()`);
      case "help":
      case "--help":
      case "-h":
        output.stdout(USAGE);
        return EXIT_OK;
      case undefined:
        throw new UsageError("no command given");
      default:
        throw new UsageError(`unknown command ${command}`);
    }
  } catch (error) {
    return reportError(error, output);
  }
}

/**
 * Runs any command line, `get` and `stats` included; see {@link runCli}.
 *
 * @example
 * ```ts ignore
 * import { runCliAsync } from "./main.ts";
 *
 * const code = await runCliAsync(["stats", "./store"], { stdout: console.log, stderr: console.error });
 * ```
 *
 * @param argv The arguments.
 * @param output Where to write.
 * @returns The exit code.
 */
export async function runCliAsync(argv: readonly string[], output: CliOutput): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "get":
        return await runGet(rest, output);
      case "stats":
        return await runStats(rest, output);
      case "bench":
        if (rest.includes("--help") || rest.includes("-h")) return runCli(["help"], output);
        return await runBenchCommand(rest, output);
      default:
        return runCli(argv, output);
    }
  } catch (error) {
    return reportError(error, output);
  }
}

/** Writes to a file descriptor; a closed pipe (`| head`) ends the process quietly. */
function writeTo(fd: number, text: string): void {
  try {
    fs.writeSync(fd, text);
  } catch (error) {
    if (typeof error === "object" && error !== null && "code" in error && error.code === "EPIPE") {
      process.exit(EXIT_OK);
    }
    throw error;
  }
}

function isEntryPoint(): boolean {
  const main = (import.meta as { main?: boolean }).main;
  if (main !== undefined) return main;
  const script = process.argv[1];
  if (script === undefined) return false;
  // npm runs the installed command through a symlink (node_modules/.bin/
  // mqstore) while Node names this module by its real path.
  try {
    return fs.realpathSync(path.resolve(script)) ===
      fs.realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  const code = await runCliAsync(process.argv.slice(2), {
    stdout: (text) => writeTo(1, text),
    stderr: (text) => writeTo(2, text),
    stderrIsTerminal: process.stderr.isTTY === true,
  });
  // Exit now rather than let the event loop drain: Deno 2.9.6 ending that
  // way crashed with SIGSEGV in a V8 background thread during teardown
  // after its output was complete (`verify` of the crashed corpus store on
  // a loaded machine: 8 of 210 runs exited 139 instead of 3; with the exit
  // here, 0 of 300). Every command has finished and written (synchronously)
  // by this point.
  process.exit(code);
}
