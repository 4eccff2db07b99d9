// Ports of LangGraph.js's own human-in-the-loop examples, through the real service (test/service.py:
// gunicorn, Celery worker and beat, PostgreSQL, Redis) on `@langchain/langgraph` 1.7.3, `langchain` 1.5.14
// and `@langchain/langgraph-checkpoint-postgres` 1.0.5, with the checkpoints in the test's own PostgreSQL.
//
// Sources:
// - langchain-ai/langgraphjs, examples/streaming/src/agents/hitl-agent.ts (the tool
//   `send_release_update_email`, the `humanInTheLoopMiddleware` config and `createAgent` are the example's)
//   with examples/streaming/src/human-in-the-loop/in-process.ts (the run → interrupt → `Command({ resume:
//   { decisions } })` loop);
// - langchain-ai/docs, src/oss/langgraph/interrupts.mdx (JS): "Approve or reject" (`approvalNode`),
//   "Interrupts in tools" (`sendEmailTool`), "Validating human input" (the full example's `collectAge`) and
//   "Handling multiple interrupts" (`nodeA`, `nodeB`);
// - tests/test_sdk_adapter_langgraph.py's `ask_age` (`interrupt("How old are you?", response_schema=Age)`), with
//   `{ responseSchema }` and a Zod `Age`: LangGraph.js 1.7 has no docs example of it. `reviewGraph` is ours.
// Changed per docs/sdk.md:
// - `model` (Anthropic) → `fakeModel()` from `@langchain/core/testing`, scripted (no network);
// - `checkpointer: new MemorySaver()` → `PostgresSaver.fromConnString(…)` (the adapter refuses an in-memory one);
// - the tool records what it sent (the example returns the same object);
// - in-process.ts's two `stream_v2` turns and its `decisions` → `langGraphAgent({ graph: agent, input })`;
// - the docs' `StateSchema` → `Annotation.Root` (the same two fields), and `langGraphAgent({ graph })`;
// - "Interrupts in tools": its full example's graph (a model node that never runs the tool) → `createAgent`
//   with the scripted model, as the Python port does; the tool records what it sent;
// - "Validating human input": `langGraphAgent({ graph, schema })`, the schema of the answer the node accepts.
// - TypeScript-only syntax (`Annotation<string[]>`, `as string`, `typeof State.State`) dropped: this file is JavaScript.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Server } from "@agentos/sdk";
import { langGraphAgent } from "@agentos/sdk/langgraph";
import { AIMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { Annotation, Command, END, MemorySaver, START, StateGraph, StateSchema, interrupt } from "@langchain/langgraph";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { createAgent, humanInTheLoopMiddleware, tool } from "langchain";
import { z } from "zod/v4";

import { freePort, newSecret, startService, waitFor } from "./harness.mjs";

const EXPIRED = "The approval request expired without a decision. Do not run this call.";

/** Calls the tools of `turns[n]` once the calls before them have answers, then reports the tool messages. */
function scripted(turns) {
  const respond = (messages) => {
    const answered = new Set(messages.filter((m) => m.type === "tool").map((m) => m.tool_call_id));
    const next = turns.find((turn) => !turn.every(([, , id]) => answered.has(id)));
    if (next) return new AIMessage({ content: "", tool_calls: next.map(([name, args, id]) => ({ id, name, args })) });
    const seen = messages.filter((m) => m.type === "tool").map((m) => `${m.tool_call_id}=${m.content}`);
    return new AIMessage(seen.sort().join("; "));
  };
  const model = fakeModel();
  for (let i = 0; i < 16; i++) model.respond(respond);
  return model;
}

function hitlAgent(turns, sent, checkpointer) {
  const sendReleaseUpdateEmail = tool(
    async ({ to, subject, body }) => {
      sent.push({ to, subject, body });
      return {
        status: "queued",
        content: `Queued a release update email to ${to} with subject "${subject}".`,
        email: { to, subject, body },
      };
    },
    {
      name: "send_release_update_email",
      description: "Send a release or rollout update email to a stakeholder. Requires human approval before dispatch.",
      schema: z.object({
        to: z.string().describe("The email address to send the update to."),
        subject: z.string().describe("A concise subject line for the message."),
        body: z.string().describe("The full email body that should be reviewed before sending."),
      }),
    },
  );

  const hitlMiddleware = humanInTheLoopMiddleware({
    interruptOn: {
      send_release_update_email: {
        allowedDecisions: ["approve", "edit", "reject"],
        description: "Review the outbound update before the email is sent.",
      },
    },
    descriptionPrefix: "Human review required",
  });

  return createAgent({
    model: scripted(turns),
    tools: [sendReleaseUpdateEmail],
    middleware: [hitlMiddleware],
    checkpointer,
    systemPrompt: `You are a helpful assistant that sends emails on behalf of the user.
When the user asks you to send, notify, email, or announce something, you MUST
immediately call the send_release_update_email tool. Draft a professional subject
and body yourself based on the user's request. Use "team@example.com" as the
default recipient unless the user specifies someone else.
Never ask clarifying questions — just draft and send.`,
  });
}

// "Approve or reject" (interrupts.mdx, JS).
const State = Annotation.Root({ actionDetails: Annotation(), status: Annotation() });
function approvalGraph(checkpointer, proceeded) {
  const approvalNode = (state) => {
    // Pause execution; payload surfaces in result.__interrupt__
    const isApproved = interrupt({
      question: "Do you want to proceed?",
      details: state.actionDetails,
    });

    // Route based on the response
    if (isApproved) {
      return new Command({ goto: "proceed" }); // Runs after the resume payload is provided
    } else {
      return new Command({ goto: "cancel" });
    }
  };
  return new StateGraph(State)
    .addNode("approval", approvalNode, { ends: ["proceed", "cancel"] })
    .addNode("proceed", (state) => (proceeded.push(state.actionDetails), { status: "approved" }))
    .addNode("cancel", () => ({ status: "rejected" }))
    .addEdge(START, "approval")
    .addEdge("proceed", END)
    .addEdge("cancel", END)
    .compile({ checkpointer });
}

// "Interrupts in tools" (interrupts.mdx, JS): the approval lives in the tool.
function emailToolAgent(checkpointer, sent) {
  const sendEmailTool = tool(
    async ({ to, subject, body }) => {
      // Pause before sending; payload surfaces in result.__interrupt__
      const response = interrupt({
        action: "send_email",
        to,
        subject,
        body,
        message: "Approve sending this email?",
      });

      if (response?.action === "approve") {
        // Resume value can override inputs before executing
        const finalTo = response.to ?? to;
        const finalSubject = response.subject ?? subject;
        const finalBody = response.body ?? body;
        sent.push({ to: finalTo, subject: finalSubject, body: finalBody });
        return `Email sent to ${finalTo} with subject '${finalSubject}'`;
      }
      return "Email cancelled by user";
    },
    {
      name: "send_email",
      description: "Send an email to a recipient",
      schema: z.object({
        to: z.string(),
        subject: z.string(),
        body: z.string(),
      }),
    },
  );
  return createAgent({ model: scripted([EMAIL]), tools: [sendEmailTool], checkpointer });
}

// "Validating human input" (interrupts.mdx, JS, full example): one interrupt per node run, a conditional edge re-asks.
function ageGraph(checkpointer) {
  const State = new StateSchema({
    age: z.number().nullable(),
    pendingQuestion: z.string().nullable(),
  });

  return new StateGraph(State)
    .addNode("collectAge", (state) => {
      const question = state.pendingQuestion ?? "What is your age?";
      const answer = interrupt(question); // called exactly once per invocation

      if (typeof answer === "number" && answer > 0) {
        return { age: answer, pendingQuestion: null };
      }
      return { pendingQuestion: `'${answer}' is not a valid age. Please enter a positive number.` };
    })
    .addEdge(START, "collectAge")
    .addConditionalEdges("collectAge", (state) =>
      state.age !== null ? END : "collectAge"
    )
    .compile({ checkpointer });
}

// The Python adapter's response-schema test: the resume value is parsed by the Zod schema.
function ageSchemaGraph(checkpointer) {
  const Age = z.object({ age: z.number().int() });
  return new StateGraph(Annotation.Root({ age: Annotation() }))
    .addNode("ask", () => ({ age: interrupt("How old are you?", { responseSchema: Age }).age }))
    .addEdge(START, "ask")
    .compile({ checkpointer });
}

// A prefilled form with the `approved` flag and a `reason`: the node pays or says why not.
function reviewGraph(checkpointer, paid) {
  const Review = z.object({ amount: z.number().int().positive().optional(), approved: z.boolean(), reason: z.string() });
  return new StateGraph(Annotation.Root({ amount: Annotation(), status: Annotation() }))
    .addNode("review", (state) => {
      const review = interrupt({ amount: state.amount, approved: true, reason: "" }, { responseSchema: Review });
      if (!review.approved) return { status: `refused: ${review.reason}` };
      paid.push(review.amount);
      return { status: `paid ${review.amount}` };
    })
    .addEdge(START, "review")
    .compile({ checkpointer });
}

// "Handling multiple interrupts" (interrupts.mdx, JS): parallel branches interrupt in the same step.
function parallelGraph(checkpointer) {
  const State = Annotation.Root({
    vals: Annotation({
      reducer: (left, right) =>
        left.concat(Array.isArray(right) ? right : [right]),
      default: () => [],
    }),
  });

  function nodeA(_state) {
    const answer = interrupt("question_a");
    return { vals: [`a:${answer}`] };
  }

  function nodeB(_state) {
    const answer = interrupt("question_b");
    return { vals: [`b:${answer}`] };
  }

  return new StateGraph(State)
    .addNode("a", nodeA)
    .addNode("b", nodeB)
    .addEdge(START, "a")
    .addEdge(START, "b")
    .addEdge("a", END)
    .addEdge("b", END)
    .compile({ checkpointer });
}

const AGE = { type: "object", properties: { value: { type: "integer", minimum: 1 } }, required: ["value"] };
const EMAIL = [["send_email", { to: "alice@example.com", subject: "Hi", body: "Hello" }, "call_email"]];
const SEND = [["send_release_update_email", { to: "team@example.com", subject: "Streaming API is live", body: "The new streaming API ships today." }, "call_send"]];
const FOLLOW_UP = [["send_release_update_email", { to: "cto@example.com", subject: "Streaming API: rollout done", body: "All regions." }, "call_follow_up"]];
const userMessage = (inv) => ({ messages: [{ role: "user", content: inv.input.prompt }] });
const toolMessages = (values) => Object.fromEntries(values.messages.filter((m) => m.type === "tool").map((m) => [m.tool_call_id, [m.status ?? "success", m.content]]));

const secret = newSecret();
let service;
let port;
let server;
const savers = [];
const sent = { main: [], restarted: [], expiring: [], tool: [], toolExpiring: [], both: [] };
const paid = { main: [], expiring: [] };
const proceeded = [];
const proceededExpiring = [];

async function saver() {
  const s = PostgresSaver.fromConnString(service.databaseUrl, { schema: "langgraph" });
  await s.setup();
  savers.push(s);
  return s;
}

async function serveAgents(sentTo) {
  const checkpointer = await saver();
  return new Server(
    {
      email: langGraphAgent({ graph: hitlAgent([SEND], sentTo, checkpointer), input: userMessage, output: toolMessages }),
      email_twice: langGraphAgent({ graph: hitlAgent([SEND, FOLLOW_UP], sentTo, checkpointer), input: userMessage, output: toolMessages }),
      email_expiring: langGraphAgent({ graph: hitlAgent([SEND], sent.expiring, checkpointer), input: userMessage, output: toolMessages, expiresIn: 60 }),
      approval: langGraphAgent({ graph: approvalGraph(checkpointer, proceeded) }),
      approval_expiring: langGraphAgent({ graph: approvalGraph(checkpointer, proceededExpiring), expiresIn: 60 }),
      email_tool: langGraphAgent({ graph: emailToolAgent(checkpointer, sent.tool), input: userMessage, output: toolMessages }),
      email_tool_expiring: langGraphAgent({
        graph: emailToolAgent(checkpointer, sent.toolExpiring),
        input: userMessage,
        output: toolMessages,
        expiresIn: 60,
      }),
      age: langGraphAgent({ graph: ageGraph(checkpointer), schema: AGE }),
      parallel: langGraphAgent({ graph: parallelGraph(checkpointer) }),
      email_both: langGraphAgent({ graph: hitlAgent([[...SEND, ...FOLLOW_UP]], sent.both, checkpointer), input: userMessage, output: toolMessages }),
      age_schema: langGraphAgent({ graph: ageSchemaGraph(checkpointer) }),
      review: langGraphAgent({ graph: reviewGraph(checkpointer, paid.main) }),
      review_expiring: langGraphAgent({ graph: reviewGraph(checkpointer, paid.expiring), expiresIn: 60 }),
    },
    { secret, port, log: () => {} },
  ).listen();
}

before(async () => {
  port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  service = await startService("langgraph", {
    email: { endpoint, secret },
    email_twice: { endpoint, secret },
    email_expiring: { endpoint, secret },
    approval: { endpoint, secret },
    approval_expiring: { endpoint, secret },
    email_tool: { endpoint, secret },
    email_tool_expiring: { endpoint, secret },
    age: { endpoint, secret },
    parallel: { endpoint, secret },
    email_both: { endpoint, secret },
    age_schema: { endpoint, secret },
    review: { endpoint, secret },
    review_expiring: { endpoint, secret },
  });
  server = await serveAgents(sent.main);
});

after(async () => {
  await server?.close();
  for (const s of savers) await s.end();
  await service?.stop();
});

async function nextHold(runId, previous) {
  return waitFor(
    async () => {
      const run = await service.run(runId);
      if (["completed", "failed"].includes(run.status)) throw new Error(`run ${runId} ended: ${JSON.stringify(run)}`);
      const open = run.holds.find((h) => h.status === "pending" && h.hold_id !== previous);
      return open && run.status === "held" ? service.hold(open.hold_id) : null;
    },
    { what: "the next hold" },
  );
}

const PROMPT = { prompt: "Send a release update email about the new streaming API" };
const QUEUED = 'Queued a release update email to team@example.com with subject "Streaming API is live".';

describe("examples/streaming hitl-agent.ts with humanInTheLoopMiddleware", () => {
  test("the middleware's request is one item with its own decisions, description and schema; approve sends it", async () => {
    sent.main.length = 0;
    const runId = await service.startRun("email", PROMPT);
    const hold = await service.heldHold(runId);
    assert.equal(hold.intent, "Approve 1 tool call(s): send_release_update_email");
    const [item] = hold.items;
    assert.match(item.id, /^[0-9a-f]{32}\.0$/);
    assert.deepEqual(item.data, SEND[0][1]);
    assert.deepEqual(item.actions, ["approve", "edit", "reject"]);
    assert.equal(item.details, "Review the outbound update before the email is sent.");
    assert.equal(item.schema.properties.subject.type, "string");
    assert.deepEqual(sent.main, []); // nothing is sent while the call waits
    await service.decide(hold.hold_id, { items: [{ id: item.id, action: "approve" }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output.call_send[0], "success");
    assert.deepEqual(sent.main, [SEND[0][1]]);
  });

  test("a typed edit is refused at the decision, a good one is sent as edited; a reject's comment is the ToolMessage", async () => {
    sent.main.length = 0;
    let runId = await service.startRun("email", PROMPT);
    let hold = await service.heldHold(runId);
    const id = hold.items[0].id;
    const bad = await service.api("POST", `/v0/holds/${hold.hold_id}/decision`, { items: [{ id, action: "edit", data: { ...SEND[0][1], to: 5 } }] });
    assert.equal(bad.status, 422);
    assert.equal(bad.body.errors[0].field, "items[0].data.to");
    const edited = { ...SEND[0][1], to: "eng@example.com" };
    await service.decide(hold.hold_id, { items: [{ id, action: "edit", data: edited }] });
    await service.runReaches(runId, "completed");
    assert.deepEqual(sent.main, [edited]);

    runId = await service.startRun("email", PROMPT);
    hold = await service.heldHold(runId);
    await service.decide(hold.hold_id, { items: [{ id: hold.items[0].id, action: "reject" }], comment: "wait for the changelog" });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { call_send: ["error", "wait for the changelog"] });
    assert.deepEqual(sent.main, [edited]); // the rejected call never ran
  });

  test("a restarted agent resumes from PostgreSQL and pauses again on the next call", async () => {
    const runId = await service.startRun("email_twice", PROMPT);
    const first = await service.heldHold(runId);
    // The process that asked is gone; a new one builds the agent and its saver anew.
    await server.close();
    sent.restarted.length = 0;
    server = await serveAgents(sent.restarted);
    await service.decide(first.hold_id, { items: [{ id: first.items[0].id, action: "approve" }] });
    const second = await nextHold(runId, first.hold_id);
    assert.deepEqual(second.items[0].data, FOLLOW_UP[0][1]);
    await service.decide(second.hold_id, { items: [{ id: second.items[0].id, action: "reject", comment: "the CTO knows" }] });
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.seq, 3);
    assert.deepEqual(run.output.call_follow_up, ["error", "the CTO knows"]);
    assert.deepEqual(sent.restarted, [SEND[0][1]]);
  });

  test("a resume whose checkpoint is gone fails, naming the run", async () => {
    const runId = await service.startRun("email", PROMPT);
    const hold = await service.heldHold(runId);
    await savers.at(-1).deleteThread(runId); // the store lost this thread
    await service.decide(hold.hold_id, { items: [{ id: hold.items[0].id, action: "approve" }] });
    const run = await service.runReaches(runId, "failed");
    assert.match(JSON.stringify(run.error), new RegExp(`run ${runId}: thread ${runId} has no pending interrupt in the graph's checkpointer`));
  });

  test("an in-memory checkpointer is refused unless allowed", () => {
    assert.throws(() => langGraphAgent({ graph: hitlAgent([SEND], [], new MemorySaver()) }), /in-memory checkpointer/);
    assert.equal(typeof langGraphAgent({ graph: hitlAgent([SEND], [], new MemorySaver()), inMemoryOk: true }), "function");
  });

  test("an expired hold rejects the call, saying it expired", async () => {
    const runId = await service.startRun("email_expiring", PROMPT);
    await service.heldHoldPastDue(runId);
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.holds[0].status, "expired");
    assert.deepEqual(run.output, { call_send: ["error", EXPIRED] });
    assert.deepEqual(sent.expiring, []);
  });
});

describe('interrupts.mdx "Approve or reject"', () => {
  test("approve takes the node's if branch, reject its else branch", async () => {
    for (const [action, status] of [["reject", "rejected"], ["approve", "approved"]]) {
      const runId = await service.startRun("approval", { actionDetails: `Transfer $500 (${action})` });
      const hold = await service.heldHold(runId);
      assert.deepEqual(hold.items[0].data, { question: "Do you want to proceed?", details: `Transfer $500 (${action})` });
      assert.equal(hold.items[0].title, "interrupt(question=\"Do you want to proceed?\", details=\"Transfer $500 (" + action + ")\")");
      await service.decide(hold.hold_id, { items: [{ id: hold.items[0].id, action }] });
      const run = await service.runReaches(runId, "completed");
      assert.equal(run.output.status, status);
    }
    assert.deepEqual(proceeded, ["Transfer $500 (approve)"]);
  });
});

describe("a plain interrupt(): a typed edit and an expiry, answered as the Python adapter answers them", () => {
  test('"Validating human input": a wrongly typed edit is refused; the node gets the edited number itself', async () => {
    const runId = await service.startRun("age", { age: null, pendingQuestion: null });
    const hold = await service.heldHold(runId);
    const [item] = hold.items;
    assert.deepEqual(item.data, { value: "What is your age?" });
    assert.deepEqual(item.schema, AGE);
    for (const value of [-3, "thirty"]) {
      const refused = await service.api("POST", `/v0/holds/${hold.hold_id}/decision`, { items: [{ id: item.id, action: "edit", data: { value } }] });
      assert.equal(refused.status, 422, JSON.stringify(refused.body));
      assert.equal(refused.body.errors[0].field, "items[0].data.value");
    }
    // `interrupt(question)` returns 30, not { value: 30 }: the node's number check passes at once.
    await service.decide(hold.hold_id, { items: [{ id: item.id, action: "edit", data: { value: 30 } }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { age: 30, pendingQuestion: null });
    assert.equal(run.holds.length, 1);
  });

  test('"Interrupts in tools": a wrongly typed edit is refused; the tool sends the edited email', async () => {
    const runId = await service.startRun("email_tool", { prompt: "email alice" });
    const hold = await service.heldHold(runId);
    const [item] = hold.items;
    assert.equal(item.title, "Approve sending this email?");
    assert.deepEqual(item.data, { action: "send_email", ...EMAIL[0][1], message: "Approve sending this email?" });
    const bad = await service.api("POST", `/v0/holds/${hold.hold_id}/decision`, { items: [{ id: item.id, action: "edit", data: { ...item.data, to: 5 } }] });
    assert.equal(bad.status, 422);
    assert.equal(bad.body.errors[0].field, "items[0].data.to");
    await service.decide(hold.hold_id, { items: [{ id: item.id, action: "edit", data: { ...item.data, to: "bob@example.com" } }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { call_email: ["success", "Email sent to bob@example.com with subject 'Hi'"] });
    assert.deepEqual(sent.tool, [{ to: "bob@example.com", subject: "Hi", body: "Hello" }]);
  });

  test("an expired hold answers false (the node's else branch) and { action: \"reject\" } (the tool cancels)", async () => {
    const approval = await service.startRun("approval_expiring", { actionDetails: "Transfer $500 (expires)" });
    const tool = await service.startRun("email_tool_expiring", { prompt: "email alice" });
    await service.heldHoldPastDue(approval);
    await service.heldHoldPastDue(tool);
    let run = await service.runReaches(approval, "completed");
    assert.equal(run.holds[0].status, "expired");
    assert.equal(run.output.status, "rejected");
    assert.deepEqual(proceededExpiring, []);
    run = await service.runReaches(tool, "completed");
    assert.equal(run.holds[0].status, "expired");
    assert.deepEqual(run.output, { call_email: ["success", "Email cancelled by user"] });
    assert.deepEqual(sent.toolExpiring, []);
  });
});

describe("several pauses in one step are one hold, each answered by its own decision", () => {
  test('"Handling multiple interrupts": both branches are items of one hold; each node gets its own answer', async () => {
    const runId = await service.startRun("parallel", { vals: [] });
    const hold = await service.heldHold(runId);
    assert.equal(hold.intent, "Approve 2 pending step(s)");
    const byQuestion = Object.fromEntries(hold.items.map((i) => [i.data.value, i.id]));
    assert.deepEqual(Object.keys(byQuestion).sort(), ["question_a", "question_b"]);
    await service.decide(hold.hold_id, {
      items: [
        { id: byQuestion.question_a, action: "edit", data: { value: "answer for question_a" } },
        { id: byQuestion.question_b, action: "reject" },
      ],
    });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output.vals.sort(), ["a:answer for question_a", "b:false"]);
    assert.equal(run.holds.length, 1);
  });

  test("the middleware's two calls of one model message are two items of one hold, decided by position", async () => {
    // Approve and edit only: on a reject LangChain JS drops the message's other calls and asks the model again.
    const runId = await service.startRun("email_both", PROMPT);
    const hold = await service.heldHold(runId);
    assert.equal(hold.intent, "Approve 2 tool call(s): send_release_update_email");
    assert.deepEqual(hold.items.map((i) => [i.id.split(".")[1], i.data.to]), [["0", "team@example.com"], ["1", "cto@example.com"]]);
    const edited = { ...FOLLOW_UP[0][1], to: "board@example.com" };
    await service.decide(hold.hold_id, {
      items: [
        { id: hold.items[1].id, action: "edit", data: edited },
        { id: hold.items[0].id, action: "approve" },
      ],
    });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(Object.keys(run.output).sort(), ["call_follow_up", "call_send"]);
    assert.deepEqual(sent.both, [SEND[0][1], edited]);
    assert.equal(run.holds.length, 1);
  });
});

describe('an interrupt with a responseSchema: the Python adapter\'s "schema" answer rule', () => {
  test("without an approved flag: edit only, in the schema's fields; a wrong type is refused; the node gets the answer", async () => {
    const runId = await service.startRun("age_schema", {});
    const hold = await service.heldHold(runId);
    const [item] = hold.items;
    assert.deepEqual(item.data, { age: null });
    assert.equal(item.details, "How old are you?");
    assert.equal(item.schema.properties.age.type, "integer");
    assert.deepEqual(item.actions, ["edit"]); // nothing to approve until a person answers; no way to say no
    const refused = await service.api("POST", `/v0/holds/${hold.hold_id}/decision`, { items: [{ id: item.id, action: "edit", data: { age: "thirty" } }] });
    assert.equal(refused.status, 422, JSON.stringify(refused.body));
    assert.equal(refused.body.errors[0].field, "items[0].data.age");
    await service.decide(hold.hold_id, { items: [{ id: item.id, action: "edit", data: { age: 30 } }] });
    const run = await service.runReaches(runId, "completed");
    assert.deepEqual(run.output, { age: 30 });
  });

  test("with an approved flag: approve sends the data, an edit the edited data, a reject { approved: false, reason }", async () => {
    paid.main.length = 0;
    for (const [decision, status] of [
      [{ action: "approve" }, "paid 500"],
      [{ action: "edit", data: { amount: 300, approved: true, reason: "" } }, "paid 300"],
      [{ action: "reject", comment: "over budget" }, "refused: over budget"],
    ]) {
      const runId = await service.startRun("review", { amount: 500 });
      const hold = await service.heldHold(runId);
      const [item] = hold.items;
      assert.deepEqual(item.data, { amount: 500, approved: true, reason: "" });
      assert.deepEqual(item.actions, ["approve", "edit", "reject"]);
      assert.deepEqual(Object.keys(item.schema.properties).sort(), ["amount", "approved", "reason"]);
      if (decision.action === "edit") {
        const refused = await service.api("POST", `/v0/holds/${hold.hold_id}/decision`, { items: [{ id: item.id, action: "edit", data: { ...decision.data, amount: "lots" } }] });
        assert.equal(refused.status, 422, JSON.stringify(refused.body));
        assert.equal(refused.body.errors[0].field, "items[0].data.amount");
      }
      await service.decide(hold.hold_id, { items: [{ id: item.id, ...decision }] });
      const run = await service.runReaches(runId, "completed");
      assert.equal(run.output.status, status);
    }
    assert.deepEqual(paid.main, [500, 300]);
  });

  test("an expired hold answers { approved: false, reason: <the expiry message> }", async () => {
    const runId = await service.startRun("review_expiring", { amount: 500 });
    await service.heldHoldPastDue(runId);
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.holds[0].status, "expired");
    assert.equal(run.output.status, `refused: ${EXPIRED}`);
    assert.deepEqual(paid.expiring, []);
  });
});
