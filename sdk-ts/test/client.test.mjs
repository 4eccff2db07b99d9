// The run token's client without a service: a timeout is its own error, explicit options win, and the
// tests read only files of this repository (a clone with nothing beside it passes them).
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";

import { APIConnectionError, APITimeoutError, Invocation, backoffMs } from "@agentos/sdk";

import { SDK } from "./harness.mjs";

test("a service that accepts and never answers gives APITimeoutError after the retries", async () => {
  const silent = createServer(() => {});
  await new Promise((r) => silent.listen(0, "127.0.0.1", r));
  const slept = [];
  const inv = new Invocation(
    { id: "inv_1", run_id: "r_1", capability: "c", api_url: `http://127.0.0.1:${silent.address().port}` },
    null,
    { timeoutMs: 50, maxRetries: 2, sleep: async (ms) => void slept.push(ms) },
  );
  const err = await inv.state.run.get("k", null).catch((e) => e);
  silent.close();
  assert.ok(err instanceof APITimeoutError && err instanceof APIConnectionError, String(err));
  assert.match(err.requestId, /^agentos-[0-9a-f]{24}$/);
  assert.equal(slept.length, 2);
});

test("Retry-After in seconds or as a date, else backoff with jitter, at most a minute", () => {
  assert.equal(backoffMs(0, "3"), 3000);
  assert.equal(backoffMs(0, "86400"), 60_000);
  assert.equal(backoffMs(0, new Date(Date.now() - 5000).toUTCString()), 0);
  for (const [attempt, top] of [[0, 500], [1, 1000], [2, 2000], [9, 8000]]) {
    const ms = backoffMs(attempt, null);
    assert.ok(ms >= top / 2 && ms <= top, `${attempt}: ${ms}`);
  }
});

test("the tests and scripts read only files of the repository", () => {
  for (const dir of ["test", "scripts"]) {
    for (const name of readdirSync(join(SDK, dir)).filter((n) => n.endsWith(".mjs") && n !== "client.test.mjs")) {
      const text = readFileSync(join(SDK, dir, name), "utf8");
      // Outside the repository is what lies beside it: a hop above its root, or the absolute path of its parent.
      const outside = dirname(resolve(SDK, ".."));
      assert.ok(!/ROOT, "\.\."/.test(text) && !text.includes(`${outside}/`), `${dir}/${name} reads outside the repository`);
    }
  }
});
