"""The demo agent: asks a person to approve, edit or reject invoice payments, then pays.

    AGENTOS_SECRET=whsec_… python examples/pay_invoices.py --port 8080

Input: {"invoices": [{"id": "INV-1", "payee": "Acme", "amount": "120.00"}, …]}; without
`invoices` it pays the three sample invoices below. Output: {"paid": […], "rejected": […]} (each
payment's id is in run state, `once:pay:<invoice>`). In an experiment it replays the recorded
decision and pays nothing.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import agentos

SAMPLE_INVOICES = [
    {"id": "INV-1", "payee": "Aksa Lojistik", "amount": "18400.00", "confidence": 0.68},
    {"id": "INV-2", "payee": "Acme", "amount": "120.00"},
    {"id": "INV-3", "payee": "Globex", "amount": "2450.50"},
]

# Stands in for a bank: in a real agent this is the side effect that must happen once.
PAYMENTS: list[dict[str, Any]] = []


def pay(invoice_id: str, payee: str, amount: str) -> dict[str, Any]:
    payment = {
        "payment_id": f"pay_{len(PAYMENTS) + 1}",
        "invoice": invoice_id,
        "payee": payee,
        "amount": amount,
    }
    PAYMENTS.append(payment)
    return payment


def pay_invoices(inv: agentos.Invocation) -> dict[str, Any]:
    invoices = (inv.input or {}).get("invoices") or SAMPLE_INVOICES
    decision = inv.resume
    if inv.eval is not None and inv.eval.recorded_holds:
        # An experiment replays the recorded decision: nobody is asked (docs/sdk.md, "Evals").
        decision = inv.eval.recorded_holds[0].resume
    if decision is None:
        inv.state.run.put("progress", {"step": "asked", "invoices": len(invoices)})
        items = []
        for invoice in invoices:
            item = {
                "id": invoice["id"],
                "title": f"{invoice['payee']} · {invoice['amount']}",
                "data": {"payee": invoice["payee"], "amount": invoice["amount"]},
            }
            if "confidence" in invoice:
                item["confidence"] = {"amount": invoice["confidence"]}
            items.append(item)
        # In an eval run with no recorded decision this ends the run `asked_for_human`.
        inv.ask(
            f"Pay {len(items)} invoice{'' if len(items) == 1 else 's'}",
            items,
            actions=["approve", "edit", "reject"],
            details="Approve to pay as shown, **edit** the payee or amount first, or reject.",
            expires_in=(inv.input or {}).get("expires_in", 86400),
        )
    paid = []
    for decided in decision.approved:  # approved or edited, with the data as decided
        if inv.eval is None:  # an eval run never pays: side effects stay out of experiments
            inv.once(f"pay:{decided.id}", lambda d=decided: pay(d.id, d.data["payee"], d.data["amount"]))
        paid.append({"id": decided.id, **decided.data})
    rejected = [d.id for d in decision.rejected]
    inv.state.run.put("progress", {"step": "done", "paid": len(paid)})
    return {"paid": paid, "rejected": rejected}


HANDLERS = {"pay_invoices": pay_invoices}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    agentos.serve(HANDLERS, port=args.port, host=args.host)  # secret from AGENTOS_SECRET


if __name__ == "__main__":
    main()
