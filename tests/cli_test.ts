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
import { describe, test } from "node:test";
import {
  EXIT_INVALID_RECORD,
  EXIT_IO,
  EXIT_NOT_FOUND,
  EXIT_OK,
  EXIT_USAGE,
} from "../src/cli/main.ts";
import { MessageStore } from "../src/store/message_store.ts";
import { makeTempDirectory, PROJECT_ROOT, removeDirectory } from "./_helpers.ts";
import { cliCommand, type CliRun, runCliInProcess } from "./_cli_helpers.ts";
import { copyCorpusStore, CORPUS_SKIP, type Json } from "./_corpus_helpers.ts";

function spawnCli(argv: string[]): CliRun {
  const { command, args } = cliCommand(argv);
  const result = spawnSync(command, args, {
    cwd: PROJECT_ROOT,
    encoding: "utf8",
    timeout: 60_000,
  });
  // A child that never exited (killed, not started, timed out) says why
  // in stderr, which the assertions print.
  const why = result.status === null
    ? `\n[no exit status: signal ${result.signal ?? "none"}, error ${
      result.error?.message ?? "none"
    }]`
    : "";
  return {
    code: result.status ?? -1,
    stdout: result.stdout ?? "",
    stderr: (result.stderr ?? "") + why,
  };
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
      const ok = await runCliInProcess(["verify", "--json", pub.directory]);
      assert.equal(ok.code, EXIT_OK, ok.stderr);
      const report = JSON.parse(ok.stdout) as Json;
      assert.equal(report.status, "ok");
      assert.equal(report.messages, 438);
      assert.equal(report.cutOffset, 515724);
      assert.equal(report.consumeQueueUnits, 433);
      const torn = await runCliInProcess(["verify", "--json", crashed.directory]);
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
      const corrupt = await runCliInProcess(["verify", pub.directory]);
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
      const byOffset = await runCliInProcess(["get", "--json", directory, "--offset", "176"]);
      assert.equal(byOffset.code, EXIT_OK, byOffset.stderr);
      assert.equal(
        (JSON.parse(byOffset.stdout) as Json).msgId,
        "0000000000000000000000000000000100002A9F00000000000000B0",
      );
      const byQueue = await runCliInProcess([
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
      const byKey = await runCliInProcess([
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
      const byId = await runCliInProcess([
        "get",
        directory,
        "--msg-id",
        "7F00000100002A9F0000000000000000",
      ]);
      assert.equal(byId.code, EXIT_OK);
      assert.match(byId.stdout, /OrderTopic/);
      const missing = await runCliInProcess(["get", directory, "--offset", "177"]);
      assert.equal(missing.code, EXIT_NOT_FOUND);
      const stats = await runCliInProcess(["stats", "--json", directory]);
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
      const result = await runCliInProcess(argv);
      assert.equal(result.code, code, argv.join(" "));
      assert.match(result.stderr, message);
      assert.equal(result.stderr.trim().split("\n").length, 1, result.stderr);
    }
  });

  test("runCliAsync() answers bad input to every command in one line and modifies no store", {
    timeout: 60_000,
  }, async () => {
    const root = makeTempDirectory();
    try {
      // A small real store: 2 queues of topic T, 64 KiB segments, tiny index.
      const pristine = path.join(root, "pristine");
      const store = await MessageStore.open(pristine, {
        mappedFileSizeCommitLog: 0x1_0000,
        mappedFileSizeConsumeQueue: 2000,
        maxHashSlotNum: 100,
        maxIndexNum: 400,
        onWarning: () => {},
      });
      for (let i = 0; i < 100; i++) {
        const result = await store.putMessage({
          topic: "T",
          queueId: i % 2,
          body: new Uint8Array(100).fill(i),
          properties: { TAGS: "a", KEYS: `k${i}` },
        });
        assert.equal(result.status, "PUT_OK");
      }
      await store.close();
      const segment = path.join("commitlog", "00000000000000000000");
      const cqFile = path.join("consumequeue", "T", "0", "00000000000000000000");
      const empty = path.join(root, "empty");
      fs.mkdirSync(empty);
      // [name, damage to a copy of the store, argv with {} for the copy, exit code, stderr].
      const cases: Array<[string, (dir: string) => void, string[], number, RegExp]> = [
        [
          "unknown dump flag",
          () => {},
          ["dump", "--bogus", `{}/${segment}`],
          EXIT_USAGE,
          /unknown flag --bogus/,
        ],
        [
          "unknown verify flag",
          () => {},
          ["verify", "{}", "--fast"],
          EXIT_USAGE,
          /unknown flag --fast/,
        ],
        [
          "unknown get flag",
          () => {},
          ["get", "{}", "--offset", "0", "-x"],
          EXIT_USAGE,
          /unknown flag -x/,
        ],
        [
          "unknown stats flag",
          () => {},
          ["stats", "--bogus", "{}"],
          EXIT_USAGE,
          /unknown flag --bogus/,
        ],
        ["unknown bench flag", () => {}, ["bench", "--bogus"], EXIT_USAGE, /unknown flag --bogus/],
        ["unknown command", () => {}, ["frobnicate"], EXIT_USAGE, /unknown command frobnicate/],
        [
          "missing value",
          () => {},
          ["get", "{}", "--offset"],
          EXIT_USAGE,
          /--offset needs a value/,
        ],
        [
          "flag as value",
          () => {},
          ["get", "{}", "--topic", "--queue", "0"],
          EXIT_USAGE,
          /--topic needs a value/,
        ],
        [
          "non-numeric offset",
          () => {},
          ["get", "{}", "--offset", "12ab"],
          EXIT_USAGE,
          /non-negative integer, not 12ab/,
        ],
        [
          "negative count",
          () => {},
          ["get", "{}", "--topic", "T", "--queue", "0", "--count", "-3"],
          EXIT_USAGE,
          /needs a value|non-negative integer/,
        ],
        [
          "bad base offset",
          () => {},
          ["dump", "--base-offset", "x", `{}/${segment}`],
          EXIT_USAGE,
          /--base-offset needs a non-negative integer/,
        ],
        [
          "topic too long",
          () => {},
          ["get", "{}", "--topic", "t".repeat(128), "--queue", "0"],
          EXIT_USAGE,
          /128 characters; a topic has 1 to 127/,
        ],
        [
          "topic characters",
          () => {},
          ["get", "{}", "--topic", "a b", "--key", "k1"],
          EXIT_USAGE,
          /outside \[%\|a-zA-Z0-9_-\]/,
        ],
        [
          "queue id over int32",
          () => {},
          ["get", "{}", "--topic", "T", "--queue", "2147483648"],
          EXIT_USAGE,
          /a queue id is at most 2147483647/,
        ],
        ["missing store", () => {}, ["stats", "{}/nope"], EXIT_IO, /ENOENT/],
        ["missing dump file", () => {}, ["dump", "{}/nope"], EXIT_IO, /ENOENT/],
        [
          "a file, not a store",
          () => {},
          ["verify", "{}/checkpoint"],
          EXIT_IO,
          /is not a directory/,
        ],
        ["not a store", () => {}, ["verify", empty], EXIT_IO, /is not a store directory/],
        [
          "not a store (get)",
          () => {},
          ["get", empty, "--offset", "0"],
          EXIT_IO,
          /is not a store directory/,
        ],
        [
          "commitlog is a file",
          (dir) => {
            fs.rmSync(path.join(dir, "commitlog"), { recursive: true });
            fs.writeFileSync(path.join(dir, "commitlog"), "x");
          },
          ["stats", "{}"],
          EXIT_IO,
          /is not a store directory/,
        ],
        [
          "truncated segment",
          (dir) => fs.truncateSync(path.join(dir, segment), 1000),
          ["stats", "{}"],
          EXIT_IO,
          /segment .* is 1000 bytes; a segment is 4096/,
        ],
        [
          "garbage segment",
          (dir) => {
            const bytes = fs.readFileSync(path.join(dir, segment));
            for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + 1) & 0xFF;
            fs.writeFileSync(path.join(dir, segment), bytes);
          },
          ["get", "{}", "--offset", "0"],
          EXIT_INVALID_RECORD,
          /invalid record .* closed cleanly: it is corrupt/,
        ],
        [
          "garbage segment (stats)",
          (dir) => {
            const bytes = fs.readFileSync(path.join(dir, segment));
            bytes.fill(0x5A, 0, 0x1000);
            fs.writeFileSync(path.join(dir, segment), bytes);
          },
          ["stats", "{}"],
          EXIT_INVALID_RECORD,
          /it is corrupt/,
        ],
        [
          "consume queue of a wrong size",
          (dir) => fs.truncateSync(path.join(dir, cqFile), 7),
          ["get", "{}", "--topic", "T", "--queue", "0"],
          EXIT_IO,
          /Consume-queue file .* is 7 bytes/,
        ],
        [
          "corrupt checkpoint",
          (dir) => fs.writeFileSync(path.join(dir, "checkpoint"), "hi"),
          ["stats", "{}"],
          EXIT_IO,
          /[Cc]heckpoint .* is 2 bytes/,
        ],
        [
          "segment is a directory",
          (dir) => fs.mkdirSync(path.join(dir, "commitlog", "00000000000000065536")),
          ["verify", "{}"],
          EXIT_IO,
          /Cannot verify .*EISDIR/,
        ],
      ];
      for (const [name, damage, argv, code, message] of cases) {
        const copy = path.join(root, "copy");
        removeDirectory(copy);
        fs.cpSync(pristine, copy, { recursive: true });
        damage(copy);
        const before = digest(copy);
        const result = await runCliInProcess(argv.map((argument) => argument.replace("{}", copy)));
        assert.equal(result.code, code, `${name}: ${result.stderr}`);
        assert.match(result.stderr, message, name);
        assert.equal(result.stderr.trim().split("\n").length, 1, `${name}: ${result.stderr}`);
        assert.doesNotMatch(result.stderr, /\n\s+at /, name);
        assert.equal(digest(copy), before, `${name}: the store changed`);
      }
      // The intact store answers, and is not changed either.
      const before = digest(pristine);
      assert.equal((await runCliInProcess(["verify", pristine])).code, EXIT_OK);
      assert.equal((await runCliInProcess(["stats", pristine])).code, EXIT_OK);
      assert.equal(
        (await runCliInProcess(["get", pristine, "--topic", "T", "--key", "k7"])).code,
        EXIT_OK,
      );
      assert.equal(digest(pristine), before);
    } finally {
      removeDirectory(root);
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
