/**
 * OpenAI Agents SDK for JavaScript (`@openai/agents` 0.x): the tool approvals a run stops on
 * (`needsApproval`) become one hold.
 *
 *   serve({ weather: openAIAgentsAgent({ agent }) })
 *
 * The paused `RunState` (`result.state.toString()`) is kept in run state on the server side, never handed
 * to a client: reviewers see each call's arguments, and the resume restores the state with
 * `RunState.fromString(agent, …)` and decides that restored state's own interruptions (an item of another
 * state would be silently ignored). The SDK has no edit: as in the Python adapter, an edit is a rejection
 * whose message gives the model the corrected arguments, and the model's repeat of exactly that call is
 * approved without asking again.
 */

import { RunState, run, type Agent, type RunResult as AgentsRunResult, type RunToolApprovalItem } from "@openai/agents";

import type { AskItem, Invocation } from "../invocation.js";
import type { Action, DecidedItem, JsonObject } from "../resume.js";
import type { Handler } from "../server.js";
import {
  EXPIRED_MESSAGE,
  callTitle,
  finish,
  isObject,
  loadPause,
  offeredActions,
  pauseAndAsk,
  serviceAcceptsItemSchema,
  type Pause,
} from "./common.js";

type AnyAgent = Agent<any, any>;
type RunResult = AgentsRunResult<any, AnyAgent>;

export interface OpenAIAgentsAgentOptions {
  /** The agent; a restarted process builds the same one (same name and tools). */
  agent: AnyAgent;
  /** The run's input; default `inv.input.prompt`. */
  input?: (inv: Invocation) => string | Promise<string>;
  /** The run's output from the final result; default `result.finalOutput`. */
  output?: (result: RunResult, inv: Invocation) => unknown;
  intent?: string;
  details?: string;
  expiresIn?: number;
  actions?: Action[];
  maxTurns?: number;
  /** Each tool's parameters JSON Schema as its item's `schema`: true, false or "auto" (as `aiSdkAgent`). */
  itemSchema?: boolean | "auto";
  /** The run-state key that keeps the paused run (default `openai-agents:run-state`). */
  stateKey?: string;
}

/** A call the reviewer already wrote (an edit): the model's repeat of it runs without a second hold. */
interface Edit {
  name: string;
  args: JsonObject;
}

interface Stored extends Pause {
  state: string;
  edits: Edit[];
}

export function openAIAgentsAgent(options: OpenAIAgentsAgentOptions): Handler {
  const key = options.stateKey ?? "openai-agents:run-state";
  const runOptions = options.maxTurns ? { maxTurns: options.maxTurns } : {};

  return async (inv: Invocation) => {
    const loaded = await loadPause<Stored>(inv, key);
    if (loaded.kind === "finished") return loaded.output;
    let edits: Edit[] = [];
    let result: RunResult;
    if (loaded.kind === "start") {
      const input = options.input ? await options.input(inv) : promptOf(inv.input);
      result = await run(options.agent, input, runOptions);
    } else {
      edits = [...loaded.pause.edits];
      const state = await RunState.fromString(options.agent, loaded.pause.state);
      applyDecisions(state, inv.resume!.decidedItems, inv.resume!.expired, edits);
      result = await run(options.agent, state, runOptions);
    }

    while (result.interruptions?.length) {
      const state = result.state;
      const pending: RunToolApprovalItem[] = [];
      for (const item of state.getInterruptions()) {
        const at = edits.findIndex((e) => e.name === item.name && sameJson(e.args, argumentsOf(item)));
        if (at >= 0) {
          edits.splice(at, 1);
          state.approve(item);
        } else {
          pending.push(item);
        }
      }
      if (pending.length) {
        // Approvals made above travel inside the saved state.
        return pauseAndAsk<Stored>(inv, key, { state: state.toString(), edits, ask: await askFor(inv, options, pending) });
      }
      result = await run(options.agent, state, runOptions);
    }
    return finish(inv, key, options.output ? await options.output(result, inv) : (result.finalOutput ?? null));
  };
}

function promptOf(input: unknown): string {
  if (isObject(input) && typeof input.prompt === "string") return input.prompt;
  throw new Error("the input needs `prompt` (a string), or pass `input` to openAIAgentsAgent");
}

export function argumentsOf(item: RunToolApprovalItem): JsonObject {
  try {
    const args = JSON.parse(item.arguments || "{}");
    return isObject(args) ? args : { arguments: args };
  } catch {
    return { arguments: item.arguments ?? null };
  }
}

function callId(item: RunToolApprovalItem): string {
  const raw = item.rawItem as { callId?: string; id?: string };
  const id = raw.callId ?? raw.id;
  if (!id) throw new Error(`the approval for ${item.name} has no call id`);
  return id;
}

export function editMessage(name: string, args: JsonObject, comment: string | null): string {
  const message =
    `A reviewer did not approve this call as proposed. Call ${name} again with exactly ` +
    `these arguments instead: ${JSON.stringify(sortKeys(args))}`;
  return comment ? `${message}. Reviewer's note: ${comment}` : message;
}

/** Approve or reject the restored state's own items, as the SDK does it. */
function applyDecisions(state: RunState<any, AnyAgent>, decided: DecidedItem[], expired: boolean, edits: Edit[]) {
  const byId = new Map(decided.map((d) => [d.id, d]));
  for (const item of state.getInterruptions()) {
    const d = byId.get(callId(item));
    if (!d) {
      if (expired) state.reject(item, { message: EXPIRED_MESSAGE });
      continue; // not in this hold: it is asked again
    }
    if (d.action === "approve") {
      state.approve(item);
    } else if (d.action === "edit") {
      edits.push({ name: item.name ?? "", args: d.data });
      state.reject(item, { message: editMessage(item.name ?? "the tool", d.data, d.comment) });
    } else {
      // reject and feedback: the comment is the SDK's rejection message (its default when there is none)
      state.reject(item, d.comment ? { message: d.comment } : {});
    }
  }
}

async function askFor(inv: Invocation, options: OpenAIAgentsAgentOptions, pending: RunToolApprovalItem[]) {
  const withSchema =
    options.itemSchema === true || (options.itemSchema !== false && (await serviceAcceptsItemSchema(inv.apiUrl)));
  const schemas = new Map<string, unknown>();
  for (const t of (options.agent.tools ?? []) as { name?: string; parameters?: unknown }[]) {
    if (t.name && isObject(t.parameters)) schemas.set(t.name, t.parameters);
  }
  const items: AskItem[] = pending.map((it) => {
    const data = argumentsOf(it);
    const item: AskItem = { id: callId(it), title: callTitle(it.name ?? "tool", data), data };
    const schema = schemas.get(it.name ?? "");
    if (withSchema && schema) item.schema = schema as JsonObject;
    return item;
  });
  const names = [...new Set(pending.map((it) => it.name ?? "tool"))].sort();
  return {
    intent: options.intent ?? `Approve ${items.length} tool call(s): ${names.join(", ")}`.slice(0, 500),
    items,
    actions: offeredActions(["approve", "edit", "reject", "feedback"], options.actions),
    ...(options.details !== undefined ? { details: options.details } : {}),
    ...(options.expiresIn !== undefined ? { expiresIn: options.expiresIn } : {}),
  };
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, sortKeys(value[k])]),
  );
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
}
