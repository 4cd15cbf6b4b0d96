/**
 * The one error class callers of mqstore handle.
 *
 * Every condition a caller may need to react to (a locked directory, a full
 * disk, a corrupt file, a rejected message) is an {@link MqStoreError} with a
 * stable {@link MqStoreErrorCode}. Bad argument types are `TypeError`s and bad
 * argument values that are programming mistakes are `RangeError`s.
 *
 * @module
 */

/**
 * Stable codes carried by {@link MqStoreError}.
 *
 * @example Deciding whether to retry
 * ```ts
 * import { MqStoreError, type MqStoreErrorCode } from "./errors.ts";
 *
 * function retryable(code: MqStoreErrorCode): boolean {
 *   return code === "OS_PAGECACHE_BUSY" || code === "FLUSH_DISK_TIMEOUT";
 * }
 * console.log(retryable(new MqStoreError("LOCKED", "Store /s is locked").code)); // false
 * ```
 */
export type MqStoreErrorCode =
  | "NOT_FOUND"
  | "ALREADY_EXISTS"
  | "PERMISSION_DENIED"
  | "NO_SPACE"
  | "IO_ERROR"
  | "LOCKED"
  | "UNSUPPORTED"
  | "INVALID_FILE"
  | "CORRUPT_RECORD"
  | "MESSAGE_ILLEGAL"
  | "PROPERTIES_SIZE_EXCEEDED"
  | "SERVICE_NOT_AVAILABLE"
  | "CLOSED"
  | "POOL_EXHAUSTED"
  | "FLUSH_DISK_TIMEOUT"
  | "OS_PAGECACHE_BUSY";

/**
 * An error with a stable `code` that callers can switch on.
 *
 * @example Telling a locked directory apart
 * ```ts
 * import { MqStoreError } from "./errors.ts";
 *
 * const error = new MqStoreError("LOCKED", "Store directory /tmp/s is locked by pid 42");
 * if (error instanceof MqStoreError && error.code === "LOCKED") {
 *   console.log(error.message);
 * }
 * ```
 */
export class MqStoreError extends Error {
  /** The stable code of the condition. */
  readonly code: MqStoreErrorCode;

  /**
   * Creates an error.
   *
   * @param code The stable code.
   * @param message A sentence naming the values that matter.
   * @param options `cause`: the underlying error, if any.
   */
  constructor(
    code: MqStoreErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "MqStoreError";
    this.code = code;
  }
}

const SYSTEM_CODES: Readonly<Record<string, MqStoreErrorCode>> = {
  ENOENT: "NOT_FOUND",
  ENOTDIR: "NOT_FOUND",
  EEXIST: "ALREADY_EXISTS",
  EACCES: "PERMISSION_DENIED",
  EPERM: "PERMISSION_DENIED",
  EROFS: "PERMISSION_DENIED",
  ENOSPC: "NO_SPACE",
  EDQUOT: "NO_SPACE",
  EFBIG: "NO_SPACE",
  EIO: "IO_ERROR",
  EAGAIN: "LOCKED",
  EWOULDBLOCK: "LOCKED",
};

/**
 * Wraps an operating-system error (anything with a string `code` such as
 * `ENOENT`) into an {@link MqStoreError} whose message names the operation
 * and the path. Errors that already are {@link MqStoreError}s pass through.
 *
 * @param error The caught error.
 * @param operation What was being done, e.g. `"open"`.
 * @param path The file or directory involved.
 * @returns An {@link MqStoreError}.
 */
export function systemError(
  error: unknown,
  operation: string,
  path: string,
): MqStoreError {
  if (error instanceof MqStoreError) return error;
  const errno = typeof error === "object" && error !== null &&
      "code" in error && typeof error.code === "string"
    ? error.code
    : undefined;
  const code: MqStoreErrorCode = (errno === undefined ? undefined : SYSTEM_CODES[errno]) ??
    "IO_ERROR";
  const reason = errno ?? (error instanceof Error ? error.message : String(error));
  return new MqStoreError(
    code,
    `Cannot ${operation} ${path}: ${reason}`,
    { cause: error },
  );
}

/**
 * Builds the error for a failed libc call that reported `errno`.
 *
 * @param errno The errno value (positive).
 * @param operation What was being done, e.g. `"msync"`.
 * @param path The file involved.
 * @returns An {@link MqStoreError}.
 */
export function errnoError(
  errno: number,
  operation: string,
  path: string,
): MqStoreError {
  const name = ERRNO_NAMES[errno] ?? `errno ${errno}`;
  const code: MqStoreErrorCode = SYSTEM_CODES[name] ?? "IO_ERROR";
  const error = new MqStoreError(
    code,
    `Cannot ${operation} ${path}: ${name}`,
  );
  return error;
}

/** Linux errno numbers (same on x86_64 and arm64) for messages. */
const ERRNO_NAMES: Readonly<Record<number, string>> = {
  1: "EPERM",
  2: "ENOENT",
  5: "EIO",
  9: "EBADF",
  11: "EAGAIN",
  12: "ENOMEM",
  13: "EACCES",
  14: "EFAULT",
  16: "EBUSY",
  17: "EEXIST",
  19: "ENODEV",
  20: "ENOTDIR",
  21: "EISDIR",
  22: "EINVAL",
  27: "EFBIG",
  28: "ENOSPC",
  30: "EROFS",
  38: "ENOSYS",
  95: "EOPNOTSUPP",
  122: "EDQUOT",
};
