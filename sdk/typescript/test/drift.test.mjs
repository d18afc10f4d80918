// The SDK against api/openapi.json ($AIRLOCK_OPENAPI): src/models.ts must
// be what scripts/gen-models.mjs makes of the document now, and the
// document may have no operation, query parameter, field or error code the
// SDK lacks. Fix a failure with `npm run gen` and by covering what is new.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { generate, loadDocument, modelsFile } from "../scripts/gen-models.mjs";
import { Airlock, ERROR_CLASSES, SENT_QUERY } from "../dist/index.js";
import { env } from "./helpers.mjs";

const doc = () => loadDocument(env("AIRLOCK_OPENAPI"));

/** What the document has that the SDK lacks (empty when it covers it all). */
function gaps(d) {
  const out = [];
  const params = d.components?.parameters || {};
  for (const [path, item] of Object.entries(d.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!op?.operationId) continue;
      const id = op.operationId;
      if (typeof Airlock.prototype[id] !== "function") out.push(`operation ${id} (${method.toUpperCase()} ${path}): no Airlock.${id}`);
      const q = [...(item.parameters || []), ...(op.parameters || [])]
        .map((p) => (p.$ref ? params[p.$ref.split("/").pop()] : p))
        .filter((p) => p?.in === "query")
        .map((p) => p.name);
      const sent = SENT_QUERY[id] || [];
      for (const n of q) if (!sent.includes(n)) out.push(`operation ${id}: query parameter ${n} is not sent`);
      for (const n of sent) if (!q.includes(n)) out.push(`operation ${id}: sends ${n}, which the document does not have`);
    }
  }
  for (const code of d.components.schemas.ErrorBody.properties.code.enum) {
    if (!ERROR_CLASSES[code]) out.push(`error code ${code}: no class`);
  }
  return out;
}

test("src/models.ts is generated from the current api/openapi.json (run `npm run gen`)", () => {
  assert.equal(readFileSync(modelsFile, "utf8"), generate(doc()), "src/models.ts is stale: run `npm run gen` in sdk/typescript");
});

test("every operation, query parameter and error code of the document is covered", () => {
  assert.deepEqual(gaps(doc()), []);
});

test("the drift checks fail on a new operation, parameter, field or error code", () => {
  const d = doc();
  d.paths["/v1/sandboxes/{id}/snapshot"] = { post: { operationId: "snapshotSandbox", parameters: [{ name: "label", in: "query" }] } };
  d.paths["/v1/sandboxes"].get.parameters.push({ name: "owner", in: "query", schema: { type: "string" } });
  d.components.schemas.ErrorBody.properties.code.enum.push("quota_exceeded");
  assert.deepEqual(gaps(d), [
    "operation listSandboxes: query parameter owner is not sent",
    "operation snapshotSandbox (POST /v1/sandboxes/{id}/snapshot): no Airlock.snapshotSandbox",
    "operation snapshotSandbox: query parameter label is not sent",
    "error code quota_exceeded: no class",
  ]);
  const d2 = doc();
  d2.components.schemas.Sandbox.properties.owner = { type: "string" };
  assert.notEqual(generate(d2), readFileSync(modelsFile, "utf8"));
  assert.match(generate(d2), /owner\?: string;/);
});
