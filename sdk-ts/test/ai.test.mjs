// The Vercel AI SDK adapter (`ai` 7.x, its real generateText driven by a scripted MockLanguageModelV4)
// and the TypeScript demo agent, through the real service.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Server } from "@agentos/sdk";
import { aiSdkAgent } from "@agentos/sdk/ai";
import { asSchema, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { ROOT, freePort, newSecret, startAgent, startService, waitFor } from "./harness.mjs";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model that calls `pay` once, then says what the tool answered; `prompts` records every call. */
function scriptedModel(prompts) {
  return new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      prompts.push(prompt);
      if (prompt[prompt.length - 1].role === "user") {
        return {
          content: [{ type: "tool-call", toolCallId: "call_1", toolName: "pay", input: JSON.stringify({ payee: "Acme", amount: "120.00" }) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        };
      }
      const result = prompt.at(-1).content.find((p) => p.toolCallId === "call_1");
      return { content: [{ type: "text", text: JSON.stringify(result.output) }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
    },
  });
}

const payInput = z.object({ payee: z.string(), amount: z.string().regex(/^[0-9]+\.[0-9]{2}$/) });
const ran = [];
const payTool = tool({ inputSchema: payInput, execute: async (input) => (ran.push(input), { paid: input }) });
const prompts = { signed: [], auto: [], forced: [], needs: [] };
const agentSettings = (model, extra = {}) => ({
  model,
  tools: { pay: payTool },
  toolApproval: { pay: () => ({ type: "user-approval" }) },
  stopWhen: stepCountIs(4),
  ...extra,
});

const handlers = {
  ai_signed: aiSdkAgent({
    settings: agentSettings(scriptedModel(prompts.signed), { experimental_toolApprovalSecret: "a-secret-of-the-agent" }),
    actions: ["approve", "edit", "reject", "feedback"],
  }),
  ai_schema_auto: aiSdkAgent({ settings: agentSettings(scriptedModel(prompts.auto)) }),
  ai_schema_forced: aiSdkAgent({ settings: agentSettings(scriptedModel(prompts.forced)), itemSchema: true }),
  // The tool-level flag (deprecated in 7.x, still honoured) instead of generateText's toolApproval.
  ai_needs_approval: aiSdkAgent({
    settings: {
      model: scriptedModel(prompts.needs),
      tools: { pay: tool({ inputSchema: payInput, needsApproval: true, execute: async (input) => ({ paid: input }) }) },
      stopWhen: stepCountIs(4),
    },
  }),
};

// One city at a time: the model asks for Berlin, then Paris, then answers with every result it can see
// in its prompt. A prompt that lost a call or its result makes the SDK fail ("Tool result is missing")
// or the model ask for that city again.
const weatherRuns = [];
function weatherModel() {
  return new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      const results = prompt.filter((m) => m.role === "tool").flatMap((m) => m.content).filter((p) => p.type === "tool-result");
      const next = ["Berlin", "Paris"].find((city) => !results.some((r) => r.toolCallId === `call_${city}`));
      if (next) {
        return {
          content: [{ type: "tool-call", toolCallId: `call_${next}`, toolName: "weather", input: JSON.stringify({ city: next }) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        };
      }
      const text = results.map((r) => `${r.toolCallId} ${JSON.stringify(r.output)}`).join("\n");
      return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
    },
  });
}
const weatherTool = tool({
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => (weatherRuns.push(city), `${city}: sunny`),
});
handlers.ai_two_pauses = aiSdkAgent({
  settings: { model: weatherModel(), tools: { weather: weatherTool }, toolApproval: { weather: "user-approval" }, stopWhen: stepCountIs(6) },
});
handlers.ai_auto_then_person = aiSdkAgent({
  settings: {
    model: weatherModel(),
    tools: { weather: weatherTool },
    toolApproval: { weather: ({ city }) => (city === "Berlin" ? "approved" : "user-approval") },
    stopWhen: stepCountIs(6),
  },
});
const WEATHER = 'call_Berlin {"type":"text","value":"Berlin: sunny"}\ncall_Paris {"type":"text","value":"Paris: sunny"}';

// Two servers with the same adapter stand for an agent process before and after a restart.
const lostRuns = [];
const lostTool = tool({ inputSchema: payInput, execute: async (input) => (lostRuns.push(input), { paid: input }) });
const lostDeliveries = { before: 0, after: 0 };
const lostHandlers = (name) => {
  const adapter = aiSdkAgent({
    settings: { model: scriptedModel([]), tools: { pay: lostTool }, toolApproval: { pay: () => ({ type: "user-approval" }) }, stopWhen: stepCountIs(4) },
  });
  return { ai_lost_answer: (inv) => (lostDeliveries[name] += 1, adapter(inv)) };
};

/** Forwards deliveries to `first`; drops the answer to the first resume, and sends later ones to `second`. */
function lossyProxy(first, second) {
  let dropped = false;
  return createServer(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    const resume = JSON.parse(body).invocation.kind === "resume";
    const target = resume && dropped ? second : first;
    const resp = await fetch(target.url + "/invoke", { method: "POST", headers: req.headers, body });
    const text = await resp.text();
    if (resume && !dropped) {
      dropped = true;
      req.socket.destroy(); // the agent did the work; its answer is lost on the way back
      return;
    }
    res.writeHead(resp.status, { "content-type": "application/json" });
    res.end(text);
  });
}

const exampleSecret = newSecret();
const payInvoicesSecret = newSecret();
const sdkSecret = newSecret();
let service;
let example;
let payInvoices;
let inProcess;
let lost;

before(async () => {
  const [examplePort, payPort, sdkPort, proxyPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const at = (port) => `http://127.0.0.1:${port}`;
  service = await startService("ai", {
    pay_with_ai: { endpoint: at(examplePort), secret: exampleSecret },
    pay_invoices: { endpoint: at(payPort), secret: payInvoicesSecret },
    ...Object.fromEntries(Object.keys(handlers).map((n) => [n, { endpoint: at(sdkPort), secret: sdkSecret }])),
    ai_lost_answer: { endpoint: at(proxyPort), secret: sdkSecret },
  });
  const before = await new Server(lostHandlers("before"), { secret: sdkSecret, port: 0, log: () => {} }).listen();
  const afterRestart = await new Server(lostHandlers("after"), { secret: sdkSecret, port: 0, log: () => {} }).listen();
  const proxy = lossyProxy(before, afterRestart);
  await new Promise((r) => proxy.listen(proxyPort, "127.0.0.1", r));
  lost = { servers: [before, afterRestart], proxy };
  [example, payInvoices, inProcess] = await Promise.all([
    startAgent(join(ROOT, "examples", "ts", "ai_agent.ts"), { secret: exampleSecret, port: examplePort }),
    startAgent(join(ROOT, "examples", "ts", "pay_invoices.ts"), { secret: payInvoicesSecret, port: payPort }),
    new Server(handlers, { secret: sdkSecret, port: sdkPort, log: () => {} }).listen(),
  ]);
});

after(async () => {
  await example?.stop();
  await payInvoices?.stop();
  await inProcess?.close();
  for (const server of lost?.servers ?? []) await server.close();
  lost?.proxy.closeAllConnections();
  lost?.proxy.close();
  await service?.stop();
});

describe("examples/ts/ai_agent.ts", () => {
  test("two gated calls become one hold; an edit runs with the reviewer's input, a rejection reaches the model as a denial", async () => {
    const runId = await service.startRun("pay_with_ai", { prompt: "Pay this week's invoices" });
    const hold = await service.heldHold(runId);
    assert.equal(hold.intent, "Pay the invoices the model chose");
    assert.deepEqual(hold.actions, ["approve", "edit", "reject"]);
    assert.equal(hold.details, "- `pay`: Payments need a person.\n- `pay`: Payments need a person.");
    assert.deepEqual(
      hold.items.map((i) => [i.id, i.title, i.data]),
      [
        ["call_INV-1", 'pay(invoice="INV-1", payee="Aksa Lojistik", amount="18400.00")', { invoice: "INV-1", payee: "Aksa Lojistik", amount: "18400.00" }],
        ["call_INV-2", 'pay(invoice="INV-2", payee="Acme", amount="120.00")', { invoice: "INV-2", payee: "Acme", amount: "120.00" }],
      ],
    );
    await service.decide(hold.hold_id, {
      items: [
        { id: "call_INV-1", action: "edit", data: { invoice: "INV-1", payee: "Aksa Lojistik A.Ş.", amount: "18400.00" } },
        { id: "call_INV-2", action: "reject" },
      ],
      comment: "INV-2 was paid last week",
    });
    const run = await service.runReaches(runId, "completed");
    assert.equal(
      run.output.text,
      'call_INV-1 {"payment_id":"pay_1","invoice":"INV-1","payee":"Aksa Lojistik A.Ş.","amount":"18400.00"}\n' +
        "call_INV-2 denied: INV-2 was paid last week",
    );
  });

  test("an approval runs the call as the model made it", async () => {
    const runId = await service.startRun("pay_with_ai", {});
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, {
      items: hold.items.map((i) => ({ id: i.id, action: "approve" })),
    });
    const run = await service.runReaches(runId, "completed");
    assert.match(run.output.text, /call_INV-1 \{"payment_id":"pay_\d+","invoice":"INV-1","payee":"Aksa Lojistik","amount":"18400.00"\}/);
    assert.match(run.output.text, /call_INV-2 \{"payment_id":"pay_\d+","invoice":"INV-2","payee":"Acme","amount":"120.00"\}/);
  });
});

describe("aiSdkAgent", () => {
  test("with experimental_toolApprovalSecret edit is not offered, and an approval still runs", async () => {
    const runId = await service.startRun("ai_signed", { prompt: "pay Acme" });
    const hold = await service.heldHold(runId);
    assert.deepEqual(hold.actions, ["approve", "reject", "feedback"]);
    await service.decide(hold.hold_id, { items: [{ id: "call_1", action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(JSON.parse(run.output.text), { type: "json", value: { paid: { payee: "Acme", amount: "120.00" } } });
  });

  test("feedback is a denial that carries the comment, and the tool never runs", async () => {
    const before = ran.length;
    const runId = await service.startRun("ai_signed", { prompt: "pay Acme" });
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "call_1", action: "feedback", comment: "ask finance first" }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(JSON.parse(run.output.text), { type: "execution-denied", reason: "ask finance first" });
    assert.equal(ran.length, before);
    // The approval response went in as the conversation's last message, after the paused assistant turn.
    const resumed = prompts.signed.at(-1);
    assert.deepEqual(resumed.map((m) => m.role), ["user", "assistant", "tool"]);
  });

  test("a tool's needsApproval pauses the same way; a reject without a comment is a plain denial", async () => {
    const runId = await service.startRun("ai_needs_approval", { prompt: "pay Acme" });
    const hold = await service.heldHold(runId);
    assert.deepEqual(hold.items.map((i) => [i.id, i.data]), [["call_1", { payee: "Acme", amount: "120.00" }]]);
    await service.decide(hold.hold_id, { items: [{ id: "call_1", action: "reject" }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(JSON.parse(run.output.text), { type: "execution-denied" });
  });

  test("a resume delivered again after its answer was lost returns the recorded output; the tool ran once", async () => {
    const runId = await service.startRun("ai_lost_answer", { prompt: "pay Acme" });
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "call_1", action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(JSON.parse(run.output.text), { type: "json", value: { paid: { payee: "Acme", amount: "120.00" } } });
    assert.equal(lostRuns.length, 1);
    assert.deepEqual(lostDeliveries, { before: 2, after: 1 }); // start and resume, then the resume again
  });

  test("a second pause after a resume keeps the first call and its result: two approvals in a row", async () => {
    weatherRuns.length = 0;
    const runId = await service.startRun("ai_two_pauses", { prompt: "weather in Berlin and Paris" });
    const first = await service.heldHold(runId);
    assert.deepEqual(first.items.map((i) => i.id), ["call_Berlin"]);
    await service.decide(first.hold_id, { items: [{ id: "call_Berlin", action: "approve" }] });
    const second = await waitForNewHold(runId, first.hold_id);
    assert.deepEqual(second.items.map((i) => i.id), ["call_Paris"]);
    await service.decide(second.hold_id, { items: [{ id: "call_Paris", action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.output.text, WEATHER);
    assert.deepEqual(weatherRuns, ["Berlin", "Paris"]);
  });

  test("an automatically approved step before a person's approval stays in the conversation: one hold", async () => {
    weatherRuns.length = 0;
    const runId = await service.startRun("ai_auto_then_person", { prompt: "weather in Berlin and Paris" });
    const hold = await service.heldHold(runId);
    assert.deepEqual(hold.items.map((i) => i.id), ["call_Paris"]);
    await service.decide(hold.hold_id, { items: [{ id: "call_Paris", action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.output.text, WEATHER);
    assert.equal(run.holds.length, 1);
    assert.deepEqual(weatherRuns, ["Berlin", "Paris"]);
  });

  test("the item's schema is the tool's input schema when the service accepts one, and absent otherwise", async () => {
    const doc = (await service.api("GET", "/v0/openapi.json")).body;
    const accepts = Boolean(doc.components.schemas.ItemIn?.properties?.schema);
    const runId = await service.startRun("ai_schema_auto", { prompt: "pay Acme" });
    const hold = await service.heldHold(runId);
    if (accepts) assert.deepEqual(hold.items[0].schema, asSchema(payInput).jsonSchema);
    else assert.equal(hold.items[0].schema ?? null, null);
    await service.decide(hold.hold_id, { items: [{ id: "call_1", action: "edit", data: { payee: "Acme A.Ş.", amount: "99.00" } }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(JSON.parse(run.output.text).value, { paid: { payee: "Acme A.Ş.", amount: "99.00" } });
  });

  test("itemSchema: true sends the schema whatever the service says (today's service refuses the field)", async () => {
    const doc = (await service.api("GET", "/v0/openapi.json")).body;
    const accepts = Boolean(doc.components.schemas.ItemIn?.properties?.schema);
    const runId = await service.startRun("ai_schema_forced", { prompt: "pay Acme" });
    if (accepts) {
      const hold = await service.heldHold(runId);
      assert.deepEqual(hold.items[0].schema, asSchema(payInput).jsonSchema);
    } else {
      const run = await service.runReaches(runId, "failed");
      assert.match(JSON.stringify(run.error), /items\[0\]\.schema/);
    }
  });
});

describe("examples/ts/pay_invoices.ts", () => {
  test("asks about three invoices and pays the approved and edited ones once", async () => {
    const runId = await service.startRun("pay_invoices", {});
    const hold = await service.heldHold(runId);
    assert.equal(hold.intent, "Pay 3 invoices");
    assert.deepEqual(hold.items[0].confidence, { amount: 0.68 });
    await service.decide(hold.hold_id, {
      items: [
        { id: "INV-1", action: "edit", data: { payee: "Aksa Lojistik A.Ş.", amount: "18400.00" } },
        { id: "INV-2", action: "approve" },
        { id: "INV-3", action: "reject" },
      ],
      comment: "INV-3 was paid last week",
    });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, {
      paid: [
        { id: "INV-1", payee: "Aksa Lojistik A.Ş.", amount: "18400.00", payment_id: "pay_1" },
        { id: "INV-2", payee: "Acme", amount: "120.00", payment_id: "pay_2" },
      ],
      rejected: ["INV-3"],
    });
  });
});

async function waitForNewHold(runId, previous) {
  return waitFor(
    async () => {
      const run = await service.run(runId);
      if (["completed", "failed"].includes(run.status)) throw new Error(`run ${runId} ended: ${JSON.stringify(run)}`);
      const open = run.holds.find((h) => h.status === "pending" && h.hold_id !== previous);
      return open && run.status === "held" ? service.hold(open.hold_id) : null;
    },
    { what: "the second hold" },
  );
}
