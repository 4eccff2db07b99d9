/**
 * Vercel AI SDK (`ai` 7.x): tool calls that need approval (`toolApproval`, or a tool's `needsApproval`)
 * become one hold; the decision goes back as the conversation's last message.
 *
 *   serve({ pay_with_ai: aiSdkAgent({ settings: { model, tools, toolApproval: { pay: () => ({ type: "user-approval" }) } } }) })
 */

import { asSchema, generateText, type ModelMessage } from "ai";

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

type GenerateSettings = Parameters<typeof generateText>[0];
type GenerateResult = Awaited<ReturnType<typeof generateText>>;

export interface AiSdkAgentOptions {
  /** What `generateText` takes, except `prompt` and `messages`: model, tools, toolApproval, stopWhen, … */
  settings: Omit<GenerateSettings, "prompt" | "messages">;
  /** The conversation to start with; default `inv.input.messages`, else `inv.input.prompt` as a user message. */
  messages?: (inv: Invocation) => ModelMessage[] | Promise<ModelMessage[]>;
  /** The run's output from the final result; default `{ text }`. */
  output?: (result: GenerateResult, inv: Invocation) => unknown;
  intent?: string;
  details?: string;
  expiresIn?: number;
  /** Narrow the decisions offered (edit is never offered when approvals are signed). */
  actions?: Action[];
  /**
   * Send each tool's input JSON Schema as its item's `schema`, so a bad edit is refused at the decision:
   * true, false, or "auto" (default): when the service's OpenAPI document lists the item field.
   */
  itemSchema?: boolean | "auto";
  /** The run-state key that keeps the conversation (default `ai-sdk:conversation`). */
  stateKey?: string;
}

/** A call that waits for a person, as kept in run state between the ask and the resume. */
interface Pending {
  approvalId: string;
  toolCallId: string;
  toolName: string;
  /** The item's data is the input itself when it is an object, else `{ value: input }`. */
  wrapped: boolean;
}

interface Stored extends Pause {
  messages: ModelMessage[];
  pending: Pending[];
}

export function aiSdkAgent(options: AiSdkAgentOptions): Handler {
  const key = options.stateKey ?? "ai-sdk:conversation";
  const signed = Boolean(options.settings.experimental_toolApprovalSecret);

  return async (inv: Invocation) => {
    const loaded = await loadPause<Stored>(inv, key);
    if (loaded.kind === "finished") return loaded.output;
    const messages =
      loaded.kind === "start"
        ? options.messages
          ? await options.messages(inv)
          : initialMessages(inv.input)
        : loaded.pause.messages.concat([decisionsMessage(loaded.pause, inv.resume!.decidedItems, inv.resume!.expired, signed)]);

    const result = await generateText({ ...options.settings, messages } as GenerateSettings);
    const requests = result.content.filter(
      (p): p is Extract<typeof p, { type: "tool-approval-request" }> => p.type === "tool-approval-request" && !p.isAutomatic,
    );
    if (requests.length === 0) {
      return finish(inv, key, options.output ? await options.output(result, inv) : { text: result.text });
    }

    const withSchema =
      options.itemSchema === true || (options.itemSchema !== false && (await serviceAcceptsItemSchema(inv.apiUrl)));
    const tools = (options.settings.tools ?? {}) as Record<string, { inputSchema?: unknown }>;
    const items: AskItem[] = requests.map((r) => {
      const input = r.toolCall.input;
      const item: AskItem = {
        id: r.toolCall.toolCallId,
        title: callTitle(r.toolCall.toolName, input),
        data: isObject(input) ? input : { value: input },
      };
      const schema = withSchema ? inputSchema(tools[r.toolCall.toolName]?.inputSchema) : null;
      if (schema) item.schema = isObject(input) ? schema : { type: "object", properties: { value: schema }, required: ["value"] };
      return item;
    });
    const signedNow = signed || requests.some((r) => r.signature);
    return pauseAndAsk<Stored>(inv, key, {
      // Every message this call added: the approved calls' results it ran first, then every step's turn
      // (`response.messages` is only the last step's, which loses earlier calls and their results).
      messages: messages.concat(result.responseMessages),
      pending: requests.map((r) => ({
        approvalId: r.approvalId,
        toolCallId: r.toolCall.toolCallId,
        toolName: r.toolCall.toolName,
        wrapped: !isObject(r.toolCall.input),
      })),
      ask: {
        intent: options.intent ?? `Approve ${requests.length} tool call${requests.length === 1 ? "" : "s"}`,
        items,
        actions: offeredActions(signedNow ? ["approve", "reject", "feedback"] : ["approve", "edit", "reject", "feedback"], options.actions),
        details: options.details ?? reasons(requests),
        ...(options.expiresIn !== undefined ? { expiresIn: options.expiresIn } : {}),
      },
    });
  };
}

function initialMessages(input: unknown): ModelMessage[] {
  const i = isObject(input) ? input : {};
  if (Array.isArray(i.messages)) return i.messages as ModelMessage[];
  if (typeof i.prompt === "string") return [{ role: "user", content: i.prompt }];
  throw new Error("the input needs `prompt` (a string) or `messages`, or pass `messages` to aiSdkAgent");
}

/** The tool's input schema as JSON Schema, or null when it has none the SDK can convert. */
function inputSchema(schema: unknown): JsonObject | null {
  if (!schema) return null;
  try {
    return asSchema(schema as Parameters<typeof asSchema>[0]).jsonSchema as JsonObject;
  } catch {
    return null;
  }
}

function reasons(requests: { toolCall: { toolName: string }; reason?: string }[]): string | undefined {
  const lines = requests.filter((r) => r.reason).map((r) => `- \`${r.toolCall.toolName}\`: ${r.reason}`);
  return lines.length ? lines.join("\n") : undefined;
}

/**
 * The tool message that answers every pending approval; an edit first rewrites the stored call's input,
 * which is what runs (the SDK validates it against the tool's schema again).
 */
function decisionsMessage(stored: Stored, decided: DecidedItem[], expired: boolean, signed: boolean): ModelMessage {
  const byId = new Map(decided.map((d) => [d.id, d]));
  const content = stored.pending.map((p) => {
    const d = byId.get(p.toolCallId);
    if (expired || !d) {
      return { type: "tool-approval-response" as const, approvalId: p.approvalId, approved: false, reason: EXPIRED_MESSAGE };
    }
    if (d.action === "edit") {
      if (signed) throw new Error(`call ${p.toolCallId} was edited, but signed approvals cannot change a call's input`);
      rewriteInput(stored.messages, p.toolCallId, p.wrapped ? d.data.value : d.data);
    }
    if (d.action === "approve" || d.action === "edit") {
      return { type: "tool-approval-response" as const, approvalId: p.approvalId, approved: true };
    }
    // reject and feedback: the call does not run and the comment reaches the model as the denial's reason
    return {
      type: "tool-approval-response" as const,
      approvalId: p.approvalId,
      approved: false,
      ...(d.comment ? { reason: d.comment } : {}),
    };
  });
  return { role: "tool", content };
}

function rewriteInput(messages: ModelMessage[], toolCallId: string, input: unknown) {
  for (const message of messages) {
    if (message.role !== "assistant" || !Array.isArray(message.content)) continue;
    for (const part of message.content) {
      if (part.type === "tool-call" && part.toolCallId === toolCallId) {
        part.input = input;
        return;
      }
    }
  }
  throw new Error(`the stored conversation has no tool call ${toolCallId} to edit`);
}
