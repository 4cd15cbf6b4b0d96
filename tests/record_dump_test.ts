/**
 * `mqstore dump` against the RocketMQ 4.9.8 golden corpus: its JSON lines
 * must equal manifest.jsonl field for field.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { CORPUS } from "./_corpus_helpers.ts";
import { type DumpEntry, dumpEntryJson, dumpFile, type DumpFileEnd } from "../src/cli/dump.ts";
import { EXIT_INVALID_RECORD, EXIT_IO, EXIT_OK, EXIT_USAGE, runCli } from "../src/cli/main.ts";
import { cliCommand } from "./_cli_helpers.ts";

const REPOSITORY = fileURLToPath(new URL("..", import.meta.url));

// deno-lint-ignore no-explicit-any
type ManifestEntry = Record<string, any>;

let temp = "";

/** Copies a corpus's commit log into the temp directory; returns its files and manifest. */
function copyCorpus(name: string): { files: string[]; manifest: ManifestEntry[] } {
  const source = path.join(CORPUS, name);
  const directory = path.join(temp, name, "commitlog");
  fs.mkdirSync(directory, { recursive: true });
  const files = fs.readdirSync(path.join(source, "store", "commitlog")).sort().map((file) => {
    const target = path.join(directory, file);
    fs.copyFileSync(path.join(source, "store", "commitlog", file), target);
    fs.chmodSync(target, 0o644);
    return target;
  });
  const manifest = fs.readFileSync(path.join(source, "manifest.jsonl"), "utf8").trim().split("\n")
    .map((line) => JSON.parse(line) as ManifestEntry);
  return { files, manifest };
}

function dumpAll(
  files: string[],
  windowBytes?: number,
): { entries: DumpEntry[]; ends: DumpFileEnd[] } {
  const entries: DumpEntry[] = [];
  const ends: DumpFileEnd[] = [];
  for (const file of files) {
    const iterator = dumpFile(file, windowBytes === undefined ? {} : { windowBytes });
    let step = iterator.next();
    while (!step.done) {
      entries.push(step.value);
      step = iterator.next();
    }
    ends.push(step.value);
    if (step.value !== "blank") break;
  }
  return { entries, ends };
}

function withoutGenCases(entry: ManifestEntry): ManifestEntry {
  const { genCases: _cases, ...fields } = entry;
  return fields;
}

function capture(argv: string[]): { code: number; stdout: string; stderr: string } {
  let stdout = "";
  let stderr = "";
  const code = runCli(argv, {
    stdout: (text) => (stdout += text),
    stderr: (text) => (stderr += text),
  });
  return { code, stdout, stderr };
}

let publicCorpus: { files: string[]; manifest: ManifestEntry[] };
let crashedCorpus: { files: string[]; manifest: ManifestEntry[] };

before(() => {
  temp = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-"));
  try {
    publicCorpus = copyCorpus("public");
    crashedCorpus = copyCorpus("crashed");
  } catch (error) {
    // after() does not remove it once before() failed.
    fs.rmSync(temp, { recursive: true, force: true });
    throw error;
  }
});

after(() => {
  fs.rmSync(temp, { recursive: true, force: true });
});

describe("mqstore dump", () => {
  test("dumpFile() prints every public record exactly as manifest.jsonl has it", () => {
    const { entries, ends } = dumpAll(publicCorpus.files);
    assert.deepEqual(ends, [...new Array(7).fill("blank"), "end"]);
    assert.equal(entries.length, publicCorpus.manifest.length);
    for (const [i, entry] of entries.entries()) {
      const expected = withoutGenCases(publicCorpus.manifest[i]!);
      assert.deepEqual(
        JSON.parse(dumpEntryJson(entry)),
        expected,
        `record ${i} at ${expected.physicalOffset}`,
      );
    }
  });

  test("dumpFile() grows its read window for records larger than it", () => {
    const small = dumpAll(publicCorpus.files, 4096);
    const large = dumpAll(publicCorpus.files);
    assert.deepEqual(small, large);
  });

  test("dumpFile() stops the crashed corpus at the torn record", () => {
    const { entries, ends } = dumpAll(crashedCorpus.files);
    assert.equal(ends.at(-1), "invalid");
    const last = entries.at(-1)!;
    assert.equal(last.kind, "invalid");
    assert.equal(last.physicalOffset, 515149);
    assert.equal(last.kind === "invalid" && last.reason, "SIZE_MISMATCH");
    const expected = crashedCorpus.manifest.filter((entry) => entry.kind !== "torn");
    assert.equal(entries.length - 1, expected.length);
    for (const [i, entry] of entries.slice(0, -1).entries()) {
      assert.deepEqual(JSON.parse(dumpEntryJson(entry)), withoutGenCases(expected[i]!));
    }
  });

  test("dumpFile() yields nothing for a zero-filled segment", () => {
    const zero = crashedCorpus.files.at(-1)!;
    const iterator = dumpFile(zero);
    const step = iterator.next();
    assert.deepEqual(step, { done: true, value: "end" });
  });

  test("dumpFile() needs an offset for a file not named by one", () => {
    const renamed = path.join(temp, "segment.bin");
    fs.copyFileSync(publicCorpus.files[1]!, renamed);
    assert.throws(() => dumpFile(renamed).next(), RangeError);
    const first = dumpFile(renamed, { baseOffset: 65536 }).next();
    assert.equal(first.done, false);
    assert.equal(!first.done && first.value.physicalOffset, 65536);
  });

  test("runCli() dump --json prints one manifest line per record", () => {
    const { code, stdout, stderr } = capture(["dump", "--json", ...publicCorpus.files.slice(0, 2)]);
    assert.equal(code, EXIT_OK);
    assert.equal(stderr, "");
    const lines = stdout.trimEnd().split("\n").map((line) => JSON.parse(line));
    const expected = publicCorpus.manifest.filter((entry) =>
      entry.file === "00000000000000000000" || entry.file === "00000000000000065536"
    );
    assert.deepEqual(lines, expected.map(withoutGenCases));
  });

  test("runCli() dump prints a table without --json", () => {
    const { code, stdout } = capture(["dump", publicCorpus.files[0]!]);
    assert.equal(code, EXIT_OK);
    const lines = stdout.trimEnd().split("\n");
    assert.match(lines[0]!, /physicalOffset/);
    const inFile = publicCorpus.manifest.filter((entry) => entry.file === "00000000000000000000");
    assert.equal(lines.length, 1 + inFile.length);
    assert.match(lines.at(-1)!, /BLANK/);
  });

  test("runCli() exits 3 after the invalid record", () => {
    const { code, stdout } = capture(["dump", "--json", ...crashedCorpus.files]);
    assert.equal(code, EXIT_INVALID_RECORD);
    const last = JSON.parse(stdout.trimEnd().split("\n").at(-1)!);
    assert.equal(last.kind, "invalid");
    assert.equal(last.physicalOffset, 515149);
    assert.equal(typeof last.reason, "string");
  });

  const mistakes: [string, string[], number, RegExp][] = [
    ["an unknown flag", ["dump", "--jsn", "x"], EXIT_USAGE, /unknown flag --jsn/],
    ["no file", ["dump", "--json"], EXIT_USAGE, /no commit-log file/],
    ["an unknown command", ["dupm"], EXIT_USAGE, /unknown command dupm/],
    ["no command", [], EXIT_USAGE, /no command/],
    ["a bad --base-offset", ["dump", "--base-offset", "-1", "x"], EXIT_USAGE, /--base-offset/],
    ["a missing file", ["dump", "/nonexistent/00000000000000000000"], EXIT_IO, /ENOENT/],
    ["a directory", ["dump", os.tmpdir()], EXIT_IO, /not a file/],
  ];
  for (const [name, argv, exitCode, message] of mistakes) {
    test(`runCli() reports ${name} in one line with exit code ${exitCode}`, () => {
      const { code, stdout, stderr } = capture(argv);
      assert.equal(code, exitCode);
      assert.equal(stdout, "");
      assert.match(stderr, message);
      assert.match(stderr, /^mqstore: [^\n]+\n$/);
    });
  }

  test("runCli() help prints the usage", () => {
    const { code, stdout } = capture(["help"]);
    assert.equal(code, EXIT_OK);
    assert.match(stdout, /mqstore dump/);
  });

  test("the mqstore command exits with the dump's code and one-line errors", () => {
    const run = (argv: string[]) => {
      const cli = cliCommand(argv);
      return spawnSync(cli.command, cli.args, { cwd: REPOSITORY, encoding: "utf8" });
    };
    const dump = run(["dump", "--json", ...crashedCorpus.files.slice(-2)]);
    assert.equal(dump.status, EXIT_INVALID_RECORD, dump.stderr);
    const lines = dump.stdout.trimEnd().split("\n");
    assert.equal(JSON.parse(lines.at(-1)!).kind, "invalid");
    assert.equal(
      lines.length,
      crashedCorpus.manifest.filter((entry) => entry.file === "00000000000000458752").length,
    );
    const mistake = run(["dump", "--nope"]);
    assert.equal(mistake.status, EXIT_USAGE);
    assert.equal(mistake.stdout, "");
    assert.match(mistake.stderr, /^mqstore: dump: unknown flag --nope[^\n]*\n$/);
  });
});
