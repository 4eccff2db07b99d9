/** The HTTP server an agent runs: `POST /invoke`, signed by the service. */
import { Invocation } from "./invocation.js";
export type Handler = (inv: Invocation) => unknown;
export type Answer = {
    status: "completed";
    output: unknown;
} | {
    status: "failed";
    error: string;
} | {
    status: "suspended";
    hold_id: string;
};
export interface ServeOptions {
    /** Default 8080; the AGENTOS_PORT environment variable wins, so a deployment places the agent. */
    port?: number;
    /** Default 127.0.0.1 (AGENTOS_HOST wins). */
    host?: string;
    /** `whsec_` + base64; default AGENTOS_SECRET. */
    secret?: string;
    /** Log a line per failed handler (default console.error). */
    log?: (message: string, error?: unknown) => void;
}
/** Call a handler and turn what happened into the invocation's answer. */
export declare function runHandler(handler: Handler, inv: Invocation, log?: typeof defaultLog): Promise<Answer>;
declare function defaultLog(message: string, error?: unknown): void;
/** `new Server(handlers, opts)`, then `await server.listen()`; `server.url` is where it answers. */
export declare class Server {
    readonly handlers: Record<string, Handler>;
    private readonly webhook;
    private readonly opts;
    private readonly answers;
    private readonly http;
    constructor(handlers: Record<string, Handler>, opts?: ServeOptions);
    listen(port?: number, host?: string): Promise<this>;
    get port(): number;
    get url(): string;
    close(): Promise<void>;
    /** Handle a verified `/invoke` body: status code and JSON answer. */
    invoke(body: string, webhookId?: string): Promise<[number, unknown]>;
    private answer;
    private remember;
    private route;
}
/** Serve `POST /invoke` on `{port}` (AGENTOS_PORT wins) until the process ends; resolves once listening. */
export declare function serve(handlers: Record<string, Handler>, opts?: ServeOptions): Promise<Server>;
export {};
