/**
 * The topic-queue table: next queue offsets by topic and queue id, with
 * the array kept for small queue ids and the map for the rest.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { TopicQueueTable } from "../src/commit_log/topic_queue_table.ts";

describe("TopicQueueTable", () => {
  test("counter() keeps one counter per topic and queue, small and large queue ids alike", () => {
    const table = new TopicQueueTable();
    const queueIds = [0, 3, 0x3F, 0x40, 0x7FFF_FFFF];
    // Interleaved topics and queues: no lookup may answer another's counter.
    for (let round = 1; round <= 3; round++) {
      for (const topic of ["A", "B"]) {
        for (const queueId of queueIds) {
          const counter = table.counter(topic, queueId);
          assert.equal(counter.next, (round - 1) * (topic === "A" ? 1 : 2));
          counter.next += topic === "A" ? 1 : 2;
          assert.equal(table.counter(topic, queueId), counter);
        }
      }
    }
    for (const queueId of queueIds) {
      assert.equal(table.get("A", queueId), 3);
      assert.equal(table.get("B", queueId), 6);
    }
    assert.equal(table.get("A", 1), undefined);
    assert.equal(table.get("C", 0), undefined);
    assert.equal([...table.entries()].length, 2 * queueIds.length);
    assert.deepEqual(
      [...table.entries()].filter(([key]) => key.startsWith("A-")).map((
        [key, next],
      ) => [key, next]),
      queueIds.map((queueId) => [`A-${queueId}`, 3]),
    );
  });

  test("clear() forgets every counter, the cached topic's included", () => {
    const table = new TopicQueueTable();
    table.counter("A", 1).next = 7;
    table.counter("A", 0x100).next = 9;
    table.clear();
    assert.equal(table.get("A", 1), undefined);
    assert.equal(table.counter("A", 1).next, 0);
    assert.equal(table.counter("A", 0x100).next, 0);
    assert.equal([...table.entries()].length, 2);
  });
});
