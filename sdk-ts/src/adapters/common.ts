/** What the framework adapters share. */

import type { Action, JsonObject } from "../resume.js";

export const EXPIRED_MESSAGE = "The approval request expired without a decision. Do not run this call.";

/** `name(key=value, …)`, cut to `limit` characters; the item's data shows it all. */
export function callTitle(name: string, args: unknown, limit = 200): string {
  const inner = isObject(args)
    ? Object.entries(args)
        .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
        .join(", ")
    : JSON.stringify(args);
  const title = `${name}(${inner ?? ""})`;
  return title.length <= limit ? title : title.slice(0, limit - 1) + "…";
}

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The actions offered, in the house order, narrowed to what the developer allows. */
export function offeredActions(allowed: Action[], wanted?: Action[]): Action[] {
  const order: Action[] = ["approve", "edit", "reject", "feedback"];
  const chosen = wanted ?? (["approve", "edit", "reject"] as Action[]);
  const actions = order.filter((a) => allowed.includes(a) && chosen.includes(a));
  if (actions.length === 0) throw new Error(`the pause allows none of ${JSON.stringify(chosen)}`);
  return actions;
}

const advertised = new Map<string, Promise<boolean>>();

/**
 * Whether the service accepts an item's `schema` (SPEC "Per-item actions, details and schema"),
 * read once per service from its OpenAPI document; a service that rejects unknown item fields
 * and does not list `schema` gets none.
 */
export function serviceAcceptsItemSchema(apiUrl: string): Promise<boolean> {
  const base = apiUrl.replace(/\/+$/, "");
  let found = advertised.get(base);
  if (!found) {
    found = fetch(`${base}/v0/openapi.json`, { signal: AbortSignal.timeout(10_000) })
      .then(async (resp) => {
        if (!resp.ok) return false;
        const doc = (await resp.json()) as { components?: { schemas?: Record<string, any> } };
        const schemas = doc?.components?.schemas ?? {};
        const ref: string | undefined = schemas.AskIn?.properties?.items?.items?.$ref;
        const item = ref ? schemas[ref.split("/").pop()!] : schemas.ItemIn;
        return Boolean(item?.properties?.schema);
      })
      .catch(() => false);
    advertised.set(base, found);
  }
  return found;
}
