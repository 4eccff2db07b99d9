// serve(): signatures, routing, answers, duplicate deliveries and eval runs, on signed deliveries
// sent the way the service sends them (no service needed).
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { connect } from "node:net";
import { after, before, describe, test } from "node:test";

import { Resume, Server, serve, sign } from "@agentos/sdk";

import { deliver, freePort, invocation, newSecret } from "./harness.mjs";

const secret = newSecret();
let server;
let release;
let runs = 0;
const gate = new Promise((r) => (release = r));

const handlers = {
  cap: async (inv) => ({ echo: inv.input, kind: inv.kind, eval: inv.eval }),
  boom: async () => {
    throw new Error("the bank is closed");
  },
  slow: async (inv) => {
    runs += 1;
    await gate;
    return { runs, id: inv.id };
  },
  evals: async (inv) => {
    const holdId = await inv.ask({
      intent: "Pay",
      items: [{ id: "INV-1", title: "Acme", data: { amount: "1.00" } }],
      suspend: false,
    });
    return { holdId, recorded: inv.eval.recordedHolds.map((h) => h.resume?.approved.map((d) => d.id) ?? null) };
  },
  undefinedOutput: async () => undefined,
  notJson: async () => ({ n: 10n }),
};

before(async () => {
  server = await new Server(handlers, { secret, port: 0, log: () => {} }).listen();
});
after(() => server.close());

describe("signatures", () => {
  test("a delivery signed with the secret is answered", async () => {
    const r = await deliver(server.url, secret, invocation({ input: { a: 1 } }));
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: "completed", output: { echo: { a: 1 }, kind: "start", eval: null } });
  });

  test("another secret's signature is 401", async () => {
    const r = await deliver(server.url, newSecret(), invocation());
    assert.equal(r.status, 401);
    assert.equal(r.body.error, "unauthorized");
  });

  test("a body changed after signing is 401", async () => {
    const payload = invocation();
    const headers = sign(secret, payload.invocation.id, JSON.stringify(payload));
    payload.invocation.input = { amount: "999999.00" };
    const resp = await fetch(server.url + "/invoke", { method: "POST", headers, body: JSON.stringify(payload) });
    assert.equal(resp.status, 401);
  });

  test("a timestamp more than 5 minutes old is 401", async () => {
    const payload = invocation();
    const body = JSON.stringify(payload);
    const headers = sign(secret, payload.invocation.id, body, new Date(Date.now() - 6 * 60_000));
    const resp = await fetch(server.url + "/invoke", { method: "POST", headers, body });
    assert.equal(resp.status, 401);
    assert.match((await resp.json()).message, /too old/);
  });

  test("no signature headers at all is 401", async () => {
    const resp = await fetch(server.url + "/invoke", { method: "POST", body: JSON.stringify(invocation()) });
    assert.equal(resp.status, 401);
  });

  test("a signed webhook-id that is not the invocation id is 400", async () => {
    const r = await deliver(server.url, secret, invocation(), { id: "inv_other" });
    assert.equal(r.status, 400);
    assert.equal(r.body.error, "bad_json");
  });

  test("the port and host in the code win over AGENTOS_PORT/AGENTOS_HOST, used only when the code gives none", async () => {
    const saved = { port: process.env.AGENTOS_PORT, host: process.env.AGENTOS_HOST };
    const port = await freePort();
    try {
      // Explicit wins: the environment names a port and host nothing listens on (1, an unroutable host).
      process.env.AGENTOS_PORT = "1";
      process.env.AGENTOS_HOST = "192.0.2.1";
      let s = await new Server(handlers, { secret, port, host: "127.0.0.1" }).listen();
      assert.equal(s.url, `http://127.0.0.1:${port}`);
      await s.close();
      s = await new Server(handlers, { secret, port: 1 }).listen(port, "127.0.0.1"); // listen()'s arguments first
      assert.equal(s.url, `http://127.0.0.1:${port}`);
      await s.close();
      // None given: the environment places it.
      process.env.AGENTOS_PORT = String(port);
      process.env.AGENTOS_HOST = "127.0.0.1";
      s = await new Server(handlers, { secret }).listen();
      assert.equal(s.url, `http://127.0.0.1:${port}`);
      await s.close();
      // A bad value in the environment is refused, not read as 8080 or NaN.
      for (const bad of ["eighty", "65536", "-1", "80.5"]) {
        process.env.AGENTOS_PORT = bad;
        await assert.rejects(new Server(handlers, { secret }).listen(), new RegExp(`port must be an integer.*${bad}`));
      }
    } finally {
      for (const [key, value] of [["AGENTOS_PORT", saved.port], ["AGENTOS_HOST", saved.host]]) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  });

  test("the secret in the code wins over AGENTOS_SECRET, used only when the code gives none", async () => {
    const saved = { secret: process.env.AGENTOS_SECRET, port: process.env.AGENTOS_PORT };
    const fromEnv = newSecret();
    const port = await freePort();
    try {
      process.env.AGENTOS_SECRET = fromEnv;
      process.env.AGENTOS_PORT = "1"; // serve()'s port option must win too
      // Both ways an agent starts: new Server(…).listen() and serve(…).
      for (const start of [
        () => new Server(handlers, { secret, port: 0, log: () => {} }).listen(),
        () => serve(handlers, { secret, port, host: "127.0.0.1", log: () => {} }),
      ]) {
        const s = await start();
        try {
          assert.equal((await deliver(s.url, secret, invocation())).status, 200);
          assert.equal((await deliver(s.url, fromEnv, invocation())).status, 401);
        } finally {
          await s.close();
        }
      }
      const s = await new Server(handlers, { port: 0, log: () => {} }).listen();
      try {
        assert.equal((await deliver(s.url, fromEnv, invocation())).status, 200);
        assert.equal((await deliver(s.url, secret, invocation())).status, 401);
      } finally {
        await s.close();
      }
    } finally {
      for (const [key, value] of [["AGENTOS_SECRET", saved.secret], ["AGENTOS_PORT", saved.port]]) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  });

  test("the server refuses to start without a whsec_ secret", () => {
    const saved = process.env.AGENTOS_SECRET;
    delete process.env.AGENTOS_SECRET;
    try {
      assert.throws(() => new Server(handlers), /signing secret is required/);
      assert.throws(() => new Server(handlers, { secret: "not-a-secret" }), /whsec_/);
    } finally {
      if (saved !== undefined) process.env.AGENTOS_SECRET = saved;
    }
  });
});

describe("answers", () => {
  test("an unknown capability is 404 naming it", async () => {
    const r = await deliver(server.url, secret, invocation({ capability: "nope" }));
    assert.equal(r.status, 404);
    assert.deepEqual(r.body, { error: "not_found", message: 'unknown capability "nope"' });
  });

  test("a capability named like an Object property is unknown too", async () => {
    const r = await deliver(server.url, secret, invocation({ capability: "toString" }));
    assert.equal(r.status, 404);
  });

  test("a handler that throws answers failed with its message", async () => {
    const r = await deliver(server.url, secret, invocation({ capability: "boom" }));
    assert.deepEqual(r.body, { status: "failed", error: "the bank is closed" });
  });

  test("a handler that returns nothing completes with null output", async () => {
    const r = await deliver(server.url, secret, invocation({ capability: "undefinedOutput" }));
    assert.deepEqual(r.body, { status: "completed", output: null });
  });

  test("output that is not JSON answers failed", async () => {
    const r = await deliver(server.url, secret, invocation({ capability: "notJson" }));
    assert.equal(r.body.status, "failed");
    assert.match(r.body.error, /output is not JSON/);
  });

  test("GET /healthz lists the capabilities; other paths are 404", async () => {
    const health = await (await fetch(server.url + "/healthz")).json();
    assert.deepEqual(health.capabilities, Object.keys(handlers).sort());
    assert.equal((await fetch(server.url + "/other", { method: "POST" })).status, 404);
  });
});

describe("duplicate deliveries", () => {
  test("a retry while the first runs waits for its answer; the handler runs once", async () => {
    const payload = invocation({ capability: "slow" });
    const first = deliver(server.url, secret, payload);
    const second = deliver(server.url, secret, payload);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(runs, 1);
    release();
    const [a, b] = await Promise.all([first, second]);
    assert.deepEqual(a.body, { status: "completed", output: { runs: 1, id: payload.invocation.id } });
    assert.deepEqual(b.body, a.body);
    const third = await deliver(server.url, secret, payload);
    assert.deepEqual(third.body, a.body);
    assert.equal(runs, 1);
  });
});

describe("eval runs", () => {
  test("inv.eval is camelCase with recorded resumes; an ask answers failed asked_for_human even with suspend:false", async () => {
    // The service side of evals is not built yet: this stands in for its documented answer to an eval
    // run's ask (409 eval_run) and records what the SDK sent.
    const asks = [];
    const api = createServer((req, res) => {
      let body = "";
      req.on("data", (d) => (body += d));
      req.on("end", () => {
        asks.push({ path: req.url, token: req.headers["x-agentos-run-token"], body: JSON.parse(body) });
        res.writeHead(409, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: "eval_run", message: "an eval run never asks a person" }));
      });
    });
    await new Promise((r) => api.listen(0, "127.0.0.1", r));
    try {
      const recorded = {
        ask: { intent: "Pay", items: [{ id: "INV-1", title: "Acme", data: { amount: "1.00" } }] },
        resume: { hold_id: "h_1", resolved_by: "human", items: [{ id: "INV-1", action: "approve", data: { amount: "1.00" }, comment: null }], comment: null },
      };
      const payload = invocation({
        capability: "evals",
        api_url: `http://127.0.0.1:${api.address().port}`,
        eval: { experiment_id: "ex_1", dataset_item_id: "di_1", recorded_holds: [recorded, { ask: recorded.ask, resume: null }] },
      });
      const r = await deliver(server.url, secret, payload);
      assert.deepEqual(r.body, { status: "failed", error: "asked_for_human" });
      assert.equal(asks.length, 1);
      assert.equal(asks[0].path, "/v0/holds");
      assert.equal(asks[0].token, "tok_test");
    } finally {
      api.close();
    }
  });

  test("the eval object a handler sees", async () => {
    const payload = invocation({
      eval: {
        experiment_id: "ex_2",
        dataset_item_id: "di_9",
        recorded_holds: [{ ask: { intent: "x" }, resume: { hold_id: "h_3", resolved_by: "expired", items: [], comment: null } }],
      },
    });
    const r = await deliver(server.url, secret, payload);
    const ev = r.body.output.eval;
    assert.equal(ev.experimentId, "ex_2");
    assert.equal(ev.datasetItemId, "di_9");
    assert.deepEqual(ev.recordedHolds[0].ask, { intent: "x" });
    assert.equal(ev.recordedHolds[0].resume.holdId, "h_3");
    assert.equal(Resume.fromJson({ resolved_by: "expired" }).expired, true);
  });

  test("decidedBy names the rule or grant that decided an item at the ask", () => {
    const resume = Resume.fromJson({
      hold_id: "h_4",
      resolved_by: "human",
      items: [
        { id: "A", action: "approve", data: { amount: 5 }, comment: null, decided_by: { type: "rule", id: "small", version: 3 } },
        { id: "B", action: "approve", data: { amount: 7 }, comment: null, decided_by: { type: "grant", id: "grt_9" } },
        { id: "C", action: "reject", data: { amount: 900 }, comment: "no" },
      ],
      comment: null,
    });
    assert.deepEqual(resume.item("A").decidedBy, { type: "rule", id: "small", version: 3 });
    assert.deepEqual(resume.item("B").decidedBy, { type: "grant", id: "grt_9" });
    assert.equal(resume.item("C").decidedBy, null);
  });
});

// Issue 30.15: headers and size are checked before the body is read, and the body has a deadline.
describe("hostile senders", () => {

  /** Sends `head` and `body` raw and resolves with the first bytes answered (or "" after `wait` ms). */
  function raw(url, head, body = "", wait = 5000) {
    const { port } = new URL(url);
    return new Promise((resolve) => {
      const socket = connect(Number(port), "127.0.0.1", () => socket.write(head + body));
      let answer = "";
      const timer = setTimeout(() => (socket.destroy(), resolve(answer)), wait);
      socket.on("data", (chunk) => {
        answer += chunk.toString();
        if (answer.includes("\r\n\r\n")) (clearTimeout(timer), socket.destroy(), resolve(answer));
      });
      socket.on("error", () => (clearTimeout(timer), resolve(answer)));
    });
  }

  test("an unsigned request announcing 16 MB is refused at once, before its body", async () => {
    const answer = await raw(server.url, "POST /invoke HTTP/1.1\r\nhost: x\r\ncontent-length: 16000000\r\n\r\n");
    assert.match(answer, /^HTTP\/1\.1 401/);
  });

  test("a declared body over the limit is refused before reading", async () => {
    const headers = sign(secret, "inv_1", "");
    const head = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("");
    const answer = await raw(server.url, `POST /invoke HTTP/1.1\r\nhost: x\r\n${head}content-length: 99999999\r\n\r\n`);
    assert.match(answer, /^HTTP\/1\.1 413/);
  });

  test("a slow body is cut at the read deadline, and others are still answered", async () => {
    const quick = await new Server(handlers, { secret, port: 0, log: () => {}, readMs: 300 }).listen();
    try {
      const headers = sign(secret, "inv_1", "{}");
      const head = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("");
      const answer = await raw(quick.url, `POST /invoke HTTP/1.1\r\nhost: x\r\n${head}content-length: 1048576\r\n\r\n`, "{");
      assert.match(answer, /^HTTP\/1\.1 408/);
      const r = await deliver(quick.url, secret, invocation({ input: { a: 1 } }));
      assert.equal(r.status, 200);
    } finally {
      await quick.close();
    }
  });
});
