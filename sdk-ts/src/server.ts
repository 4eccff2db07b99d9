/** The HTTP server an agent runs: `POST /invoke`, signed by the service. */

import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { Webhook, WebhookVerificationError } from "standardwebhooks";

import { AskedForHuman, Suspend } from "./errors.js";
import { Invocation, type InvocationPayload } from "./invocation.js";
import type { ResumePayload } from "./resume.js";

export type Handler = (inv: Invocation) => unknown;

export type Answer =
  | { status: "completed"; output: unknown }
  | { status: "failed"; error: string }
  | { status: "suspended"; hold_id: string };

export interface ServeOptions {
  /** Default 8080; the AGENTOS_PORT environment variable wins, so a deployment places the agent. */
  port?: number;
  /** Default 127.0.0.1 (AGENTOS_HOST wins). */
  host?: string;
  /** `whsec_` + base64; default AGENTOS_SECRET. */
  secret?: string;
  /** Log a line per failed handler (default console.error). */
  log?: (message: string, error?: unknown) => void;
  /** How long a request's headers, and then its body, may take to arrive (default 10 s). */
  readMs?: number;
}

const MAX_BODY = 16 * 1024 * 1024;
/** A request's headers, and then its body, must arrive within this (a slow sender holds its buffer). */
export const READ_MS = 10_000;
/** standardwebhooks' tolerance: a timestamp further off is refused before the body is read. */
const TOLERANCE_S = 5 * 60;
const REMEMBERED_ANSWERS = 10_000;

/** Call a handler and turn what happened into the invocation's answer. */
export async function runHandler(handler: Handler, inv: Invocation, log = defaultLog): Promise<Answer> {
  let output: unknown;
  let failure: unknown = undefined;
  let threw = false;
  try {
    output = await handler(inv);
  } catch (err) {
    threw = true;
    failure = err;
  }
  // In an eval run an ask ends the invocation, whatever the handler did after it.
  if (inv.askedInEval) return { status: "failed", error: "asked_for_human" };
  // Once a hold is asked, the invocation's answer is `suspended` on it, even if the handler
  // caught the SDK's signal or failed afterwards.
  if (inv.holdId !== null) return { status: "suspended", hold_id: inv.holdId };
  if (threw) {
    if (failure instanceof Suspend) return { status: "suspended", hold_id: failure.holdId };
    if (failure instanceof AskedForHuman) return { status: "failed", error: "asked_for_human" };
    log(`handler for ${inv.capability} failed (invocation ${inv.id})`, failure);
    const message = failure instanceof Error ? failure.message || failure.name : String(failure);
    return { status: "failed", error: message || "handler failed" };
  }
  if (output === undefined) output = null;
  try {
    JSON.stringify(output);
  } catch (err) {
    return { status: "failed", error: `output is not JSON: ${(err as Error).message}` };
  }
  return { status: "completed", output };
}

function defaultLog(message: string, error?: unknown) {
  console.error(`[agentos] ${message}`, error ?? "");
}

/** `new Server(handlers, opts)`, then `await server.listen()`; `server.url` is where it answers. */
export class Server {
  readonly handlers: Record<string, Handler>;
  private readonly webhook: Webhook;
  private readonly opts: ServeOptions;
  private readonly answers = new Map<string, { answer: Promise<Answer>; done: boolean }>();
  private readonly http: HttpServer;
  private readonly readMs: number;

  constructor(handlers: Record<string, Handler>, opts: ServeOptions = {}) {
    const secret = opts.secret ?? process.env.AGENTOS_SECRET;
    if (!secret) throw new Error("a signing secret is required: pass {secret} or set AGENTOS_SECRET");
    if (!/^whsec_[A-Za-z0-9+/]+={0,2}$/.test(secret)) {
      throw new Error("the signing secret must be 'whsec_' followed by base64");
    }
    this.webhook = new Webhook(secret);
    this.handlers = { ...handlers };
    this.opts = opts;
    this.http = createServer((req, res) => {
      this.route(req, res).catch((err) => {
        (opts.log ?? defaultLog)("request failed", err);
        if (!res.headersSent) send(res, 500, { error: "agent_error", message: String(err) });
      });
    });
    // A resume may take as long as the capability's timeout; Node's 5 min request default is not ours to impose.
    // The request itself is bounded by its parts: headers by headersTimeout, the body by readBody's deadline.
    this.http.requestTimeout = 0;
    this.readMs = opts.readMs ?? READ_MS;
    this.http.headersTimeout = this.readMs;
  }

  async listen(port?: number, host?: string): Promise<this> {
    const envPort = process.env.AGENTOS_PORT;
    const p = envPort ? Number(envPort) : (port ?? this.opts.port ?? 8080);
    if (!Number.isInteger(p) || p < 0 || p > 65535) {
      throw new Error(`the port must be an integer from 0 to 65535, got ${JSON.stringify(envPort ?? port ?? this.opts.port)}`);
    }
    const h = process.env.AGENTOS_HOST || host || this.opts.host || "127.0.0.1";
    await new Promise<void>((resolve, reject) => {
      this.http.once("error", reject);
      this.http.listen(p, h, () => {
        this.http.off("error", reject);
        resolve();
      });
    });
    return this;
  }

  get port(): number {
    return (this.http.address() as AddressInfo).port;
  }

  get url(): string {
    const { address, port } = this.http.address() as AddressInfo;
    return `http://${address.includes(":") ? `[${address}]` : address}:${port}`;
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.http.close(() => resolve());
      this.http.closeAllConnections();
    });
  }

  /** Handle a verified `/invoke` body: status code and JSON answer. */
  async invoke(body: string, webhookId?: string): Promise<[number, unknown]> {
    let payload: { invocation: InvocationPayload; resume?: ResumePayload | null };
    try {
      payload = JSON.parse(body);
      if (typeof payload?.invocation?.id !== "string") throw new TypeError("no invocation id");
    } catch {
      return [400, { error: "bad_json", message: "expected {invocation: {id, …}}" }];
    }
    const invocation = payload.invocation;
    if (webhookId !== undefined && webhookId !== invocation.id) {
      return [400, { error: "bad_json", message: "webhook-id is not the invocation id" }];
    }
    const handler = Object.hasOwn(this.handlers, invocation.capability) ? this.handlers[invocation.capability] : undefined;
    if (!handler) {
      return [404, { error: "not_found", message: `unknown capability ${JSON.stringify(invocation.capability)}` }];
    }
    // A retry of a delivery that is still running (or has answered) gets the first answer.
    let entry = this.answers.get(invocation.id);
    if (!entry) {
      const started = { answer: this.answer(handler, invocation, payload.resume ?? null), done: false };
      started.answer.then(() => (started.done = true));
      this.remember(invocation.id, started);
      entry = started;
    }
    return [200, await entry.answer];
  }

  private async answer(handler: Handler, invocation: InvocationPayload, resume: ResumePayload | null): Promise<Answer> {
    let inv: Invocation;
    try {
      inv = new Invocation(invocation, resume);
    } catch (err) {
      return { status: "failed", error: `malformed invocation: ${(err as Error).message}` };
    }
    return runHandler(handler, inv, this.opts.log);
  }

  private remember(id: string, entry: { answer: Promise<Answer>; done: boolean }) {
    this.answers.set(id, entry);
    if (this.answers.size <= REMEMBERED_ANSWERS) return;
    // Forget the oldest finished answers; one still running stays so its retries can wait for it.
    for (const [oldId, old] of this.answers) {
      if (this.answers.size <= REMEMBERED_ANSWERS) break;
      if (old.done) this.answers.delete(oldId);
      else break;
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse) {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method === "GET" && (path === "/" || path === "/healthz")) {
      return send(res, 200, { status: "ok", capabilities: Object.keys(this.handlers).sort() });
    }
    if (req.method !== "POST" || path !== "/invoke") {
      return send(res, 404, { error: "not_found", message: "POST /invoke only" });
    }
    // Everything that needs no body is checked before reading it: the signature's headers and timestamp,
    // and a declared size within MAX_BODY. Then the body is read by a deadline.
    const refusal = headerRefusal(req);
    if (refusal) return refuse(req, res, refusal[0], refusal[1]);
    const body = await readBody(req, Number(req.headers["content-length"]), this.readMs);
    if (body === null) {
      return refuse(req, res, 408, { error: "timeout", message: `the body did not arrive within ${this.readMs} ms` });
    }
    try {
      this.webhook.verify(body, req.headers as Record<string, string>, { jsonParse: false });
    } catch (err) {
      if (err instanceof WebhookVerificationError || err instanceof Error) {
        return send(res, 401, { error: "unauthorized", message: err.message });
      }
      throw err;
    }
    const id = req.headers["webhook-id"];
    const [status, answer] = await this.invoke(body.toString("utf8"), typeof id === "string" ? id : undefined);
    send(res, status, answer);
  }
}

function send(res: ServerResponse, status: number, body: unknown) {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { "content-type": "application/json", "content-length": String(data.length) });
  res.end(data);
}

type Refusal = [number, { error: string; message: string }];

function headerRefusal(req: IncomingMessage): Refusal | null {
  const id = req.headers["webhook-id"];
  const timestamp = req.headers["webhook-timestamp"];
  const signature = req.headers["webhook-signature"];
  if (!id || !timestamp || !signature) return [401, { error: "unauthorized", message: "missing webhook headers" }];
  // standardwebhooks' checks and words, made before the body is read.
  const ts = Number(timestamp);
  if (!/^\d+$/.test(String(timestamp))) return [401, { error: "unauthorized", message: "Invalid Signature Headers" }];
  const now = Date.now() / 1000;
  if (ts < now - TOLERANCE_S) return [401, { error: "unauthorized", message: "Message timestamp too old" }];
  if (ts > now + TOLERANCE_S) return [401, { error: "unauthorized", message: "Message timestamp too new" }];
  const length = req.headers["content-length"];
  if (length === undefined || !/^\d+$/.test(length)) {
    return [411, { error: "length_required", message: "a content-length is required" }];
  }
  if (Number(length) > MAX_BODY) return [413, { error: "too_large", message: "body too large" }];
  return null;
}

/** Answers without reading the rest of the request, and closes the connection. */
function refuse(req: IncomingMessage, res: ServerResponse, status: number, body: unknown) {
  res.setHeader("connection", "close");
  send(res, status, body);
  res.on("finish", () => req.destroy());
}

/** The declared `length` bytes of body, or null when they did not all arrive within `ms`. */
function readBody(req: IncomingMessage, length: number, ms: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => {
      req.removeAllListeners("data");
      req.pause();
      resolve(null);
    }, ms);
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > length) {
        clearTimeout(timer);
        resolve(null);
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on("end", () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks));
    });
    req.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** Serve `POST /invoke` on `{port}` (AGENTOS_PORT wins) until the process ends; resolves once listening. */
export async function serve(handlers: Record<string, Handler>, opts: ServeOptions = {}): Promise<Server> {
  const server = await new Server(handlers, opts).listen();
  console.log(`[agentos] serving ${Object.keys(handlers).sort().join(", ")} on ${server.url}`);
  return server;
}
