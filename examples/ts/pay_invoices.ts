// The demo agent in TypeScript: asks a person to approve, edit or reject invoice payments, then pays.
//
//   AGENTOS_SECRET=whsec_… AGENTOS_PORT=8080 node sdk-ts/scripts/example.mjs examples/ts/pay_invoices.ts
//
// Input: {"invoices": [{"id": "INV-1", "payee": "Acme", "amount": "120.00"}, …]}; without `invoices`
// it pays the three sample invoices below. Output: {"paid": […], "rejected": […]}.
import { serve, type AskItem, type Invocation } from "@agentos/sdk";

type Invoice = { id: string; payee: string; amount: string; confidence?: number };

const SAMPLE_INVOICES: Invoice[] = [
  { id: "INV-1", payee: "Aksa Lojistik", amount: "18400.00", confidence: 0.68 },
  { id: "INV-2", payee: "Acme", amount: "120.00" },
  { id: "INV-3", payee: "Globex", amount: "2450.50" },
];

// Stands in for a bank: in a real agent this is the side effect that must happen once.
const payments: { payment_id: string; invoice: string; payee: string; amount: string }[] = [];

function pay(invoice: string, payee: string, amount: string) {
  const payment = { payment_id: `pay_${payments.length + 1}`, invoice, payee, amount };
  payments.push(payment);
  return payment;
}

async function payInvoices(inv: Invocation) {
  const invoices: Invoice[] = inv.input?.invoices ?? SAMPLE_INVOICES;
  if (!inv.resume) {
    await inv.state.run.put("progress", { step: "asked", invoices: invoices.length });
    const items: AskItem[] = invoices.map((invoice) => ({
      id: invoice.id,
      title: `${invoice.payee} · ${invoice.amount}`,
      data: { payee: invoice.payee, amount: invoice.amount },
      ...(invoice.confidence !== undefined ? { confidence: { amount: invoice.confidence } } : {}),
    }));
    await inv.ask({
      intent: `Pay ${items.length} invoice${items.length === 1 ? "" : "s"}`,
      items,
      actions: ["approve", "edit", "reject"],
      details: "Approve to pay as shown, **edit** the payee or amount first, or reject.",
      expiresIn: inv.input?.expires_in ?? 86400,
    });
  }
  const paid = [];
  for (const decided of inv.resume!.approved) {
    // approved or edited, with the data as decided; never paid twice per run
    const payment = await inv.once(`pay:${decided.id}`, () =>
      pay(decided.id, String(decided.data.payee), String(decided.data.amount)),
    );
    paid.push({ id: decided.id, ...decided.data, payment_id: payment.payment_id });
  }
  const rejected = inv.resume!.rejected.map((d) => d.id);
  await inv.state.run.put("progress", { step: "done", paid: paid.length });
  return { paid, rejected };
}

await serve({ pay_invoices: payInvoices }); // AGENTOS_PORT (else 8080) and AGENTOS_SECRET from the environment
