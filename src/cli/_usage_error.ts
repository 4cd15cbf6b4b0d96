/**
 * The error of a command-line mistake (unknown flag, missing or malformed
 * value): the CLI answers it in one line with exit code 2, never with a
 * stack trace.
 *
 * @module
 */

/** A user mistake on the command line: reported in one line with exit code 2. */
export class UsageError extends Error {
  override name = "UsageError";
}
