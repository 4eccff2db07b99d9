// A Vercel AI SDK agent whose payments wait for a person: the `pay` tool needs approval, so the
// model's calls become one hold (one item per call) and the decision goes back as the last message.
//
//   AGENTOS_SECRET=whsec_… AGENTOS_PORT=8081 node sdk-ts/scripts/example.mjs examples/ts/ai_agent.ts
//
// Input: {"prompt": "Pay this week's invoices"}. Output: {"text": …} (the model's last words).
// A scripted MockLanguageModelV4 stands in for a provider so that it runs offline; swap in any
// `ai` model (openai("…"), anthropic("…")) and nothing else changes.
import { serve } from "@agentos/sdk";
import { aiSdkAgent } from "@agentos/sdk/ai";
import { stepCountIs, tool, type ModelMessage } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

const INVOICES = [
  { invoice: "INV-1", payee: "Aksa Lojistik", amount: "18400.00" },
  { invoice: "INV-2", payee: "Acme", amount: "120.00" },
];

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 10, text: 10, reasoning: 0 },
};

// The script: first look the invoices up and pay each one; once the tools answered, report what came back.
const model = new MockLanguageModelV4({
  doGenerate: async ({ prompt }) => {
    const last = prompt[prompt.length - 1];
    if (last.role === "user") {
      return {
        content: [
          { type: "tool-call", toolCallId: "call_budget", toolName: "check_budget", input: "{}" },
          ...INVOICES.map((i) => ({
            type: "tool-call" as const,
            toolCallId: `call_${i.invoice}`,
            toolName: "pay",
            input: JSON.stringify(i),
          })),
        ],
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      };
    }
    const lines = [];
    for (const message of prompt) {
      if (message.role !== "tool") continue;
      for (const part of message.content) {
        if (part.type !== "tool-result" || part.toolName !== "pay") continue;
        const out = part.output;
        lines.push(
          out.type === "execution-denied"
            ? `${part.toolCallId} denied: ${out.reason ?? "no reason given"}`
            : `${part.toolCallId} ${JSON.stringify(out.type === "json" || out.type === "text" ? out.value : out)}`,
        );
      }
    }
    return { content: [{ type: "text", text: lines.join("\n") }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
  },
});

let payments = 0;
const tools = {
  check_budget: tool({
    description: "How much may still be paid this week",
    inputSchema: z.object({}),
    execute: async () => ({ left: "50000.00" }),
  }),
  pay: tool({
    description: "Pay an invoice",
    inputSchema: z.object({
      invoice: z.string(),
      payee: z.string().min(1),
      amount: z.string().regex(/^[0-9]+\.[0-9]{2}$/),
    }),
    execute: async ({ invoice, payee, amount }) => ({ payment_id: `pay_${++payments}`, invoice, payee, amount }),
  }),
};

// No port in the code: AGENTOS_PORT places the agent (a port given here would win over it).
await serve(
  {
    pay_with_ai: aiSdkAgent({
      settings: {
        model,
        tools,
        toolApproval: { pay: () => ({ type: "user-approval", reason: "Payments need a person." }) },
        stopWhen: stepCountIs(5),
      },
      messages: (inv): ModelMessage[] => [{ role: "user", content: inv.input?.prompt ?? "Pay this week's invoices" }],
      intent: "Pay the invoices the model chose",
      expiresIn: 86400,
    }),
  },
);
