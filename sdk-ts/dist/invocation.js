/** One call of the agent for a run, and the API calls it may make with its run token. */
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { basename, extname } from "node:path";
import { ApiError, AskInvalid, AskedForHuman, Suspend } from "./errors.js";
import { Resume } from "./resume.js";
export const TOKEN_HEADER = "x-agentos-run-token";
class Api {
    base;
    token;
    timeoutMs;
    constructor(apiUrl, token, timeoutMs = 30_000) {
        this.base = apiUrl.replace(/\/+$/, "");
        this.token = token;
        this.timeoutMs = timeoutMs;
    }
    async request(method, path, init = {}) {
        const url = this.base + path;
        const resp = await fetch(url, {
            method,
            body: init.body,
            headers: { [TOKEN_HEADER]: this.token, ...init.headers },
            signal: AbortSignal.timeout(this.timeoutMs),
        });
        const text = await resp.text();
        let body = null;
        if (text) {
            try {
                body = JSON.parse(text);
            }
            catch {
                body = { message: text };
            }
        }
        const expect = init.expect ?? [200, 201, 204];
        if (!expect.includes(resp.status)) {
            const invalid = resp.status === 422 && body?.error === "invalid";
            throw invalid ? new AskInvalid(resp.status, body, method, url) : new ApiError(resp.status, body, method, url);
        }
        return { status: resp.status, body };
    }
    json(method, path, value, extra = {}) {
        return this.request(method, path, {
            body: JSON.stringify(value),
            headers: { "content-type": "application/json", ...extra.headers },
            expect: extra.expect,
        });
    }
}
/** The run's small key/value store; it survives between the invocations of one run. */
export class RunState {
    api;
    prefix;
    constructor(api, runId) {
        this.api = api;
        this.prefix = `/v0/runs/${encodeURIComponent(runId)}/state/`;
    }
    async put(key, value) {
        await this.api.json("PUT", this.prefix + encodeURIComponent(key), value);
    }
    /** The stored value; a missing key throws unless a fallback is given (`get(key, null)`). */
    async get(key, ...fallback) {
        const { status, body } = await this.api.request("GET", this.prefix + encodeURIComponent(key), {
            expect: [200, 404],
        });
        if (status === 404) {
            if (fallback.length === 0)
                throw new RangeError(`no run state ${JSON.stringify(key)}`);
            return fallback[0];
        }
        return body;
    }
    /** Forget a key; deleting a missing key is not an error. */
    async delete(key) {
        await this.api.request("DELETE", this.prefix + encodeURIComponent(key), { expect: [200, 204, 404] });
    }
}
const CONTENT_TYPES = {
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
    api;
    constructor(api) {
        this.api = api;
    }
    /** Upload a file of the run's environment and return its file id (for `ask({files})`). */
    async upload(pathOrBytes, opts = {}) {
        let data;
        let name = opts.name;
        if (typeof pathOrBytes === "string") {
            data = await readFile(pathOrBytes);
            name ??= basename(pathOrBytes);
        }
        else {
            data = pathOrBytes;
            name ??= "file";
        }
        const contentType = opts.contentType ?? CONTENT_TYPES[extname(name).toLowerCase()] ?? "application/octet-stream";
        // Header values must be ASCII; other names travel percent-encoded.
        const ascii = /^[\x20-\x7e]*$/.test(name);
        const { body } = await this.api.request("POST", "/v0/files", {
            body: data,
            headers: { "content-type": contentType, "x-filename": ascii ? name : encodeURIComponent(name) },
        });
        return body.file_id;
    }
}
/** What a handler receives: the invocation, its decision on a resume, and the API. */
export class Invocation {
    id;
    kind;
    seq;
    runId;
    capability;
    version;
    input;
    apiUrl;
    runToken;
    /** null on a start; the decision on a resume. */
    resume;
    /** null outside experiments. */
    eval;
    state;
    files;
    /** The hold this invocation asked; the server answers `suspended` on it. */
    holdId = null;
    /** Set when the handler asked in an eval run: the answer is then `failed` with `asked_for_human`. */
    askedInEval = false;
    api;
    constructor(invocation, resume = null) {
        for (const key of ["id", "run_id", "capability"]) {
            if (typeof invocation[key] !== "string")
                throw new TypeError(`invocation.${key} is missing`);
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
        this.api = new Api(this.apiUrl, this.runToken);
        this.state = { run: new RunState(this.api, this.runId) };
        this.files = new Files(this.api);
    }
    async ask(request) {
        const body = { intent: request.intent, items: request.items };
        if (request.actions !== undefined)
            body.actions = request.actions;
        if (request.details !== undefined)
            body.details = request.details;
        if (request.expiresIn !== undefined)
            body.expires_in = request.expiresIn;
        if (request.files !== undefined)
            body.files = request.files;
        if (this.eval) {
            this.askedInEval = true;
            // The service answers an eval run's ask with 409 eval_run and records the run as asked_for_human;
            // whatever it answers, this invocation is over.
            await this.api.json("POST", "/v0/holds", body, { expect: [] }).catch(() => undefined);
            throw new AskedForHuman();
        }
        const { status, body: answer } = await this.api.json("POST", "/v0/holds", body, { expect: [201, 409] });
        const payload = (answer ?? {});
        // 409 hold_open: a re-run of an invocation that already asked suspends on that hold.
        if (status === 409 && (payload.error !== "hold_open" || !payload.hold_id)) {
            throw new ApiError(409, payload, "POST", this.api.base + "/v0/holds");
        }
        this.holdId = payload.hold_id;
        if (request.suspend !== false)
            throw new Suspend(this.holdId);
        return this.holdId;
    }
    /** A key stable across every invocation of this run: run id + step. */
    idempotencyKey(step) {
        return `${this.runId}:${step}`;
    }
    /**
     * Run `fn` once per run and step; later calls, in any invocation of the run, return the recorded
     * result. It is recorded after `fn` resolves, so a crash in between runs it again.
     */
    async once(step, fn) {
        const key = `once:${step}`;
        const recorded = await this.state.run.get(key, null);
        if (recorded && typeof recorded === "object" && "result" in recorded)
            return recorded.result;
        const result = await fn();
        await this.state.run.put(key, { result });
        return result;
    }
    /**
     * Start a child run and return its run id. Without a key, one is derived from this run, the
     * capability and the input, so a re-run after a resume gets the same child instead of a second one.
     */
    async startChild(capability, input, idempotencyKey) {
        const key = idempotencyKey ??
            this.idempotencyKey(`child:${capability}:${createHash("sha256").update(canonicalJson([capability, input])).digest("hex").slice(0, 32)}`);
        const { body } = await this.api.json("POST", "/v0/runs", { capability, input }, { headers: { "idempotency-key": key } });
        return body.run_id;
    }
}
/** JSON with sorted keys, so that equal inputs give the same text. */
export function canonicalJson(value) {
    return JSON.stringify(value, (_key, v) => v && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]]))
        : v);
}
//# sourceMappingURL=invocation.js.map