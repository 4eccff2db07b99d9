/** What the framework adapters share. */

import { Suspend } from "../errors.js";
import type { AskRequest, Invocation } from "../invocation.js";
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

/**
 * A framework's pause as kept in run state between an ask and its resume. `after` is the hold whose
 * decision led here (null on a start), so that an invocation delivered again after the agent stopped
 * part-way finds how far the first attempt got instead of doing the work twice.
 */
export interface Pause {
  ask: AskRequest;
  holdId: string | null;
  after: string | null;
  /** Set once the run finished: its output, for a delivery repeated after the answer was lost. */
  output?: unknown;
}

export type Loaded<P> = { kind: "start" } | { kind: "resume"; pause: P } | { kind: "finished"; output: unknown };

/**
 * What this delivery has to do: start, or apply its decision to the kept pause. A repeated delivery
 * never redoes work: it suspends on (or asks again) the hold its first attempt reached, or gets the
 * output that attempt recorded.
 */
export async function loadPause<P extends Pause>(inv: Invocation, key: string): Promise<Loaded<P>> {
  const stored = await inv.state.run.get<P | null>(key, null);
  const resumed = inv.resume ? inv.resume.holdId : null;
  if (stored && stored.after === resumed) {
    if (stored.output !== undefined) return { kind: "finished", output: stored.output };
    return reask(inv, key, stored);
  }
  if (!inv.resume) {
    if (stored) throw new Error(`run state "${key}" already holds a later step of this run`);
    return { kind: "start" };
  }
  if (!stored) throw new Error(`run ${inv.runId}: nothing to resume: run state "${key}" holds no paused run`);
  if (stored.holdId !== resumed) {
    throw new Error(`run state "${key}" waits on hold ${stored.holdId ?? "(not asked)"}, not on ${resumed}`);
  }
  return { kind: "resume", pause: stored };
}

/** Keeps the pause, then asks; ends the invocation. */
export async function pauseAndAsk<P extends Pause>(inv: Invocation, key: string, pause: Omit<P, "holdId" | "after">): Promise<never> {
  const stored = { ...pause, holdId: null, after: inv.resume ? inv.resume.holdId : null } as P;
  await inv.state.run.put(key, stored);
  return reask(inv, key, stored);
}

/** Records the run's output (so a repeated delivery answers the same) and returns it. */
export async function finish(inv: Invocation, key: string, output: unknown): Promise<unknown> {
  await inv.state.run.put(key, { after: inv.resume ? inv.resume.holdId : null, holdId: null, output: output ?? null });
  return output;
}

async function reask(inv: Invocation, key: string, stored: Pause): Promise<never> {
  if (stored.holdId) throw new Suspend(stored.holdId);
  const holdId = await inv.ask({ ...stored.ask, suspend: false });
  await inv.state.run.put(key, { ...stored, holdId });
  throw new Suspend(holdId);
}
