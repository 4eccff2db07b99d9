/** One call of the agent for a run, and the API calls it may make with its run token. */

import { createHash, randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { basename, extname } from "node:path";

import { APIConnectionError, APITimeoutError, ApiError, AskedForHuman, Suspend, apiError } from "./errors.js";
import { Resume, type Action, type JsonObject, type ResumePayload } from "./resume.js";
import type { components } from "./wire.js";

export const TOKEN_HEADER = "x-agentos-run-token";

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
  recorded_holds?: { ask: JsonObject; resume: ResumePayload | null }[];
};

/** An experiment's context: the holds recorded for this dataset item, in asking order. */
export interface Eval {
  experimentId: string;
  datasetItemId: string;
  /** `ask` is the recorded ask as sent (wire JSON); `resume` is null when none was sent. */
  recordedHolds: { ask: JsonObject; resume: Resume | null }[];
}

/** One item of an ask, as the service's ItemIn (generated from its OpenAPI document, src/wire.ts). */
export type AskItem = components["schemas"]["ItemIn"];

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

/** How the run token's client retries; explicit options win over the defaults. */
export interface ApiOptions {
  /** Per attempt, in milliseconds (default 30 000). */
  timeoutMs?: number;
  /** Retries after the first attempt (default 3). */
  maxRetries?: number;
  /** Waits between attempts (tests replace it). */
  sleep?: (ms: number) => Promise<void>;
}

const MAX_WAIT_MS = 60_000;

/**
 * The run token's HTTP client. Every call it makes is safe to repeat (state is put and deleted by key,
 * an ask repeated gets `409 hold_open` with the same hold, uploads and child runs carry an
 * Idempotency-Key), so connection errors, timeouts, 5xx and 429 are retried with backoff, waiting as
 * long as a Retry-After says. One X-Request-ID goes with every attempt of a call.
 */
export class Api {
  readonly base: string;
  private readonly token: string;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(apiUrl: string, token: string, options: ApiOptions = {}) {
    this.base = apiUrl.replace(/\/+$/, "");
    this.token = token;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.maxRetries = options.maxRetries ?? 3;
    this.sleep = options.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
  }

  async request(
    method: string,
    path: string,
    init: { body?: string | Uint8Array; headers?: Record<string, string>; expect?: number[] } = {},
  ): Promise<{ status: number; body: unknown }> {
    const url = this.base + path;
    const requestId = "agentos-" + randomBytes(12).toString("hex");
    const expect = init.expect ?? [200, 201, 204];
    for (let attempt = 0; ; attempt++) {
      const last = attempt >= this.maxRetries;
      let resp: Response;
      let text: string;
      try {
        resp = await fetch(url, {
          method,
          body: init.body,
          headers: { [TOKEN_HEADER]: this.token, "x-request-id": requestId, ...init.headers },
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        text = await resp.text();
      } catch (err) {
        if (!last) {
          await this.sleep(backoffMs(attempt, null));
          continue;
        }
        const timedOut = err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
        const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : "";
        throw timedOut
          ? new APITimeoutError(`${method} ${url}: no answer in ${this.timeoutMs} ms`, requestId, { cause: err })
          : new APIConnectionError(`${method} ${url}: ${String(err)}${cause}`, requestId, { cause: err });
      }
      let body: unknown = null;
      if (text) {
        try {
          body = JSON.parse(text);
        } catch {
          body = { message: text };
        }
      }
      if (expect.includes(resp.status)) return { status: resp.status, body };
      if (last || !(resp.status === 429 || resp.status >= 500)) {
        throw apiError(resp.status, body, method, url, resp.headers.get("x-request-id"));
      }
      await this.sleep(backoffMs(attempt, resp.headers.get("retry-after")));
    }
  }

  json(method: string, path: string, value: unknown, extra: { headers?: Record<string, string>; expect?: number[] } = {}) {
    return this.request(method, path, {
      body: JSON.stringify(value),
      headers: { "content-type": "application/json", ...extra.headers },
      expect: extra.expect,
    });
  }
}

/**
 * Milliseconds before the next attempt: what Retry-After says (seconds or an HTTP date, at most a
 * minute), else 500, 1000, 2000 … (at most 8000) with jitter, so that agents retrying at once spread out.
 */
export function backoffMs(attempt: number, retryAfter: string | null): number {
  if (retryAfter) {
    const seconds = /^\s*\d+(\.\d+)?\s*$/.test(retryAfter) ? Number(retryAfter) : (Date.parse(retryAfter) - Date.now()) / 1000;
    if (Number.isFinite(seconds)) return Math.min(Math.max(seconds * 1000, 0), MAX_WAIT_MS);
  }
  return Math.min(500 * 2 ** attempt, 8000) * (0.5 + Math.random() / 2);
}

/** The run's small key/value store; it survives between the invocations of one run. */
export class RunState {
  private readonly api: Api;
  private readonly prefix: string;

  constructor(api: Api, runId: string) {
    this.api = api;
    this.prefix = `/v0/runs/${encodeURIComponent(runId)}/state/`;
  }

  async put(key: string, value: unknown): Promise<void> {
    await this.api.json("PUT", this.prefix + encodeURIComponent(key), value);
  }

  /** The stored value; a missing key throws unless a fallback is given (`get(key, null)`). */
  async get<T = unknown>(key: string, ...fallback: [T?]): Promise<T> {
    const { status, body } = await this.api.request("GET", this.prefix + encodeURIComponent(key), {
      expect: [200, 404],
    });
    if (status === 404) {
      if (fallback.length === 0) throw new RangeError(`no run state ${JSON.stringify(key)}`);
      return fallback[0] as T;
    }
    return body as T;
  }

  /** Forget a key; deleting a missing key is not an error. */
  async delete(key: string): Promise<void> {
    await this.api.request("DELETE", this.prefix + encodeURIComponent(key), { expect: [200, 204, 404] });
  }
}

const CONTENT_TYPES: Record<string, string> = {
  ".pdf": "application/pdf",
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".gif": "image/gif",
  ".webp": "image/webp",
  ".txt": "text/plain",
  ".csv": "text/csv",
  ".json": "application/json",
  ".html": "text/html",
  ".xml": "application/xml",
  ".zip": "application/zip",
};

export class Files {
  private readonly api: Api;

  constructor(api: Api) {
    this.api = api;
  }

  /** Upload a file of the run's environment and return its file id (for `ask({files})`). */
  /**
   * The upload carries an Idempotency-Key (by default one made of the name, type and content), so a
   * retry after a lost answer, or the same upload in a later invocation of the run, gets the first file.
   */
  async upload(
    pathOrBytes: string | Uint8Array,
    opts: { name?: string; contentType?: string; idempotencyKey?: string } = {},
  ): Promise<string> {
    let data: Uint8Array;
    let name = opts.name;
    if (typeof pathOrBytes === "string") {
      data = await readFile(pathOrBytes);
      name ??= basename(pathOrBytes);
    } else {
      data = pathOrBytes;
      name ??= "file";
    }
    const contentType = opts.contentType ?? CONTENT_TYPES[extname(name).toLowerCase()] ?? "application/octet-stream";
    // Header values must be ASCII; other names travel percent-encoded.
    const ascii = /^[\x20-\x7e]*$/.test(name);
    const { body } = await this.api.request("POST", "/v0/files", {
      body: data,
      headers: {
        "content-type": contentType,
        "x-filename": ascii ? name : encodeURIComponent(name),
        "idempotency-key": opts.idempotencyKey ?? "file:" + createHash("sha256").update(JSON.stringify([name, contentType]) + "\0").update(data).digest("hex"),
      },
    });
    return (body as { file_id: string }).file_id;
  }
}

/** What a handler receives: the invocation, its decision on a resume, and the API. */
export class Invocation {
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
  readonly state: { run: RunState };
  readonly files: Files;
  /** The hold this invocation asked; the server answers `suspended` on it. */
  holdId: string | null = null;
  /** Set when the handler asked in an eval run: the answer is then `failed` with `asked_for_human`. */
  askedInEval = false;
  private readonly api: Api;

  constructor(invocation: InvocationPayload, resume: ResumePayload | null = null, apiOptions: ApiOptions = {}) {
    for (const key of ["id", "run_id", "capability"] as const) {
      if (typeof invocation[key] !== "string") throw new TypeError(`invocation.${key} is missing`);
    }
    this.id = invocation.id;
    this.kind = invocation.kind ?? "start";
    this.seq = invocation.seq ?? 1;
    this.runId = invocation.run_id;
    this.capability = invocation.capability;
    this.version = invocation.version ?? null;
    this.input = invocation.input ?? null;
    this.apiUrl = invocation.api_url ?? "";
    this.runToken = invocation.run_token ?? "";
    this.resume = resume ? Resume.fromJson(resume) : null;
    const ev = invocation.eval;
    this.eval = ev
      ? {
          experimentId: ev.experiment_id,
          datasetItemId: ev.dataset_item_id,
          recordedHolds: (ev.recorded_holds ?? []).map((h) => ({
            ask: h.ask,
            resume: h.resume ? Resume.fromJson(h.resume) : null,
          })),
        }
      : null;
    this.api = new Api(this.apiUrl, this.runToken, apiOptions);
    this.state = { run: new RunState(this.api, this.runId) };
    this.files = new Files(this.api);
  }

  /**
   * Ask a person. Ends the invocation (it throws `Suspend`) unless `suspend: false`, which returns
   * the hold id. Code before the ask runs again on the resume, so keep it idempotent (see `once`).
   * In an eval run no person is asked: the invocation ends with `failed` / `asked_for_human`.
   */
  ask(request: AskRequest & { suspend?: true }): Promise<never>;
  ask(request: AskRequest & { suspend: false }): Promise<string>;
  ask(request: AskRequest): Promise<string>;
  async ask(request: AskRequest): Promise<string> {
    const body: components["schemas"]["AskIn"] = { intent: request.intent, items: request.items };
    if (request.actions !== undefined) body.actions = request.actions;
    if (request.details !== undefined) body.details = request.details;
    if (request.expiresIn !== undefined) body.expires_in = request.expiresIn;
    if (request.files !== undefined) body.files = request.files;
    if (this.eval) {
      this.askedInEval = true;
      // The service answers an eval run's ask with 409 eval_run and records the run as asked_for_human;
      // whatever it answers, this invocation is over.
      await this.api.json("POST", "/v0/holds", body, { expect: [] }).catch(() => undefined);
      throw new AskedForHuman();
    }
    const { status, body: answer } = await this.api.json("POST", "/v0/holds", body, { expect: [201, 409] });
    const payload = (answer ?? {}) as { hold_id?: string; error?: string };
    // 409 hold_open: a re-run of an invocation that already asked suspends on that hold.
    if (status === 409 && (payload.error !== "hold_open" || !payload.hold_id)) {
      throw new ApiError(409, payload, "POST", this.api.base + "/v0/holds");
    }
    this.holdId = payload.hold_id!;
    if (request.suspend !== false) throw new Suspend(this.holdId);
    return this.holdId;
  }

  /** A key stable across every invocation of this run: run id + step. */
  idempotencyKey(step: string): string {
    return `${this.runId}:${step}`;
  }

  /**
   * Run `fn` once per run and step; later calls, in any invocation of the run, return the recorded
   * result. It is recorded after `fn` resolves, so a crash in between runs it again.
   */
  async once<T>(step: string, fn: () => T | Promise<T>): Promise<T> {
    const key = `once:${step}`;
    const recorded = await this.state.run.get<{ result: T } | null>(key, null);
    if (recorded && typeof recorded === "object" && "result" in recorded) return recorded.result;
    const result = await fn();
    await this.state.run.put(key, { result });
    return result;
  }

  /**
   * Start a child run and return its run id. Without a key, one is derived from this run, the
   * capability and the input, so a re-run after a resume gets the same child instead of a second one.
   */
  async startChild(capability: string, input: unknown, idempotencyKey?: string): Promise<string> {
    const key =
      idempotencyKey ??
      this.idempotencyKey(
        `child:${capability}:${createHash("sha256").update(canonicalJson([capability, input])).digest("hex").slice(0, 32)}`,
      );
    const { body } = await this.api.json(
      "POST",
      "/v0/runs",
      { capability, input },
      { headers: { "idempotency-key": key } },
    );
    return (body as { run_id: string }).run_id;
  }
}

/** JSON with sorted keys, so that equal inputs give the same text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as JsonObject)[k]]))
      : v,
  );
}
