/** Errors an agent sees when talking to the Review Queue API, and the signals that end an invocation. */

export type ErrorBody = { error?: string; message?: string; [key: string]: unknown };

/** Any failure of a call to the Review Queue API (after the SDK's retries). */
export class AgentOSError extends Error {
  /** The X-Request-ID of the call: the service's answer's, else the one the SDK sent. */
  requestId: string | null = null;
}

/** The service could not be reached, or the connection broke before an answer. */
export class APIConnectionError extends AgentOSError {
  constructor(message: string, requestId: string | null = null, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "APIConnectionError";
    this.requestId = requestId;
  }
}

/** The service did not answer within the timeout. */
export class APITimeoutError extends APIConnectionError {
  constructor(message: string, requestId: string | null = null, options?: { cause?: unknown }) {
    super(message, requestId, options);
    this.name = "APITimeoutError";
  }
}

/** The API answered with an error: `status`, `code`, the whole `body` and the service's `requestId`. */
export class ApiError extends AgentOSError {
  readonly status: number;
  readonly body: ErrorBody;
  readonly code: string;

  constructor(status: number, body: unknown, method = "", url = "", requestId: string | null = null) {
    const b: ErrorBody =
      body && typeof body === "object" && !Array.isArray(body) ? (body as ErrorBody) : { message: String(body) };
    super(`${method} ${url} -> ${status} ${b.error ?? ""}: ${b.message ?? ""}`.trim());
    this.name = "ApiError";
    this.status = status;
    this.body = b;
    this.code = typeof b.error === "string" ? b.error : "";
    this.requestId = requestId;
  }
}

function byStatus(name: string) {
  return class extends ApiError {
    constructor(status: number, body: unknown, method = "", url = "", requestId: string | null = null) {
      super(status, body, method, url, requestId);
      this.name = name;
    }
  };
}

/** 400: the body is not JSON, or not what the endpoint takes. */
export class BadRequest extends byStatus("BadRequest") {}
/** 401: the run token is missing, wrong or no longer live. */
export class AuthenticationError extends byStatus("AuthenticationError") {}
export class PermissionDenied extends byStatus("PermissionDenied") {}
export class NotFound extends byStatus("NotFound") {}
/** 409: the run or hold is not in a state that allows the call. */
export class ConflictError extends byStatus("ConflictError") {}
export class PayloadTooLarge extends byStatus("PayloadTooLarge") {}
/** 422: `body.errors` lists every wrong field. */
export class UnprocessableEntity extends byStatus("UnprocessableEntity") {}
/** 429, still after the SDK waited as the service asked (Retry-After) and retried. */
export class RateLimited extends byStatus("RateLimited") {}
/** 5xx, still after the SDK's retries. */
export class ServerError extends byStatus("ServerError") {}

/** The ask was rejected with 422; `errors` lists every wrong field as {field, message}. */
export class AskInvalid extends UnprocessableEntity {
  constructor(status: number, body: unknown, method = "", url = "", requestId: string | null = null) {
    super(status, body, method, url, requestId);
    this.name = "AskInvalid";
    this.message = "invalid ask: " + this.errors.map((e) => `${e.field}: ${e.message}`).join("; ");
  }

  get errors(): { field: string; message: string }[] {
    const errors = this.body.errors;
    return Array.isArray(errors) ? (errors as { field: string; message: string }[]) : [];
  }
}

const BY_STATUS: Record<number, typeof ApiError> = {
  400: BadRequest,
  401: AuthenticationError,
  403: PermissionDenied,
  404: NotFound,
  409: ConflictError,
  413: PayloadTooLarge,
  422: UnprocessableEntity,
  429: RateLimited,
};

/** The error for an answer: AskInvalid for 422 invalid, ServerError for any 5xx, else by status. */
export function apiError(status: number, body: unknown, method: string, url: string, requestId: string | null): ApiError {
  const code = body && typeof body === "object" ? (body as ErrorBody).error : undefined;
  if (status === 422 && code === "invalid") return new AskInvalid(status, body, method, url, requestId);
  const cls = status >= 500 ? ServerError : (BY_STATUS[status] ?? ApiError);
  return new cls(status, body, method, url, requestId);
}

/**
 * Thrown by `inv.ask()` to end the invocation; the server answers `suspended` with `holdId`.
 * A handler that catches it still answers `suspended`: once a hold is asked, that is the answer.
 */
export class Suspend extends Error {
  readonly holdId: string;

  constructor(holdId: string) {
    super(`suspended on ${holdId}`);
    this.name = "Suspend";
    this.holdId = holdId;
  }
}

/** Thrown by `inv.ask()` in an eval run: no person is asked, the invocation answers `failed`. */
export class AskedForHuman extends Error {
  constructor() {
    super("asked_for_human");
    this.name = "AskedForHuman";
  }
}
