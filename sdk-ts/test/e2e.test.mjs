// The seed's TypeScript example, unchanged, and the SDK's API calls, through the real service:
// gunicorn, a Celery worker and beat, PostgreSQL (a fresh database) and Redis.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { AgentOSError, ApiError, Invocation, Server, Suspend } from "@agentos/sdk";

import { SDK, freePort, newSecret, startAgent, startService } from "./harness.mjs";

/** The TypeScript block of the seed's "With the SDKs" section, as written (test/seed/README.md names its source). */
export function seedExample() {
  return readFileSync(join(SDK, "test", "seed", "pay_invoices.ts"), "utf8");
}

const seedSecret = newSecret();
const sdkSecret = newSecret();
let service;
let seedAgent;
let sdkAgent;
const seen = [];

// Handlers that use the rest of the SDK against the real API.
const handlers = {
  state_and_files: async (inv) => {
    if (!inv.resume) {
      await inv.state.run.put("progress", { step: "asked", n: 1 });
      await inv.state.run.put("gone", true);
      await inv.state.run.delete("gone");
      await inv.state.run.delete("never-there");
      const fileId = await inv.files.upload(new TextEncoder().encode("%PDF-1.4 invoice"), { name: "fatura ş.pdf" });
      const childId = await inv.startChild("state_and_files_child", { n: 1 });
      const again = await inv.startChild("state_and_files_child", { n: 1 });
      await inv.state.run.put("child", { childId, again });
      let thrown = null;
      try {
        await inv.ask({ intent: "", items: [] });
      } catch (err) {
        thrown = { name: err.name, fields: err.errors.map((e) => e.field) };
      }
      await inv.state.run.put("invalid", thrown);
      try {
        await inv.ask({
          intent: "Check the invoice",
          items: [{ id: "F-1", title: "fatura", data: { total: "1.00" }, confidence: { total: 0.4 } }],
          actions: ["approve", "reject", "feedback"],
          details: "Read the **file**.",
          expiresIn: 3600,
          files: [fileId],
        });
      } catch (err) {
        // A handler that catches the SDK's signal still answers suspended on the hold it asked.
        seen.push(err instanceof Suspend ? "caught Suspend" : String(err));
      }
      return { swallowed: true };
    }
    const progress = await inv.state.run.get("progress");
    const missing = await inv.state.run.get("gone", "fallback");
    let missingThrows = false;
    try {
      await inv.state.run.get("gone");
    } catch {
      missingThrows = true;
    }
    const resume = inv.resume;
    return {
      progress,
      missing,
      missingThrows,
      child: await inv.state.run.get("child"),
      invalid: await inv.state.run.get("invalid"),
      feedback: resume.feedback.map((d) => ({ id: d.id, comment: d.comment })),
      comment: resume.comment,
      resolvedBy: resume.resolvedBy,
      holdId: resume.holdId,
      item: resume.item("F-1").action,
    };
  },
  state_and_files_child: async () => ({ child: true }),
  stream_then_suspend: async (inv) => {
    if (!inv.resume) {
      const holdId = await inv.ask({
        intent: "Send the report",
        items: [{ id: "R-1", title: "report", data: { to: "ops@example.com" } }],
        suspend: false,
      });
      await inv.state.run.put("asked", holdId);
      return { ignored: "the invocation answers suspended on the hold it asked" };
    }
    return { asked: await inv.state.run.get("asked"), expired: inv.resume.expired, approved: inv.resume.approved.length };
  },
  throws: async () => {
    throw new Error("the bank is closed");
  },
  // The SDK's client behind a faulty network (`faulty`, below): what it retried and how it failed.
  resilient: async (inv) => {
    if (inv.resume) return inv.state.run.get("out");
    const slept = [];
    const payload = { id: inv.id, run_id: inv.runId, capability: inv.capability, api_url: faulty.url, run_token: inv.runToken };
    const flaky = new Invocation(payload, null, { sleep: async (ms) => void slept.push(ms) });
    const state = `/v0/runs/${inv.runId}/state/`;
    const out = {};
    faulty.faults = [["POST", "/v0/holds", "drop"], ["POST", "/v0/files", "drop"], ["POST", "/v0/files", "refuse"]];
    out.fileId = await flaky.files.upload(new TextEncoder().encode("%PDF-1.4 x"), { name: "x.pdf" });
    out.sameFile = await flaky.files.upload(new TextEncoder().encode("%PDF-1.4 x"), { name: "x.pdf" });
    out.uploadRetries = slept.splice(0).length;
    faulty.faults = [["PUT", state, 503, "2"], ["PUT", state, 429, "Wed, 21 Oct 2015 07:28:00 GMT"], ["GET", state, 502]];
    await flaky.state.run.put("k", { v: 1 });
    out.read = await flaky.state.run.get("k");
    out.slept = slept.splice(0);
    faulty.faults = Array(4).fill(["PUT", state, 503]);
    out.serverError = await flaky.state.run.put("k", 2).catch((e) => ({ name: e.name, status: e.status, requestId: e.requestId, isApi: e instanceof ApiError }));
    out.retries = slept.splice(0).length;
    faulty.faults = Array(4).fill(["PUT", state, "refuse"]);
    out.connection = await flaky.state.run.put("k", 2).catch((e) => ({ name: e.name, requestId: e.requestId, isBase: e instanceof AgentOSError }));
    const refused = new Invocation({ ...payload, api_url: inv.apiUrl, run_token: "not-a-token" });
    out.denied = await refused.state.run.put("k", 2).catch((e) => ({ name: e.name, status: e.status, requestId: e.requestId }));
    faulty.faults = [["POST", "/v0/holds", "drop"]];
    out.holdId = await flaky.ask({ intent: "Pay", items: [{ id: "I-1", title: "Acme", data: { amount: "1.00" } }], suspend: false });
    out.holdAttempts = faulty.seen.filter(([m, p]) => m === "POST" && p === "/v0/holds").map(([, , id]) => id);
    await inv.state.run.put("out", out);
    throw new Suspend(out.holdId);
  },
};

/**
 * Forwards to the service; `faults` lists [method, path prefix, what] for the next matching requests:
 * "drop" (forward, then close unanswered), "refuse" (close unanswered) or a status answered here
 * (with an optional Retry-After).
 */
const faulty = {
  url: "",
  target: "",
  faults: [],
  seen: [],
  server: createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    faulty.seen.push([req.method, req.url, req.headers["x-request-id"]]);
    const i = faulty.faults.findIndex(([m, p]) => m === req.method && req.url.startsWith(p));
    const [, , what, retryAfter] = i >= 0 ? faulty.faults.splice(i, 1)[0] : [];
    if (what === "refuse") return req.socket.destroy();
    if (typeof what === "number") {
      res.writeHead(what, { "content-type": "application/json", "x-request-id": "proxy-said-so", ...(retryAfter ? { "retry-after": retryAfter } : {}) });
      return res.end('{"error":"unavailable","message":"try later"}');
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers["content-length"];
    const resp = await fetch(faulty.target + req.url, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
    const text = await resp.text();
    if (what === "drop") return req.socket.destroy();
    res.writeHead(resp.status, { "content-type": resp.headers.get("content-type") ?? "application/json", "x-request-id": resp.headers.get("x-request-id") ?? "" });
    res.end(text);
  }),
};

/** The seed's example names port 8080, which wins over AGENTOS_PORT: the one fixed port in the suites. */
const SEED_PORT = 8080;

async function seedPortFree() {
  const probe = createServer();
  await new Promise((resolve, reject) => {
    probe.once("error", (err) =>
      reject(new Error(`the seed's example listens on ${SEED_PORT} (its code says so), which is taken: ${err.code}`)),
    );
    probe.listen(SEED_PORT, "127.0.0.1", resolve);
  });
  await new Promise((r) => probe.close(r));
}

before(async () => {
  await seedPortFree();
  const [seedPort, sdkPort] = [SEED_PORT, await freePort()];
  const endpoint = (port) => `http://127.0.0.1:${port}`;
  service = await startService("seed", {
    pay_invoices: { endpoint: endpoint(seedPort), secret: seedSecret },
    ...Object.fromEntries(Object.keys(handlers).map((name) => [name, { endpoint: endpoint(sdkPort), secret: sdkSecret }])),
  });
  const dir = join(SDK, "test", ".build");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "seed_pay_invoices.ts"), seedExample());
  seedAgent = await startAgent(join(dir, "seed_pay_invoices.ts"), { secret: seedSecret, port: seedPort, tag: "seed" });
  sdkAgent = await new Server(handlers, { secret: sdkSecret, port: sdkPort, log: () => {} }).listen();
  await new Promise((r) => faulty.server.listen(0, "127.0.0.1", r));
  faulty.url = `http://127.0.0.1:${faulty.server.address().port}`;
  faulty.target = service.url;
});

after(async () => {
  await seedAgent?.stop();
  await sdkAgent?.close();
  faulty.server.closeAllConnections();
  faulty.server.close();
  await service?.stop();
});

describe("the seed's TypeScript example, unchanged", () => {
  test("it is the seed's text, with the import and port the seed shows", () => {
    const code = seedExample();
    assert.match(code, /^import \{ serve \} from "@agentos\/sdk";/);
    assert.match(code, /inv\.resume!\.approved\.map/);
    assert.match(code, /\}, \{ port: 8080 \}\);\n?$/);
    assert.equal(seedAgent.url, `http://127.0.0.1:${SEED_PORT}`);
  });

  const cases = [
    ["approve", { action: "approve" }, { paid: [{ id: "INV-1", payee: "Acme", amount: "120.00" }], rejected: [] }],
    [
      "edit",
      { action: "edit", data: { payee: "Acme A.Ş.", amount: "99.50" } },
      { paid: [{ id: "INV-1", payee: "Acme A.Ş.", amount: "99.50" }], rejected: [] },
    ],
    ["reject", { action: "reject", comment: "paid last week" }, { paid: [], rejected: ["INV-1"] }],
  ];
  for (const [name, decision, output] of cases) {
    test(`start, ask, ${name}, resume, completed`, async () => {
      const runId = await service.startRun("pay_invoices", {});
      const hold = await service.heldHold(runId);
      assert.equal(hold.intent, "Pay 2 invoices");
      assert.deepEqual(hold.actions, ["approve", "edit", "reject"]);
      assert.deepEqual(
        hold.items.map(({ id, title, data }) => ({ id, title, data })),
        [{ id: "INV-1", title: "Acme · 120.00", data: { payee: "Acme", amount: "120.00" } }],
      );
      await service.decide(hold.hold_id, { items: [{ id: "INV-1", ...decision }] });
      const run = await service.runReaches(runId, "completed");
      assert.deepEqual(run.output, output);
      assert.equal(run.seq, 2);
    });
  }
});

describe("the SDK against the real API", () => {
  test("run state, files, child runs, a 422 ask, and a caught Suspend still suspends", async () => {
    const runId = await service.startRun("state_and_files", {});
    const hold = await service.heldHold(runId);
    assert.deepEqual(seen, ["caught Suspend"]);
    assert.equal(hold.files.length, 1);
    assert.equal(hold.expires_at !== null, true);
    assert.deepEqual(hold.actions, ["approve", "reject", "feedback"]);
    const file = await service.api("GET", `/v0/files/${hold.files[0].file_id ?? hold.files[0]}`);
    assert.equal(file.status, 200);
    assert.equal(file.body, "%PDF-1.4 invoice");
    assert.equal(file.headers.get("content-type"), "application/pdf");
    assert.match(file.headers.get("content-disposition") ?? "", /fatura/);
    await service.decide(hold.hold_id, { items: [{ id: "F-1", action: "feedback" }], comment: "total is 10.00" });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output.progress, { step: "asked", n: 1 });
    assert.equal(run.output.missing, "fallback");
    assert.equal(run.output.missingThrows, true);
    assert.equal(run.output.child.childId, run.output.child.again);
    assert.deepEqual(run.children, [run.output.child.childId]);
    assert.equal(run.output.invalid.name, "AskInvalid");
    assert.ok(run.output.invalid.fields.includes("intent") && run.output.invalid.fields.includes("items"));
    assert.deepEqual(run.output.feedback, [{ id: "F-1", comment: "total is 10.00" }]);
    assert.equal(run.output.comment, "total is 10.00");
    assert.equal(run.output.resolvedBy, "human");
    assert.equal(run.output.holdId, hold.hold_id);
    assert.equal(run.output.item, "feedback");
  });

  test("ask with suspend:false returns the hold id and the invocation still answers suspended", async () => {
    const runId = await service.startRun("stream_then_suspend", {});
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "R-1", action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { asked: hold.hold_id, expired: false, approved: 1 });
  });

  test("behind a faulty network: safe calls are retried (Retry-After honoured), errors are typed with X-Request-ID", async () => {
    const runId = await service.startRun("resilient", {});
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "I-1", action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.holds.length, 1); // the ask whose answer was lost made one hold
    const saved = run.output;
    assert.equal(saved.holdId, hold.hold_id);
    assert.equal(saved.holdAttempts.length, 2);
    assert.equal(saved.holdAttempts[0], saved.holdAttempts[1]); // one X-Request-ID for every attempt
    assert.equal(saved.sameFile, saved.fileId);
    assert.equal(saved.uploadRetries, 2);
    assert.deepEqual(saved.read, { v: 1 });
    assert.deepEqual(saved.slept.slice(0, 2), [2000, 0]);
    assert.ok(saved.slept[2] > 0 && saved.slept[2] <= 500);
    assert.deepEqual(saved.serverError, { name: "ServerError", status: 503, requestId: "proxy-said-so", isApi: true });
    assert.equal(saved.retries, 3);
    assert.equal(saved.connection.name, "APIConnectionError");
    assert.match(saved.connection.requestId, /^agentos-[0-9a-f]{24}$/);
    assert.equal(saved.connection.isBase, true);
    assert.equal(saved.denied.name, "AuthenticationError");
    assert.equal(saved.denied.status, 401);
    assert.match(saved.denied.requestId, /^agentos-/); // the service answers with the id the SDK sent
  });

  test("a handler that throws fails the run with its message", async () => {
    const runId = await service.startRun("throws", {});
    const run = await service.runReaches(runId, "failed");
    assert.match(JSON.stringify(run.error), /the bank is closed/);
  });
});
