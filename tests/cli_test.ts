/**
 * The store commands of the `mqstore` CLI (verify, get, stats) on copies of
 * the RocketMQ 4.9.8 corpus stores: in process through `runCliAsync`, and as a
 * spawned process of the runtime running the test. None of them modifies
 * the store.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { describe, test } from "node:test";
import {
  EXIT_INVALID_RECORD,
  EXIT_NOT_FOUND,
  EXIT_OK,
  EXIT_USAGE,
  runCliAsync,
} from "../src/cli/main.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { PROJECT_ROOT, removeDirectory } from "./_helpers.ts";
import { copyCorpusStore, CORPUS_SKIP, type Json } from "./_corpus_helpers.ts";

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function run(argv: string[]): Promise<Run> {
  let stdout = "";
  let stderr = "";
  const code = await runCliAsync(argv, {
    stdout: (text) => stdout += text,
    stderr: (text) => stderr += text,
  });
  return { code, stdout, stderr };
}

/** The command line that runs the CLI under the runtime running this test. */
function cliCommand(): [string, string[]] {
  const main = path.join(PROJECT_ROOT, "src", "cli", "main.ts");
  switch (runtimeName()) {
    case "deno":
      return [process.execPath, ["run", "-A", "--no-check", main]];
    case "bun":
      return [process.execPath, [main]];
    default:
      return [process.execPath, ["--import", "tsx", main]];
  }
}

function spawnCli(argv: string[]): Run {
  const [command, prefix] = cliCommand();
  const result = spawnSync(command, [...prefix, ...argv], {
    cwd: PROJECT_ROOT,
    encoding: "utf8",
    timeout: 60_000,
  });
  return { code: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

/** A digest of every file under `directory` (names and bytes). */
function digest(directory: string): string {
  const hash = createHash("sha256");
  const walk = (at: string) => {
    for (const name of fs.readdirSync(at).sort()) {
      const child = path.join(at, name);
      hash.update(child);
      if (fs.statSync(child).isDirectory()) walk(child);
      else hash.update(fs.readFileSync(child));
    }
  };
  walk(directory);
  return hash.digest("hex");
}

describe("mqstore verify, get, stats", () => {
  test("runCliAsync() verify passes the public store and reports the crashed store's torn tail", {
    skip: CORPUS_SKIP,
  }, async () => {
    const pub = copyCorpusStore("public");
    const crashed = copyCorpusStore("crashed");
    try {
      const before = [digest(pub.directory), digest(crashed.directory)];
      const ok = await run(["verify", "--json", pub.directory]);
      assert.equal(ok.code, EXIT_OK, ok.stderr);
      const report = JSON.parse(ok.stdout) as Json;
      assert.equal(report.status, "ok");
      assert.equal(report.messages, 438);
      assert.equal(report.cutOffset, 515724);
      assert.equal(report.consumeQueueUnits, 433);
      const torn = await run(["verify", "--json", crashed.directory]);
      assert.equal(torn.code, EXIT_INVALID_RECORD);
      const tornReport = JSON.parse(torn.stdout) as Json;
      assert.equal(tornReport.status, "torn-tail");
      assert.equal(tornReport.cutOffset, 515149);
      assert.equal(tornReport.invalid.offset, 515149);
      assert.equal(tornReport.consumeQueueUnitsPastCut, 1);
      assert.equal(tornReport.cleanShutdown, false);
      // Corruption in the middle: a flipped byte in the first segment.
      const first = path.join(pub.directory, "commitlog", "00000000000000000000");
      const bytes = fs.readFileSync(first);
      bytes[300] = bytes[300]! ^ 0xFF;
      fs.writeFileSync(first, bytes);
      const corrupt = await run(["verify", pub.directory]);
      assert.equal(corrupt.code, EXIT_INVALID_RECORD);
      assert.match(corrupt.stdout, /status {7}corrupt/);
      assert.equal(digest(crashed.directory), before[1]);
    } finally {
      removeDirectory(pub.root);
      removeDirectory(crashed.root);
    }
  });

  test("runCliAsync() get finds messages by offset, queue, key and msgId; stats lists the queues", {
    skip: CORPUS_SKIP,
  }, async () => {
    const { root, directory } = copyCorpusStore("public");
    try {
      const before = digest(directory);
      const byOffset = await run(["get", "--json", directory, "--offset", "176"]);
      assert.equal(byOffset.code, EXIT_OK, byOffset.stderr);
      assert.equal(
        (JSON.parse(byOffset.stdout) as Json).msgId,
        "0000000000000000000000000000000100002A9F00000000000000B0",
      );
      const byQueue = await run([
        "get",
        "--json",
        directory,
        "--topic",
        "TopicTest",
        "--queue",
        "1",
        "--queue-offset",
        "3",
        "--count",
        "2",
      ]);
      const lines = byQueue.stdout.trim().split("\n").map((line) => JSON.parse(line) as Json);
      assert.deepEqual(lines.map((m) => m.physicalOffset), [33207, 35840]);
      const byKey = await run([
        "get",
        "--json",
        directory,
        "--topic",
        "TopicTest",
        "--key",
        "order-7",
        "--count",
        "10",
      ]);
      assert.equal(byKey.stdout.trim().split("\n").length, 3);
      const byId = await run(["get", directory, "--msg-id", "7F00000100002A9F0000000000000000"]);
      assert.equal(byId.code, EXIT_OK);
      assert.match(byId.stdout, /OrderTopic/);
      const missing = await run(["get", directory, "--offset", "177"]);
      assert.equal(missing.code, EXIT_NOT_FOUND);
      const stats = await run(["stats", "--json", directory]);
      const summary = JSON.parse(stats.stdout) as Json;
      assert.equal(summary.maxOffset, 515724);
      assert.equal(summary.queues.length, 25);
      assert.equal(summary.queuedMessages, 433);
      assert.equal(digest(directory), before);
    } finally {
      removeDirectory(root);
    }
  });

  test("runCliAsync() answers user mistakes in one line", async () => {
    const cases: Array<[string[], number, RegExp]> = [
      [["verify"], EXIT_USAGE, /no store directory/],
      [["get", "/nonexistent-mqstore"], 1, /ENOENT/],
      [["get", PROJECT_ROOT, "--offset", "x"], EXIT_USAGE, /--offset needs a non-negative integer/],
      [["get", PROJECT_ROOT], EXIT_USAGE, /give --offset/],
      [["get", PROJECT_ROOT, "--offset", "1"], 1, /not a store directory/],
      [["stats", PROJECT_ROOT, "--bogus"], EXIT_USAGE, /unknown flag --bogus/],
    ];
    for (const [argv, code, message] of cases) {
      const result = await run(argv);
      assert.equal(result.code, code, argv.join(" "));
      assert.match(result.stderr, message);
      assert.equal(result.stderr.trim().split("\n").length, 1, result.stderr);
    }
  });

  test("mqstore verify and get run as a process on a store copy", { skip: CORPUS_SKIP }, () => {
    const { root, directory } = copyCorpusStore("crashed");
    try {
      const verify = spawnCli(["verify", directory]);
      assert.equal(verify.code, EXIT_INVALID_RECORD, verify.stderr);
      assert.match(verify.stdout, /torn-tail/);
      assert.match(verify.stdout, /515149/);
      const get = spawnCli(["get", "--json", directory, "--offset", "514788"]);
      assert.equal(get.code, EXIT_OK, get.stderr);
      assert.equal((JSON.parse(get.stdout) as Json).physicalOffset, 514788);
      const bad = spawnCli(["get", directory, "--queue", "1"]);
      assert.equal(bad.code, EXIT_USAGE);
      assert.doesNotMatch(bad.stderr, /\n\s+at /);
    } finally {
      removeDirectory(root);
    }
  });
});
