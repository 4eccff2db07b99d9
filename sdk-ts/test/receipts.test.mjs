// Decision receipts through the real service: an agent built on the SDK verifies its resume's receipt
// against the service's /.well-known/jwks.json; then the same receipt offline with a key set held locally,
// an unknown kid fetched once then failing, and a changed byte failing.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { ReceiptError, Server, forgetReceiptKeys, verifyReceipt } from "@agentos/sdk";

import { freePort, newSecret, startService } from "./harness.mjs";

const secret = newSecret();
let service;
let agent;
const received = [];
// A counting proxy in front of the service's JWKS: how many times the SDK fetched it.
const counter = { fetches: 0, server: null, url: "" };

const handlers = {
  receipts: async (inv) => {
    if (!inv.resume) {
      await inv.ask({
        intent: "Pay",
        items: [{ id: "INV-1", title: "Acme", data: { payee: "Acme", amount: "120.00" } }],
        actions: ["approve", "edit", "reject"],
      });
    }
    const claims = await verifyReceipt(inv.resume.receipt, { jwksUrl: `${inv.apiUrl}/.well-known/jwks.json` });
    received.push({ token: inv.resume.receipt, items: inv.resume.decidedItems });
    return { claims };
  },
};

before(async () => {
  const port = await freePort();
  service = await startService("receipts", { receipts: { endpoint: `http://127.0.0.1:${port}`, secret } });
  agent = await new Server(handlers, { secret, port, log: () => {} }).listen();
  counter.server = createServer(async (req, res) => {
    counter.fetches += 1;
    const resp = await fetch(service.url + req.url);
    res.writeHead(resp.status, { "content-type": "application/json" });
    res.end(await resp.text());
  });
  await new Promise((r) => counter.server.listen(0, "127.0.0.1", r));
  counter.url = `http://127.0.0.1:${counter.server.address().port}/.well-known/jwks.json`;
});

after(async () => {
  await agent?.close();
  counter.server?.close();
  await service?.stop();
});

function canonical(value) {
  // The service's canonical JSON for these string-valued objects: sorted keys, no spaces.
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object")
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  return JSON.stringify(value);
}

const sha256 = (value) => createHash("sha256").update(canonical(value), "utf8").digest("hex");

function b64(json) {
  return Buffer.from(JSON.stringify(json)).toString("base64url");
}

describe("receipts", () => {
  test("the agent verifies its resume's receipt against the service's JWKS", async () => {
    const runId = await service.startRun("receipts", {});
    const hold = await service.heldHold(runId);
    const edited = { payee: "Acme A.Ş.", amount: "99.50" };
    await service.decide(hold.hold_id, { items: [{ id: "INV-1", action: "edit", data: edited }] });
    const run = await service.runReaches(runId, "completed");
    const { claims } = run.output;
    assert.equal(claims.hold_id, hold.hold_id);
    assert.equal(claims.run_id, runId);
    assert.equal(claims.capability, "receipts");
    assert.equal(claims.resolved_by, "human");
    assert.deepEqual(claims.items, [
      {
        id: "INV-1",
        action: "edit",
        asked_sha256: sha256({ payee: "Acme", amount: "120.00" }),
        decided_sha256: sha256(edited),
      },
    ]);
    assert.deepEqual(received[0].items[0].data, edited);
  });

  test("offline with a key set held locally, and from the cache without a second fetch", async () => {
    const { token } = received[0];
    const jwks = await (await fetch(`${service.url}/.well-known/jwks.json`)).json();
    assert.equal((await verifyReceipt(token, { jwks })).resolved_by, "human");
    forgetReceiptKeys();
    counter.fetches = 0;
    await verifyReceipt(token, { jwksUrl: counter.url });
    await verifyReceipt(token, { jwksUrl: counter.url });
    assert.equal(counter.fetches, 1);
  });

  test("an unknown kid is fetched once, then fails", async () => {
    const [, payload, signature] = received[0].token.split(".");
    const forged = `${b64({ alg: "Ed25519", kid: "not-a-key", typ: "rq-receipt+jws" })}.${payload}.${signature}`;
    const before = counter.fetches;
    await assert.rejects(verifyReceipt(forged, { jwksUrl: counter.url }), (err) => err instanceof ReceiptError && /unknown key/.test(err.message));
    assert.equal(counter.fetches, before + 1);
  });

  test("a changed byte fails", async () => {
    const [header, payload, signature] = received[0].token.split(".");
    const jwks = await (await fetch(`${service.url}/.well-known/jwks.json`)).json();
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString());
    claims.items[0].action = "approve";
    for (const changed of [
      `${header}.${b64(claims)}.${signature}`,
      `${header}.${payload}.${signature[0] === "A" ? "B" : "A"}${signature.slice(1)}`,
    ]) {
      await assert.rejects(verifyReceipt(changed, { jwks }), ReceiptError);
      await assert.rejects(verifyReceipt(changed, { jwksUrl: counter.url }), ReceiptError);
    }
    await assert.rejects(verifyReceipt("not.a-jws", { jwks }), ReceiptError);
  });
});
