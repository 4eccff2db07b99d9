/**
 * Decision receipts: verify the compact JWS (Ed25519) a resume carries against the service's public keys
 * (`/.well-known/jwks.json`), offline with a key set you hold, or with keys fetched once and cached.
 *
 *     const claims = await verifyReceipt(inv.resume!.receipt!, { jwksUrl: `${inv.apiUrl}/.well-known/jwks.json` });
 */

import { compactVerify, createLocalJWKSet, createRemoteJWKSet, errors, type JSONWebKeySet } from "jose";

import { AgentOSError } from "./errors.js";

/** The fully-specified name (RFC 9864) and its older one. */
const ALGORITHMS = ["Ed25519", "EdDSA"];

/** A receipt that does not verify: malformed, signed by an unknown key, or changed. */
export class ReceiptError extends AgentOSError {
  override name = "ReceiptError";
}

export interface ReceiptItem {
  id: string;
  action: string | null;
  asked_sha256: string;
  decided_sha256: string | null;
  decided_by?: Record<string, unknown>;
}

/** What a receipt states (docs/receipts.md). */
export interface ReceiptClaims {
  iss: string;
  hold_id: string;
  run_id: string;
  capability: string;
  resolved_by: string;
  decided_by: Record<string, unknown>[];
  decided_at: string;
  iat: number;
  items: ReceiptItem[];
}

type KeyGetter = ReturnType<typeof createRemoteJWKSet>;
// One remote key set per URL: fetched on first use, kept, and fetched again only for a kid it lacks.
const remote = new Map<string, KeyGetter>();

/**
 * The receipt's verified claims, or a ReceiptError. With `jwks` (a key set you hold) nothing is fetched.
 * With `jwksUrl` the set is fetched on first use and cached; a kid not in it makes one fresh fetch (a
 * rotation), then fails.
 */
export async function verifyReceipt(
  token: string,
  keys: { jwksUrl: string | URL; jwks?: undefined } | { jwks: JSONWebKeySet; jwksUrl?: undefined },
): Promise<ReceiptClaims> {
  let getKey: KeyGetter | ReturnType<typeof createLocalJWKSet>;
  if (keys.jwks) {
    getKey = createLocalJWKSet(keys.jwks);
  } else {
    const url = String(keys.jwksUrl);
    let cached = remote.get(url);
    if (!cached) {
      // No cooldown: a receipt signed after a rotation must fetch the new key at once.
      cached = createRemoteJWKSet(new URL(url), { cooldownDuration: 0, cacheMaxAge: Infinity });
      remote.set(url, cached);
    }
    getKey = cached;
  }
  let payload: Uint8Array;
  try {
    ({ payload } = await compactVerify(String(token), getKey, { algorithms: ALGORITHMS }));
  } catch (err) {
    if (err instanceof errors.JWKSNoMatchingKey) throw new ReceiptError("receipt signed with an unknown key", { cause: err });
    if (err instanceof errors.JWSSignatureVerificationFailed)
      throw new ReceiptError("receipt signature does not verify (changed, or not signed by this key)", { cause: err });
    if (err instanceof errors.JOSEError) throw new ReceiptError(`receipt does not verify: ${err.message}`, { cause: err });
    throw err;
  }
  let claims: unknown;
  try {
    claims = JSON.parse(new TextDecoder().decode(payload));
  } catch (err) {
    throw new ReceiptError("receipt payload is not JSON", { cause: err });
  }
  if (!claims || typeof claims !== "object" || Array.isArray(claims)) throw new ReceiptError("receipt payload is not an object");
  return claims as ReceiptClaims;
}

/** Drops every cached key set (the next verification fetches again). */
export function forgetReceiptKeys(): void {
  remote.clear();
}
