/** Errors an agent sees when talking to the Review Queue API, and the signals that end an invocation. */
/** The API answered with an error: `status`, `code` and the whole `body`. */
export class ApiError extends Error {
    status;
    body;
    code;
    constructor(status, body, method = "", url = "") {
        const b = body && typeof body === "object" && !Array.isArray(body) ? body : { message: String(body) };
        super(`${method} ${url} -> ${status} ${b.error ?? ""}: ${b.message ?? ""}`.trim());
        this.name = "ApiError";
        this.status = status;
        this.body = b;
        this.code = typeof b.error === "string" ? b.error : "";
    }
}
/** The ask was rejected with 422; `errors` lists every wrong field as {field, message}. */
export class AskInvalid extends ApiError {
    constructor(status, body, method = "", url = "") {
        super(status, body, method, url);
        this.name = "AskInvalid";
        this.message = "invalid ask: " + this.errors.map((e) => `${e.field}: ${e.message}`).join("; ");
    }
    get errors() {
        const errors = this.body.errors;
        return Array.isArray(errors) ? errors : [];
    }
}
/**
 * Thrown by `inv.ask()` to end the invocation; the server answers `suspended` with `holdId`.
 * A handler that catches it still answers `suspended`: once a hold is asked, that is the answer.
 */
export class Suspend extends Error {
    holdId;
    constructor(holdId) {
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
//# sourceMappingURL=errors.js.map