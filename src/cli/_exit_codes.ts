/**
 * Exit codes of the `mqstore` command (re-exported by main.ts).
 *
 * @module
 */

/** Exit code: success (`bench`: PASS). */
export const EXIT_OK = 0;
/** Exit code: a file could not be read, or the store could not be opened. */
export const EXIT_IO = 1;
/** Exit code: `bench` ended with FAIL (a put was refused or a message did not read back). */
export const EXIT_BENCH_FAILED = 1;
/** Exit code: bad usage (unknown command or flag, missing argument). */
export const EXIT_USAGE = 2;
/** Exit code: `dump` stopped at an invalid record; `verify` (or `get`, `stats`) found a torn or corrupt one. */
export const EXIT_INVALID_RECORD = 3;
/** Exit code: `get` found no message. */
export const EXIT_NOT_FOUND = 4;
