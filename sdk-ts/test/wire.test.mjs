// src/wire.ts is what openapi-typescript makes of the service's OpenAPI document: a change to the
// service's schemas that is not regenerated (`npm run wire-types`) fails here.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { WIRE, dumpDocument, generate } from "../scripts/wire-types.mjs";

test("the checked-in src/wire.ts is generated from the document /v0/openapi.json serves", async () => {
  const doc = dumpDocument();
  assert.equal(doc.openapi.startsWith("3."), true);
  assert.ok(doc.components.schemas.AskIn, "the document has the ask's schema");
  assert.equal(readFileSync(WIRE, "utf8"), await generate(doc), "run `npm run wire-types` in sdk-ts");
});

test("a document that differs gives other types (the comparison can fail)", async () => {
  const doc = dumpDocument();
  doc.components.schemas.AskIn.properties.intent = { type: "integer" };
  assert.notEqual(readFileSync(WIRE, "utf8"), await generate(doc));
});
