// Port of the OpenAI Agents SDK for JavaScript's own human-in-the-loop example, through the real service
// (test/service.py: gunicorn, Celery worker and beat, PostgreSQL, Redis) on `@openai/agents` 0.20.0.
//
// Source: openai/openai-agents-js, examples/agent-patterns/human-in-the-loop.ts. The tools (`get_weather`,
// `get_temperature` with `needsApproval` on Oakland), the weather sub-agent exposed with
// `weatherAgent.asTool({ needsApproval })` on San Francisco, and the main agent are the example's.
// Changed per docs/sdk.md:
// - the agents get `model: scripted(...)`, the SDK's own `ScriptedModel` (no network);
// - the tools record what they ran (the example returns the same strings);
// - the `while (hasInterruptions)` loop (fs.writeFile of `result.state`, `RunState.fromString`,
//   `confirm()`, `state.approve/reject`, `run(agent, state)`) → `openAIAgentsAgent({ agent })`.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Server } from "@agentos/sdk";
import { openAIAgentsAgent } from "@agentos/sdk/openai-agents";
import { Agent, setTracingDisabled, tool } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder } from "@openai/agents/testing";
import { z } from "zod";

import { freePort, newSecret, startService, waitFor } from "./harness.mjs";

setTracingDisabled(true);
const EXPIRED = "The approval request expired without a decision. Do not run this call.";

/** The model makes the calls of `turns[n]` once the calls before them have results, then reports the results. */
function scripted(turns) {
  const respond = ({ request }) => {
    const input = Array.isArray(request.input) ? request.input : [];
    const results = input.filter((i) => i.type === "function_call_result");
    const answered = new Set(results.map((r) => r.callId));
    const next = turns.find((turn) => !turn.every(([, , id]) => answered.has(id)));
    if (next) return next.map(([name, args, callId]) => functionCall(name, args, { callId }));
    const seen = results.map((r) => `${r.callId}=${typeof r.output === "string" ? r.output : r.output?.text}`);
    return [assistantMessage(seen.sort().join("; "))];
  };
  return new ScriptedModel(Array.from({ length: 16 }, () => modelResponder(respond)));
}

function exampleAgent(turns, ran) {
  const getWeatherTool = tool({
    name: "get_weather",
    description: "Get the weather for a given city",
    parameters: z.object({
      city: z.string(),
    }),
    execute: async ({ city }) => {
      ran.push(["get_weather", city]);
      return `The weather in ${city} is sunny`;
    },
  });

  // A specialist sub-agent that we will expose as a tool.
  const weatherAgent = new Agent({
    name: "Weather agent",
    instructions: "You provide concise weather information based on the input.",
    handoffDescription: "Handles weather-related queries",
    tools: [getWeatherTool],
    model: scripted([[["get_weather", { city: "San Francisco" }, "sub_1"]]]),
  });

  const getTemperatureTool = tool({
    name: "get_temperature",
    description: "Get the temperature for a given city",
    parameters: z.object({
      city: z.string(),
    }),
    needsApproval: async (_ctx, { city }) => city.includes("Oakland"),
    execute: async ({ city }) => {
      ran.push(["get_temperature", city]);
      return `The temperature in ${city} is 20° Celsius`;
    },
  });

  // Main agent that can call the weather agent as a tool.
  return new Agent({
    name: "Basic test agent",
    instructions:
      "You are a basic agent. For weather questions, use the weather agent tool with an appropriate input string and then answer.",
    tools: [
      getTemperatureTool,
      weatherAgent.asTool({
        toolName: "ask_weather_agent",
        toolDescription: "Ask the weather agent about a location. Pass a short input string.",
        // Demonstrate approvals at the agent-as-tool level.
        // Require approval when the input mentions San Francisco.
        needsApproval: async (_ctx, { input }) => input.includes("San Francisco"),
      }),
    ],
    model: scripted(turns),
  });
}

const PROMPT = "What is the weather and temperature in San Francisco and Oakland? Use available tools as needed.";
const FIRST = [
  ["get_temperature", { city: "Oakland" }, "t_oak"],
  ["ask_weather_agent", { input: "San Francisco" }, "w_sf"],
  ["get_temperature", { city: "San Francisco" }, "t_sf"],
];
const THEN_OAKLAND_HILLS = [["get_temperature", { city: "Oakland Hills" }, "t_hills"]];

const secret = newSecret();
let service;
let port;
let agentServer;
const runs = { main: [], restarted: [], expiring: [] };

function serveAgents(ran) {
  return new Server(
    {
      weather: openAIAgentsAgent({ agent: exampleAgent([FIRST], ran) }),
      weather_twice: openAIAgentsAgent({ agent: exampleAgent([FIRST, THEN_OAKLAND_HILLS], ran) }),
      weather_expiring: openAIAgentsAgent({ agent: exampleAgent([FIRST], runs.expiring), expiresIn: 60 }),
    },
    { secret, port, log: () => {} },
  ).listen();
}

before(async () => {
  port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  service = await startService("openai_agents", {
    weather: { endpoint, secret },
    weather_twice: { endpoint, secret },
    weather_expiring: { endpoint, secret },
  });
  agentServer = await serveAgents(runs.main);
});

after(async () => {
  await agentServer?.close();
  await service?.stop();
});

async function held(runId) {
  const hold = await service.heldHold(runId);
  return { hold, byId: Object.fromEntries(hold.items.map((i) => [i.id, i])) };
}

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

describe("examples/agent-patterns/human-in-the-loop.ts", () => {
  test("both gated calls are one hold; approve runs one, a reject's comment reaches the model", async () => {
    runs.main.length = 0;
    const runId = await service.startRun("weather", { prompt: PROMPT });
    const { hold, byId } = await held(runId);
    assert.deepEqual(Object.keys(byId).sort(), ["t_oak", "w_sf"]);
    assert.deepEqual(byId.t_oak.data, { city: "Oakland" });
    assert.equal(byId.t_oak.title, 'get_temperature(city="Oakland")');
    assert.deepEqual(runs.main, [["get_temperature", "San Francisco"]]); // ungated: ran before the pause
    assert.doesNotMatch(JSON.stringify(hold), /schemaVersion|currentAgent|modelResponses/); // the RunState stays server-side
    await service.decide(hold.hold_id, {
      items: [
        { id: "t_oak", action: "approve" },
        { id: "w_sf", action: "reject", comment: "no sub-agents today" },
      ],
    });
    const run = await service.runReaches(runId, "completed");
    assert.equal(
      run.output,
      "t_oak=The temperature in Oakland is 20° Celsius; t_sf=The temperature in San Francisco is 20° Celsius; w_sf=no sub-agents today",
    );
    assert.deepEqual(runs.main, [["get_temperature", "San Francisco"], ["get_temperature", "Oakland"]]);
  });

  test("a typed edit is checked against the tool's schema, then is a rejection naming the call, whose repeat runs unasked", async () => {
    runs.main.length = 0;
    const runId = await service.startRun("weather_twice", { prompt: PROMPT });
    const { hold, byId } = await held(runId);
    assert.equal(byId.t_oak.schema?.properties?.city?.type, "string");
    const bad = await service.api("POST", `/v0/holds/${hold.hold_id}/decision`, {
      items: [
        { id: "t_oak", action: "edit", data: { city: 5 } },
        { id: "w_sf", action: "approve" },
      ],
    });
    assert.equal(bad.status, 422);
    assert.equal(bad.body.errors[0].field, "items[0].data.city");
    await service.decide(hold.hold_id, {
      items: [
        { id: "t_oak", action: "edit", data: { city: "Oakland Hills" } },
        { id: "w_sf", action: "approve" },
      ],
    });
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.holds.length, 1); // the model's repeat of the edited call was not asked again
    assert.match(run.output, /t_oak=A reviewer did not approve this call as proposed\. Call get_temperature again with exactly these arguments instead: \{"city":"Oakland Hills"\}/);
    assert.match(run.output, /t_hills=The temperature in Oakland Hills is 20° Celsius/);
    assert.deepEqual(runs.main, [
      ["get_temperature", "San Francisco"],
      ["get_weather", "San Francisco"],
      ["get_temperature", "Oakland Hills"],
    ]);
  });

  test("a restarted agent resumes from the RunState kept in run state, and pauses again on the next step", async () => {
    const runId = await service.startRun("weather_twice", { prompt: PROMPT });
    const { hold } = await held(runId);
    // The process that asked is gone; a new one builds the agent anew (new Agent objects, new models).
    await agentServer.close();
    runs.restarted.length = 0;
    agentServer = await serveAgents(runs.restarted);
    await service.decide(hold.hold_id, {
      items: [
        { id: "t_oak", action: "approve" },
        { id: "w_sf", action: "reject" },
      ],
    });
    const second = await nextHold(runId, hold.hold_id);
    assert.deepEqual(second.items.map((i) => i.id), ["t_hills"]);
    await service.decide(second.hold_id, { items: [{ id: "t_hills", action: "reject", comment: "Oakland only" }] });
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.seq, 3);
    assert.match(run.output, /t_hills=Oakland only/);
    assert.match(run.output, /w_sf=Tool execution was not approved\./); // the SDK's own default rejection
    assert.deepEqual(runs.restarted, [["get_temperature", "Oakland"]]);
  });

  test("a resume whose RunState is gone fails, naming the run", async () => {
    const runId = await service.startRun("weather", { prompt: PROMPT });
    const { hold } = await held(runId);
    // The agent's store is lost: this process forgets the run state before the adapter reads it.
    await agentServer.close();
    agentServer = await new Server(
      {
        weather: async (inv) => {
          await inv.state.run.delete("openai-agents:run-state");
          return openAIAgentsAgent({ agent: exampleAgent([FIRST], []) })(inv);
        },
      },
      { secret, port, log: () => {} },
    ).listen();
    await service.decide(hold.hold_id, { items: [{ id: "t_oak", action: "approve" }, { id: "w_sf", action: "approve" }] });
    const run = await service.runReaches(runId, "failed");
    assert.match(JSON.stringify(run.error), new RegExp(`run ${runId}: nothing to resume: run state \\\\"openai-agents:run-state\\\\" holds no paused run`));
    await agentServer.close();
    agentServer = await serveAgents(runs.main);
  });

  test("an expired hold rejects both calls, saying it expired", async () => {
    const runId = await service.startRun("weather_expiring", { prompt: PROMPT });
    await service.heldHoldPastDue(runId);
    const run = await service.runReaches(runId, "completed");
    assert.equal(run.holds[0].status, "expired");
    assert.equal(
      run.output,
      `t_oak=${EXPIRED}; t_sf=The temperature in San Francisco is 20° Celsius; w_sf=${EXPIRED}`,
    );
    assert.deepEqual(runs.expiring, [["get_temperature", "San Francisco"]]);
  });
});
