/**
 * The `mqstore` command: argument parsing and subcommand dispatch.
 *
 * ```
 * mqstore dump [--json] [--no-crc] [--base-offset <n>] <commit-log file>...
 * mqstore help
 * ```
 *
 * Run it with `deno task mqstore …`, `npm run mqstore -- …`, or
 * `deno run -A src/cli/main.ts …`. A user mistake (unknown command or flag,
 * missing argument, unreadable file) prints one line on stderr, never a
 * stack trace. Exit codes: 0 success, 1 a file could not be read, 2 bad
 * usage, 3 the dump stopped at an invalid record.
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
/** Exit code: `dump` stopped at an invalid record. */
export const EXIT_INVALID_RECORD = 3;

const USAGE = `Usage:
  mqstore dump [--json] [--no-crc] [--base-offset <n>] <commit-log file>...
      Print every record of the files in physical order: a table, or with
      --json one JSON object per line (the golden manifest's fields). Stops at
      the end of the data or at the first invalid record (exit code 3).
      --no-crc        do not verify body CRCs
      --base-offset   physical offset of the first file, when its name is not
                      its 20-digit offset
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

/**
 * Runs the command line `argv` (without the runtime and script) and returns
 * the exit code. Never throws for a user mistake or an unreadable file.
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
    throw error;
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
  const code = runCli(process.argv.slice(2), {
    stdout: (text) => writeTo(1, text),
    stderr: (text) => writeTo(2, text),
  });
  process.exitCode = code;
}
