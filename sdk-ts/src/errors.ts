/** Errors an agent sees when talking to the Review Queue API, and the signals that end an invocation. */

export type ErrorBody = { error?: string; message?: string; [key: string]: unknown };

/** The API answered with an error: `status`, `code` and the whole `body`. */
export class ApiError extends Error {
  readonly status: number;
  readonly body: ErrorBody;
  readonly code: string;

  constructor(status: number, body: unknown, method = "", url = "") {
    const b: ErrorBody =
      body && typeof body === "object" && !Array.isArray(body) ? (body as ErrorBody) : { message: String(body) };
    super(`${method} ${url} -> ${status} ${b.error ?? ""}: ${b.message ?? ""}`.trim());
    this.name = "ApiError";
    this.status = status;
    this.body = b;
    this.code = typeof b.error === "string" ? b.error : "";
  }
}

/** The ask was rejected with 422; `errors` lists every wrong field as {field, message}. */
export class AskInvalid extends ApiError {
  constructor(status: number, body: unknown, method = "", url = "") {
    super(status, body, method, url);
    this.name = "AskInvalid";
    this.message = "invalid ask: " + this.errors.map((e) => `${e.field}: ${e.message}`).join("; ");
  }

  get errors(): { field: string; message: string }[] {
    const errors = this.body.errors;
    return Array.isArray(errors) ? (errors as { field: string; message: string }[]) : [];
  }
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
