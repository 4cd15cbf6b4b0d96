/**
 * `mqstore bench`: small runs in process through `runCliAsync` in each
 * flush mode (PASS, figures consistent with the counts), the directory
 * rules (a non-empty `--dir` refused, the default directory removed,
 * `--keep` keeping a store `verify` accepts), flag mistakes answered in
 * one line, progress output, and real processes of this and another
 * runtime.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { describe, test } from "node:test";
import { parseBenchArguments } from "../src/cli/bench.ts";
import { EXIT_OK, EXIT_USAGE } from "../src/cli/main.ts";
import { Progress } from "../src/cli/_progress.ts";
import { runtimeName } from "../src/runtime/info.ts";
import type { RuntimeName } from "../src/runtime/port.ts";
import { makeTempDirectory, PROJECT_ROOT, removeDirectory, runCommand } from "./_helpers.ts";
import { cliCommand, runCliInProcess } from "./_cli_helpers.ts";

// deno-lint-ignore no-explicit-any
type Json = Record<string, any>;

/** Runs that open stores take a few seconds on a loaded machine (bun's default limit is 5 s). */
const STORE_TEST = { timeout: 120_000 };

/** Small and fast: 1 MiB segments so a run rolls a few of them. */
const SMALL = ["--messages", "2000", "--segment-size", "1m", "--size", "512"];

function names(directory: string): string[] {
  return fs.readdirSync(directory).sort();
}

describe("mqstore bench", () => {
  for (const flush of ["async", "async-pool", "sync"]) {
    test(
      `runCliAsync() bench --flush ${flush} writes, reads back and passes`,
      STORE_TEST,
      async () => {
        const root = makeTempDirectory();
        try {
          const directory = path.join(root, "store");
          const result = await runCliInProcess([
            "bench",
            ...SMALL,
            "--flush",
            flush,
            "--dir",
            directory,
            "--json",
          ]);
          assert.equal(result.code, EXIT_OK, result.stderr + result.stdout);
          const lines = result.stdout.trim().split("\n");
          assert.equal(lines.length, 1, "--json prints exactly one line");
          const report = JSON.parse(lines[0]!) as Json;
          assert.equal(report.result, "PASS", report.failure);
          assert.equal(report.failure, null);
          assert.equal(report.flush, flush);
          assert.equal(report.runtime, runtimeName());
          assert.equal(report.messages, 2000);
          assert.equal(report.messagesWritten, 2000);
          assert.equal(report.messagesVerified, 2000);
          assert.equal(report.queues, 4);
          assert.equal(report.sizeBytes, 512);
          assert.equal(report.bodyBytes, 2000 * 512);
          assert.ok(report.recordBytes > report.bodyBytes, "records carry headers and properties");
          // Records plus the BLANK ends of rolled segments.
          assert.ok(report.commitLogDataBytes >= report.recordBytes);
          assert.ok(report.commitLogSegments >= 2, `${report.commitLogSegments} segments`);
          assert.ok(report.diskFilesBytes >= report.commitLogSegments * 0x10_0000);
          assert.equal(report.producers, flush === "sync" ? 64 : 1);
          assert.equal(report.latencySampleEvery, flush === "sync" ? 1 : 17);
          assert.equal(report.latencySamples, Math.ceil(2000 / report.latencySampleEvery));
          assert.ok(report.putLatencyP50Ms <= report.putLatencyP99Ms);
          assert.ok(report.putLatencyP99Ms <= report.putLatencyP999Ms);
          assert.ok(report.putLatencyP999Ms <= report.putLatencyMaxMs);
          assert.ok(report.messagesPerSecond > 0 && report.readMessagesPerSecond > 0);
          assert.ok(report.writeCpuSeconds > 0 && report.readCpuSeconds > 0);
          assert.equal(
            report.options.flushDiskType,
            flush === "sync" ? "SYNC_FLUSH" : "ASYNC_FLUSH",
          );
          assert.equal(
            report.options.transientStorePoolEnable,
            flush === "async-pool" ? true : undefined,
          );
          assert.equal(report.options.mappedFileSizeCommitLog, 0x10_0000);
          assert.equal(report.groupCommitMean === null, flush !== "sync");
          assert.equal(report.kept, false);
          assert.equal(fs.existsSync(directory), false, "a --dir the bench created is removed");
        } finally {
          removeDirectory(root);
        }
      },
    );
  }

  test(
    "runCliAsync() bench prints a text report ending in PASS and removes its temp directory",
    STORE_TEST,
    async () => {
      const result = await runCliInProcess([
        "bench",
        ...SMALL,
        "--queues",
        "3",
        "--progress",
        "lines",
      ]);
      assert.equal(result.code, EXIT_OK, result.stderr);
      const lines = result.stdout.trim().split("\n");
      assert.equal(lines.at(-1), "PASS");
      assert.match(result.stdout, /^write +2,000 messages × 512 B in 3 queues/m);
      assert.match(result.stdout, /^read +2,000 messages verified/m);
      assert.match(result.stdout, /p99\.9/);
      const store = /^ {2}store +(\S+) \(removed\)$/m.exec(result.stdout)?.[1];
      assert.ok(store !== undefined, result.stdout);
      assert.equal(fs.existsSync(store), false);
      // Progress goes to stderr, a plain line per tenth of each phase.
      assert.match(result.stderr, /^write +100% +2,000\/2,000/m);
      assert.match(result.stderr, /^read +100% +2,000\/2,000/m);
      assert.equal(result.stderr.match(/^write /gm)?.length, 10);
    },
  );

  test("runCliAsync() bench --keep keeps a store that verify accepts", STORE_TEST, async () => {
    const root = makeTempDirectory();
    try {
      const directory = path.join(root, "kept");
      fs.mkdirSync(directory);
      const result = await runCliInProcess([
        "bench",
        ...SMALL,
        "--dir",
        directory,
        "--keep",
        "--json",
      ]);
      assert.equal(result.code, EXIT_OK, result.stderr);
      const report = JSON.parse(result.stdout) as Json;
      assert.equal(report.kept, true);
      assert.ok(names(directory).includes("commitlog"));
      const verify = await runCliInProcess(["verify", "--json", directory]);
      assert.equal(verify.code, EXIT_OK, verify.stdout);
      const verified = JSON.parse(verify.stdout) as Json;
      assert.equal(verified.messages, 2000);
      assert.equal(verified.cutOffset, report.commitLogDataBytes);
    } finally {
      removeDirectory(root);
    }
  });

  test("runCliAsync() bench refuses a non-empty --dir and leaves it untouched", async () => {
    const root = makeTempDirectory();
    try {
      fs.writeFileSync(path.join(root, "precious"), "data");
      const result = await runCliInProcess(["bench", ...SMALL, "--dir", root]);
      assert.equal(result.code, EXIT_USAGE);
      assert.match(result.stderr, /is not empty/);
      assert.equal(result.stderr.trim().split("\n").length, 1, result.stderr);
      assert.equal(result.stdout, "");
      assert.deepEqual(names(root), ["precious"]);
      assert.equal(fs.readFileSync(path.join(root, "precious"), "utf8"), "data");
      const file = await runCliInProcess(["bench", ...SMALL, "--dir", path.join(root, "precious")]);
      assert.equal(file.code, EXIT_USAGE);
      assert.match(file.stderr, /is not a directory/);
    } finally {
      removeDirectory(root);
    }
  });

  test("runCliAsync() bench answers flag mistakes in one line with exit code 2", async () => {
    const cases: Array<[string[], RegExp]> = [
      [["--bogus"], /unknown flag --bogus/],
      [["--messages"], /--messages needs a value/],
      [["--messages", "--json"], /--messages needs a value/],
      [["--messages", "ten"], /--messages needs a whole number/],
      [["--messages", "0"], /--messages is 0; it must be from 1/],
      [["--messages", "1.5"], /needs a whole number/],
      [["--size", "1x"], /--size needs a size in bytes/],
      [["--size", "4"], /--size is 4 bytes; it must be from 8/],
      [["--size", "5MiB"], /--size is 5,242,880 bytes/],
      [["--size", "4m"], /--size 4,194,304: .*maxMessageSize|--size 4,194,304/],
      [["--queues", "0"], /--queues is 0/],
      [["--producers", "-1"], /--producers needs a whole number/],
      [["--flush", "later"], /--flush must be one of async, async-pool, sync, not later/],
      [["--runtime", "java"], /--runtime must be one of deno, bun, node/],
      [["--adapter", "mmap"], /--adapter must be one of/],
      [["--segment-size", "100"], /--segment-size is 100 bytes/],
      [["--size", "8k", "--segment-size", "4k"], /does not fit a --segment-size of 4,096 bytes/],
      [["--keep=yes"], /--keep takes no value/],
      [["store-dir"], /unexpected argument store-dir/],
    ];
    for (const [argv, message] of cases) {
      const result = await runCliInProcess(["bench", ...argv]);
      assert.equal(result.code, EXIT_USAGE, argv.join(" "));
      assert.match(result.stderr, message, argv.join(" "));
      assert.equal(result.stderr.trim().split("\n").length, 1, result.stderr);
      assert.doesNotMatch(result.stderr, /\n\s+at /);
      assert.equal(result.stdout, "");
    }
  });

  test("parseBenchArguments() applies defaults and reads sizes and counts", () => {
    const defaults = parseBenchArguments([]);
    assert.equal(defaults.messages, 1_000_000);
    assert.equal(defaults.sizeBytes, 1024);
    assert.equal(defaults.queues, 4);
    assert.equal(defaults.flush, "async");
    assert.equal(defaults.producers, 1);
    assert.equal(defaults.directory, undefined);
    assert.equal(parseBenchArguments(["--flush", "sync"]).producers, 64);
    assert.equal(parseBenchArguments(["--flush=sync", "--producers=3"]).producers, 3);
    for (const [text, bytes] of [["128", 128], ["1k", 1024], ["1KiB", 1024], ["2KB", 2048]]) {
      assert.equal(parseBenchArguments(["--size", String(text)]).sizeBytes, bytes, String(text));
    }
    for (const [text, count] of [["2000", 2000], ["1_000", 1000], ["100k", 100_000], ["1m", 1e6]]) {
      assert.equal(parseBenchArguments(["--messages", String(text)]).messages, count, String(text));
    }
    assert.equal(parseBenchArguments(["--segment-size", "64MiB"]).segmentSizeBytes, 0x400_0000);
  });

  test("Progress() prints a line per tenth, a redrawn bar on a terminal, or nothing", () => {
    const capture = (mode: "bar" | "lines" | "off") => {
      let text = "";
      const progress = new Progress(mode, (piece) => text += piece, "write", 1000);
      for (let i = 1; i <= 1000; i++) progress.update(i);
      progress.finish();
      return text;
    };
    const lines = capture("lines").trimEnd().split("\n");
    assert.equal(lines.length, 10);
    assert.match(lines[0]!, /^write +10% +100\/1,000/);
    assert.match(lines[9]!, /^write +100% +1,000\/1,000/);
    const bar = capture("bar");
    assert.ok(bar.startsWith("\r"), JSON.stringify(bar));
    assert.doesNotMatch(bar, /\n/);
    assert.match(bar, /\[#*·*\]/);
    assert.ok(bar.endsWith("\r\x1b[K"), "finish() erases the bar");
    assert.equal(capture("off"), "");
  });

  test(
    "mqstore bench runs as a process and under another runtime with --runtime",
    STORE_TEST,
    async () => {
      const root = makeTempDirectory();
      try {
        const args = ["bench", "--messages", "300", "--segment-size", "1m", "--queues", "2"];
        const spawnCli = (argv: string[]) => {
          const cli = cliCommand(argv);
          return runCommand(cli.command, cli.args);
        };
        const here = await spawnCli([...args, "--dir", `${root}/a`]);
        assert.equal(here.code, EXIT_OK, here.stderr);
        assert.equal(here.stdout.trim().split("\n").at(-1), "PASS");
        // stderr is a pipe, not a terminal: plain progress lines.
        assert.match(here.stderr, /^read +100%/m);
        assert.doesNotMatch(here.stderr, /\r/);
        const other: RuntimeName = runtimeName() === "node" ? "bun" : "node";
        const there = await spawnCli([...args, "--dir", `${root}/b`, "--json", "--runtime", other]);
        assert.equal(there.code, EXIT_OK, there.stderr);
        const report = JSON.parse(there.stdout) as Json;
        assert.equal(report.runtime, other);
        assert.equal(report.result, "PASS");
        const refused = await spawnCli(["bench", "--dir", PROJECT_ROOT, "--runtime", other]);
        assert.equal(refused.code, EXIT_USAGE, "the child's exit code is relayed");
        assert.match(refused.stderr, /is not empty/);
        assert.equal(fs.readdirSync(root).length, 0, "both runs removed their stores");
      } finally {
        removeDirectory(root);
      }
    },
  );

  test("mqstore bench stopped by SIGINT removes its store and exits 130", STORE_TEST, async () => {
    const root = makeTempDirectory();
    try {
      // Far more messages than the run gets through before the signal.
      const args = ["bench", "--messages", "5m", "--size", "128", "--segment-size", "64m"];
      const cli = cliCommand([...args, "--dir", `${root}/store`, "--progress", "lines"]);
      const child = spawn(cli.command, cli.args, {
        cwd: PROJECT_ROOT,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stderr = "";
      child.stderr.setEncoding("utf8");
      child.stdout.resume();
      const exited = new Promise<number>((resolve, reject) => {
        child.on("error", reject);
        child.on("close", (code) => resolve(code ?? -1));
      });
      // The first progress line means the store is open and being written.
      await new Promise<void>((resolve) => {
        child.stderr.on("data", (text: string) => {
          stderr += text;
          if (/^write /m.test(stderr)) resolve();
        });
        void exited.then(() => resolve());
      });
      // process.kill, not child.kill: Deno's ChildProcess reports a signal it sent as the cause.
      process.kill(child.pid!, "SIGINT");
      const code = await exited;
      assert.equal(code, 130, stderr);
      assert.match(stderr, /stopped by SIGINT; store removed/);
      assert.equal(fs.existsSync(`${root}/store`), false, "the store directory it created is gone");
    } finally {
      removeDirectory(root);
    }
  });
});
