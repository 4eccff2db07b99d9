// Mastra agents and workflows whose pauses wait for a person, resumable by another process:
// - `pay_with_mastra`: an agent whose `pay` tool has `requireApproval`; each paused call becomes a hold,
//   and the decision goes back through approveToolCallGenerate / declineToolCallGenerate.
// - `approve_payment`: a workflow whose step calls suspend(); the decision becomes its resumeData.
//
//   AGENTOS_SECRET=whsec_… AGENTOS_PORT=8082 MASTRA_DB=var/mastra.db \
//     node sdk-ts/scripts/example.mjs examples/ts/mastra_agent.ts
//
// A scripted MastraLanguageModelV2Mock stands in for a provider so that it runs offline.
import { serve } from "@agentos/sdk";
import { mastraAgent, mastraWorkflow } from "@agentos/sdk/mastra";
import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core/mastra";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { createTool } from "@mastra/core/tools";
import { createStep, createWorkflow } from "@mastra/core/workflows";
import { LibSQLStore } from "@mastra/libsql";
import { resolve } from "node:path";
import { z } from "zod";

const usage = { inputTokens: 10, outputTokens: 10, totalTokens: 20 };

// The script: pay two invoices; once the tools answered, report what came back.
const model = new MastraLanguageModelV2Mock({
  doGenerate: async ({ prompt }) => {
    const last = prompt[prompt.length - 1];
    if (last.role === "user") {
      const calls = [
        { invoice: "INV-1", payee: "Aksa Lojistik", amount: "18400.00" },
        { invoice: "INV-2", payee: "Acme", amount: "120.00" },
      ].map((input) => ({
        type: "tool-call" as const,
        toolCallId: `call_${input.invoice}`,
        toolName: "pay",
        input: JSON.stringify(input),
      }));
      return { content: calls, finishReason: "tool-calls", usage, warnings: [] };
    }
    const lines = [];
    for (const message of prompt) {
      if (message.role !== "tool") continue;
      for (const part of message.content) {
        if (part.type === "tool-result") lines.push(`${part.toolCallId} ${JSON.stringify(part.output.value)}`);
      }
    }
    return { content: [{ type: "text", text: lines.join("\n") }], finishReason: "stop", usage, warnings: [] };
  },
});

let payments = 0;
const pay = createTool({
  id: "pay",
  description: "Pay an invoice",
  inputSchema: z.object({ invoice: z.string(), payee: z.string(), amount: z.string() }),
  requireApproval: true,
  execute: async ({ invoice, payee, amount }) => ({ payment_id: `pay_${++payments}`, invoice, payee, amount }),
});

const payer = new Agent({ id: "payer", name: "payer", instructions: "Pay the invoices you are given.", model, tools: { pay } });

const approval = createStep({
  id: "approval",
  inputSchema: z.object({ payee: z.string(), amount: z.string() }),
  suspendSchema: z.object({ message: z.string(), payee: z.string(), amount: z.string() }),
  resumeSchema: z.object({ approved: z.boolean(), amount: z.string().regex(/^[0-9]+\.[0-9]{2}$/), reason: z.string().optional() }),
  outputSchema: z.object({ paid: z.boolean(), payee: z.string(), amount: z.string(), reason: z.string().optional() }),
  execute: async ({ inputData, resumeData, suspend }) => {
    if (!resumeData) {
      return await suspend({ message: "Payments over 100.00 need a person", payee: inputData.payee, amount: inputData.amount });
    }
    return { paid: resumeData.approved, payee: inputData.payee, amount: resumeData.amount, reason: resumeData.reason };
  },
});

const payment = createWorkflow({
  id: "payment",
  inputSchema: z.object({ payee: z.string(), amount: z.string() }),
  outputSchema: z.object({ paid: z.boolean(), payee: z.string(), amount: z.string(), reason: z.string().optional() }),
})
  .then(approval)
  .commit();

// Durable storage: a paused agent run or workflow resumes in whichever process gets the decision.
const mastra = new Mastra({
  agents: { payer },
  workflows: { payment },
  storage: new LibSQLStore({ id: "agentos-example", url: `file:${resolve(process.env.MASTRA_DB ?? "var/mastra.db")}` }),
  logger: false,
});

// No port in the code: AGENTOS_PORT places the agent (a port given here would win over it).
await serve(
  {
    pay_with_mastra: mastraAgent({ mastra, agent: "payer", intent: "Approve a payment the agent wants to make" }),
    approve_payment: mastraWorkflow({ mastra, workflow: "payment", intent: "Approve the payment" }),
  },
);
