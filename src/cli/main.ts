/**
 * The `mqstore` command: argument parsing and subcommand dispatch.
 *
 * ```
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
 * missing argument, unreadable file) prints one line on stderr, never a
 * stack trace. Exit codes: 0 success, 1 a file could not be read, 2 bad
 * usage, 3 the dump stopped at an invalid record (verify: the store has a
 * torn or corrupt record), 4 `get` found nothing. `verify`, `get` and
 * `stats` never modify the store (read-only: no lock, no write).
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
import { GET_TABLE_HEADER, getMessages, type GetQuery, messageJson, messageRow } from "./get.ts";
import { type IndexSizes, openStoreReadOnly } from "./_open_store.ts";
import { formatSummary, summarize } from "./stats.ts";
import { formatVerifyReport, verifyStore } from "./verify.ts";

/** Where the command writes. */
export interface CliOutput {
  /** Receives standard output, in pieces. */
  stdout(text: string): void;
  /** Receives standard error, in pieces. */
  stderr(text: string): void;
}

/** Exit code: success. */
export const EXIT_OK = 0;
/** Exit code: a file could not be read. */
export const EXIT_IO = 1;
/** Exit code: bad usage (unknown command or flag, missing argument). */
export const EXIT_USAGE = 2;
/** Exit code: `dump` stopped at an invalid record; `verify` found a torn or corrupt one. */
export const EXIT_INVALID_RECORD = 3;
/** Exit code: `get` found no message. */
export const EXIT_NOT_FOUND = 4;

const USAGE = `Usage:
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

/** A user mistake: reported in one line with exit code 2. */
class UsageError extends Error {
  override name = "UsageError";
}

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
      if (value === undefined) throw new UsageError(`${command}: ${name} needs a value`);
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
  const key = values.get("--key");
  if (key !== undefined) return { kind: "key", topic, key, count };
  if (!values.has("--queue")) throw new UsageError("get: --topic needs --queue or --key");
  return {
    kind: "queue",
    topic,
    queueId: integerFlag("get", values, "--queue"),
    queueOffset: integerFlag("get", values, "--queue-offset", 0),
    count,
  };
}

function runVerify(argv: readonly string[], output: CliOutput): number {
  const options = parseStoreArguments("verify", argv);
  const report = verifyStore(options.directory, { checkCrc: options.checkCrc });
  output.stdout(options.json ? `${JSON.stringify(report)}\n` : formatVerifyReport(report));
  return report.status === "ok" ? EXIT_OK : EXIT_INVALID_RECORD;
}

async function runGet(argv: readonly string[], output: CliOutput): Promise<number> {
  const options = parseStoreArguments("get", argv);
  const query = getQuery(options.values);
  const store = await openStoreReadOnly(options.directory, indexSizes("get", options.values));
  try {
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
    const summary = summarize(store);
    output.stdout(options.json ? `${JSON.stringify(summary)}\n` : formatSummary(summary));
    return EXIT_OK;
  } finally {
    await store.close();
  }
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
    output.stderr(`mqstore: ${systemError(error, "read", "the input").message}\n`);
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
  return script !== undefined && path.resolve(script) === fileURLToPath(import.meta.url);
}

if (isEntryPoint()) {
  const code = await runCliAsync(process.argv.slice(2), {
    stdout: (text) => writeTo(1, text),
    stderr: (text) => writeTo(2, text),
  });
  process.exitCode = code;
}
