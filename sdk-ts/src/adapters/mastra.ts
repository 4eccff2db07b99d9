/**
 * Mastra (`@mastra/core` 1.x): an agent's tool approval (`requireApproval`) and a workflow step's
 * `suspend()` become holds. Both resume from Mastra's storage, so the agent process that resumes need
 * not be the one that asked: register the agent or workflow in a `Mastra` with durable storage.
 *
 *   serve({ pay_with_mastra: mastraAgent({ mastra, agent: "payer" }),
 *           approve_payment: mastraWorkflow({ mastra, workflow: "payment" }) })
 */

import type { Mastra } from "@mastra/core/mastra";
import { standardSchemaToJSONSchema, toStandardSchema } from "@mastra/core/schema";

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

interface HoldOptions {
  intent?: string;
  details?: string;
  expiresIn?: number;
  /** Narrow the decisions offered. */
  actions?: Action[];
}

// ---------------------------------------------------------------------------------------------
// Agents: requireApproval → approveToolCallGenerate / declineToolCallGenerate

export interface MastraAgentOptions extends HoldOptions {
  mastra: Mastra;
  /** The agent's key in the Mastra instance; an agent outside one cannot resume from storage. */
  agent: string;
  /** What the agent is asked; default `inv.input.messages`, else `inv.input.prompt`. */
  prompt?: (inv: Invocation) => unknown;
  /** Options passed to `generate()` and to the approve/decline calls (memory, requireToolApproval, …). */
  options?: Record<string, unknown>;
  /** The run's output from the final result; default `{ text }`. */
  output?: (result: AgentResult, inv: Invocation) => unknown;
  /** Run-state key that keeps the paused call (default `mastra:agent`). */
  stateKey?: string;
}

export interface AgentResult {
  text: string;
  finishReason?: string;
  runId?: string;
  suspendPayload?: unknown;
  [key: string]: unknown;
}

interface AgentLike {
  generate(messages: unknown, options?: Record<string, unknown>): Promise<AgentResult>;
  approveToolCallGenerate(options: Record<string, unknown>): Promise<AgentResult>;
  declineToolCallGenerate(options: Record<string, unknown>): Promise<AgentResult>;
  listSuspendedRuns(options?: Record<string, unknown>): Promise<{ runs: { runId: string }[] }>;
}

interface PausedCall extends Pause {
  runId: string;
  toolCallId: string;
}

export function mastraAgent(options: MastraAgentOptions): Handler {
  const key = options.stateKey ?? "mastra:agent";
  return async (inv: Invocation) => {
    const agent = options.mastra.getAgent(options.agent) as unknown as AgentLike;
    const loaded = await loadPause<PausedCall>(inv, key);
    if (loaded.kind === "finished") return loaded.output;
    let result: AgentResult;
    if (loaded.kind === "start") {
      result = await agent.generate(options.prompt ? await options.prompt(inv) : promptOf(inv.input), {
        ...options.options,
        runId: inv.runId,
      });
    } else {
      const paused = loaded.pause;
      const { runs } = await agent.listSuspendedRuns();
      if (!runs.some((r) => r.runId === paused.runId)) {
        throw new Error(`Mastra's storage has no suspended run ${paused.runId} of agent "${options.agent}" to resume`);
      }
      const d = inv.resume!.expired ? undefined : decisionFor(inv.resume!.decidedItems, paused.toolCallId);
      const call = { ...options.options, runId: paused.runId, toolCallId: paused.toolCallId };
      result =
        d && (d.action === "approve" || d.action === "edit")
          ? await agent.approveToolCallGenerate(call)
          : await agent.declineToolCallGenerate({ ...call, reason: d ? (d.comment ?? undefined) : EXPIRED_MESSAGE });
    }
    const pause = result.finishReason === "suspended" && isObject(result.suspendPayload) ? result.suspendPayload : null;
    if (!pause) return finish(inv, key, options.output ? await options.output(result, inv) : { text: result.text });
    // A tool's own suspend() carries its `suspendPayload`; an approval pause has none. Declining
    // it would resume the tool, which suspends again: fail rather than ask a person the same thing forever.
    if (typeof pause.toolCallId !== "string" || typeof pause.toolName !== "string" || "suspendPayload" in pause) {
      const tool = typeof pause.toolName === "string" ? ` (tool "${pause.toolName}")` : "";
      throw new Error(`the Mastra agent suspended without a tool approval${tool}: a tool's own suspend() is not supported, use requireApproval`);
    }
    const args = pause.args;
    return pauseAndAsk<PausedCall>(inv, key, {
      runId: String(result.runId ?? inv.runId),
      toolCallId: pause.toolCallId,
      ask: {
        intent: options.intent ?? `Approve ${pause.toolName}`,
        items: [{ id: pause.toolCallId, title: callTitle(pause.toolName, args), data: isObject(args) ? args : { value: args } }],
        // Mastra runs the stored arguments: there is no edit to offer.
        actions: offeredActions(["approve", "reject", "feedback"], options.actions ?? ["approve", "reject"]),
        details: options.details,
        expiresIn: options.expiresIn,
      },
    });
  };
}

function promptOf(input: unknown): unknown {
  const i = isObject(input) ? input : {};
  if (Array.isArray(i.messages)) return i.messages;
  if (typeof i.prompt === "string") return i.prompt;
  throw new Error("the input needs `prompt` (a string) or `messages`, or pass `prompt` to mastraAgent");
}

function decisionFor(items: DecidedItem[], id: string): DecidedItem | undefined {
  return items.find((i) => i.id === id);
}

// ---------------------------------------------------------------------------------------------
// Workflows: suspend() → a hold whose decision becomes resumeData

export interface MastraWorkflowOptions extends HoldOptions {
  mastra: Mastra;
  /** The workflow's key in the Mastra instance. Its run id is the Review Queue run id. */
  workflow: string;
  /** The workflow's inputData; default `inv.input`. */
  input?: (inv: Invocation) => unknown;
  /** The run's output from the final result; default the workflow's `result`, or `{status: "canceled", …}`. */
  output?: (result: WorkflowOutcome, inv: Invocation) => unknown;
  /**
   * The item's data, a proposed resumeData that approve sends as is and edit lets the reviewer change.
   * Default: the resumeSchema's properties taken from the suspend payload, `approved: true` for a boolean
   * `approved`, and the schema's defaults.
   */
  data?: (suspendPayload: unknown, step: string, resumeSchema: JsonObject | null) => JsonObject;
  /** Send the step's resumeSchema as the item's `schema`: true, false or "auto" (when the service lists it). */
  itemSchema?: boolean | "auto";
}

export interface WorkflowOutcome {
  status: string;
  result?: unknown;
  error?: unknown;
  steps?: Record<string, { status?: string; suspendPayload?: unknown }>;
  suspended?: string[][];
  /** On a cancel: the steps a person rejected and their comments. */
  rejected?: { step: string; comment: string | null }[];
}

interface RunLike {
  start(args: { inputData: unknown }): Promise<WorkflowOutcome>;
  resume(args: { step: string | string[]; resumeData: unknown }): Promise<WorkflowOutcome>;
  cancel(): Promise<void>;
}

interface WorkflowLike {
  steps: Record<string, { resumeSchema?: unknown }>;
  createRun(args: { runId: string }): Promise<RunLike>;
  getWorkflowRunById(runId: string): Promise<WorkflowOutcome | null>;
}

/** The hold whose decision the workflow was last resumed with. */
const APPLIED_KEY = "mastra:workflow:applied";

export function mastraWorkflow(options: MastraWorkflowOptions): Handler {
  return async (inv: Invocation) => {
    const workflow = options.mastra.getWorkflow(options.workflow) as unknown as WorkflowLike;
    const run = await workflow.createRun({ runId: inv.runId });
    let outcome: WorkflowOutcome;
    if (!inv.resume) {
      const existing = await workflow.getWorkflowRunById(inv.runId);
      // A start delivered again: ask about the suspended steps again (the open hold answers 409 hold_open).
      outcome =
        existing?.status === "suspended"
          ? { ...existing, suspended: suspendedPaths(existing) }
          : await run.start({ inputData: options.input ? await options.input(inv) : inv.input });
    } else {
      const snapshot = await workflow.getWorkflowRunById(inv.runId);
      const applied = await inv.state.run.get<string | null>(APPLIED_KEY, null);
      if (applied === inv.resume.holdId && snapshot) {
        // Delivered again: the decision went in already, so answer from where the workflow is now.
        outcome = snapshot.status === "suspended" ? { ...snapshot, suspended: suspendedPaths(snapshot) } : snapshot;
      } else {
        if (snapshot?.status !== "suspended") {
          throw new Error(
            `Mastra's storage has no suspended run ${inv.runId} of workflow "${options.workflow}" to resume (${snapshot ? snapshot.status : "no snapshot"})`,
          );
        }
        // Recorded before the resume: a crash in between asks the person again rather than resuming twice.
        await inv.state.run.put(APPLIED_KEY, inv.resume.holdId);
        outcome = await applyDecisions(workflow, run, inv, suspendedPaths(snapshot));
      }
    }
    if (outcome.status === "suspended") return askAbout(workflow, inv, outcome, options);
    if (outcome.status === "failed") {
      throw new Error(`the workflow failed: ${errorText(outcome.error)}`);
    }
    if (options.output) return options.output(outcome, inv);
    return outcome.status === "success" ? (outcome.result ?? null) : { status: outcome.status, rejected: outcome.rejected ?? [] };
  };
}

async function applyDecisions(workflow: WorkflowLike, run: RunLike, inv: Invocation, paths: string[][]): Promise<WorkflowOutcome> {
  const resume = inv.resume!;
  const plans = paths.map((path) => {
    const step = path.join(".");
    const schema = jsonSchemaOf(workflow.steps[path[0]]?.resumeSchema);
    const d = resume.expired ? undefined : decisionFor(resume.decidedItems, step);
    const comment = d ? d.comment : EXPIRED_MESSAGE;
    if (d && (d.action === "approve" || d.action === "edit")) return { path, step, resumeData: d.data as unknown };
    // A rejection or an expiry: `approved: false` when the resumeSchema has that boolean (with the comment as
    // `reason`/`comment` and whether it expired as `expired`, where the schema has them), else a cancel.
    if (schemaType(schema, "approved") === "boolean") {
      const data: JsonObject = { ...(d?.data ?? {}), approved: false };
      for (const field of ["reason", "comment"]) {
        if (comment && schemaType(schema, field) === "string") data[field] = comment;
      }
      if (schemaType(schema, "expired") === "boolean") data.expired = resume.expired;
      return { path, step, resumeData: data, refused: true, comment };
    }
    return { path, step, cancel: true, refused: true, comment };
  });
  const refused = (only: typeof plans) => only.map((p) => ({ step: p.step, comment: p.comment ?? null }));
  const cancelled = plans.filter((p) => p.cancel);
  if (cancelled.length) {
    await run.cancel();
    return { status: "canceled", rejected: refused(cancelled) };
  }
  let outcome: WorkflowOutcome | undefined;
  for (const plan of plans) {
    outcome = await run.resume({ step: plan.path.length === 1 ? plan.path[0] : plan.path, resumeData: plan.resumeData });
  }
  // A step with no branch for `approved: false` (`if (!approved) return suspend()`) suspends again: a
  // refusal ends it instead of asking a person the same question after every expiry or reject.
  const again = new Set(outcome!.status === "suspended" ? suspendedPaths(outcome!).map((p) => p.join(".")) : []);
  const looping = plans.filter((p) => p.refused && again.has(p.step));
  if (looping.length) {
    await run.cancel();
    return { status: "canceled", rejected: refused(looping) };
  }
  return outcome!;
}

async function askAbout(workflow: WorkflowLike, inv: Invocation, outcome: WorkflowOutcome, options: MastraWorkflowOptions): Promise<never> {
  const paths = outcome.suspended?.length ? outcome.suspended : suspendedPaths(outcome);
  const withSchema =
    options.itemSchema === true || (options.itemSchema !== false && (await serviceAcceptsItemSchema(inv.apiUrl)));
  const details: string[] = [];
  const items: AskItem[] = paths.map((path) => {
    const step = path.join(".");
    const payload = outcome.steps?.[path[path.length - 1]]?.suspendPayload ?? outcome.steps?.[step]?.suspendPayload ?? null;
    const schema = jsonSchemaOf(workflow.steps[path[0]]?.resumeSchema);
    const data = options.data ? options.data(payload, step, schema) : proposedResumeData(payload, schema);
    const said = isObject(payload) ? (payload.message ?? payload.reason ?? payload.question) : payload;
    details.push(`**${step}** suspended with:\n\n\`\`\`json\n${JSON.stringify(payload, null, 2)}\n\`\`\``);
    const item: AskItem = { id: step, title: typeof said === "string" && said ? `${step}: ${said}` : step, data };
    if (withSchema && schema) item.schema = schema;
    return item;
  });
  return inv.ask({
    intent: options.intent ?? `Resume workflow ${options.workflow}`,
    items,
    actions: offeredActions(["approve", "edit", "reject", "feedback"], options.actions),
    details: options.details ?? details.join("\n\n"),
    ...(options.expiresIn !== undefined ? { expiresIn: options.expiresIn } : {}),
  });
}

function suspendedPaths(outcome: WorkflowOutcome & { suspendedPaths?: Record<string, unknown> }): string[][] {
  if (outcome.suspended?.length) return outcome.suspended;
  if (isObject(outcome.suspendedPaths)) return Object.keys(outcome.suspendedPaths).map((s) => s.split("."));
  return Object.entries(outcome.steps ?? {})
    .filter(([, s]) => s?.status === "suspended")
    .map(([id]) => [id]);
}

function jsonSchemaOf(schema: unknown): JsonObject | null {
  if (!schema) return null;
  try {
    const json = standardSchemaToJSONSchema(toStandardSchema(schema as Parameters<typeof toStandardSchema>[0]));
    return isObject(json) ? json : null;
  } catch {
    return null;
  }
}

function schemaType(schema: JsonObject | null, field: string): unknown {
  const props = schema?.properties;
  return isObject(props) && isObject(props[field]) ? props[field].type : undefined;
}

/** The resumeData that approving would send: the schema's fields, filled from the payload where it has them. */
export function proposedResumeData(payload: unknown, schema: JsonObject | null): JsonObject {
  const props = isObject(schema?.properties) ? schema.properties : null;
  if (!props) return isObject(payload) ? { ...payload } : {};
  const data: JsonObject = {};
  for (const [field, spec] of Object.entries(props)) {
    if (isObject(payload) && field in payload) data[field] = payload[field];
    else if (field === "approved" && isObject(spec) && spec.type === "boolean") data[field] = true;
    else if (isObject(spec) && "default" in spec) data[field] = spec.default;
  }
  return data;
}

function errorText(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (isObject(error) && typeof error.message === "string") return error.message;
  return JSON.stringify(error);
}
