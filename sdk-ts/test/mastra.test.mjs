// The Mastra adapters (`@mastra/core` 1.x on its real runtime, LibSQL storage, a scripted
// MastraLanguageModelV2Mock) through the real service; examples/ts/mastra_agent.ts is restarted between
// the ask and the decision, so another process resumes from Mastra's storage.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Server } from "@agentos/sdk";
import { aiSdkAgent } from "@agentos/sdk/ai";
import { mastraAgent, mastraWorkflow, proposedResumeData } from "@agentos/sdk/mastra";
import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core/mastra";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { createTool } from "@mastra/core/tools";
import { createStep, createWorkflow } from "@mastra/core/workflows";
import { LibSQLStore } from "@mastra/libsql";
import { stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { ROOT, freePort, newSecret, startAgent, startService } from "./harness.mjs";

const tmp = mkdtempSync(join(tmpdir(), "agentos-mastra-"));
const exampleSecret = newSecret();
const sdkSecret = newSecret();
let service;
let example;
let examplePort;
let inProcess;
const EXPIRED = "The approval request expired without a decision. Do not run this call.";

// Holds that nobody decides (the "expiry" tests make each one due as soon as it is asked).
const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
const expiringModel = new MockLanguageModelV4({
  doGenerate: async ({ prompt }) =>
    prompt.at(-1).role === "user"
      ? { content: [{ type: "tool-call", toolCallId: "call_1", toolName: "pay", input: '{"amount":"5.00"}' }], finishReason: { unified: "tool-calls", raw: "" }, usage, warnings: [] }
      : { content: [{ type: "text", text: JSON.stringify(prompt.at(-1).content[0].output) }], finishReason: { unified: "stop", raw: "" }, usage, warnings: [] },
});
const expiringHandlers = {
  ai_expiring: aiSdkAgent({
    settings: {
      model: expiringModel,
      tools: { pay: tool({ inputSchema: z.object({ amount: z.string() }), execute: async () => "paid" }) },
      toolApproval: { pay: () => ({ type: "user-approval" }) },
      stopWhen: stepCountIs(3),
    },
    expiresIn: 60,
  }),
};

// A workflow whose resumeSchema has no `approved`: a rejection cancels the workflow run.
const review = createStep({
  id: "review",
  inputSchema: z.object({ title: z.string() }),
  resumeSchema: z.object({ title: z.string().min(3) }),
  outputSchema: z.object({ published: z.string() }),
  execute: async ({ inputData, resumeData, suspend }) => {
    if (!resumeData) return await suspend({ title: inputData.title, message: "Check the headline" });
    return { published: resumeData.title };
  },
});
const publish = createWorkflow({ id: "publish", inputSchema: z.object({ title: z.string() }), outputSchema: z.object({ published: z.string() }) })
  .then(review)
  .commit();
// Mastra's own human-in-the-loop example (docs/workflows/human-in-the-loop, "Pausing a workflow with
// suspend()"): the step has no branch for `approved: false`, it suspends again.
const sendEmail = createStep({
  id: "step-1",
  inputSchema: z.object({ userEmail: z.string() }),
  outputSchema: z.object({ output: z.string() }),
  resumeSchema: z.object({ approved: z.boolean() }),
  suspendSchema: z.object({ reason: z.string() }),
  execute: async ({ inputData, resumeData, suspend }) => {
    const { userEmail } = inputData;
    const { approved } = resumeData ?? {};
    if (!approved) {
      return await suspend({ reason: "Human approval required." });
    }
    return { output: `Email sent to ${userEmail}` };
  },
});
const emailSchemas = { inputSchema: z.object({ userEmail: z.string() }), outputSchema: z.object({ output: z.string() }) };
const testWorkflow = createWorkflow({ id: "test-workflow", ...emailSchemas }).then(sendEmail).commit();
// The same page's "Handling human rejection with bail()", as written, and with room in its resumeSchema
// for the reviewer's comment and whether the hold expired.
const bailStep = (room) =>
  createStep({
    id: "step-1",
    inputSchema: z.object({ userEmail: z.string() }),
    outputSchema: z.object({ output: z.string() }),
    resumeSchema: room
      ? z.object({ approved: z.boolean(), reason: z.string().optional(), expired: z.boolean().optional() })
      : z.object({ approved: z.boolean() }),
    suspendSchema: z.object({ reason: z.string() }),
    execute: async ({ inputData, resumeData, suspend, bail }) => {
      const { userEmail } = inputData;
      const { approved } = resumeData ?? {};
      if (approved === false) {
        return bail(room ? { reason: resumeData.reason, expired: resumeData.expired } : { reason: "User rejected the request." });
      }
      if (!approved) {
        return await suspend({ reason: "Human approval required." });
      }
      return { output: `Email sent to ${userEmail}` };
    },
  });
const bailWorkflow = createWorkflow({ id: "bail-workflow", ...emailSchemas }).then(bailStep(false)).commit();
const bailRoomWorkflow = createWorkflow({ id: "bail-room-workflow", ...emailSchemas }).then(bailStep(true)).commit();

// A tool that calls its own suspend() (Mastra's agent tool suspension), not requireApproval.
const mastraUsage = { inputTokens: 10, outputTokens: 10, totalTokens: 20 };
const bookModel = new MastraLanguageModelV2Mock({
  doGenerate: async ({ prompt }) =>
    prompt.at(-1).role === "user"
      ? { content: [{ type: "tool-call", toolCallId: "call_1", toolName: "book", input: '{"city":"Paris"}' }], finishReason: "tool-calls", usage: mastraUsage, warnings: [] }
      : { content: [{ type: "text", text: "done" }], finishReason: "stop", usage: mastraUsage, warnings: [] },
});
const book = createTool({
  id: "book",
  description: "Book a trip once the traveller confirms",
  inputSchema: z.object({ city: z.string() }),
  suspendSchema: z.object({ message: z.string() }),
  resumeSchema: z.object({ confirmed: z.boolean() }),
  execute: async (input, context) => {
    const { suspend, resumeData } = context.agent;
    if (!resumeData) return await suspend({ message: `Book ${input.city}?` });
    return { booked: resumeData.confirmed };
  },
});
const booker = new Agent({ id: "booker", name: "booker", instructions: "Book trips.", model: bookModel, tools: { book } });

const mastra = new Mastra({
  agents: { booker },
  workflows: { publish, "test-workflow": testWorkflow, "bail-workflow": bailWorkflow, "bail-room-workflow": bailRoomWorkflow },
  storage: new LibSQLStore({ id: "tests", url: `file:${join(tmp, "in-process.db")}` }),
  logger: false,
});

const moreHandlers = {
  hitl_docs: mastraWorkflow({ mastra, workflow: "test-workflow" }),
  hitl_docs_expiring: mastraWorkflow({ mastra, workflow: "test-workflow", expiresIn: 60 }),
  bail: mastraWorkflow({ mastra, workflow: "bail-workflow" }),
  bail_room: mastraWorkflow({ mastra, workflow: "bail-room-workflow" }),
  bail_room_expiring: mastraWorkflow({ mastra, workflow: "bail-room-workflow", expiresIn: 60 }),
  book: mastraAgent({ mastra, agent: "booker" }),
};

function startExample() {
  return startAgent(join(ROOT, "examples", "ts", "mastra_agent.ts"), {
    secret: exampleSecret,
    port: examplePort,
    env: { MASTRA_DB: join(tmp, "example.db") },
  });
}

before(async () => {
  examplePort = await freePort();
  const sdkPort = await freePort();
  const at = (port) => `http://127.0.0.1:${port}`;
  service = await startService("mastra", {
    pay_with_mastra: { endpoint: at(examplePort), secret: exampleSecret },
    approve_payment: { endpoint: at(examplePort), secret: exampleSecret },
    publish: { endpoint: at(sdkPort), secret: sdkSecret },
    publish_expiring: { endpoint: at(sdkPort), secret: sdkSecret },
    ai_expiring: { endpoint: at(sdkPort), secret: sdkSecret },
    ...Object.fromEntries(Object.keys(moreHandlers).map((n) => [n, { endpoint: at(sdkPort), secret: sdkSecret }])),
  });
  inProcess = await new Server(
    {
      publish: mastraWorkflow({ mastra, workflow: "publish" }),
      publish_expiring: mastraWorkflow({ mastra, workflow: "publish", expiresIn: 60 }),
      ...expiringHandlers,
      ...moreHandlers,
    },
    { secret: sdkSecret, port: sdkPort, log: () => {} },
  ).listen();
  example = await startExample();
});

after(async () => {
  await example?.stop();
  await inProcess?.close();
  await service?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

describe("Mastra agent tool approval (examples/ts/mastra_agent.ts)", () => {
  test("each paused call is a hold; another process approves one and declines the other with the comment", async () => {
    const runId = await service.startRun("pay_with_mastra", { prompt: "Pay this week's invoices" });
    const first = await service.heldHold(runId);
    assert.equal(first.intent, "Approve a payment the agent wants to make");
    assert.deepEqual(first.actions, ["approve", "reject"]);
    assert.deepEqual(
      first.items.map((i) => [i.id, i.title, i.data]),
      [["call_INV-1", 'pay(invoice="INV-1", payee="Aksa Lojistik", amount="18400.00")', { invoice: "INV-1", payee: "Aksa Lojistik", amount: "18400.00" }]],
    );

    // The process that asked is gone; a new one resumes from Mastra's storage.
    await example.stop();
    example = await startExample();

    await service.decide(first.hold_id, { items: [{ id: "call_INV-1", action: "approve" }] });
    const second = await waitForNewHold(runId, first.hold_id);
    assert.deepEqual(second.items.map((i) => i.id), ["call_INV-2"]);
    await service.decide(second.hold_id, { items: [{ id: "call_INV-2", action: "reject" }], comment: "INV-2 was paid last week" });
    const run = await service.runReaches(runId, "completed");
    assert.equal(
      run.output.text,
      'call_INV-1 {"payment_id":"pay_1","invoice":"INV-1","payee":"Aksa Lojistik","amount":"18400.00"}\n' +
        'call_INV-2 "INV-2 was paid last week"',
    );
    assert.equal(run.seq, 3);
  });
});

describe("Mastra workflow suspend() (examples/ts/mastra_agent.ts)", () => {
  test("the hold proposes resumeData from the resumeSchema; an edit resumes the step with the reviewer's data", async () => {
    const runId = await service.startRun("approve_payment", { payee: "Acme", amount: "120.00" });
    const hold = await service.heldHold(runId);
    assert.equal(hold.intent, "Approve the payment");
    assert.deepEqual(hold.actions, ["approve", "edit", "reject"]);
    assert.deepEqual(hold.items.map((i) => [i.id, i.title, i.data]), [
      ["approval", "approval: Payments over 100.00 need a person", { approved: true, amount: "120.00" }],
    ]);
    assert.match(hold.details, /"payee": "Acme"/);
    await example.stop();
    example = await startExample();
    await service.decide(hold.hold_id, { items: [{ id: "approval", action: "edit", data: { approved: true, amount: "99.00" } }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { paid: true, payee: "Acme", amount: "99.00" });
  });

  test("a reject sends approved: false (and the comment as reason) when the resumeSchema has that boolean", async () => {
    const runId = await service.startRun("approve_payment", { payee: "Globex", amount: "2450.50" });
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "approval", action: "reject" }], comment: "not this month" });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { paid: false, payee: "Globex", amount: "2450.50", reason: "not this month" });
  });
});

describe("mastraWorkflow", () => {
  test("a reject without an `approved` boolean cancels the workflow run", async () => {
    const runId = await service.startRun("publish", { title: "Q3 numbers" });
    const hold = await service.heldHold(runId);
    assert.deepEqual(hold.items[0].data, { title: "Q3 numbers" });
    await service.decide(hold.hold_id, { items: [{ id: "review", action: "reject" }], comment: "wrong quarter" });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { status: "canceled", rejected: [{ step: "review", comment: "wrong quarter" }] });
    assert.equal((await mastra.getWorkflow("publish").getWorkflowRunById(runId)).status, "canceled");
  });

  test("approve resumes with the data as asked", async () => {
    const runId = await service.startRun("publish", { title: "Q4 numbers" });
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "review", action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { published: "Q4 numbers" });
  });

  test("a resume whose snapshot is gone fails, naming what was missing", async () => {
    const runId = await service.startRun("publish", { title: "Q1 numbers" });
    const hold = await service.heldHold(runId);
    await mastra.getWorkflow("publish").deleteWorkflowRunById(runId);
    await service.decide(hold.hold_id, { items: [{ id: "review", action: "approve" }] });
    const run = await service.runReaches(runId, "failed");
    assert.match(JSON.stringify(run.error), /no suspended run r_\d+ of workflow \\"publish\\"/);
  });

  test("proposedResumeData takes the schema's fields from the payload, approved: true and defaults", () => {
    const schema = {
      type: "object",
      properties: { approved: { type: "boolean" }, amount: { type: "string" }, note: { type: "string", default: "" }, x: {} },
    };
    assert.deepEqual(proposedResumeData({ amount: "1.00", other: 1 }, schema), { approved: true, amount: "1.00", note: "" });
    assert.deepEqual(proposedResumeData({ a: 1 }, null), { a: 1 });
  });
});

describe("Mastra's human-in-the-loop page", () => {
  test("a step with no branch for approved: false ends on a reject (the run is cancelled with the comment), never re-asks", async () => {
    const runId = await service.startRun("hitl_docs", { userEmail: "a@example.com" });
    const hold = await service.heldHold(runId);
    assert.deepEqual(hold.items.map((i) => [i.id, i.title, i.data]), [["step-1", "step-1: Human approval required.", { approved: true }]]);
    await service.decide(hold.hold_id, { items: [{ id: "step-1", action: "reject" }], comment: "not this one" });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { status: "canceled", rejected: [{ step: "step-1", comment: "not this one" }] });
    assert.equal(run.holds.length, 1);
    assert.equal((await mastra.getWorkflow("test-workflow").getWorkflowRunById(runId)).status, "canceled");
  });

  test("approve runs the step", async () => {
    const runId = await service.startRun("hitl_docs", { userEmail: "b@example.com" });
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "step-1", action: "approve" }] });
    assert.deepEqual((await service.runReaches(runId, "completed")).output, { output: "Email sent to b@example.com" });
  });

  test("bail() as written: a reject bails with the step's own reason (its resumeSchema has no room for the comment)", async () => {
    const runId = await service.startRun("bail", { userEmail: "a@example.com" });
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "step-1", action: "reject" }], comment: "wrong address" });
    assert.deepEqual((await service.runReaches(runId, "completed")).output, { reason: "User rejected the request." });
  });

  test("bail() with reason and expired in its resumeSchema gets the reviewer's comment and expired: false", async () => {
    const runId = await service.startRun("bail_room", { userEmail: "a@example.com" });
    const hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: "step-1", action: "reject" }], comment: "wrong address" });
    assert.deepEqual((await service.runReaches(runId, "completed")).output, { reason: "wrong address", expired: false });
  });

  test("a tool's own suspend() fails the run, as docs/sdk.md says, without asking anyone", async () => {
    const runId = await service.startRun("book", { prompt: "book Paris" });
    const run = await service.runReaches(runId, "failed");
    assert.match(JSON.stringify(run.error), /a tool's own suspend\(\) is not supported/);
    assert.deepEqual(run.holds, []);
  });
});

describe("expiry", () => {
  test("an expired hold denies the AI SDK call and cancels the workflow run, saying it expired", async () => {
    const aiRun = await service.startRun("ai_expiring", { prompt: "pay" });
    const workflowRun = await service.startRun("publish_expiring", { title: "Q2 numbers" });
    await service.heldHoldPastDue(aiRun);
    await service.heldHoldPastDue(workflowRun);
    const ai = await service.runReaches(aiRun, "completed");
    assert.deepEqual(JSON.parse(ai.output.text), { type: "execution-denied", reason: EXPIRED });
    assert.equal(ai.holds[0].status, "expired");
    const workflow = await service.runReaches(workflowRun, "completed");
    assert.deepEqual(workflow.output, { status: "canceled", rejected: [{ step: "review", comment: EXPIRED }] });
  });

  test("an expired hold ends a step with no branch for approved: false, once (no new hold)", async () => {
    const runId = await service.startRun("hitl_docs_expiring", { userEmail: "a@example.com" });
    await service.heldHoldPastDue(runId);
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { status: "canceled", rejected: [{ step: "step-1", comment: EXPIRED }] });
    assert.deepEqual(run.holds.map((h) => h.status), ["expired"]);
  });

  test("bail() with room in its resumeSchema learns that the hold expired", async () => {
    const runId = await service.startRun("bail_room_expiring", { userEmail: "a@example.com" });
    await service.heldHoldPastDue(runId);
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { reason: EXPIRED, expired: true });
  });
});

async function waitForNewHold(runId, previous) {
  const { waitFor } = await import("./harness.mjs");
  return waitFor(
    async () => {
      const run = await service.run(runId);
      const open = run.holds.find((h) => h.status === "pending" && h.hold_id !== previous);
      if (["completed", "failed"].includes(run.status)) throw new Error(`run ${runId} ended: ${JSON.stringify(run)}`);
      return open && run.status === "held" ? service.hold(open.hold_id) : null;
    },
    { what: "the second hold" },
  );
}
