/**
 * An HTTP service over one mqstore store, in one file that runs on
 * `Deno.serve` and on `Bun.serve`:
 *
 * ```sh
 * deno run -A --unstable-no-legacy-abort examples/http/server.ts [flags]
 * bun examples/http/server.ts [flags]
 *   --port N            TCP port, 0 = any free one           (default 8080)
 *   --hostname H        address to listen on                 (default 127.0.0.1)
 *   --dir PATH          store directory                      (default ./http-store)
 *   --flush async|sync  ASYNC_FLUSH or SYNC_FLUSH            (default async)
 *   --queues N          queues per topic, ids 0 to N-1       (default 8)
 *   --max-wait-ms T     longest long-poll a GET may ask for  (default 30000)
 *   --set NAME=VALUE    any store option by its RocketMQ name, repeatable
 *                       (--set mappedFileSizeCommitLog=67108864); true and
 *                       false are booleans, integers without a leading
 *                       zero are numbers, anything else is text
 * ```
 *
 * It prints `listening on http://HOST:PORT` once it serves, and closes the
 * server and then the store on SIGINT or SIGTERM. (`--unstable-no-legacy-abort`
 * makes Deno abort `request.signal` only when the client goes away, as Bun
 * does; without it the service works the same but Deno warns once, at the
 * first long-poll, that it also aborts the signal after each response.)
 *
 * Routes (JSON answers, `application/json; charset=utf-8`):
 *
 * | route | answer |
 * |---|---|
 * | `POST /topics/:topic/messages?queueId=Q` | 201 `{ status, topic, msgId, offset, queueId, queueOffset, storeTimestamp }` |
 * | `GET /topics/:topic/queues/:queueId/messages?offset=N&max=M&waitMs=T` | 200 `{ status, messages, nextOffset, minOffset, maxOffset }` |
 * | `GET /topics/:topic/keys/:key?max=M` | 200 `{ messages }`, newest first |
 * | `GET /messages/:msgId` | 200 a message (by offsetMsgId), or 404 |
 * | `GET /health` | 200 `{ status, maxOffset, flushedOffset, dispatchedOffset, queues, longPolls }` |
 *
 * **Putting.** The request body is the message body, stored as sent, with
 * `tags` and `keys` (space-separated) from the query. With
 * `Content-Type: application/json` the request is an envelope instead:
 * `{ "body": "text" | "bodyBase64": "…", "tags"?: "…", "keys"?: "…" | ["…"],
 * "properties"?: { "NAME": "value" }, "flag"?: int32 }` (exactly one of
 * `body` and `bodyBase64`; unknown fields are refused, and so are the
 * delay properties `DELAY`, `REAL_TOPIC` and `REAL_QID`: no schedule
 * service runs here to deliver delayed messages). `queueId` defaults
 * to 0 and must be below `--queues`. A 201 means the message is stored and
 * readable: the answer waits until it is in its consume queue and the key
 * index. `offset` is the commit-log offset.
 *
 * **Reading.** `offset` (queue offset) defaults to 0, `max` to 32 (at most
 * 256; the store's transfer limits may answer fewer, and an answer stops
 * after 8 MiB of bodies), `waitMs` to 0. When nothing is at `offset` yet
 * and `waitMs` > 0, the GET waits on
 * `store.subscribe()` (woken by the store's dispatcher, not by polling)
 * until a message arrives, `waitMs` passes (then 200 with no messages), the
 * client goes away, or the service closes. `status` is the store's
 * `GetMessageStatus`; `nextOffset` is where to read next.
 *
 * A message is `{ msgId, topic, queueId, queueOffset, physicalOffset,
 * storeSize, storeTimestamp, bornTimestamp, bornHost, storeHost, flag,
 * sysFlag, reconsumeTimes, bodyCRC, properties, body, text? }`: `body` is
 * base64 always, and `text` is the body decoded as UTF-8, present only when
 * the body is valid UTF-8.
 *
 * **Errors** answer `{ "error": { "code", "message" } }`, never a stack
 * trace. 400 `INVALID_ARGUMENT` (a malformed or out-of-range parameter,
 * envelope field or percent-encoding), 400 `INVALID_TOPIC` (a GET for a
 * name no topic can have), 400 `MALFORMED_JSON`, 404 `ROUTE_NOT_FOUND`,
 * 404 `MESSAGE_NOT_FOUND`, 405 `METHOD_NOT_ALLOWED`, 413 `BODY_TOO_LARGE`
 * (checked on Content-Length before reading, and the read is capped). A put
 * the store refuses answers with the store's `MqStoreError` code and
 * `status`: 400 for `MESSAGE_ILLEGAL` (a bad topic name included) and
 * `PROPERTIES_SIZE_EXCEEDED`; 503 for `SERVICE_NOT_AVAILABLE`,
 * `OS_PAGECACHE_BUSY`, `CREATE_MAPEDFILE_FAILED`, `SLAVE_NOT_AVAILABLE`;
 * 504 for `FLUSH_DISK_TIMEOUT` and `FLUSH_SLAVE_TIMEOUT` (the message is
 * stored, its durability was not confirmed in time: the answer carries its
 * msgId); 500 for `UNKNOWN_ERROR`. Anything unexpected is logged once on
 * stderr and answers 500 `INTERNAL_ERROR`. A refused request never writes
 * to the store.
 *
 * @example In-process, without a server
 * ```ts ignore
 * import { MessageStore } from "../../mod.ts";
 * import { createHandler } from "./server.ts";
 *
 * const store = await MessageStore.open("./http-store");
 * const handler = createHandler(store);
 * const response = await handler.fetch(
 *   new Request("http://localhost/topics/Orders/messages?queueId=0", { method: "POST", body: "hi" }),
 * );
 * console.log(response.status, await response.json()); // 201 { status: "PUT_OK", ... }
 * handler.close();
 * await store.close();
 * ```
 *
 * @module
 */

import { Buffer } from "node:buffer";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  type GetMessageStatus,
  MessageStore,
  type MessageStoreOptions,
  MqStoreError,
  type PutMessageResult,
  type PutMessageStatus,
  type StoredMessage,
  validateMessage,
} from "../../mod.ts";

/** Options of {@link createHandler}. */
export interface HandlerOptions {
  /**
   * Queues per topic: queue ids run from 0 to `queueCount - 1`.
   *
   * @default {8}
   */
  queueCount?: number;
  /**
   * Largest message body, bytes: the store's `maxMessageSize`. A larger
   * request body is refused (413) before it is read past this size.
   *
   * @default {4194304}
   */
  maxMessageSizeBytes?: number;
  /**
   * Longest long-poll a GET may ask for, ms.
   *
   * @default {30000}
   */
  maxWaitMs?: number;
  /**
   * Receives each unexpected error once (the client gets a 500 without
   * details).
   *
   * @default {console.error}
   */
  onError?: (message: string, error: unknown) => void;
  /**
   * Told when a long-poll starts waiting and how it ends (for metrics and
   * tests).
   *
   * @default {undefined}
   */
  onLongPoll?: (event: LongPollEvent) => void;
}

/** What a long-poll does: starts waiting, then ends one of four ways. */
export type LongPollEvent = "waiting" | LongPollEnd;

/** How a long-poll ends: a message, its `waitMs`, its client gone, or the service closing. */
export type LongPollEnd = "woken" | "timedOut" | "aborted" | "closed";

/** Long-poll counters, as `GET /health` reports them. */
export interface LongPollStats {
  /** Long-polls waiting now. */
  waiting: number;
  /** Ended by a message. */
  woken: number;
  /** Ended by their `waitMs`. */
  timedOut: number;
  /** Ended because the client went away. */
  aborted: number;
  /** Ended because the service closed. */
  closed: number;
}

/** The service: a fetch handler, as `Deno.serve` and `Bun.serve` take it. */
export interface HttpHandler {
  /** Answers one request; never rejects. */
  fetch(request: Request): Promise<Response>;
  /**
   * Ends every waiting long-poll (each answers at once) and answers later
   * requests 503. Call it before closing the server and the store.
   * Idempotent.
   */
  close(): void;
  /** Long-poll counters. */
  readonly longPolls: Readonly<LongPollStats>;
}

/** Default queues per topic (RocketMQ's `defaultTopicQueueNums`). */
const QUEUE_COUNT_DEFAULT = 8;
/** RocketMQ's default `maxMessageSize`. */
const MAX_MESSAGE_SIZE_DEFAULT_BYTES = 0x40_0000;
const MAX_WAIT_DEFAULT_MS = 30_000;
/** Messages a GET answers when `max` is not given. */
const PAGE_COUNT_DEFAULT = 32;
/** Most messages one GET answers. */
const PAGE_COUNT_MAX = 256;
/** Most messages a query by key answers (RocketMQ's maxMsgsNumBatch). */
const QUERY_COUNT_MAX = 64;
/** A GET stops adding messages past this many body bytes (it always answers one). */
const PAGE_BODY_BYTES_MAX = 0x80_0000;
/** Room for an envelope's JSON, properties and base64 beyond the body itself. */
const ENVELOPE_OVERHEAD_BYTES = 0x1_0000;
const DECIMAL_PATTERN = /^[0-9]{1,16}$/;
const BASE64_PATTERN = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const INT32_MIN = -0x8000_0000;
const INT32_MAX = 0x7FFF_FFFF;
/** Properties that reroute a message to the schedule topic (SPEC §3), which nothing here serves. */
const UNSERVED_PROPERTIES = new Set(["DELAY", "REAL_TOPIC", "REAL_QID"]);
const ENVELOPE_FIELDS = new Set(["body", "bodyBase64", "tags", "keys", "properties", "flag"]);
/** Long-poll statuses: nothing at the offset yet, so waiting makes sense. */
const WAITABLE: ReadonlySet<GetMessageStatus> = new Set<GetMessageStatus>([
  "OFFSET_OVERFLOW_ONE",
  "NO_MESSAGE_IN_QUEUE",
  "NO_MATCHED_LOGIC_QUEUE",
]);

/** HTTP status of each put answer. */
const PUT_HTTP_STATUS: Readonly<Record<PutMessageStatus, number>> = {
  PUT_OK: 201,
  MESSAGE_ILLEGAL: 400,
  PROPERTIES_SIZE_EXCEEDED: 400,
  SERVICE_NOT_AVAILABLE: 503,
  OS_PAGECACHE_BUSY: 503,
  CREATE_MAPEDFILE_FAILED: 503,
  SLAVE_NOT_AVAILABLE: 503,
  FLUSH_DISK_TIMEOUT: 504,
  FLUSH_SLAVE_TIMEOUT: 504,
  UNKNOWN_ERROR: 500,
};

/** A user mistake (or a refusal) with the answer it gets. */
class HttpError extends Error {
  readonly status: number;
  readonly code: string;
  readonly headers: Record<string, string>;

  constructor(status: number, code: string, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.headers = headers;
  }
}

const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" };

function json(status: number, value: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(value), { status, headers: { ...JSON_HEADERS, ...headers } });
}

function errorResponse(error: HttpError): Response {
  return json(error.status, { error: { code: error.code, message: error.message } }, error.headers);
}

function invalid(message: string): HttpError {
  return new HttpError(400, "INVALID_ARGUMENT", message);
}

/**
 * Reads a decimal integer query parameter: digits only (no sign, exponent
 * or hex, so `-1`, `1.5`, `1e3` and `0x10` are refused), from `min` to `max`.
 */
function integerParam(
  url: URL,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const text = url.searchParams.get(name);
  if (text === null) return fallback;
  return parseInteger(name, text, min, max);
}

function parseInteger(name: string, text: string, min: number, max: number): number {
  if (!DECIMAL_PATTERN.test(text)) {
    throw invalid(`${name} is "${text}"; it must be a non-negative decimal integer`);
  }
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw invalid(`${name} is ${text}; it must be from ${min} to ${max}`);
  }
  return value;
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw invalid(`Path segment "${segment}" is not valid percent-encoded UTF-8`);
  }
}

/** A body for {@link checkTopicName}'s validation: only the topic is in question. */
const NO_BODY = new Uint8Array(0);

/**
 * GETs check topic names with the store's own validation (a put does it
 * itself): a name no topic can have is a mistake, not an empty queue.
 */
function checkTopicName(topic: string): void {
  const error = validateMessage({ topic, queueId: 0, body: NO_BODY });
  if (error !== undefined) throw new HttpError(400, "INVALID_TOPIC", error.message);
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The text of a body that is valid UTF-8, else undefined. */
function textOf(body: Uint8Array): string | undefined {
  try {
    return utf8.decode(body);
  } catch {
    return undefined;
  }
}

function base64Of(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

/** A stored message as the routes answer it. */
function messageJson(message: StoredMessage): Record<string, unknown> {
  const text = textOf(message.body);
  return {
    msgId: message.msgId,
    topic: message.topic,
    queueId: message.queueId,
    queueOffset: message.queueOffset,
    physicalOffset: message.physicalOffset,
    storeSize: message.storeSize,
    storeTimestamp: message.storeTimestamp,
    bornTimestamp: message.bornTimestamp,
    bornHost: message.bornHost,
    storeHost: message.storeHost,
    flag: message.flag,
    sysFlag: message.sysFlag,
    reconsumeTimes: message.reconsumeTimes,
    bodyCRC: message.bodyCRC,
    properties: Object.fromEntries(message.properties),
    body: base64Of(message.body),
    ...(text === undefined ? {} : { text }),
  };
}

/**
 * Reads a request body of at most `capBytes`: refused on its Content-Length
 * before any byte is read, and the read stops (and cancels the stream) as
 * soon as the bytes pass the cap, whatever the header said.
 */
async function readCapped(request: Request, capBytes: number, what: string): Promise<Uint8Array> {
  const tooLarge = (size: string) =>
    new HttpError(
      413,
      "BODY_TOO_LARGE",
      `${what} is ${size} bytes, the limit is ${capBytes} bytes`,
    );
  const declared = request.headers.get("content-length");
  if (declared !== null) {
    if (!DECIMAL_PATTERN.test(declared)) {
      throw invalid(`Content-Length is "${declared}"; it must be a decimal integer`);
    }
    if (Number(declared) > capBytes) throw tooLarge(declared);
  }
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  // Bounded by capBytes: each chunk adds to total, and past the cap the read stops.
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > capBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge(`over ${capBytes}`);
    }
    chunks.push(value);
  }
  if (chunks.length === 1) return chunks[0]!;
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}

/** What a POST asks to store, before the store sees it. */
interface PutRequest {
  body: Uint8Array;
  properties: [string, string][];
  flag: number;
}

function stringField(name: string, value: unknown): string {
  if (typeof value !== "string") {
    throw invalid(`Envelope field "${name}" must be a string, not ${jsonType(value)}`);
  }
  return value;
}

function jsonType(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

/** Joins keys into the KEYS property; a key must be one non-empty token. */
function keysProperty(keys: readonly string[]): string {
  for (const key of keys) {
    if (key.length === 0 || /\s/.test(key)) {
      throw invalid(`Key "${key}" must be non-empty and hold no whitespace`);
    }
  }
  return keys.join(" ");
}

/** Parses the JSON envelope of a POST (see the module doc). */
function parseEnvelope(bytes: Uint8Array, maxBodyBytes: number): PutRequest {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(bytes));
  } catch (error) {
    throw new HttpError(
      400,
      "MALFORMED_JSON",
      `The request body is not valid JSON: ${error instanceof Error ? error.message : error}`,
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw invalid(`The envelope must be a JSON object, not ${jsonType(value)}`);
  }
  const envelope = value as Record<string, unknown>;
  for (const name of Object.keys(envelope)) {
    if (!ENVELOPE_FIELDS.has(name)) {
      throw invalid(
        `Unknown envelope field "${name}"; the fields are ${[...ENVELOPE_FIELDS].join(", ")}`,
      );
    }
  }
  let body: Uint8Array;
  if ((envelope.body === undefined) === (envelope.bodyBase64 === undefined)) {
    throw invalid('The envelope needs exactly one of "body" (text) and "bodyBase64"');
  } else if (envelope.body !== undefined) {
    body = new TextEncoder().encode(stringField("body", envelope.body));
  } else {
    const text = stringField("bodyBase64", envelope.bodyBase64);
    if (!BASE64_PATTERN.test(text)) throw invalid('"bodyBase64" is not padded base64');
    body = Buffer.from(text, "base64");
  }
  if (body.byteLength > maxBodyBytes) {
    throw new HttpError(
      413,
      "BODY_TOO_LARGE",
      `The message body is ${body.byteLength} bytes, the limit is ${maxBodyBytes} bytes`,
    );
  }
  const properties: [string, string][] = [];
  if (envelope.properties !== undefined) {
    const given = envelope.properties;
    if (typeof given !== "object" || given === null || Array.isArray(given)) {
      throw invalid(`"properties" must be an object of strings, not ${jsonType(given)}`);
    }
    for (const [name, text] of Object.entries(given)) {
      if (UNSERVED_PROPERTIES.has(name)) {
        throw invalid(
          `Property ${name} is not served here: a delayed message would wait in ` +
            "SCHEDULE_TOPIC_XXXX, and this example runs no schedule service to deliver it",
        );
      }
      properties.push([name, stringField(`properties.${name}`, text)]);
    }
  }
  const add = (name: string, text: string) => {
    if (properties.some(([existing]) => existing === name)) {
      throw invalid(`${name} is given both as a field and in "properties"`);
    }
    properties.push([name, text]);
  };
  if (envelope.tags !== undefined) add("TAGS", stringField("tags", envelope.tags));
  if (envelope.keys !== undefined) {
    const keys = envelope.keys;
    const list = Array.isArray(keys)
      ? keys.map((key, i) => stringField(`keys[${i}]`, key))
      : stringField("keys", keys).split(" ");
    add("KEYS", keysProperty(list));
  }
  let flag = 0;
  if (envelope.flag !== undefined) {
    const given = envelope.flag;
    if (
      typeof given !== "number" || !Number.isInteger(given) || given < INT32_MIN ||
      given > INT32_MAX
    ) {
      throw invalid(`"flag" is ${JSON.stringify(given)}; it must be an int32`);
    }
    flag = given;
  }
  return { body, properties, flag };
}

function isJson(request: Request): boolean {
  const type = request.headers.get("content-type");
  return type !== null && /^application\/json\s*(;|$)/i.test(type);
}

function checkOption(name: string, value: number, min: number, max: number): void {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} is ${value}; it must be an integer from ${min} to ${max}`);
  }
}

/**
 * Creates the service's handler over an open store. The store stays the
 * caller's: close the handler, then the server, then the store.
 *
 * @example
 * ```ts ignore
 * const handler = createHandler(store, { queueCount: 4 });
 * Deno.serve({ port: 8080 }, handler.fetch);
 * ```
 *
 * @param store An open, writable store.
 * @param options Limits and hooks.
 * @returns The handler.
 * @throws {RangeError} For an option out of range.
 */
export function createHandler(store: MessageStore, options: HandlerOptions = {}): HttpHandler {
  const queueCount = options.queueCount ?? QUEUE_COUNT_DEFAULT;
  const maxBodyBytes = options.maxMessageSizeBytes ?? MAX_MESSAGE_SIZE_DEFAULT_BYTES;
  const maxWaitMs = options.maxWaitMs ?? MAX_WAIT_DEFAULT_MS;
  checkOption("queueCount", queueCount, 1, INT32_MAX);
  checkOption("maxMessageSizeBytes", maxBodyBytes, 1, INT32_MAX);
  // setTimeout's limit.
  checkOption("maxWaitMs", maxWaitMs, 0, INT32_MAX);
  // Base64 of the largest body plus room for properties and the JSON around them.
  const envelopeCapBytes = Math.ceil(maxBodyBytes / 3) * 4 + ENVELOPE_OVERHEAD_BYTES;
  const onError = options.onError ??
    ((message: string, error: unknown) => console.error(message, error));
  const onLongPoll = options.onLongPoll;
  const longPolls: LongPollStats = { waiting: 0, woken: 0, timedOut: 0, aborted: 0, closed: 0 };
  /** Ends each waiting long-poll as "closed"; called by close. */
  const waiting = new Set<() => void>();
  let closed = false;

  const queueIdOf = (text: string): number => parseInteger("queueId", text, 0, queueCount - 1);

  async function put(request: Request, topic: string, url: URL): Promise<Response> {
    const queueId = queueIdOf(url.searchParams.get("queueId") ?? "0");
    let message: PutRequest;
    if (isJson(request)) {
      message = parseEnvelope(
        await readCapped(request, envelopeCapBytes, "The JSON envelope"),
        maxBodyBytes,
      );
    } else {
      const body = await readCapped(request, maxBodyBytes, "The message body");
      const properties: [string, string][] = [];
      const tags = url.searchParams.get("tags");
      if (tags !== null) properties.push(["TAGS", tags]);
      const keys = url.searchParams.get("keys");
      if (keys !== null) properties.push(["KEYS", keysProperty(keys.split(" "))]);
      message = { body, properties, flag: 0 };
    }
    const result: PutMessageResult = await store.putMessage({
      topic,
      queueId,
      body: message.body,
      properties: message.properties,
      flag: message.flag,
    });
    const append = result.appendResult;
    const stored = append === undefined ? {} : {
      topic,
      msgId: append.msgId,
      offset: append.wroteOffset,
      queueId,
      queueOffset: append.queueOffset,
      storeTimestamp: append.storeTimestamp,
    };
    if (result.status !== "PUT_OK" || append === undefined) {
      const status = PUT_HTTP_STATUS[result.status];
      const error = result.error;
      return json(status, {
        error: {
          code: error?.code ?? result.status,
          message: error?.message ?? `The store answered ${result.status}`,
        },
        status: result.status,
        ...stored,
      }, status === 503 ? { "retry-after": "1" } : {});
    }
    // Read-your-writes: once answered, the message is in its queue and the index.
    try {
      await store.whenDispatched(append.wroteOffset + append.wroteBytes);
    } catch (error) {
      // Stored all the same (the answer says so); readers see it after the next recovery.
      onError(`mqstore http: message ${append.msgId} is stored but was not dispatched:`, error);
    }
    return json(201, { status: result.status, ...stored }, {
      location: `/messages/${append.msgId}`,
    });
  }

  /** Waits for a message at `offset`; tells why the wait ended. */
  async function waitForMessage(
    request: Request,
    topic: string,
    queueId: number,
    offset: number,
    waitMs: number,
  ): Promise<void> {
    const controller = new AbortController();
    let ending: LongPollEnd = "timedOut";
    const end = (event: LongPollEnd) => {
      if (controller.signal.aborted) return;
      ending = event;
      controller.abort();
    };
    const timer = setTimeout(() => end("timedOut"), waitMs);
    const onClientGone = () => end("aborted");
    request.signal.addEventListener("abort", onClientGone, { once: true });
    const onClose = () => end("closed");
    waiting.add(onClose);
    longPolls.waiting++;
    onLongPoll?.("waiting");
    try {
      if (request.signal.aborted) end("aborted");
      for await (
        const _ of store.subscribe(topic, queueId, offset, { signal: controller.signal })
      ) {
        end("woken");
        break;
      }
      // The subscription also ends when the store closes.
      end("closed");
    } finally {
      clearTimeout(timer);
      request.signal.removeEventListener("abort", onClientGone);
      waiting.delete(onClose);
      longPolls.waiting--;
      longPolls[ending]++;
      onLongPoll?.(ending);
    }
  }

  async function getQueue(
    request: Request,
    topic: string,
    queueId: number,
    url: URL,
  ): Promise<Response> {
    const offset = integerParam(url, "offset", 0, 0, Number.MAX_SAFE_INTEGER);
    const max = integerParam(url, "max", PAGE_COUNT_DEFAULT, 1, PAGE_COUNT_MAX);
    const waitMs = integerParam(url, "waitMs", 0, 0, maxWaitMs);
    let page = await store.getMessages(topic, queueId, offset, max);
    if (page.status !== "FOUND" && WAITABLE.has(page.status) && waitMs > 0 && !closed) {
      await waitForMessage(request, topic, queueId, offset, waitMs);
      page = await store.getMessages(topic, queueId, offset, max);
    }
    const messages: Record<string, unknown>[] = [];
    let bodyBytes = 0;
    let nextOffset = page.nextQueueOffset;
    for (const message of page.messages) {
      if (messages.length > 0 && bodyBytes + message.body.byteLength > PAGE_BODY_BYTES_MAX) {
        nextOffset = message.queueOffset;
        break;
      }
      bodyBytes += message.body.byteLength;
      messages.push(messageJson(message));
    }
    return json(200, {
      status: page.status,
      messages,
      nextOffset,
      minOffset: page.minQueueOffset,
      maxOffset: page.maxQueueOffset,
    });
  }

  async function getByKey(topic: string, key: string, url: URL): Promise<Response> {
    const max = integerParam(url, "max", QUERY_COUNT_MAX, 1, QUERY_COUNT_MAX);
    const found = await store.queryMessages(topic, key, { maxCount: max });
    return json(200, { messages: found.messages.map(messageJson) });
  }

  async function getByMsgId(msgId: string): Promise<Response> {
    if (!/^(?:[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$/.test(msgId)) {
      throw invalid(`"${msgId.slice(0, 80)}" is not an offsetMsgId (32 or 56 hex digits)`);
    }
    let message: StoredMessage | undefined;
    try {
      message = await store.getMessageByMsgId(msgId);
    } catch (error) {
      // Well-formed hex that names no offset the store can hold (past 2^53).
      if (error instanceof RangeError) throw invalid(error.message);
      throw error;
    }
    if (message === undefined) {
      throw new HttpError(404, "MESSAGE_NOT_FOUND", `No message is stored at msgId ${msgId}`);
    }
    return json(200, messageJson(message));
  }

  function health(): Response {
    return json(200, {
      status: "ok",
      maxOffset: store.maxOffset,
      flushedOffset: store.flushedOffset,
      dispatchedOffset: store.dispatchedOffset,
      queues: store.queues(),
      longPolls,
    });
  }

  /** Routes a request; throws HttpError for what the client got wrong. */
  function route(request: Request): Promise<Response> | Response {
    const url = new URL(request.url);
    const parts = url.pathname.split("/").slice(1).map(decodeSegment);
    const method = request.method;
    const allow = (methods: string, answer: () => Promise<Response> | Response) => {
      if (methods.split(", ").includes(method)) return answer();
      throw new HttpError(
        405,
        "METHOD_NOT_ALLOWED",
        `${method} is not allowed on ${url.pathname}; use ${methods}`,
        { allow: methods },
      );
    };
    // /health · /messages/:msgId · /topics/:topic/{messages, keys/:key, queues/:queueId/messages}
    const [root, name, kind, id, tail] = parts;
    if (parts.length === 1 && root === "health") return allow("GET", health);
    if (parts.length === 2 && root === "messages") return allow("GET", () => getByMsgId(name!));
    const topic = name;
    if (root === "topics" && topic !== undefined && topic.length > 0) {
      if (parts.length === 3 && kind === "messages") {
        return allow("POST", () => put(request, topic, url));
      }
      if (parts.length === 4 && kind === "keys" && id!.length > 0) {
        return allow("GET", () => {
          checkTopicName(topic);
          return getByKey(topic, id!, url);
        });
      }
      if (parts.length === 5 && kind === "queues" && tail === "messages") {
        return allow("GET", () => {
          checkTopicName(topic);
          return getQueue(request, topic, queueIdOf(id!), url);
        });
      }
    }
    throw new HttpError(404, "ROUTE_NOT_FOUND", `No route for ${method} ${url.pathname}`);
  }

  async function handle(request: Request): Promise<Response> {
    try {
      if (closed) {
        throw new HttpError(503, "SERVICE_NOT_AVAILABLE", "The service is shutting down", {
          "retry-after": "1",
        });
      }
      return await route(request);
    } catch (error) {
      if (error instanceof HttpError) return errorResponse(error);
      if (
        error instanceof MqStoreError &&
        (error.code === "SERVICE_NOT_AVAILABLE" || error.code === "CLOSED")
      ) {
        // The store is closing under the request: expected during a shutdown.
        return errorResponse(
          new HttpError(503, error.code, error.message, { "retry-after": "1" }),
        );
      }
      const where = `${request.method} ${new URL(request.url).pathname}`;
      onError(`mqstore http: unexpected error on ${where}:`, error);
      return errorResponse(
        new HttpError(500, "INTERNAL_ERROR", `Unexpected error on ${where}; see the server log`),
      );
    }
  }

  return {
    fetch: handle,
    close() {
      if (closed) return;
      closed = true;
      for (const onClose of [...waiting]) onClose();
    },
    longPolls,
  };
}

// ---------------------------------------------------------------------
// The program: flags, the runtime's server, signals.

/** What the flags ask for. */
interface ServerConfig {
  port: number;
  hostname: string;
  directory: string;
  storeOptions: MessageStoreOptions;
  queueCount: number;
  maxWaitMs: number;
}

const USAGE = "Usage: server.ts [--port N] [--hostname H] [--dir PATH] [--flush async|sync] " +
  "[--queues N] [--max-wait-ms T] [--set NAME=VALUE]...";
/** Bun closes a connection idle this long, s (its limit is 255): past the longest long-poll. */
const IDLE_TIMEOUT_MARGIN_S = 10;
const MAX_WAIT_LIMIT_MS = 240_000;
/** Store options that are objects or functions, not values a flag can give. */
const NOT_SETTABLE = new Set(["port", "clock", "onWarning"]);

/** Parses the flags; throws RangeError with a one-line reason. */
function parseFlags(argv: readonly string[]): ServerConfig {
  const config: ServerConfig = {
    port: 8080,
    hostname: "127.0.0.1",
    directory: "./http-store",
    storeOptions: {},
    queueCount: QUEUE_COUNT_DEFAULT,
    maxWaitMs: MAX_WAIT_DEFAULT_MS,
  };
  const settings: Record<string, unknown> = {};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = argv[i + 1];
    if (value === undefined) throw new RangeError(`${flag} needs a value`);
    i++;
    const number = (min: number, max: number) => {
      if (!/^[0-9]+$/.test(value) || Number(value) < min || Number(value) > max) {
        throw new RangeError(`${flag} is "${value}"; it must be an integer from ${min} to ${max}`);
      }
      return Number(value);
    };
    switch (flag) {
      case "--port":
        config.port = number(0, 0xFFFF);
        break;
      case "--hostname":
        config.hostname = value;
        break;
      case "--dir":
        config.directory = value;
        break;
      case "--flush":
        if (value !== "async" && value !== "sync") {
          throw new RangeError(`--flush is "${value}"; use async or sync`);
        }
        settings.flushDiskType = value === "sync" ? "SYNC_FLUSH" : "ASYNC_FLUSH";
        break;
      case "--queues":
        config.queueCount = number(1, 0x400);
        break;
      case "--max-wait-ms":
        config.maxWaitMs = number(0, MAX_WAIT_LIMIT_MS);
        break;
      case "--set": {
        const match = /^([A-Za-z][A-Za-z0-9]*)=(.*)$/.exec(value);
        if (match === null || NOT_SETTABLE.has(match[1]!)) {
          throw new RangeError(`--set takes NAME=VALUE with a store option name, not "${value}"`);
        }
        const text = match[2]!;
        // A leading zero keeps text a string (deleteWhen=04).
        settings[match[1]!] = text === "true"
          ? true
          : text === "false"
          ? false
          : /^-?(?:0|[1-9][0-9]{0,15})$/.test(text)
          ? Number(text)
          : text;
        break;
      }
      default:
        throw new RangeError(`Unknown flag ${flag}`);
    }
  }
  config.storeOptions = settings as MessageStoreOptions;
  return config;
}

/** The part of a Bun server this file uses. */
interface BunServer {
  readonly port: number;
  stop(closeActiveConnections?: boolean): Promise<void> | void;
}

/** The part of `Bun` this file uses (reached through globalThis: `deno check` has no Bun types). */
interface BunServe {
  serve(options: {
    port: number;
    hostname: string;
    idleTimeout: number;
    fetch(request: Request): Promise<Response>;
  }): BunServer;
}

/** A running server: its port and how to stop it (in-flight requests finish first). */
interface RunningServer {
  port: number;
  stop(): Promise<void>;
}

function serve(config: ServerConfig, handler: HttpHandler): Promise<RunningServer> {
  const deno = (globalThis as { Deno?: typeof Deno }).Deno;
  if (deno?.serve !== undefined) {
    return new Promise((resolve) => {
      const server = deno.serve({
        port: config.port,
        hostname: config.hostname,
        onListen: ({ port }) => resolve({ port, stop: () => server.shutdown() }),
      }, handler.fetch);
    });
  }
  const bun = (globalThis as { Bun?: BunServe }).Bun;
  if (bun?.serve !== undefined) {
    const server = bun.serve({
      port: config.port,
      hostname: config.hostname,
      idleTimeout: Math.min(255, Math.ceil(config.maxWaitMs / 1000) + IDLE_TIMEOUT_MARGIN_S),
      fetch: handler.fetch,
    });
    return Promise.resolve({ port: server.port, stop: async () => await server.stop(false) });
  }
  throw new RangeError(NO_SERVE);
}

const NO_SERVE = "This example needs Deno.serve or Bun.serve: run it with deno or bun";

/** Whether this runtime has a server {@link serve} can use (checked before the store opens). */
function canServe(): boolean {
  return (globalThis as { Deno?: typeof Deno }).Deno?.serve !== undefined ||
    (globalThis as { Bun?: BunServe }).Bun?.serve !== undefined;
}

async function main(argv: readonly string[]): Promise<number> {
  let config: ServerConfig;
  try {
    config = parseFlags(argv);
  } catch (error) {
    console.error(`${error instanceof Error ? error.message : error}\n${USAGE}`);
    return 2;
  }
  if (!canServe()) {
    console.error(NO_SERVE);
    return 2;
  }
  let store: MessageStore;
  try {
    store = await MessageStore.open(config.directory, config.storeOptions);
  } catch (error) {
    const bad = error instanceof TypeError || error instanceof RangeError;
    console.error(
      `Cannot open ${config.directory}: ${error instanceof Error ? error.message : error}`,
    );
    return bad ? 2 : 1;
  }
  const handler = createHandler(store, {
    queueCount: config.queueCount,
    maxMessageSizeBytes: config.storeOptions.maxMessageSize,
    maxWaitMs: config.maxWaitMs,
  });
  let server: RunningServer;
  try {
    server = await serve(config, handler);
  } catch (error) {
    console.error(
      `Cannot listen on ${config.hostname}:${config.port}: ${
        error instanceof Error ? error.message : error
      }`,
    );
    await store.close();
    return 1;
  }
  // Before the line that tells a supervisor it may signal us. Once: a second
  // signal during the close ends the process at once (the next open recovers).
  const stopped = new Promise<string>((resolve) => {
    process.once("SIGINT", () => resolve("SIGINT"));
    process.once("SIGTERM", () => resolve("SIGTERM"));
  });
  console.log(`listening on http://${config.hostname}:${server.port}`);
  const signal = await stopped;
  console.error(`${signal}: closing`);
  // Long-polls answer first, so the server's graceful stop does not wait them out.
  handler.close();
  await server.stop();
  await store.close();
  console.error("closed");
  return 0;
}

function isEntryPoint(): boolean {
  const main = (import.meta as { main?: boolean }).main;
  if (main !== undefined) return main;
  // Node before 24 has no import.meta.main: compare the script path.
  const script = process.argv[1];
  return script !== undefined && path.resolve(script) === fileURLToPath(import.meta.url);
}

if (isEntryPoint()) {
  process.exitCode = await main(process.argv.slice(2));
}
