/**
 * LangGraph.js (`@langchain/langgraph` 1.x): `interrupt()`s, plain or from LangChain's
 * `humanInTheLoopMiddleware`, become one hold; the answer goes back as `new Command({ resume })`.
 *
 *   const graph = builder.compile({ checkpointer: PostgresSaver.fromConnString(dsn) });   // durable
 *   serve({ triage: langGraphAgent({ graph }) });      // or { graph: createAgent({ ..., checkpointer }) }
 *
 * The run id is the graph's `thread_id`. Every pending interrupt is answered in one resume, by id
 * (`{ [interruptId]: value }`): LangGraph.js resumes *all* pending interrupts with a bare value. The
 * answer rules are the Python adapter's (docs/sdk.md): middleware requests get LangChain's own decisions
 * (approve, edit as `editedAction`, reject with the comment as its `message`), one item per call with the
 * tool's argument schema; a plain `interrupt(value)` gets what the docs' nodes read (`answer`), and one
 * with a `responseSchema` (LangGraph keeps it as JSON Schema, `response_schema`) is asked in its fields.
 */

import { Command } from "@langchain/langgraph";
import { toJsonSchema } from "@langchain/core/utils/json_schema";

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

/** What a plain interrupt's node reads back (the Python adapter's `answer=`). */
export type Answer = "truth" | "action" | "schema" | "decision" | ((value: unknown, decided: DecidedItem | null) => unknown);

export interface LangGraphAgentOptions {
  /** A compiled graph, or a `createAgent(...)` agent, with a durable checkpointer. */
  graph: any;
  /** The graph input; default `inv.input`. */
  input?: (inv: Invocation) => unknown;
  /** The run output from the final state values; default the values themselves. */
  output?: (values: any, inv: Invocation) => unknown;
  /**
   * How a plain interrupt is answered; inferred when not given: "schema" for an interrupt with a
   * `responseSchema`, "action" for a value with an `action` key, else "truth".
   */
  answer?: Answer;
  /** A plain interrupt's item schema (of its data, e.g. `{ value: … }`), or a function of the interrupt value. */
  schema?: JsonObject | ((value: unknown) => JsonObject | null);
  /** Allow `MemorySaver` (tests, demos): it forgets every paused run when the agent restarts. */
  inMemoryOk?: boolean;
  /** Extra `RunnableConfig` (the adapter sets `configurable.thread_id`). */
  config?: Record<string, any>;
  intent?: string;
  details?: string;
  expiresIn?: number;
  actions?: Action[];
  /** Tool argument schemas as item `schema`: true, false or "auto" (as `aiSdkAgent`). */
  itemSchema?: boolean | "auto";
  /** The run-state key of the pause (default `langgraph:pause`). */
  stateKey?: string;
}

interface PendingInterrupt {
  id: string;
  value: unknown;
  /** `interrupt(value, { responseSchema })` as LangGraph stores it: JSON Schema, a Zod one converted. */
  responseSchema?: JsonObject;
}

/** One reviewable thing: a middleware request's call, or a plain interrupt. */
interface Reviewable {
  itemId: string;
  interruptId: string;
  kind: "batched" | "plain";
  name: string;
  data: JsonObject;
  title: string;
  allowed: Action[];
  details?: string;
  value?: unknown;
  /** A plain interrupt's answer shape, and under "schema" its response schema (the item's schema). */
  shape?: Answer;
  schema?: JsonObject;
}

const FROM_LANGCHAIN: Record<string, Action> = { approve: "approve", edit: "edit", reject: "reject" };

export function langGraphAgent(options: LangGraphAgentOptions): Handler {
  const graph = options.graph?.graph ?? options.graph; // a createAgent() agent wraps its compiled graph
  const checkpointer = graph?.checkpointer;
  if (!checkpointer) throw new Error("compile the graph with a checkpointer: the run resumes from it");
  if (!options.inMemoryOk && ["MemorySaver", "InMemorySaver"].includes(checkpointer.constructor?.name)) {
    throw new Error(
      "an in-memory checkpointer loses every paused run when the agent restarts; use PostgresSaver or SqliteSaver, " +
        "or pass inMemoryOk: true (tests and demos)",
    );
  }
  const key = options.stateKey ?? "langgraph:pause";
  const schemas = toolSchemas(graph);

  return async (inv: Invocation) => {
    const loaded = await loadPause<Pause>(inv, key);
    if (loaded.kind === "finished") return loaded.output;
    const config = { ...(options.config ?? {}), configurable: { ...(options.config?.configurable ?? {}), thread_id: inv.runId } };
    if (loaded.kind === "start") {
      await graph.invoke(options.input ? await options.input(inv) : inv.input, config);
    } else {
      const pending = pendingInterrupts(await graph.getState(config));
      if (pending.length === 0) {
        throw new Error(
          `run ${inv.runId}: thread ${inv.runId} has no pending interrupt in the graph's checkpointer, so hold ` +
            `${inv.resume!.holdId} cannot be applied (was the checkpoint lost?)`,
        );
      }
      const answers = resumeMap(pending, inv.resume!.decidedItems, inv.resume!.expired, options.answer);
      await graph.invoke(new Command({ resume: answers }), config);
    }
    const state = await graph.getState(config);
    const pending = pendingInterrupts(state);
    if (pending.length) return pauseAndAsk<Pause>(inv, key, { ask: await askFor(inv, options, pending, schemas) });
    return finish(inv, key, options.output ? await options.output(state.values, inv) : state.values);
  };
}

function pendingInterrupts(state: any): PendingInterrupt[] {
  return (state?.tasks ?? []).flatMap((t: any) =>
    (t.interrupts ?? []).map((i: any) => ({
      id: i.id,
      value: i.value,
      ...(isObject(i.response_schema) ? { responseSchema: i.response_schema } : {}),
    })),
  );
}

/** Each tool's argument JSON Schema, from the graph's ToolNode (createAgent's "tools" node). */
function toolSchemas(graph: any): Map<string, JsonObject> {
  const found = new Map<string, JsonObject>();
  for (const node of Object.values<any>(graph?.nodes ?? {})) {
    for (const t of node?.bound?.tools ?? []) {
      try {
        if (t?.name && t.schema) found.set(t.name, toJsonSchema(t.schema) as JsonObject);
      } catch {
        // a tool whose schema cannot be converted: the service's type rule checks edits
      }
    }
  }
  return found;
}

function isMiddlewareRequest(value: unknown): value is { actionRequests: any[]; reviewConfigs: any[] } {
  return isObject(value) && Array.isArray(value.actionRequests) && Array.isArray(value.reviewConfigs);
}

function inferredAnswer(intr: PendingInterrupt, answer?: Answer): Answer {
  if (answer) return answer;
  if (intr.responseSchema) return "schema";
  return isObject(intr.value) && "action" in intr.value ? "action" : "truth";
}

function hasApprovedFlag(schema: JsonObject | undefined): boolean {
  const props = schema?.properties;
  return isObject(props) && isObject(props.approved) && props.approved.type === "boolean";
}

function reviewables(pending: PendingInterrupt[], answer?: Answer): Reviewable[] {
  const out: Reviewable[] = [];
  for (const intr of pending) {
    const value = intr.value;
    if (isMiddlewareRequest(value)) {
      const configs = new Map(value.reviewConfigs.map((c: any) => [c.actionName, c]));
      value.actionRequests.forEach((req: any, n: number) => {
        const allowed = (configs.get(req.name)?.allowedDecisions ?? []) as string[];
        out.push({
          itemId: `${intr.id}.${n}`,
          interruptId: intr.id,
          kind: "batched",
          name: req.name,
          data: isObject(req.args) ? req.args : {},
          title: callTitle(req.name, req.args ?? {}),
          allowed: allowed.filter((d) => d in FROM_LANGCHAIN).map((d) => FROM_LANGCHAIN[d]),
          ...(req.description ? { details: String(req.description) } : {}),
        });
      });
    } else {
      const title = isObject(value)
        ? typeof value.title === "string"
          ? value.title
          : typeof value.message === "string"
            ? value.message
            : callTitle("interrupt", value)
        : typeof value === "string"
          ? value.slice(0, 200)
          : callTitle("interrupt", { value });
      const shape = inferredAnswer(intr, answer);
      let data: JsonObject = isObject(value) ? value : { value: value as any };
      let allowed: Action[] = ["approve", "edit", "reject"];
      let details: string | undefined;
      const schema = shape === "schema" ? intr.responseSchema : undefined;
      if (schema) {
        // The reviewer answers in the schema's fields; the question itself is the details.
        const fields = Object.keys(isObject(schema.properties) ? schema.properties : {});
        const asked = isObject(value) ? value : {};
        if (fields.length) data = Object.fromEntries(fields.map((k) => [k, asked[k] === undefined ? null : asked[k]]));
        if (typeof value === "string") details = value;
        // Nothing valid to approve until a person fills it in; no way to say no without the flag.
        if (Object.values(data).some((v) => v === null)) allowed = allowed.filter((a) => a !== "approve");
        if (!hasApprovedFlag(schema)) allowed = allowed.filter((a) => a !== "reject");
      }
      out.push({
        itemId: intr.id,
        interruptId: intr.id,
        kind: "plain",
        name: "interrupt",
        data,
        title: (title || "Approve this step").slice(0, 1000),
        allowed,
        ...(details ? { details } : {}),
        value,
        shape,
        ...(schema ? { schema } : {}),
      });
    }
  }
  return out;
}

function langchainDecision(r: Reviewable, d: DecidedItem | undefined): JsonObject {
  if (d?.action === "approve") return { type: "approve" };
  if (d?.action === "edit") return { type: "edit", editedAction: { name: r.name, args: d.data } };
  const message = d ? d.comment : EXPIRED_MESSAGE;
  return message ? { type: "reject", message } : { type: "reject" };
}

function plainDecision(r: Reviewable, d: DecidedItem | undefined): unknown {
  const shape = r.shape!;
  if (typeof shape === "function") return shape(r.value, d ?? null);
  const action = !d || d.action === "feedback" ? "reject" : d.action;
  const comment = d ? d.comment : EXPIRED_MESSAGE;
  if (shape === "decision") return { action, data: d ? d.data : r.data, comment };
  if (shape === "action") {
    if (action === "reject") return { action: "reject", comment };
    return { ...(isObject(d?.data) ? d!.data : r.data), action: "approve" };
  }
  if (shape === "schema") {
    if (action !== "reject") return d!.data;
    // An expiry answers so too, with or without the flag (the Python adapter's rule).
    const props = isObject(r.schema?.properties) ? r.schema.properties : {};
    const key = ["reason", "comment", "message", "feedback"].find((k) => isObject(props[k]) && props[k].type === "string");
    return key ? { approved: false, [key]: comment ?? "" } : { approved: false };
  }
  // "truth": the docs' `if (interrupt(...))` and `const edited = interrupt(...)`.
  if (action === "approve") return true;
  if (action === "edit") return isObject(r.value) ? d!.data : d!.data.value;
  return false;
}

/**
 * `{ [interruptId]: answer }` for every pending interrupt the decision covers. An expired hold rejects
 * everything; an interrupt without a decision stays pending, and a middleware request is answered only
 * when all its calls are decided (a short list of decisions poisons the thread).
 */
export function resumeMap(pending: PendingInterrupt[], decided: DecidedItem[], expired: boolean, answer?: Answer) {
  const byId = new Map(decided.map((d) => [d.id, d]));
  const answers: Record<string, unknown> = {};
  const batched = new Map<string, JsonObject[]>();
  const incomplete = new Set<string>();
  for (const r of reviewables(pending, answer)) {
    const d = byId.get(r.itemId);
    if (!d && !expired) {
      incomplete.add(r.interruptId);
    } else if (r.kind === "batched") {
      batched.set(r.interruptId, [...(batched.get(r.interruptId) ?? []), langchainDecision(r, d)]);
    } else {
      answers[r.interruptId] = plainDecision(r, d);
    }
  }
  for (const [id, decisions] of batched) if (!incomplete.has(id)) answers[id] = { decisions };
  return answers;
}

async function askFor(inv: Invocation, options: LangGraphAgentOptions, pending: PendingInterrupt[], schemas: Map<string, JsonObject>) {
  const withSchema =
    options.itemSchema === true || (options.itemSchema !== false && (await serviceAcceptsItemSchema(inv.apiUrl)));
  const found = reviewables(pending, options.answer);
  const items: AskItem[] = found.map((r) => {
    const item: AskItem = { id: r.itemId, title: r.title, data: r.data, actions: offeredActions(withFeedback(r.allowed), options.actions) };
    if (r.details) item.details = r.details;
    const own = typeof options.schema === "function" ? options.schema(r.value) : options.schema;
    const schema = r.kind === "batched" ? schemas.get(r.name) : (r.schema ?? own);
    if (withSchema && schema) item.schema = schema;
    return item;
  });
  const calls = found.filter((r) => r.kind === "batched");
  const intent =
    options.intent ??
    (calls.length === found.length
      ? `Approve ${found.length} tool call(s): ${[...new Set(calls.map((r) => r.name))].sort().join(", ")}`.slice(0, 500)
      : `Approve ${found.length} pending step(s)`);
  const order: Action[] = ["approve", "edit", "reject", "feedback"];
  return {
    intent,
    items,
    actions: order.filter((a) => items.some((i) => i.actions?.includes(a))),
    ...(options.details !== undefined ? { details: options.details } : {}),
    ...(options.expiresIn !== undefined ? { expiresIn: options.expiresIn } : {}),
  };
}

function withFeedback(allowed: Action[]): Action[] {
  return allowed.includes("reject") ? [...allowed, "feedback"] : allowed;
}
