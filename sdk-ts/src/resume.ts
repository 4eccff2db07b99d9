/** The decision a resume invocation carries. */

import type { components } from "./wire.js";

type Wire = components["schemas"];

/** The service's decisions (generated from its OpenAPI document, src/wire.ts). */
export type Action = Wire["DecisionItemIn"]["action"];

export type JsonObject = { [key: string]: unknown };

/** Which rule (with its version) or standing grant decided an item at the ask; null when a person did. */
export type DecidedBy = Wire["DecidedByOut"];

export interface DecidedItem {
  id: string;
  action: Action;
  /** The item as decided: the reviewer's data for an edit, the asked data otherwise. */
  data: JsonObject;
  /** The item's comment; the reviewer's one comment is already copied onto edit, reject and feedback. */
  comment: string | null;
  decidedBy: DecidedBy | null;
}

/** The service's ResumeOut (src/wire.ts), read leniently: a recorded or hand-made resume may leave fields out. */
export type ResumePayload = Partial<Omit<Wire["ResumeOut"], "items" | "resolved_by">> & {
  resolved_by?: Wire["ResumeOut"]["resolved_by"] | string;
  items?:
    | (Pick<Wire["ResumeItemOut"], "id" | "action"> & {
        data?: JsonObject | null;
        comment?: string | null;
        decided_by?: DecidedBy | null;
      })[]
    | null;
};

export class Resume {
  readonly holdId: string;
  readonly resolvedBy: string;
  readonly decidedItems: DecidedItem[];
  readonly comment: string | null;
  /** The decision receipt as sent (a compact JWS); `verifyReceipt` checks it. */
  readonly receipt: string | null;

  constructor(
    holdId: string,
    resolvedBy: string,
    decidedItems: DecidedItem[],
    comment: string | null,
    receipt: string | null = null,
  ) {
    this.holdId = holdId;
    this.resolvedBy = resolvedBy;
    this.decidedItems = decidedItems;
    this.comment = comment;
    this.receipt = receipt;
  }

  static fromJson(payload: ResumePayload): Resume {
    const items = (payload.items ?? []).map((i) => ({
      id: i.id,
      action: i.action,
      data: i.data ?? {},
      comment: i.comment || null,
      decidedBy: i.decided_by ?? null,
    }));
    return new Resume(payload.hold_id ?? "", payload.resolved_by ?? "", items, payload.comment || null, payload.receipt ?? null);
  }

  /** True when nobody decided before the hold's expiry; `decidedItems` is then empty. */
  get expired(): boolean {
    return this.resolvedBy === "expired";
  }

  /** Approved or edited items; `data` is as decided, so an edit carries the new values. */
  get approved(): DecidedItem[] {
    return this.decidedItems.filter((i) => i.action === "approve" || i.action === "edit");
  }

  get edited(): DecidedItem[] {
    return this.decidedItems.filter((i) => i.action === "edit");
  }

  get rejected(): DecidedItem[] {
    return this.decidedItems.filter((i) => i.action === "reject");
  }

  get feedback(): DecidedItem[] {
    return this.decidedItems.filter((i) => i.action === "feedback");
  }

  /** The decided item with this id; throws when the hold has no such item. */
  item(id: string): DecidedItem {
    const found = this.decidedItems.find((i) => i.id === id);
    if (!found) throw new RangeError(`the hold has no item ${JSON.stringify(id)}`);
    return found;
  }
}
