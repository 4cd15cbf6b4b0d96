/**
 * Shared test helpers: temporary directories, and running a child process
 * of the same runtime (Deno, Bun or Node) as the test.
 *
 * @module
 */

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { runtimeName } from "../src/runtime/info.ts";

/** The project root (holds deno.json and node_modules). */
export const PROJECT_ROOT: string = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  "..",
);

/** The directory of the child scripts. */
export const FIXTURES: string = path.join(PROJECT_ROOT, "tests", "fixtures");

/** Creates a fresh temporary directory `mqstore-XXXXXX`. */
export function makeTempDirectory(): string {
  return fs.mkdtempSync(`${os.tmpdir()}/mqstore-`);
}

/** Removes a directory tree; no error if it is gone. */
export function removeDirectory(directory: string): void {
  fs.rmSync(directory, { recursive: true, force: true });
}

/**
 * Runs `body` with a fresh temporary directory, removed afterwards.
 *
 * @param body Receives the directory path.
 */
export async function withTempDirectory<T>(
  body: (directory: string) => Promise<T>,
): Promise<T> {
  const directory = makeTempDirectory();
  try {
    return await body(directory);
  } finally {
    removeDirectory(directory);
  }
}

/** Whether the process runs as root (which bypasses permission bits). */
export function isRoot(): boolean {
  return typeof process.getuid === "function" && process.getuid() === 0;
}

/**
 * The command line that runs `script` on this runtime: `deno run -A`,
 * `bun`, or `node --import tsx`.
 *
 * @param script Path of a TypeScript file.
 * @param args Its arguments.
 */
export function childCommand(
  script: string,
  args: readonly string[],
): { command: string; args: string[] } {
  switch (runtimeName()) {
    case "deno":
      return { command: process.execPath, args: ["run", "-A", script, ...args] };
    case "bun":
      return { command: process.execPath, args: [script, ...args] };
    case "node":
      return {
        command: process.execPath,
        args: ["--import", "tsx", script, ...args],
      };
  }
}

/** What a finished child process left. */
export interface ChildResult {
  /** Exit code, or null if killed by a signal. */
  code: number | null;
  /** Everything written to stdout. */
  stdout: string;
  /** Everything written to stderr. */
  stderr: string;
}

/**
 * Runs a fixture script (a file in `tests/fixtures/`) in a fresh process of
 * this runtime, from the project root, and collects its output.
 *
 * @param fixture File name inside `tests/fixtures/`.
 * @param args Its arguments.
 */
export function runFixture(
  fixture: string,
  args: readonly string[],
): Promise<ChildResult> {
  const { command, args: argv } = childCommand(path.join(FIXTURES, fixture), args);
  return runCommand(command, argv);
}

/**
 * Runs `command args` from the project root to its end and collects its
 * output. Asynchronous, so the test runner's timers keep running meanwhile.
 *
 * @param command Executable path or name.
 * @param args Its arguments.
 */
export function runCommand(
  command: string,
  args: readonly string[],
): Promise<ChildResult> {
  return new Promise<ChildResult>((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: PROJECT_ROOT,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8");
    child.stderr.setEncoding("utf8");
    child.stdout.on("data", (text: string) => (stdout += text));
    child.stderr.on("data", (text: string) => (stderr += text));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * Runs a fixture that prints one JSON line and returns it parsed; throws
 * with the child's stderr if it failed.
 */
export async function runJsonFixture<T>(
  fixture: string,
  args: readonly string[],
): Promise<T> {
  const result = await runFixture(fixture, args);
  if (result.code !== 0) {
    throw new Error(
      `Fixture ${fixture} exited with ${result.code}: ${result.stderr.trim()}`,
    );
  }
  return JSON.parse(result.stdout.trim()) as T;
}

/** Bytes `0, 1, 2, ...` (mod 251, so pages differ) offset by `seed`. */
export function pattern(length: number, seed = 0): Uint8Array {
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = (i + seed) % 251;
  return bytes;
}

/** Lower-case hex of bytes. */
export function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Sets or clears the immutable attribute of a directory (`chattr ±i`), a
 * permission root cannot bypass. Returns false where it is unavailable
 * (no chattr, no CAP_LINUX_IMMUTABLE, a file system without attributes).
 */
export function setImmutable(directory: string, immutable: boolean): boolean {
  try {
    const result = spawnSync("chattr", [immutable ? "+i" : "-i", directory], {
      stdio: "ignore",
    });
    return result.status === 0;
  } catch {
    return false;
  }
}

/** Whether {@link setImmutable} works here (probed once on a scratch directory). */
export function immutableDirectoriesWork(): boolean {
  const directory = makeTempDirectory();
  try {
    if (!setImmutable(directory, true)) return false;
    setImmutable(directory, false);
    return true;
  } finally {
    removeDirectory(directory);
  }
}
