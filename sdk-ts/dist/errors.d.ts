/** Errors an agent sees when talking to the Review Queue API, and the signals that end an invocation. */
export type ErrorBody = {
    error?: string;
    message?: string;
    [key: string]: unknown;
};
/** The API answered with an error: `status`, `code` and the whole `body`. */
export declare class ApiError extends Error {
    readonly status: number;
    readonly body: ErrorBody;
    readonly code: string;
    constructor(status: number, body: unknown, method?: string, url?: string);
}
/** The ask was rejected with 422; `errors` lists every wrong field as {field, message}. */
export declare class AskInvalid extends ApiError {
    constructor(status: number, body: unknown, method?: string, url?: string);
    get errors(): {
        field: string;
        message: string;
    }[];
}
/**
 * Thrown by `inv.ask()` to end the invocation; the server answers `suspended` with `holdId`.
 * A handler that catches it still answers `suspended`: once a hold is asked, that is the answer.
 */
export declare class Suspend extends Error {
    readonly holdId: string;
    constructor(holdId: string);
}
/** Thrown by `inv.ask()` in an eval run: no person is asked, the invocation answers `failed`. */
export declare class AskedForHuman extends Error {
    constructor();
}
