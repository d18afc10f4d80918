// Errors of the SDK. The daemon's error answers become one class per API
// error code (all subclasses of APIError); failures of the transport are
// ConnectionError, TimeoutError and StreamCutError. Every class extends
// AirlockError, so `catch (e) { if (e instanceof AirlockError) ... }`
// catches all of them.

import type { ErrorCode } from "./models.js";

/** The base of every error this SDK throws. */
export class AirlockError extends Error {
  /** An API error code, or "connection", "timeout", "stream_cut", "bad_answer". */
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** An error answered by the daemon, with its message. */
export class APIError extends AirlockError {
  /** The HTTP status of the answer; 0 for an error sent at the end of a stream. */
  readonly status: number;
  /** The daemon's message, as it sent it. */
  readonly apiMessage: string;
  /** How long the daemon asked to wait before trying again (Retry-After), in ms; 0 when it did not say. */
  readonly retryAfterMs: number;
  constructor(code: string, message: string, status = 0, retryAfterMs = 0) {
    super(code, status ? `airlock: ${message} (${code}, HTTP ${status})` : `airlock: ${message} (${code})`);
    this.status = status;
    this.apiMessage = message;
    this.retryAfterMs = retryAfterMs;
  }
}

/** invalid_argument (400): the request is malformed. */
export class InvalidArgumentError extends APIError {}
/** command_not_found (400): the command does not exist in the sandbox (a shell's 127); nothing was started. */
export class CommandNotFoundError extends InvalidArgumentError {}
/** not_executable (400): the command exists but cannot be executed (a shell's 126); nothing was started. */
export class NotExecutableError extends InvalidArgumentError {}
/** unauthenticated (401): over TCP, the API key is missing, unknown or revoked. */
export class UnauthenticatedError extends APIError {}
/** permission_denied (403): the operation is not allowed (API keys over TCP, a path the policy forbids). */
export class PermissionDeniedError extends APIError {}
/** not_found (404): no such sandbox, process, file or key. */
export class NotFoundError extends APIError {}
/** failed_precondition (409): the sandbox, process or file is in the wrong state. */
export class FailedPreconditionError extends APIError {}
/** already_exists (409): the target exists. */
export class AlreadyExistsError extends APIError {}
/** too_large (413): a body, file or download goes past a limit. */
export class TooLargeError extends APIError {}
/** resource_exhausted (429): the daemon is at capacity; see retryAfterMs. */
export class ResourceExhaustedError extends APIError {}
/** internal (500). */
export class InternalError extends APIError {}
/** unavailable (503): the daemon is starting or draining. */
export class UnavailableError extends APIError {}
/** not_implemented (501). */
export class NotImplementedError extends APIError {}
/** deadline_exceeded (504). */
export class DeadlineExceededError extends APIError {}
/** method_not_allowed (405). */
export class MethodNotAllowedError extends APIError {}

/** The class of each API error code. */
export const ERROR_CLASSES: { readonly [K in ErrorCode]: new (code: string, message: string, status?: number, retryAfterMs?: number) => APIError } = {
  invalid_argument: InvalidArgumentError,
  command_not_found: CommandNotFoundError,
  not_executable: NotExecutableError,
  unauthenticated: UnauthenticatedError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  failed_precondition: FailedPreconditionError,
  already_exists: AlreadyExistsError,
  too_large: TooLargeError,
  resource_exhausted: ResourceExhaustedError,
  internal: InternalError,
  unavailable: UnavailableError,
  not_implemented: NotImplementedError,
  deadline_exceeded: DeadlineExceededError,
  method_not_allowed: MethodNotAllowedError,
};

/** The code of an error answer whose body is not the API's (a proxy's page). */
const STATUS_CODES: Record<number, ErrorCode> = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "permission_denied",
  404: "not_found",
  405: "method_not_allowed",
  409: "failed_precondition",
  413: "too_large",
  429: "resource_exhausted",
  500: "internal",
  501: "not_implemented",
  503: "unavailable",
  504: "deadline_exceeded",
};

/** Builds the error of a code and message (status 0: sent in a stream). */
export function apiError(code: string, message: string, status = 0, retryAfterMs = 0): APIError {
  const cls = (ERROR_CLASSES as Record<string, (typeof ERROR_CLASSES)[ErrorCode]>)[code] ?? APIError;
  return new cls(code, message, status, retryAfterMs);
}

/** Builds the error of an answer from its status, Retry-After and body. */
export function errorFromAnswer(status: number, retryAfterMs: number, body: Buffer): APIError {
  let code = "";
  let message = "";
  try {
    const v = JSON.parse(body.toString("utf8"));
    if (v && typeof v.error === "object" && v.error) {
      code = typeof v.error.code === "string" ? v.error.code : "";
      message = typeof v.error.message === "string" ? v.error.message : "";
    }
  } catch {
    // not the API's body
  }
  if (!code) code = STATUS_CODES[status] ?? (status >= 500 ? "internal" : "unknown");
  if (!message) {
    const text = body.toString("utf8").trim().slice(0, 200);
    message = text || `HTTP status ${status}`;
  }
  return apiError(code, message, status, retryAfterMs);
}

/** The daemon cannot be reached (nothing listens, the socket is missing, the connection dropped before an answer). */
export class ConnectionError extends AirlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("connection", message, options);
  }
}

/** A call took longer than its timeout and was abandoned. */
export class TimeoutError extends AirlockError {
  constructor(message: string) {
    super("timeout", message);
  }
}

/** A stream (output, network events, an archive) ended in the middle: its data is incomplete. */
export class StreamCutError extends AirlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("stream_cut", message, options);
  }
}
