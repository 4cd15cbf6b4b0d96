/**
 * Runs every test file under Deno (`deno test -A`), Bun (`bun test`) and
 * Node (`node --import tsx --test`), reads each runner's counts from its
 * JUnit report, and ends with one line `N passed, N failed` summing all
 * three, plus a line per runtime naming the adapters its tests exercised.
 *
 * Usage: `tsx scripts/test.ts [--runtime deno|bun|node]... [test files...]`
 *
 * A runtime that ran 0 tests, or whose runner exited non-zero without a
 * failure in its report (a file that did not load), counts as a failure.
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";

type Runtime = "deno" | "bun" | "node";

interface Counts {
  passed: number;
  failed: number;
  skipped: number;
  failures: string[];
  adapters: Set<string>;
}

const ROOT = path.resolve(import.meta.dirname ?? ".", "..");
const BIN = path.join(ROOT, "node_modules", ".bin");
/** Per-test limit given to `bun test`; a hung test still fails. */
const BUN_TEST_TIMEOUT_MS = 60_000;
const ADAPTERS = ["deno-ffi", "bun-ffi", "node-koffi", "portable", "memory"];

function parseArguments(argv: string[]): { runtimes: Runtime[]; files: string[] } {
  const runtimes: Runtime[] = [];
  const files: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const argument = argv[i]!;
    if (argument === "--runtime") {
      const value = argv[++i];
      if (value !== "deno" && value !== "bun" && value !== "node") {
        throw new Error(`--runtime takes deno, bun or node, not ${value}`);
      }
      runtimes.push(value);
    } else if (argument.startsWith("-")) {
      throw new Error(`Unknown flag ${argument}`);
    } else {
      files.push(argument);
    }
  }
  return {
    runtimes: runtimes.length > 0 ? runtimes : ["deno", "bun", "node"],
    files,
  };
}

function findTestFiles(): string[] {
  const found: string[] = [];
  const walk = (directory: string): void => {
    for (const entry of fs.readdirSync(directory, { withFileTypes: true })) {
      const full = path.join(directory, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== "fixtures") walk(full);
      } else if (entry.name.endsWith("_test.ts")) {
        found.push(path.relative(ROOT, full));
      }
    }
  };
  walk(path.join(ROOT, "tests"));
  return found.sort();
}

function commandFor(
  runtime: Runtime,
  files: string[],
  junitPath: string,
): { command: string; args: string[] } {
  switch (runtime) {
    case "deno":
      return {
        command: path.join(BIN, "deno"),
        args: ["test", "-A", `--junit-path=${junitPath}`, ...files],
      };
    case "bun":
      return {
        command: path.join(BIN, "bun"),
        args: [
          "test",
          // Bun alone limits a test to 5 s; a loaded 2-core CI machine
          // needs more for the real-file tests (Deno and Node set none).
          `--timeout=${BUN_TEST_TIMEOUT_MS}`,
          "--reporter=junit",
          `--reporter-outfile=${junitPath}`,
          ...files.map((file) => `./${file}`),
        ],
      };
    case "node":
      return {
        command: process.execPath,
        args: [
          "--import",
          "tsx",
          "--test",
          "--test-reporter=spec",
          "--test-reporter-destination=stdout",
          "--test-reporter=junit",
          `--test-reporter-destination=${junitPath}`,
          ...files,
        ],
      };
  }
}

/** Counts leaf test cases of a JUnit report: failed if it holds a failure or error, skipped if skipped. */
function parseJunit(xml: string): Counts {
  const counts: Counts = {
    passed: 0,
    failed: 0,
    skipped: 0,
    failures: [],
    adapters: new Set(),
  };
  const testcase = /<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g;
  for (const match of xml.matchAll(testcase)) {
    const attributes = match[1] ?? "";
    const body = match[3] ?? "";
    const name = decodeXml(/\bname="([^"]*)"/.exec(attributes)?.[1] ?? "?");
    const classname = decodeXml(/\bclassname="([^"]*)"/.exec(attributes)?.[1] ?? "");
    if (/<skipped\b/.test(body)) {
      counts.skipped++;
      continue;
    }
    if (/<(failure|error)\b/.test(body)) {
      counts.failed++;
      counts.failures.push(`${classname} ${name}`.trim());
    } else {
      counts.passed++;
      for (const adapter of ADAPTERS) {
        if (name.includes(adapter) || classname.includes(adapter)) {
          counts.adapters.add(adapter);
        }
      }
    }
  }
  // Bun and Node nest suites: count adapter names from suite names too.
  for (const match of xml.matchAll(/<testsuite\b[^>]*\bname="([^"]*)"[^>]*>/g)) {
    const name = decodeXml(match[1] ?? "");
    for (const adapter of ADAPTERS) {
      if (name.includes(adapter)) counts.adapters.add(adapter);
    }
  }
  return counts;
}

function decodeXml(text: string): string {
  return text.replaceAll("&lt;", "<").replaceAll("&gt;", ">").replaceAll(
    "&quot;",
    '"',
  ).replaceAll("&apos;", "'").replaceAll("&amp;", "&");
}

function run(runtime: Runtime, files: string[], workDirectory: string): Counts {
  const junitPath = path.join(workDirectory, `${runtime}.xml`);
  const { command, args } = commandFor(runtime, files, junitPath);
  console.log(
    `\n=== ${runtime}: ${path.basename(command)} ${
      args.slice(0, 3).join(" ")
    } … (${files.length} files)`,
  );
  const started = Date.now();
  const result = spawnSync(command, args, {
    cwd: ROOT,
    stdio: "inherit",
    env: { ...process.env, MQSTORE_TEST_RUNTIME: runtime, NO_COLOR: "1" },
  });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  let counts: Counts;
  try {
    counts = parseJunit(fs.readFileSync(junitPath, "utf8"));
  } catch {
    counts = { passed: 0, failed: 0, skipped: 0, failures: [], adapters: new Set() };
  }
  if (result.status !== 0 && counts.failed === 0) {
    counts.failed++;
    counts.failures.push(
      `${runtime} runner exited with ${result.status ?? result.signal} (a file failed to load?)`,
    );
  }
  if (counts.passed + counts.failed === 0) {
    counts.failed++;
    counts.failures.push(`${runtime} ran 0 tests`);
  }
  console.log(
    `=== ${runtime}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped in ${seconds} s`,
  );
  return counts;
}

function main(): void {
  const { runtimes, files: requested } = parseArguments(process.argv.slice(2));
  const files = requested.length > 0 ? requested : findTestFiles();
  if (files.length === 0) throw new Error("No test files found under tests/");
  const workDirectory = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-junit-"));
  const totals = { passed: 0, failed: 0, skipped: 0 };
  const lines: string[] = [];
  const failures: string[] = [];
  try {
    for (const runtime of runtimes) {
      const counts = run(runtime, files, workDirectory);
      totals.passed += counts.passed;
      totals.failed += counts.failed;
      totals.skipped += counts.skipped;
      failures.push(...counts.failures.map((failure) => `${runtime}: ${failure}`));
      const adapters = [...counts.adapters].sort().join(", ") || "none";
      lines.push(
        `${runtime}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped; adapters exercised: ${adapters}`,
      );
    }
  } finally {
    fs.rmSync(workDirectory, { recursive: true, force: true });
  }
  console.log("");
  for (const failure of failures) console.log(`FAILED ${failure}`);
  for (const line of lines) console.log(line);
  console.log(
    `${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`,
  );
  process.exitCode = totals.failed === 0 ? 0 : 1;
}

main();
