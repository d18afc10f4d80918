"""The SDK against api/openapi.json, both ways: operations, methods, paths,
query parameters, schema fields, error codes and the asyncio shape. The
check is also run on altered copies of the document, to show it fails."""

import copy
import inspect
import json
import os
import unittest

import airlock
import airlock.aio as aio
from airlock import client as client_mod, errors, models, sandbox

DOC = os.environ.get("AIRLOCK_OPENAPI") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "api", "openapi.json")


def load():
    with open(DOC) as f:
        return json.load(f)


def _resolve(doc, p):
    while "$ref" in p:
        parts = p["$ref"].lstrip("#/").split("/")
        p = doc
        for x in parts:
            p = p[x]
    return p


def _props(doc, schema):
    schema = _resolve(doc, schema)
    out = set(schema.get("properties", {}))
    for sub in schema.get("allOf", []):
        out |= _props(doc, sub)
    return out


def drift(doc):
    """Every difference between the SDK and doc, as sentences."""
    problems = []
    ops = {}
    for path, item in doc["paths"].items():
        common = item.get("parameters", [])
        for method, op in item.items():
            if method == "parameters":
                continue
            params = [_resolve(doc, p) for p in common + op.get("parameters", [])]
            q = {p["name"] for p in params if p.get("in") == "query"}
            ops[op["operationId"]] = (method.upper(), path, q)
    table = client_mod.OPERATIONS
    for oid, (method, path, q) in ops.items():
        if oid not in table:
            problems.append(f"operation {oid} ({method} {path}) is not covered by the SDK")
            continue
        name, tmethod, tpath, tq = table[oid]
        if (tmethod, tpath) != (method, path):
            problems.append(f"operation {oid}: the SDK has {tmethod} {tpath}, the document {method} {path}")
        if set(tq) != q:
            problems.append(f"operation {oid}: query parameters {sorted(tq)} in the SDK, {sorted(q)} in the document")
        fn = getattr(airlock.Client, name, None)
        if fn is None:
            problems.append(f"operation {oid}: Client has no method {name}")
            continue
        accepted = set(inspect.signature(fn).parameters)
        extra = client_mod.FOLLOWERS.get(oid)
        if extra:
            accepted |= set(inspect.signature(getattr(airlock.Client, extra)).parameters)
        for p in q - accepted:
            problems.append(f"operation {oid}: Client.{name} takes no parameter {p}")
        for m in [name] + ([extra] if extra else []):
            a = getattr(aio.Client, m, None)
            if a is None:
                problems.append(f"operation {oid}: aio.Client has no method {m}")
            elif m in aio.STREAMING:
                if inspect.iscoroutinefunction(a):
                    problems.append(f"aio.Client.{m} streams: it must return an async iterator, not be a coroutine")
            elif not inspect.iscoroutinefunction(a):
                problems.append(f"aio.Client.{m} is not a coroutine function")
    for oid in table:
        if oid not in ops:
            problems.append(f"the SDK has operation {oid}, which the document does not")
    schemas = doc["components"]["schemas"]
    for name, schema in schemas.items():
        cls = models.SCHEMAS.get(name)
        if cls is None:
            problems.append(f"schema {name} has no model")
            continue
        want, have = _props(doc, schema), set(models.json_fields(cls))
        for f in sorted(want - have):
            problems.append(f"schema {name}: field {f} is missing from models.{cls.__name__}")
        for f in sorted(have - want):
            problems.append(f"models.{cls.__name__} has field {f}, which schema {name} does not")
    for name in models.SCHEMAS:
        if name not in schemas:
            problems.append(f"models has schema {name}, which the document does not")
    codes = set(_resolve(doc, schemas["ErrorBody"])["properties"]["code"]["enum"])
    for c in sorted(codes - set(errors.ERROR_CLASSES)):
        problems.append(f"error code {c} has no exception class")
    for c in sorted(set(errors.ERROR_CLASSES) - codes):
        problems.append(f"exception class for {c}, which the document does not list")
    return problems


def shape():
    """Differences between the blocking classes and their asyncio versions."""
    problems = []
    pairs = [(airlock.Client, aio.Client), (sandbox.Sandbox, aio.Sandbox), (sandbox.Process, aio.Process),
             (sandbox.Files, aio.Files), (sandbox.Network, aio.Network), (airlock.PTYSession, aio.PTYSession)]
    for s, a in pairs:
        for name, v in inspect.getmembers(s):
            if name.startswith("_") or not callable(v):
                continue
            av = inspect.getattr_static(a, name, None)
            if av is None:
                problems.append(f"aio.{a.__name__} has no {name}")
                continue
            static = inspect.getattr_static(s, name)
            if isinstance(static, classmethod):
                continue  # checked by the live tests (create, get, list)
            f = getattr(a, name)
            if name in aio.STREAMING:
                if inspect.iscoroutinefunction(f):
                    problems.append(f"aio.{a.__name__}.{name} must return an async iterator")
            elif not inspect.iscoroutinefunction(f):
                problems.append(f"aio.{a.__name__}.{name} is not a coroutine function")
    return problems


class DriftTest(unittest.TestCase):
    def test_sdk_matches_document(self):
        self.assertEqual(drift(load()), [])

    def test_async_shape(self):
        self.assertEqual(shape(), [])
        self.assertTrue(inspect.iscoroutinefunction(aio.Sandbox.get))

    def test_fails_on_new_operation(self):
        doc = copy.deepcopy(load())
        doc["paths"]["/v1/sandboxes/{id}/snapshot"] = {"post": {"operationId": "snapshotSandbox", "responses": {}}}
        self.assertIn("operation snapshotSandbox (POST /v1/sandboxes/{id}/snapshot) is not covered by the SDK", drift(doc))

    def test_fails_on_new_field(self):
        doc = copy.deepcopy(load())
        doc["components"]["schemas"]["Sandbox"]["properties"]["owner"] = {"type": "string"}
        self.assertIn("schema Sandbox: field owner is missing from models.Sandbox", drift(doc))
        doc = copy.deepcopy(load())
        # A field of the ExecRequest part of PTYStart (allOf) counts too.
        doc["components"]["schemas"]["ExecRequest"]["properties"]["user"] = {"type": "string"}
        p = drift(doc)
        self.assertIn("schema ExecRequest: field user is missing from models.ExecRequest", p)
        self.assertIn("schema PTYStart: field user is missing from models.PTYStart", p)

    def test_fails_on_new_schema_query_path_code(self):
        doc = copy.deepcopy(load())
        doc["components"]["schemas"]["Checkpoint"] = {"type": "object", "properties": {"id": {"type": "string"}}}
        doc["paths"]["/v1/sandboxes"]["get"]["parameters"].append({"name": "owner", "in": "query"})
        doc["paths"]["/v1/boxes/{id}"] = doc["paths"].pop("/v1/sandboxes/{id}")
        doc["components"]["schemas"]["ErrorBody"]["properties"]["code"]["enum"].append("aborted")
        p = drift(doc)
        self.assertIn("schema Checkpoint has no model", p)
        self.assertTrue(any("operation listSandboxes: query parameters" in x for x in p), p)
        self.assertTrue(any("operation getSandbox: the SDK has GET /v1/sandboxes/{id}" in x for x in p), p)
        self.assertIn("error code aborted has no exception class", p)

    def test_fails_on_removed_parts(self):
        doc = copy.deepcopy(load())
        del doc["paths"]["/v1/keys"]
        del doc["components"]["schemas"]["Process"]["properties"]["end_reason"]
        p = drift(doc)
        self.assertIn("the SDK has operation createKey, which the document does not", p)
        self.assertIn("models.Process has field end_reason, which schema Process does not", p)


if __name__ == "__main__":
    unittest.main()
