/** @agentos/sdk: the agent side of Review Queue. Ask a person, suspend, resume with the decision. */
import { Webhook } from "standardwebhooks";
export { ApiError, AskInvalid, AskedForHuman, Suspend } from "./errors.js";
export { Files, Invocation, RunState, } from "./invocation.js";
export { Resume } from "./resume.js";
export { Server, runHandler, serve } from "./server.js";
/** Standard Webhooks headers for one delivery of `body` (tests and tools that play the service). */
export function sign(secret, id, body, timestamp = new Date()) {
    return {
        "webhook-id": id,
        "webhook-timestamp": String(Math.floor(timestamp.getTime() / 1000)),
        "webhook-signature": new Webhook(secret).sign(id, timestamp, body),
    };
}
//# sourceMappingURL=index.js.map