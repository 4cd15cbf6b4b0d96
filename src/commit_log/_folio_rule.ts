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

/**
 * Whether the next pre-fault chunks get small (4 KiB) folios: a writer
 * appending `bytesPerMs` with a flush every `flushIntervalMs`, after
 * `small` so far. Between the two thresholds the answer stays `small`,
 * so a writer near one does not switch at every chunk.
 *
 * @example
 * ```ts
 * import { smallFolios } from "./_folio_rule.ts";
 *
 * console.log(smallFolios(false, 300, 500)); // true: 150 KB a flush
 * console.log(smallFolios(true, 20_000, 500)); // false: 10 MB a flush
 * ```
 */
export function smallFolios(small: boolean, bytesPerMs: number, flushIntervalMs: number): boolean {
  assert(bytesPerMs >= 0 && flushIntervalMs >= 0, "a rate and an interval are not negative");
  const perFlushBytes = bytesPerMs * flushIntervalMs;
  if (perFlushBytes >= PREFAULT_LARGE_FOLIOS_FROM * LARGE_FOLIO_BYTES) return false;
  if (perFlushBytes < PREFAULT_SMALL_FOLIOS_BELOW * LARGE_FOLIO_BYTES) return true;
  return small;
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
