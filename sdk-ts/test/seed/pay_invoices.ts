import { serve } from "@agentos/sdk";

await serve({
  pay_invoices: async (inv) => {
    if (!inv.resume) {
      await inv.state.run.put("progress", { step: "asked" });
      await inv.ask({
        intent: "Pay 2 invoices",
        actions: ["approve", "edit", "reject"],
        items: [{ id: "INV-1", title: "Acme · 120.00", data: { payee: "Acme", amount: "120.00" } }],
      });
    }
    return {
      paid: inv.resume!.approved.map((d) => ({ id: d.id, ...d.data })),
      rejected: inv.resume!.rejected.map((d) => d.id),
    };
  },
}, { port: 8080 });
