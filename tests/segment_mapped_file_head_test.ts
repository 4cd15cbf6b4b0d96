/**
 * `MappedFile.whenHeadPrepared()`: what a store's open waits for, the
 * first pre-fault chunk of a preparation, not the whole segment. Every
 * adapter; pre-faults are held per call at a gate, so the order is
 * observed, not timed.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setImmediate } from "node:timers";
import { MappedFile } from "../src/segment/mapped_file.ts";
import { PREPARE_POPULATE_CHUNK_BYTES } from "../src/segment/constants.ts";
import type { RuntimePort } from "../src/runtime/port.ts";
import {
  adapterCases,
  hookedMappingsPort,
  type SegmentEnv,
  segmentName,
  settle,
  withSegmentEnv,
} from "./_segment_helpers.ts";

const PAGE = 0x1000;
const CHUNK = PREPARE_POPULATE_CHUNK_BYTES;

/**
 * `inner`, with every `Mapping.populate` logged (`populate a-b` when asked
 * for, `populated a-b` when done) and held until {@link PopulateGates.release}.
 */
interface PopulateGates {
  port: RuntimePort;
  events: string[];
  /** Lets the oldest held pre-fault run. */
  release(): void;
  /** Lets every held and later pre-fault run. */
  releaseAll(): void;
}

function populateGates(inner: RuntimePort): PopulateGates {
  const events: string[] = [];
  const held: Array<() => void> = [];
  let open = false;
  const port = hookedMappingsPort(inner, {
    async populate(position, length, run) {
      events.push(`populate ${position}-${position + length}`);
      if (!open) await new Promise<void>((resolve) => held.push(resolve));
      await run();
      events.push(`populated ${position}-${position + length}`);
    },
  });
  return {
    port,
    events,
    release: () => held.shift()?.(),
    releaseAll: () => {
      open = true;
      for (const resolve of held.splice(0)) resolve();
    },
  };
}

function createLarge(env: SegmentEnv, port: RuntimePort): Promise<MappedFile> {
  return MappedFile.create({
    port,
    path: `${env.directory}/${segmentName(0)}`,
    // Two whole chunks and a page: the preparation runs three.
    fileSizeBytes: 2 * CHUNK + PAGE,
    sparse: true,
  });
}

/** Tracks whether `promise` settled. */
function watch(promise: Promise<void>): { readonly settled: boolean } {
  const state = { settled: false };
  promise.then(() => state.settled = true);
  return state;
}

/** Waits (on observable progress, bounded) until `condition()` holds. */
async function until(condition: () => boolean): Promise<void> {
  for (let turn = 0; turn < 1_000_000; turn++) {
    if (condition()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error("the condition never held");
}

const cases = await adapterCases();

describe("MappedFile.whenHeadPrepared()", () => {
  for (const { adapter, skip } of cases) {
    const run = (name: string, body: (env: SegmentEnv) => Promise<void>) =>
      test(`${name} (${adapter})`, { skip }, () => withSegmentEnv(adapter, body));

    run(
      "whenHeadPrepared() resolves after the first pre-fault chunk, before the rest",
      async (env) => {
        const gates = populateGates(env.port);
        const file = await createLarge(env, gates.port);
        try {
          if (file.writeMode !== "mapping") return;
          const preparing = file.prepare();
          const head = watch(file.whenHeadPrepared());
          await settle();
          assert.deepEqual(gates.events, [`populate 0-${CHUNK}`]);
          assert.equal(head.settled, false, "settled before its first chunk was pre-faulted");
          gates.release();
          await until(() => gates.events.length >= 3);
          await settle();
          assert.equal(head.settled, true, "still waiting after the first chunk");
          assert.equal(gates.events[1], `populated 0-${CHUNK}`);
          assert.ok(
            gates.events[2]?.startsWith(`populate ${CHUNK}-`),
            `the second chunk is in flight: ${gates.events.join(", ")}`,
          );
          assert.equal(gates.events.length, 3, "the second chunk is still held");
          gates.releaseAll();
          await preparing;
        } finally {
          gates.releaseAll();
          await file.close();
        }
      },
    );

    run(
      "whenHeadPrepared() resolves when a preparation stops before its first chunk",
      async (env) => {
        const gates = populateGates(env.port);
        const file = await createLarge(env, gates.port);
        try {
          const before = watch(file.whenHeadPrepared());
          await settle();
          assert.equal(before.settled, true, "nothing prepared: nothing to wait for");
          if (file.writeMode !== "mapping") return;
          const preparing = file.prepare({ stopped: () => true });
          const head = watch(file.whenHeadPrepared());
          await preparing;
          await settle();
          assert.deepEqual(gates.events, [], "a stopped preparation pre-faults nothing");
          assert.equal(head.settled, true, "a preparation that ended left its head waiting");
        } finally {
          gates.releaseAll();
          await file.close();
        }
      },
    );
  }
});
