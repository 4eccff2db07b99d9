/** One call of the agent for a run, and the API calls it may make with its run token. */
import { Resume, type Action, type JsonObject, type ResumePayload } from "./resume.js";
export declare const TOKEN_HEADER = "x-agentos-run-token";
/** The invocation as the service sends it (snake_case, as on the wire). */
export type InvocationPayload = {
    id: string;
    kind?: "start" | "resume";
    seq?: number;
    run_id: string;
    capability: string;
    version?: string | null;
    api_url?: string;
    run_token?: string;
    input?: unknown;
    eval?: EvalPayload | null;
};
type EvalPayload = {
    experiment_id: string;
    dataset_item_id: string;
    recorded_holds?: {
        ask: JsonObject;
        resume: ResumePayload | null;
    }[];
};
/** An experiment's context: the holds recorded for this dataset item, in asking order. */
export interface Eval {
    experimentId: string;
    datasetItemId: string;
    /** `ask` is the recorded ask as sent (wire JSON); `resume` is null when none was sent. */
    recordedHolds: {
        ask: JsonObject;
        resume: Resume | null;
    }[];
}
export interface AskItem {
    id: string;
    title: string;
    data: JsonObject;
    /** Maps keys of `data` to numbers in [0, 1]. */
    confidence?: Record<string, number>;
    /** Per-item fields (SPEC "Per-item actions, details and schema"); only a service that accepts them. */
    actions?: Action[];
    details?: string;
    schema?: JsonObject;
}
export interface AskRequest {
    intent: string;
    items: AskItem[];
    actions?: Action[];
    details?: string;
    /** Seconds, 60 to 30 days; without it the hold never expires. */
    expiresIn?: number;
    /** File ids from `inv.files.upload()`. */
    files?: string[];
    /** false: return the hold id and let the handler finish; the invocation still answers `suspended`. */
    suspend?: boolean;
}
declare class Api {
    readonly base: string;
    private readonly token;
    private readonly timeoutMs;
    constructor(apiUrl: string, token: string, timeoutMs?: number);
    request(method: string, path: string, init?: {
        body?: string | Uint8Array;
        headers?: Record<string, string>;
        expect?: number[];
    }): Promise<{
        status: number;
        body: unknown;
    }>;
    json(method: string, path: string, value: unknown, extra?: {
        headers?: Record<string, string>;
        expect?: number[];
    }): Promise<{
        status: number;
        body: unknown;
    }>;
}
/** The run's small key/value store; it survives between the invocations of one run. */
export declare class RunState {
    private readonly api;
    private readonly prefix;
    constructor(api: Api, runId: string);
    put(key: string, value: unknown): Promise<void>;
    /** The stored value; a missing key throws unless a fallback is given (`get(key, null)`). */
    get<T = unknown>(key: string, ...fallback: [T?]): Promise<T>;
    /** Forget a key; deleting a missing key is not an error. */
    delete(key: string): Promise<void>;
}
export declare class Files {
    private readonly api;
    constructor(api: Api);
    /** Upload a file of the run's environment and return its file id (for `ask({files})`). */
    upload(pathOrBytes: string | Uint8Array, opts?: {
        name?: string;
        contentType?: string;
    }): Promise<string>;
}
/** What a handler receives: the invocation, its decision on a resume, and the API. */
export declare class Invocation {
    readonly id: string;
    readonly kind: "start" | "resume";
    readonly seq: number;
    readonly runId: string;
    readonly capability: string;
    readonly version: string | null;
    readonly input: any;
    readonly apiUrl: string;
    readonly runToken: string;
    /** null on a start; the decision on a resume. */
    readonly resume: Resume | null;
    /** null outside experiments. */
    readonly eval: Eval | null;
    readonly state: {
        run: RunState;
    };
    readonly files: Files;
    /** The hold this invocation asked; the server answers `suspended` on it. */
    holdId: string | null;
    /** Set when the handler asked in an eval run: the answer is then `failed` with `asked_for_human`. */
    askedInEval: boolean;
    private readonly api;
    constructor(invocation: InvocationPayload, resume?: ResumePayload | null);
    /**
     * Ask a person. Ends the invocation (it throws `Suspend`) unless `suspend: false`, which returns
     * the hold id. Code before the ask runs again on the resume, so keep it idempotent (see `once`).
     * In an eval run no person is asked: the invocation ends with `failed` / `asked_for_human`.
     */
    ask(request: AskRequest & {
        suspend?: true;
    }): Promise<never>;
    ask(request: AskRequest & {
        suspend: false;
    }): Promise<string>;
    ask(request: AskRequest): Promise<string>;
    /** A key stable across every invocation of this run: run id + step. */
    idempotencyKey(step: string): string;
    /**
     * Run `fn` once per run and step; later calls, in any invocation of the run, return the recorded
     * result. It is recorded after `fn` resolves, so a crash in between runs it again.
     */
    once<T>(step: string, fn: () => T | Promise<T>): Promise<T>;
    /**
     * Start a child run and return its run id. Without a key, one is derived from this run, the
     * capability and the input, so a re-run after a resume gets the same child instead of a second one.
     */
    startChild(capability: string, input: unknown, idempotencyKey?: string): Promise<string>;
}
/** JSON with sorted keys, so that equal inputs give the same text. */
export declare function canonicalJson(value: unknown): string;
export {};
