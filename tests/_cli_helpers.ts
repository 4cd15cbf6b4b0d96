/**
 * Helpers of the CLI tests: running `mqstore` in process through
 * `runCliAsync` with its output captured, and the command line that runs
 * it as a process of the runtime running the test.
 *
 * @module
 */

import path from "node:path";
import { runCliAsync } from "../src/cli/main.ts";
import { childCommand, PROJECT_ROOT } from "./_helpers.ts";

/** The CLI's entry point, src/cli/main.ts. */
export const CLI_MAIN: string = path.join(PROJECT_ROOT, "src", "cli", "main.ts");

/** What a CLI run left. */
export interface CliRun {
  /** Exit code. */
  code: number;
  /** Everything written to stdout. */
  stdout: string;
  /** Everything written to stderr. */
  stderr: string;
}

/** Runs the CLI in this process with `argv` (without the program name), capturing its output. */
export async function runCliInProcess(argv: readonly string[]): Promise<CliRun> {
  let stdout = "";
  let stderr = "";
  const code = await runCliAsync([...argv], {
    stdout: (text) => stdout += text,
    stderr: (text) => stderr += text,
  });
  return { code, stdout, stderr };
}

/**
 * The command line that runs the CLI with `args` as a process of the
 * runtime running the test (`deno run -A`, `bun`, `node --import tsx`).
 */
export function cliCommand(args: readonly string[]): { command: string; args: string[] } {
  return childCommand(CLI_MAIN, args);
}
