/**
 * The npm package: `npm pack` (its `prepack` runs scripts/build_npm.ts)
 * gives a tarball of compiled JavaScript and declarations only. Installed
 * offline into a temporary project, it serves a put/get script under plain
 * `node` (no tsx, no loader) with the koffi adapter, the same script under
 * Bun and Deno, and its `mqstore` bin.
 *
 * The install needs no network: the project's `node_modules/koffi` (there
 * after `npm ci`) is linked into the temporary project first, so npm finds
 * the package's only dependency satisfied and fetches nothing
 * (`--offline` makes a fetch fail instead of hanging).
 *
 * Runs under Node only: building and packing once per suite is enough, and
 * the script is run on the other two runtimes from here.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { test } from "node:test";
import { availableAdapters } from "../src/runtime/mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import { makeTempDirectory, PROJECT_ROOT, removeDirectory } from "./_helpers.ts";

const SKIP = runtimeName() === "node"
  ? false
  : "builds and packs the package once per suite: runs under node only";
const BIN = path.join(PROJECT_ROOT, "node_modules", ".bin");
const PACKAGE_NAME = "@mqstore/store";
/** Every child gets this long; the build (tsc) takes a few seconds. */
const CHILD_TIMEOUT_MS = 120_000;
const MESSAGE_COUNT = 64;

/** What the put/get script prints as its last line. */
interface ScriptReport {
  runtime: string;
  adapter: string;
  putCount: number;
  bodies: string[];
  keyHits: number;
}

/**
 * The consumer script: plain JavaScript, importing the package by name.
 * Small consume-queue and index files keep it fast; the index sizes keep
 * RocketMQ's 4 entries per slot, so `mqstore stats` infers them.
 */
const PUT_GET_SCRIPT = `
import { createPort, MessageStore, runtimeName } from "${PACKAGE_NAME}";

const [directory, adapter] = process.argv.slice(2);
const port = await createPort({ adapter });
const store = await MessageStore.open(directory, {
  port,
  flushDiskType: "SYNC_FLUSH",
  mappedFileSizeCommitLog: 0x10_0000,
  mappedFileSizeConsumeQueue: 20 * 1024,
  maxHashSlotNum: 256,
  maxIndexNum: 1024,
});
const encoder = new TextEncoder();
let putCount = 0;
for (let i = 0; i < ${MESSAGE_COUNT}; i++) {
  const result = await store.putMessage({
    topic: "Orders",
    queueId: i % 2,
    body: encoder.encode("order-" + i),
    properties: { KEYS: "order-" + i, TAGS: "created" },
  });
  if (result.status !== "PUT_OK") throw result.error ?? new Error(result.status);
  putCount++;
}
await store.whenDispatched(store.maxOffset);
const decoder = new TextDecoder();
const bodies = [];
for (const queueId of [0, 1]) {
  const page = await store.getMessages("Orders", queueId, 0, ${MESSAGE_COUNT});
  if (page.status !== "FOUND") throw new Error("queue " + queueId + ": " + page.status);
  for (const message of page.messages) bodies.push(decoder.decode(message.body));
}
const keyHits = (await store.queryMessages("Orders", "order-7")).messages.length;
await store.close();
console.log(JSON.stringify({ runtime: runtimeName(), adapter: port.adapter, putCount, bodies, keyHits }));
`;

/**
 * A TypeScript consumer of the package's declarations; the
 * `@ts-expect-error` line fails the check if the types were `any`.
 */
const CONSUMER_SOURCE = `
import { MessageStore, MqStoreError, type MessageStoreOptions, type StoredMessage } from "${PACKAGE_NAME}";

const options: MessageStoreOptions = { flushDiskType: "SYNC_FLUSH" };
const store: MessageStore = await MessageStore.open("./store", options);
const page = await store.getMessages("Orders", 0, 0, 1);
const first: StoredMessage | undefined = page.messages[0];
console.log(first?.queueOffset, new MqStoreError("LOCKED", "locked").code);
// @ts-expect-error nextQueueOffset is a number
const wrong: string = page.nextQueueOffset;
console.log(wrong);
`;

function run(command: string, args: string[], cwd: string): SpawnSyncReturns<string> {
  const result = spawnSync(command, args, {
    cwd,
    encoding: "utf8",
    timeout: CHILD_TIMEOUT_MS,
    env: { ...process.env, NO_COLOR: "1", npm_config_update_notifier: "false" },
  });
  assert.equal(result.error, undefined, `${command} ${args.join(" ")}: ${result.error?.message}`);
  assert.equal(
    result.status,
    0,
    `${command} ${args.join(" ")} exited ${result.status}\n${result.stdout}\n${result.stderr}`,
  );
  return result;
}

/**
 * The last line of the script's output, parsed. Nothing on stderr: a
 * notice there means a fallback (a worker thread that did not start, an
 * adapter that did not load) the answer alone would not show.
 */
function report(result: SpawnSyncReturns<string>): ScriptReport {
  assert.equal(result.stderr, "", "the script printed no notice");
  const lines = result.stdout.trim().split("\n");
  return JSON.parse(lines[lines.length - 1] ?? "") as ScriptReport;
}

function expectedBodies(): string[] {
  const bodies: string[] = [];
  for (const queueId of [0, 1]) {
    for (let i = queueId; i < MESSAGE_COUNT; i += 2) bodies.push(`order-${i}`);
  }
  return bodies;
}

/** Packs the project into `directory`; returns the tarball's path. */
function pack(directory: string): string {
  run("npm", ["pack", "--pack-destination", directory, "--silent"], PROJECT_ROOT);
  const tarballs = fs.readdirSync(directory).filter((name) => name.endsWith(".tgz"));
  assert.equal(tarballs.length, 1, `one tarball, not ${tarballs.join(", ")}`);
  return path.join(directory, tarballs[0]!);
}

/** Creates a project in `directory` and installs the tarball into it, offline. */
function install(directory: string, tarball: string): void {
  fs.mkdirSync(path.join(directory, "node_modules"), { recursive: true });
  fs.writeFileSync(
    path.join(directory, "package.json"),
    JSON.stringify({ name: "mqstore-consumer", private: true, type: "module" }),
  );
  fs.symlinkSync(
    path.join(PROJECT_ROOT, "node_modules", "koffi"),
    path.join(directory, "node_modules", "koffi"),
    "dir",
  );
  run("npm", [
    "install",
    "--offline",
    "--ignore-scripts",
    "--no-audit",
    "--no-fund",
    "--no-package-lock",
    tarball,
  ], directory);
}

test("package.json names the build's outputs and agrees with deno.json", () => {
  const read = (name: string) => JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, name), "utf8"));
  const npm = read("package.json");
  const deno = read("deno.json");
  assert.equal(npm.name, deno.name);
  assert.equal(npm.version, deno.version);
  assert.deepEqual(npm.exports["."], { types: "./dist/mod.d.ts", import: "./dist/mod.js" });
  assert.equal(npm.main, "./dist/mod.js");
  assert.equal(npm.types, "./dist/mod.d.ts");
  assert.deepEqual(npm.bin, { mqstore: "./dist/src/cli/main.js" });
  assert.deepEqual([...npm.files].sort(), ["LICENSE", "README.md", "dist/"]);
  assert.match(npm.scripts.prepack, /scripts\/build_npm\.ts/);
  assert.equal(npm.dependencies.koffi !== undefined, true, "koffi is a runtime dependency");
});

test("npm pack builds a tarball that installs offline and runs on plain node, bun and deno", {
  skip: SKIP,
}, async (t) => {
  const root = makeTempDirectory();
  try {
    const tarball = pack(root);
    const project = path.join(root, "consumer");

    await t.test("npm pack packs only dist/ JavaScript and declarations, README.md and LICENSE", () => {
      const listing = run("tar", ["-tzf", tarball], root).stdout.trim().split("\n")
        .map((entry) => entry.replace(/^package\//, ""))
        .sort();
      const outside = listing.filter((file) =>
        !file.startsWith("dist/") && !["LICENSE", "README.md", "package.json"].includes(file)
      );
      assert.deepEqual(outside, [], "files outside dist/");
      const strays = listing.filter((file) =>
        file.startsWith("dist/") && !file.endsWith(".js") && !file.endsWith(".d.ts")
      );
      assert.deepEqual(strays, [], "files in dist/ other than .js and .d.ts");
      assert.deepEqual(listing.filter((file) => /(^|\/)(tests|bench|scripts)\//.test(file)), []);
      for (const file of ["dist/mod.js", "dist/mod.d.ts", "dist/src/cli/main.js"]) {
        assert.ok(listing.includes(file), `${file} is packed`);
      }
      // Every compiled module has its declarations.
      const modules = listing.filter((file) => file.endsWith(".js"));
      assert.ok(modules.length > 20, `${modules.length} modules`);
      for (const file of modules) {
        assert.ok(listing.includes(file.replace(/\.js$/, ".d.ts")), `${file} has a .d.ts`);
      }
    });

    install(project, tarball);
    const installed = path.join(project, "node_modules", ...PACKAGE_NAME.split("/"));
    const manifest = JSON.parse(fs.readFileSync(path.join(installed, "package.json"), "utf8"));
    const script = path.join(project, "put_get.mjs");
    fs.writeFileSync(script, PUT_GET_SCRIPT);

    await t.test("import of the installed package puts and gets messages under plain node", () => {
      assert.equal(manifest.exports["."].import, "./dist/mod.js");
      const adapter = availableAdapters()[0]!;
      const store = path.join(root, "node-store");
      const result = report(run(process.execPath, [script, store, adapter], project));
      assert.deepEqual(result, {
        runtime: "node",
        adapter,
        putCount: MESSAGE_COUNT,
        bodies: expectedBodies(),
        keyHits: 1,
      });
      assert.ok(fs.existsSync(path.join(store, "commitlog", "00000000000000000000")));
    });

    await t.test("the installed mqstore bin answers help and stats on that store", () => {
      const mqstore = path.join(project, "node_modules", ".bin", "mqstore");
      assert.ok(fs.lstatSync(mqstore).isSymbolicLink(), "npm linked the bin");
      const help = run(mqstore, ["help"], project);
      assert.match(help.stdout, /^Usage:\n[\s\S]*\n {2}mqstore stats /);
      const stats = run(mqstore, ["stats", "--json", path.join(root, "node-store")], project);
      const summary = JSON.parse(stats.stdout) as {
        queuedMessages: number;
        cleanShutdown: boolean;
      };
      assert.equal(summary.queuedMessages, MESSAGE_COUNT);
      assert.equal(summary.cleanShutdown, true);
    });

    await t.test("the installed declarations type-check a TypeScript consumer under tsc", () => {
      fs.writeFileSync(path.join(project, "consumer.ts"), CONSUMER_SOURCE);
      run(path.join(BIN, "tsc"), [
        "--noEmit",
        "--strict",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "--target",
        "es2022",
        "consumer.ts",
      ], project);
    });

    for (const runtime of ["bun", "deno"] as const) {
      await t.test(`import of the installed package puts and gets messages under ${runtime}`, () => {
        const adapter = runtime === "bun" ? "bun-ffi" : "deno-ffi";
        const native = availableAdapters()[0] === "node-koffi";
        const store = path.join(root, `${runtime}-store`);
        const args = runtime === "bun" ? [script] : ["run", "-A", script];
        const result = report(
          run(path.join(BIN, runtime), [...args, store, native ? adapter : "portable"], project),
        );
        assert.equal(result.runtime, runtime);
        assert.equal(result.adapter, native ? adapter : "portable");
        assert.equal(result.putCount, MESSAGE_COUNT);
        assert.deepEqual(result.bodies, expectedBodies());
        assert.equal(result.keyHits, 1);
      });
    }
  } finally {
    removeDirectory(root);
  }
});
