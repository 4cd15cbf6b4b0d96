/**
 * The rule that picks the folios of an ASYNC_FLUSH commit log's pre-fault
 * chunks from its writer's rate: small (4 KiB) below one large folio per
 * flush interval, large from two, unchanged in between.
 *
 * @module
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type FolioSize, folioSize, smallFolioChunkBytes } from "../src/commit_log/_folio_rule.ts";
import { LARGE_FOLIO_BYTES } from "../src/commit_log/flush_real_time_service.ts";
import { PREFAULT_LEAD_MS, PREFAULT_SMALL_BYTES_MIN } from "../src/commit_log/constants.ts";
import { PREPARE_POPULATE_CHUNK_BYTES } from "../src/segment/constants.ts";

const INTERVAL_MS = 500;
/** The rate, bytes per ms, at which the writer appends `folios` large folios per interval. */
const foliosPerInterval = (folios: number) => folios * LARGE_FOLIO_BYTES / INTERVAL_MS;

describe("folioSize()", () => {
  const cases: Array<[string, FolioSize, number, FolioSize]> = [
    ["an idle writer, after large ones", "large", 0, "small"],
    ["300 1 KiB messages a second, after large ones", "large", 300 * 1024 / 1000, "small"],
    [
      "just under one folio an interval, after large ones",
      "large",
      foliosPerInterval(0.99),
      "small",
    ],
    ["one folio an interval, after small ones", "small", foliosPerInterval(1), "small"],
    ["one folio an interval, after large ones", "large", foliosPerInterval(1), "large"],
    [
      "just under two folios an interval, after small ones",
      "small",
      foliosPerInterval(1.99),
      "small",
    ],
    ["two folios an interval, after small ones", "small", foliosPerInterval(2), "large"],
    ["a fast writer, after small ones", "small", foliosPerInterval(200), "large"],
  ];
  for (const [name, current, rate, expected] of cases) {
    test(`folioSize() answers ${expected} for ${name}`, () => {
      assert.equal(folioSize(current, rate, INTERVAL_MS), expected);
    });
  }

  test("folioSize() scales with the flush interval", () => {
    const rate = foliosPerInterval(1.5);
    assert.equal(folioSize("small", rate, INTERVAL_MS), "small");
    assert.equal(folioSize("small", rate, 2 * INTERVAL_MS), "large");
    assert.equal(folioSize("large", rate, INTERVAL_MS / 2), "small");
  });
});

describe("smallFolioChunkBytes()", () => {
  test("smallFolioChunkBytes() is the writer's lead time of bytes in whole pages, within its bounds", () => {
    assert.equal(smallFolioChunkBytes(0), PREFAULT_SMALL_BYTES_MIN);
    const rate = 2 * PREFAULT_SMALL_BYTES_MIN / PREFAULT_LEAD_MS + 1;
    const chunk = smallFolioChunkBytes(rate);
    assert.equal(chunk % 0x1000, 0);
    assert.ok(chunk >= rate * PREFAULT_LEAD_MS && chunk < rate * PREFAULT_LEAD_MS + 0x1000);
    assert.equal(smallFolioChunkBytes(foliosPerInterval(100)), PREPARE_POPULATE_CHUNK_BYTES);
  });
});
