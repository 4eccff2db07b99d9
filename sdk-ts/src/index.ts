/** @agentos/sdk: the agent side of Review Queue. Ask a person, suspend, resume with the decision. */

import { Webhook } from "standardwebhooks";

export {
  APIConnectionError,
  APITimeoutError,
  AgentOSError,
  ApiError,
  AskInvalid,
  AskedForHuman,
  AuthenticationError,
  BadRequest,
  ConflictError,
  NotFound,
  PayloadTooLarge,
  PermissionDenied,
  RateLimited,
  ServerError,
  Suspend,
  UnprocessableEntity,
} from "./errors.js";
export {
  Files,
  Invocation,
  backoffMs,
  type ApiOptions,
  RunState,
  type AskItem,
  type AskRequest,
  type Eval,
  type InvocationPayload,
} from "./invocation.js";
export { ReceiptError, forgetReceiptKeys, verifyReceipt, type ReceiptClaims, type ReceiptItem } from "./receipts.js";
export { Resume, type Action, type DecidedItem, type JsonObject, type ResumePayload } from "./resume.js";
export { Server, runHandler, serve, type Answer, type Handler, type ServeOptions } from "./server.js";
/** The service's wire types, generated from its OpenAPI document (scripts/wire-types.mjs). */
export type { components, paths } from "./wire.js";

/** Standard Webhooks headers for one delivery of `body` (tests and tools that play the service). */
export function sign(secret: string, id: string, body: string, timestamp: Date = new Date()): Record<string, string> {
  return {
    "webhook-id": id,
    "webhook-timestamp": String(Math.floor(timestamp.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign(id, timestamp, body),
  };
}
