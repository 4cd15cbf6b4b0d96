/**
 * The folio size an ASYNC_FLUSH commit log pre-faults, chunk by chunk,
 * from its writer's rate (see {@link PREFAULT_LARGE_FOLIOS_FROM}).
 *
 * @module
 */

import { assert } from "../assert.ts";
import { OS_PAGE_SIZE_BYTES, PREPARE_POPULATE_CHUNK_BYTES } from "../segment/constants.ts";
import {
  PREFAULT_LARGE_FOLIOS_FROM,
  PREFAULT_LEAD_MS,
  PREFAULT_SMALL_BYTES_MIN,
  PREFAULT_SMALL_FOLIOS_BELOW,
} from "./constants.ts";
import { LARGE_FOLIO_BYTES } from "./flush_real_time_service.ts";

/** The folios of pre-fault chunks: 4 KiB (`"small"`) or 2 MiB (`"large"`). */
export type FolioSize = "small" | "large";

/**
 * The folios of the next pre-fault chunks for a writer appending
 * `bytesPerMs` with a flush every `flushIntervalMs`, after `current` so
 * far. Between the two thresholds the answer stays `current`, so a writer
 * near one does not switch at every chunk.
 *
 * @example
 * ```ts
 * import { folioSize } from "./_folio_rule.ts";
 *
 * console.log(folioSize("large", 300, 500)); // "small": 150 KB a flush
 * console.log(folioSize("small", 20_000, 500)); // "large": 10 MB a flush
 * ```
 */
export function folioSize(
  current: FolioSize,
  bytesPerMs: number,
  flushIntervalMs: number,
): FolioSize {
  assert(bytesPerMs >= 0 && flushIntervalMs >= 0, "a rate and an interval are not negative");
  const perFlushBytes = bytesPerMs * flushIntervalMs;
  if (perFlushBytes >= PREFAULT_LARGE_FOLIOS_FROM * LARGE_FOLIO_BYTES) return "large";
  if (perFlushBytes < PREFAULT_SMALL_FOLIOS_BELOW * LARGE_FOLIO_BYTES) return "small";
  return current;
}

/**
 * The lead and the largest chunk of a pre-fault of small folios for a
 * writer appending `bytesPerMs`: what it appends in PREFAULT_LEAD_MS, in
 * whole pages, within [PREFAULT_SMALL_BYTES_MIN, PREPARE_POPULATE_CHUNK_BYTES].
 *
 * @example
 * ```ts
 * import { smallFolioChunkBytes } from "./_folio_rule.ts";
 *
 * console.log(smallFolioChunkBytes(0)); // 65536
 * ```
 */
export function smallFolioChunkBytes(bytesPerMs: number): number {
  const pages = Math.ceil(bytesPerMs * PREFAULT_LEAD_MS / OS_PAGE_SIZE_BYTES) * OS_PAGE_SIZE_BYTES;
  return Math.min(PREPARE_POPULATE_CHUNK_BYTES, Math.max(PREFAULT_SMALL_BYTES_MIN, pages));
}
