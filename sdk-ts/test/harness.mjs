// What the node tests share: the real service (test/service.py), agents as processes, signed deliveries.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

import { sign } from "@agentos/sdk";

import { SDK, compile } from "../scripts/example.mjs";

export { SDK, compile };
export const ROOT = resolve(SDK, "..");
const PYTHON = process.env.PYTHON || join(ROOT, ".venv", "bin", "python");

export function newSecret() {
  return "whsec_" + randomBytes(24).toString("base64");
}

export function freePort() {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => ok(port));
    });
  });
}

export async function waitFor(check, { timeout = 60_000, interval = 200, what = "a condition" } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await check();
    if (last) return last;
    await new Promise((r) => setTimeout(r, interval));
  }
  throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

function databaseName(tag) {
  const url = process.env.DATABASE_URL || "postgres://postgres@127.0.0.1:5432/reviewqueue";
  return `${new URL(url).pathname.slice(1) || "reviewqueue"}_${tag}`;
}

/**
 * Starts the real service in a fresh database `<DATABASE_URL's name>_<tag>` with these capabilities
 * ({name: {endpoint, secret, …}}) and a service account; resolves once it answers.
 */
export async function startService(tag, capabilities) {
  if (!existsSync(PYTHON)) throw new Error(`no Python at ${PYTHON}: run make setup, or set PYTHON`);
  const values = Object.fromEntries(
    Object.entries(capabilities).map(([name, v]) => [name, { timeout_seconds: 30, ...v }]),
  );
  const proc = spawn(
    PYTHON,
    [join(SDK, "test", "service.py"), "--database", databaseName(tag), "--capabilities", JSON.stringify(values)],
    { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] },
  );
  let output = "";
  proc.stderr.on("data", (d) => (output += d));
  proc.stdin.on("error", () => {}); // a command to a launcher that has exited: its exit fails what waits
  const gone = () => new Error(`the service launcher exited (${proc.exitCode}):\n${output.slice(-4000)}`);
  // service.py answers its commands one by one, in the order they were written.
  const answers = [];
  const info = await new Promise((ok, fail) => {
    const lines = createInterface({ input: proc.stdout });
    lines.on("line", (line) => {
      output += line + "\n";
      if (line.startsWith('{"url"')) ok(JSON.parse(line));
      else if (line.startsWith('{"past_due"')) answers.shift().ok(JSON.parse(line));
    });
    proc.on("exit", () => {
      fail(gone());
      for (const answer of answers.splice(0)) answer.fail(gone());
    });
  });
  const exited = new Promise((r) => proc.on("exit", r));
  const command = (line) =>
    new Promise((ok, fail) => {
      if (proc.exitCode !== null) return fail(gone());
      answers.push({ ok, fail });
      proc.stdin.write(line + "\n");
    });
  return new Service(info, {
    command,
    stop: async () => {
      proc.stdin.end();
      await exited;
    },
  });
}

export class Service {
  constructor(info, { command, stop }) {
    this.url = info.url;
    this.key = info.key;
    this.logs = info.logs;
    this.databaseUrl = info.database_url; // the service's fresh database: a test may keep a framework's store in it
    this.command = command;
    this.stop = stop;
  }

  async api(method, path, body) {
    const send = () =>
      fetch(this.url + path, {
        method,
        headers: { authorization: `Bearer ${this.key}`, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    let resp;
    try {
      resp = await send();
    } catch (err) {
      // gunicorn closes a kept-alive connection after 2 s idle, and fetch keeps one for 4 s: a request sent
      // on it as the server closes it fails unanswered ("other side closed"; seen with five files at once).
      // A GET is sent again on a new connection; anything else fails as it did.
      if (method !== "GET" || err?.cause?.code !== "UND_ERR_SOCKET") throw err;
      resp = await send();
    }
    const text = await resp.text();
    const json = (resp.headers.get("content-type") ?? "").includes("json");
    return { status: resp.status, body: json && text ? JSON.parse(text) : text, headers: resp.headers };
  }

  async startRun(capability, input = {}) {
    const r = await this.api("POST", "/v0/runs", { capability, input });
    if (r.status !== 201) throw new Error(`start ${capability}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body.run_id;
  }

  async run(runId) {
    return (await this.api("GET", `/v0/runs/${runId}`)).body;
  }

  async hold(holdId) {
    return (await this.api("GET", `/v0/holds/${holdId}`)).body;
  }

  /** Waits until the run has this status (or finished otherwise, which fails loudly). */
  async runReaches(runId, status, timeout = 60_000) {
    return waitFor(
      async () => {
        const run = await this.run(runId);
        if (run.status === status) return run;
        if (["completed", "failed", "asked_for_human"].includes(run.status)) {
          throw new Error(`run ${runId} is ${run.status}, not ${status}: ${JSON.stringify(run)}`);
        }
        return null;
      },
      { timeout, what: `run ${runId} to be ${status}` },
    );
  }

  /** The run's pending hold, once the run is held. */
  async heldHold(runId) {
    const run = await this.runReaches(runId, "held");
    const open = run.holds.find((h) => h.status === "pending");
    return this.hold(open.hold_id);
  }

  /**
   * Moves a pending hold's deadline to now (test/service.py runs factories.past_due), so that a test of
   * expiry asks with SPEC's shortest expires_in, 60 s, without waiting the minute out; the beat's sweep
   * (every second here) and the worker still expire the hold and deliver the resume as they do in production.
   */
  async pastDue(holdId) {
    const answer = await this.command(`past_due ${holdId}`);
    if (answer.updated !== 1) throw new Error(`past_due ${holdId}: no such hold (${JSON.stringify(answer)})`);
  }

  /** The run's pending hold, once the run is held: asked to expire in 60 s, and made due now. */
  async heldHoldPastDue(runId) {
    const hold = await this.heldHold(runId);
    const expiresIn = Date.parse(hold.expires_at) - Date.parse(hold.created_at);
    assert.ok(Math.abs(expiresIn - 60_000) < 1_000, `${hold.hold_id} expires ${expiresIn} ms after it was asked, not 60 s`);
    await this.pastDue(hold.hold_id);
    return hold;
  }

  async decide(holdId, decision) {
    const r = await this.api("POST", `/v0/holds/${holdId}/decision`, decision);
    if (r.status !== 200) throw new Error(`decide ${holdId}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }
}

/** Compiles a TypeScript agent (tsc) and runs it as its own process on `port`; resolves once it answers. */
const compiled = new Map();

export async function startAgent(source, { secret, port, env = {}, tag } = {}) {
  // tsc takes seconds on the adapters' types: a restarted agent runs what was compiled for it before.
  const js = compiled.get(source) ?? compile(source, tag);
  compiled.set(source, js);
  const out = [];
  const proc = spawn(process.execPath, [js], {
    env: { ...process.env, ...env, AGENTOS_SECRET: secret, AGENTOS_PORT: String(port) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  proc.stdout.on("data", (d) => out.push(d));
  proc.stderr.on("data", (d) => out.push(d));
  const exited = new Promise((r) => proc.on("exit", r));
  await waitFor(
    async () => {
      if (proc.exitCode !== null) throw new Error(`${source} exited:\n${Buffer.concat(out)}`);
      return fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false);
    },
    { timeout: 30_000, what: `${source} to answer` },
  );
  return {
    url: `http://127.0.0.1:${port}`,
    output: () => Buffer.concat(out).toString(),
    stop: async () => {
      proc.kill("SIGTERM");
      await exited;
    },
  };
}

/** POSTs one signed delivery of `payload` to an agent, as the service does. */
export async function deliver(agentUrl, secret, payload, { headers = {}, id = payload.invocation.id } = {}) {
  const body = JSON.stringify(payload);
  const resp = await fetch(agentUrl + "/invoke", {
    method: "POST",
    headers: { ...sign(secret, id, body), "content-type": "application/json", ...headers },
    body,
  });
  return { status: resp.status, body: await resp.json() };
}

export function invocation(overrides = {}, resume = null) {
  return {
    invocation: {
      id: "inv_" + randomBytes(8).toString("hex"),
      kind: resume ? "resume" : "start",
      seq: resume ? 2 : 1,
      run_id: "r_1",
      capability: "cap",
      version: "1",
      api_url: "http://127.0.0.1:9",
      run_token: "tok_test",
      input: {},
      eval: null,
      ...overrides,
    },
    resume,
  };
}
