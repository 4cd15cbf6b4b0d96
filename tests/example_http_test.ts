/**
 * The example HTTP service (`examples/http/server.ts`): its handler in
 * process on every runtime (real `Request` objects against a real store),
 * and, under Deno and Bun, the server itself as a child process driven over
 * loopback with `fetch` — concurrent producers, a long-poll woken by a put,
 * reads by key, bad input answered with JSON errors that leave the store
 * unchanged, and a graceful close on SIGTERM.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { describe, test } from "node:test";
import { MessageStore, type MessageStoreOptions } from "../mod.ts";
import { runtimeName } from "../src/runtime/info.ts";
import {
  createHandler,
  type HandlerOptions,
  type HttpHandler,
  type LongPollEvent,
} from "../examples/http/server.ts";
import { makeTempDirectory, PROJECT_ROOT, removeDirectory } from "./_helpers.ts";

const SERVER = path.join(PROJECT_ROOT, "examples", "http", "server.ts");
/** Small files: the defaults (1 GiB segments, a 420 MB index) would dominate the test's time. */
const STORE_OPTIONS = {
  mappedFileSizeCommitLog: 0x40_0000,
  maxMessageSize: 0x4000,
  mappedFileSizeConsumeQueue: 20 * 1024,
  maxHashSlotNum: 256,
  maxIndexNum: 1024,
} as const satisfies MessageStoreOptions;
const QUEUE_COUNT = 4;
const PRODUCERS = 8;
const MESSAGES_PER_PRODUCER = 12;
const TOPIC = "Orders";

/** Sends a request to the service (in process or over HTTP); `target` starts with `/`. */
type Send = (target: string, init?: RequestInit) => Promise<Response>;

// deno-lint-ignore no-explicit-any
type Json = any;

interface Answer {
  status: number;
  body: Json;
  text: string;
}

async function call(send: Send, target: string, init?: RequestInit): Promise<Answer> {
  const response = await send(target, init);
  const text = await response.text();
  assert.match(
    response.headers.get("content-type") ?? "",
    /^application\/json/,
    `${target}: ${text}`,
  );
  return { status: response.status, body: JSON.parse(text), text };
}

function post(body: BodyInit, contentType?: string): RequestInit {
  return {
    method: "POST",
    body,
    headers: contentType === undefined ? {} : { "content-type": contentType },
  };
}

/**
 * Posts from {@link PRODUCERS} concurrent producers, each sending its
 * messages one after the other, alternating between queues 0 and 1, with
 * keys `pP-mI` and `producer-P`. Returns the bodies by queue and queue offset.
 */
async function produce(send: Send): Promise<Map<number, Map<number, string>>> {
  const stored = new Map<number, Map<number, string>>([[0, new Map()], [1, new Map()]]);
  await Promise.all(
    Array.from({ length: PRODUCERS }, async (_, p) => {
      for (let i = 0; i < MESSAGES_PER_PRODUCER; i++) {
        const queueId = (p + i) % 2;
        const body = `producer-${p} message-${i}`;
        const keys = encodeURIComponent(`p${p}-m${i} producer-${p}`);
        const answer = await call(
          send,
          `/topics/${TOPIC}/messages?queueId=${queueId}&tags=t${p}&keys=${keys}`,
          post(body),
        );
        assert.equal(answer.status, 201, answer.text);
        assert.equal(answer.body.status, "PUT_OK");
        assert.equal(answer.body.queueId, queueId);
        assert.match(answer.body.msgId, /^[0-9A-F]{32}$/);
        const queue = stored.get(queueId)!;
        assert.equal(queue.has(answer.body.queueOffset), false, "a queue offset given twice");
        queue.set(answer.body.queueOffset, body);
      }
    }),
  );
  return stored;
}

/** Reads queues 0 and 1 back and checks them against what {@link produce} stored. */
async function checkReadBack(send: Send, stored: Map<number, Map<number, string>>): Promise<void> {
  const perQueue = PRODUCERS * MESSAGES_PER_PRODUCER / 2;
  for (const [queueId, bodies] of stored) {
    assert.equal(bodies.size, perQueue);
    // Page by page: the store may answer fewer than `max` (its transfer limits).
    const messages: Json[] = [];
    for (let offset = 0; offset < perQueue;) {
      const page = await call(
        send,
        `/topics/${TOPIC}/queues/${queueId}/messages?offset=${offset}&max=256`,
      );
      assert.equal(page.status, 200, page.text);
      assert.equal(page.body.status, "FOUND");
      assert.equal(page.body.maxOffset, perQueue);
      assert.ok(page.body.messages.length > 0);
      assert.equal(page.body.nextOffset, offset + page.body.messages.length);
      messages.push(...page.body.messages);
      offset = page.body.nextOffset;
    }
    assert.equal(messages.length, perQueue);
    const lastOfProducer = new Map<string, number>();
    let lastPhysicalOffset = -1;
    messages.forEach((message, index) => {
      // Contiguous queue offsets, in commit-log order, with the bodies the puts answered.
      assert.equal(message.queueOffset, index);
      assert.equal(message.queueId, queueId);
      assert.ok(message.physicalOffset > lastPhysicalOffset);
      lastPhysicalOffset = message.physicalOffset;
      assert.equal(message.text, bodies.get(index));
      assert.equal(Buffer.from(message.body, "base64").toString("utf8"), message.text);
      // Each producer's own messages keep the order it sent them in.
      const [, producer, i] = /^producer-(\d+) message-(\d+)$/.exec(message.text)!;
      assert.ok(Number(i) > (lastOfProducer.get(producer!) ?? -1));
      lastOfProducer.set(producer!, Number(i));
      assert.equal(message.properties.TAGS, `t${producer}`);
    });
  }
}

/** Each case: request, expected status and error code. */
interface BadCase {
  name: string;
  method?: string;
  target: string;
  body?: BodyInit;
  contentType?: string;
  status: number;
  code: string;
}

const TOO_LARGE = new Uint8Array(STORE_OPTIONS.maxMessageSize + 1);

const BAD_CASES: readonly BadCase[] = [
  { name: "unknown route", target: "/nope", status: 404, code: "ROUTE_NOT_FOUND" },
  { name: "trailing slash", target: "/health/", status: 404, code: "ROUTE_NOT_FOUND" },
  {
    name: "wrong method",
    method: "DELETE",
    target: `/topics/${TOPIC}/messages`,
    status: 405,
    code: "METHOD_NOT_ALLOWED",
  },
  {
    name: "topic with a space (the store's validation)",
    method: "POST",
    target: "/topics/bad%20topic/messages",
    body: "x",
    status: 400,
    code: "MESSAGE_ILLEGAL",
  },
  {
    name: "topic of 128 characters",
    method: "POST",
    target: `/topics/${"a".repeat(128)}/messages`,
    body: "x",
    status: 400,
    code: "MESSAGE_ILLEGAL",
  },
  {
    name: "GET of an illegal topic",
    target: "/topics/bad!topic/queues/0/messages",
    status: 400,
    code: "INVALID_TOPIC",
  },
  {
    name: "bad percent-encoding",
    target: "/topics/%E0%A4%A/keys/k",
    status: 400,
    code: "INVALID_ARGUMENT",
  },
  ...["-1", "1.5", "abc", "1e1", "0x1", `${QUEUE_COUNT}`, "99999999999"].map((queueId) => ({
    name: `queueId ${queueId}`,
    method: "POST",
    target: `/topics/${TOPIC}/messages?queueId=${queueId}`,
    body: "x",
    status: 400,
    code: "INVALID_ARGUMENT",
  })),
  {
    name: "queue id out of range in the path",
    target: `/topics/${TOPIC}/queues/${QUEUE_COUNT}/messages`,
    status: 400,
    code: "INVALID_ARGUMENT",
  },
  ...["offset=-1", "offset=x", "offset=1e3", "max=0", "max=257", "waitMs=-5", "waitMs=99999999"]
    .map((query) => ({
      name: query,
      target: `/topics/${TOPIC}/queues/0/messages?${query}`,
      status: 400,
      code: "INVALID_ARGUMENT",
    })),
  { name: "msgId not hex", target: "/messages/xyz", status: 400, code: "INVALID_ARGUMENT" },
  {
    name: "msgId past any offset",
    target: `/messages/${"F".repeat(32)}`,
    status: 400,
    code: "INVALID_ARGUMENT",
  },
  {
    name: "msgId where no message is",
    target: "/messages/7F00000100002A9F00000000000FFFFF",
    status: 404,
    code: "MESSAGE_NOT_FOUND",
  },
  {
    name: "empty key in keys",
    method: "POST",
    target: `/topics/${TOPIC}/messages?keys=a%20%20b`,
    body: "x",
    status: 400,
    code: "INVALID_ARGUMENT",
  },
  {
    name: "body over maxMessageSize",
    method: "POST",
    target: `/topics/${TOPIC}/messages`,
    body: TOO_LARGE,
    status: 413,
    code: "BODY_TOO_LARGE",
  },
  ...([
    ['{"body":', 400, "MALFORMED_JSON"],
    ["[1]", 400, "INVALID_ARGUMENT"],
    ["{}", 400, "INVALID_ARGUMENT"],
    ['{"body":"x","bodyBase64":"eA=="}', 400, "INVALID_ARGUMENT"],
    ['{"body":"x","extra":1}', 400, "INVALID_ARGUMENT"],
    ['{"bodyBase64":"not base64!"}', 400, "INVALID_ARGUMENT"],
    ['{"body":"x","tags":5}', 400, "INVALID_ARGUMENT"],
    ['{"body":"x","keys":["a b"]}', 400, "INVALID_ARGUMENT"],
    ['{"body":"x","flag":1.5}', 400, "INVALID_ARGUMENT"],
    ['{"body":"x","tags":"a","properties":{"TAGS":"b"}}', 400, "INVALID_ARGUMENT"],
    ['{"body":"x","properties":{"A":"\\u0001"}}', 400, "MESSAGE_ILLEGAL"],
    ['{"body":"x","properties":{"DELAY":"3"}}', 400, "INVALID_ARGUMENT"],
    [
      JSON.stringify({ body: "x", properties: { A: "v".repeat(0x8000) } }),
      400,
      "PROPERTIES_SIZE_EXCEEDED",
    ],
    [
      JSON.stringify({ bodyBase64: Buffer.from(TOO_LARGE).toString("base64") }),
      413,
      "BODY_TOO_LARGE",
    ],
  ] as const).map(([body, status, code]) => ({
    name: `envelope ${body.slice(0, 40)}`,
    method: "POST",
    target: `/topics/${TOPIC}/messages`,
    body,
    contentType: "application/json",
    status,
    code,
  })),
];

/** Sends every bad case and checks its status, JSON error and the absence of a stack trace. */
async function checkBadCases(send: Send): Promise<void> {
  for (const bad of BAD_CASES) {
    const answer = await call(send, bad.target, {
      method: bad.method ?? "GET",
      body: bad.body,
      headers: bad.contentType === undefined ? {} : { "content-type": bad.contentType },
    });
    assert.equal(answer.status, bad.status, `${bad.name}: ${answer.text}`);
    assert.equal(answer.body.error?.code, bad.code, `${bad.name}: ${answer.text}`);
    assert.equal(typeof answer.body.error.message, "string");
    assert.doesNotMatch(answer.text, /\bat .*:\d+:\d+/, `${bad.name}: a stack trace`);
  }
}

/** A digest of the files a put or a dispatch writes (names and bytes). */
/**
 * Waits (bounded, on observable progress) until queue 0's first unit is in
 * its consume-queue file: a new queue takes its first units in memory and
 * its file is created in the background after the put was answered.
 */
async function firstUnitInFile(directory: string): Promise<void> {
  const file = path.join(directory, "consumequeue", TOPIC, "0", "00000000000000000000");
  for (let turn = 0; turn < 100_000; turn++) {
    // Bytes 8–11 of a unit are the record's size, never 0.
    if (fs.existsSync(file) && fs.readFileSync(file).readInt32BE(8) > 0) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  assert.fail(`${file} never received its first unit`);
}

function digestStore(directory: string): string {
  const hash = createHash("sha256");
  const walk = (at: string) => {
    if (!fs.existsSync(at)) return;
    for (const name of fs.readdirSync(at).sort()) {
      const child = path.join(at, name);
      hash.update(child);
      if (fs.statSync(child).isDirectory()) walk(child);
      else hash.update(fs.readFileSync(child));
    }
  };
  walk(path.join(directory, "consumequeue"));
  walk(path.join(directory, "index"));
  // The first segment only: the next one may be prepared in the background at any time.
  hash.update(fs.readFileSync(path.join(directory, "commitlog", "00000000000000000000")));
  return hash.digest("hex");
}

/** A store and its handler in this process, with every unexpected error collected. */
async function withHandler(
  body: (env: {
    send: Send;
    handler: HttpHandler;
    store: MessageStore;
    directory: string;
    events: LongPollEvent[];
    nextEvent: () => Promise<LongPollEvent>;
  }) => Promise<void>,
  options: HandlerOptions = {},
): Promise<void> {
  const root = makeTempDirectory();
  const directory = path.join(root, "store");
  const store = await MessageStore.open(directory, { ...STORE_OPTIONS, onWarning: () => {} });
  const errors: unknown[] = [];
  const events: LongPollEvent[] = [];
  let waiter: ((event: LongPollEvent) => void) | undefined;
  const handler = createHandler(store, {
    queueCount: QUEUE_COUNT,
    maxMessageSizeBytes: STORE_OPTIONS.maxMessageSize,
    onError: (_message, error) => errors.push(error),
    onLongPoll: (event) => {
      events.push(event);
      waiter?.(event);
      waiter = undefined;
    },
    ...options,
  });
  const send: Send = (target, init) =>
    handler.fetch(new Request(`http://mqstore.test${target}`, init));
  try {
    await body({
      send,
      handler,
      store,
      directory,
      events,
      nextEvent: () => new Promise((resolve) => waiter = resolve),
    });
    assert.deepEqual(errors, []);
  } finally {
    handler.close();
    await store.close();
    removeDirectory(root);
  }
}

describe("createHandler() in process", () => {
  test("createHandler() stores concurrent producers' messages and reads them back in order", async () => {
    await withHandler(async ({ send }) => {
      const stored = await produce(send);
      await checkReadBack(send, stored);
      const health = await call(send, "/health");
      assert.equal(health.status, 200);
      assert.equal(health.body.status, "ok");
      assert.deepEqual(
        health.body.queues.map((q: Json) => [q.queueId, q.maxQueueOffset]),
        [[0, 48], [1, 48]],
      );
    });
  });

  test("createHandler() wakes a long-poll with a put, and answers an empty page when waitMs passes", async () => {
    await withHandler(async ({ send, nextEvent, handler }) => {
      const first = await call(send, `/topics/${TOPIC}/messages?queueId=2`, post("first"));
      assert.equal(first.status, 201, first.text);
      const waiting = nextEvent();
      const poll = call(send, `/topics/${TOPIC}/queues/2/messages?offset=1&waitMs=30000`);
      assert.equal(await waiting, "waiting");
      const woken = nextEvent();
      const put = await call(send, `/topics/${TOPIC}/messages?queueId=2`, post("second"));
      assert.equal(put.status, 201, put.text);
      const answer = await poll;
      assert.equal(await woken, "woken");
      assert.equal(answer.status, 200);
      assert.equal(answer.body.status, "FOUND");
      assert.deepEqual(answer.body.messages.map((m: Json) => m.text), ["second"]);
      assert.equal(answer.body.nextOffset, 2);
      // A wait that nothing ends: its waitMs passes, and the page is empty.
      const timedOut = await call(send, `/topics/${TOPIC}/queues/2/messages?offset=2&waitMs=1`);
      assert.equal(timedOut.status, 200);
      assert.equal(timedOut.body.status, "OFFSET_OVERFLOW_ONE");
      assert.deepEqual(timedOut.body.messages, []);
      assert.equal(timedOut.body.nextOffset, 2);
      assert.deepEqual(handler.longPolls, {
        waiting: 0,
        woken: 1,
        timedOut: 1,
        aborted: 0,
        closed: 0,
      });
    });
  });

  test("createHandler() ends a long-poll when the client aborts or the handler closes", async () => {
    await withHandler(async ({ send, nextEvent, handler }) => {
      const controller = new AbortController();
      let waiting = nextEvent();
      const aborted = send(`/topics/${TOPIC}/queues/0/messages?waitMs=30000`, {
        signal: controller.signal,
      });
      assert.equal(await waiting, "waiting");
      const ended = nextEvent();
      controller.abort();
      assert.equal(await ended, "aborted");
      assert.equal((await aborted).status, 200);
      // A queue never written: the poll waits for its first message; close ends it.
      waiting = nextEvent();
      const closing = call(send, "/topics/NewTopic/queues/3/messages?waitMs=30000");
      assert.equal(await waiting, "waiting");
      handler.close();
      const answer = await closing;
      assert.equal(answer.status, 200);
      assert.equal(answer.body.status, "NO_MATCHED_LOGIC_QUEUE");
      assert.deepEqual(answer.body.messages, []);
      assert.equal(handler.longPolls.aborted, 1);
      assert.equal(handler.longPolls.closed, 1);
      const refused = await call(send, "/health");
      assert.equal(refused.status, 503);
      assert.equal(refused.body.error.code, "SERVICE_NOT_AVAILABLE");
    });
  });

  test("createHandler() answers bad input with a JSON error and leaves the store unchanged", async () => {
    await withHandler(async ({ send, store, directory }) => {
      const ok = await call(send, `/topics/${TOPIC}/messages?queueId=0`, post("kept"));
      assert.equal(ok.status, 201, ok.text);
      await firstUnitInFile(directory);
      const before = {
        digest: digestStore(directory),
        maxOffset: store.maxOffset,
        queues: store.topicQueueTable(),
      };
      await checkBadCases(send);
      // A body that declares nothing and streams past the limit.
      const streamed = await call(send, `/topics/${TOPIC}/messages`, streamedTooLarge());
      assert.equal(streamed.status, 413, streamed.text);
      assert.equal(streamed.body.error.code, "BODY_TOO_LARGE");
      assert.equal(store.maxOffset, before.maxOffset);
      assert.deepEqual(store.topicQueueTable(), before.queues);
      assert.equal(digestStore(directory), before.digest);
    });
  });

  test("createHandler() finds messages by key and msgId, and gives text only for UTF-8 bodies", async () => {
    await withHandler(async ({ send }) => {
      const binary = Uint8Array.of(0xFF, 0x00, 0xC3);
      const raw = await call(
        send,
        `/topics/${TOPIC}/messages?queueId=1&keys=order-1%20customer-7`,
        post(binary, "application/octet-stream"),
      );
      assert.equal(raw.status, 201, raw.text);
      const envelope = await call(
        send,
        `/topics/${TOPIC}/messages?queueId=1`,
        post(
          JSON.stringify({
            body: "héllo",
            tags: "created",
            keys: ["order-1"],
            properties: { origin: "test" },
            flag: 7,
          }),
          "application/json; charset=utf-8",
        ),
      );
      assert.equal(envelope.status, 201, envelope.text);
      const byKey = await call(send, `/topics/${TOPIC}/keys/order-1`);
      assert.equal(byKey.status, 200, byKey.text);
      // Newest first.
      assert.deepEqual(
        byKey.body.messages.map((m: Json) => m.msgId),
        [envelope.body.msgId, raw.body.msgId],
      );
      const [text, bytes] = byKey.body.messages;
      assert.equal(text.text, "héllo");
      assert.equal(text.flag, 7);
      assert.deepEqual(text.properties, { origin: "test", TAGS: "created", KEYS: "order-1" });
      assert.equal(bytes.text, undefined);
      assert.deepEqual([...Buffer.from(bytes.body, "base64")], [...binary]);
      const byOtherKey = await call(send, `/topics/${TOPIC}/keys/customer-7`);
      assert.deepEqual(byOtherKey.body.messages.map((m: Json) => m.msgId), [raw.body.msgId]);
      const none = await call(send, `/topics/${TOPIC}/keys/nobody`);
      assert.deepEqual(none.body.messages, []);
      const byId = await call(send, `/messages/${raw.body.msgId}`);
      assert.equal(byId.status, 200);
      assert.equal(byId.body.physicalOffset, raw.body.offset);
    });
  });
});

/** The command that runs the server under this runtime. */
function serverCommand(args: readonly string[]): [string, string[]] {
  return runtimeName() === "deno"
    ? [process.execPath, ["run", "-A", "--unstable-no-legacy-abort", SERVER, ...args]]
    : [process.execPath, [SERVER, ...args]];
}

/** Resolves with the server's base URL once it prints its `listening on` line. */
function listening(child: ChildProcess, stderr: () => string): Promise<string> {
  return new Promise((resolve, reject) => {
    let stdout = "";
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (text: string) => {
      stdout += text;
      const match = /^listening on (http:\/\/127\.0\.0\.1:\d+)$/m.exec(stdout);
      if (match !== null) resolve(match[1]!);
    });
    child.once(
      "exit",
      (code) => reject(new Error(`The server exited with ${code} before listening: ${stderr()}`)),
    );
  });
}

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve(child.exitCode);
  }
  return new Promise((resolve) => child.once("exit", (code) => resolve(code)));
}

/** Streams TOO_LARGE in two chunks, with no Content-Length. */
function streamedTooLarge(): RequestInit {
  return {
    method: "POST",
    body: new ReadableStream({
      start(controller) {
        controller.enqueue(TOO_LARGE.slice(0, 0x2000));
        controller.enqueue(TOO_LARGE.slice(0x2000));
        controller.close();
      },
    }),
    duplex: "half",
  } as RequestInit;
}

/** Waits until the server's /health satisfies `ready`: one request per round, bounded. */
async function untilHealth(send: Send, ready: (health: Json) => boolean): Promise<Json> {
  for (let round = 0; round < 10_000; round++) {
    const health = (await call(send, "/health")).body;
    if (ready(health)) return health;
  }
  throw new Error("/health never reached the expected state");
}

/** Drives a running server at `send`; the checks of the spawned-server test. */
async function driveServer(send: Send): Promise<Json> {
  await checkReadBack(send, await produce(send));

  // A long-poll at the next offset, woken by a put: it waits before the put
  // is sent, and answers with the put's message (a timeout answers none).
  const poll = call(send, `/topics/${TOPIC}/queues/0/messages?offset=48&waitMs=5000`);
  await untilHealth(send, (health) => health.longPolls.waiting === 1);
  const put = await call(send, `/topics/${TOPIC}/messages?queueId=0`, post("wake up"));
  assert.equal(put.status, 201, put.text);
  const woken = await poll;
  assert.equal(woken.status, 200);
  assert.deepEqual(woken.body.messages.map((m: Json) => m.text), ["wake up"]);
  assert.equal(woken.body.messages[0].queueOffset, 48);

  // A client that goes away ends its long-poll.
  const controller = new AbortController();
  const gone = send(`/topics/${TOPIC}/queues/0/messages?offset=49&waitMs=5000`, {
    signal: controller.signal,
  }).catch((error) => error);
  await untilHealth(send, (health) => health.longPolls.waiting === 1);
  controller.abort();
  await gone;
  const ended = await untilHealth(send, (health) => health.longPolls.waiting === 0);
  assert.deepEqual(ended.longPolls, { waiting: 0, woken: 1, timedOut: 0, aborted: 1, closed: 0 });

  const byKey = await call(send, `/topics/${TOPIC}/keys/p3-m5`);
  assert.deepEqual(byKey.body.messages.map((m: Json) => m.text), ["producer-3 message-5"]);
  const byProducer = await call(send, `/topics/${TOPIC}/keys/producer-6`);
  assert.equal(byProducer.body.messages.length, MESSAGES_PER_PRODUCER);

  // Over HTTP the oversized case's Uint8Array body carries a Content-Length
  // (refused before reading); a stream carries none (the read is capped).
  const before = (await call(send, "/health")).body;
  await checkBadCases(send);
  const streamed = await call(send, `/topics/${TOPIC}/messages`, streamedTooLarge());
  assert.equal(streamed.status, 413, streamed.text);
  assert.equal(streamed.body.error.code, "BODY_TOO_LARGE");
  const after = (await call(send, "/health")).body;
  assert.equal(after.maxOffset, before.maxOffset);
  assert.deepEqual(after.queues, before.queues);
  return after;
}

describe("examples/http/server.ts", () => {
  test(
    "server.ts serves puts, reads, long-polls, keys and bad input over HTTP; SIGTERM closes it",
    {
      skip: runtimeName() === "node" ? "Node has neither Deno.serve nor Bun.serve" : false,
    },
    async () => {
      const root = makeTempDirectory();
      const directory = path.join(root, "store");
      const sets = Object.entries(STORE_OPTIONS).flatMap(([name, value]) => [
        "--set",
        `${name}=${value}`,
      ]);
      const [command, args] = serverCommand(
        ["--port", "0", "--dir", directory, "--queues", String(QUEUE_COUNT), ...sets],
      );
      const child = spawn(command, args, {
        cwd: PROJECT_ROOT,
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, NO_COLOR: "1" },
      });
      let stderr = "";
      child.stderr.setEncoding("utf8");
      child.stderr.on("data", (text: string) => stderr += text);
      try {
        const base = await listening(child, () => stderr);
        const last = await driveServer((target, init) => fetch(base + target, init));
        // process.kill, not child.kill: Deno's ChildProcess reports a child it
        // signalled as killed by the signal even when the child exits 0.
        process.kill(child.pid!, "SIGTERM");
        assert.equal(await exited(child), 0, stderr);
        assert.equal(fs.existsSync(path.join(directory, "abort")), false, "not closed cleanly");
        assert.doesNotMatch(stderr, /\bat .*:\d+:\d+/);
        const reopened = await MessageStore.open(directory, { ...STORE_OPTIONS, readOnly: true });
        try {
          assert.equal(reopened.getMaxQueueOffset(TOPIC, 0), 49);
          assert.equal(reopened.getMaxQueueOffset(TOPIC, 1), 48);
          assert.equal(reopened.maxOffset, last.maxOffset);
        } finally {
          await reopened.close();
        }
      } finally {
        if (child.exitCode === null && child.signalCode === null) {
          process.kill(child.pid!, "SIGTERM");
        }
        await exited(child);
        removeDirectory(root);
      }
    },
  );
});
