// The transport without a daemon: addresses, errors, 429 retries, timeouts,
// cancellation, unreachable daemons and stream parsing, against local
// servers made for each case.

import { test } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import {
  Airlock, AirlockError, APIError, ConnectionError, ERROR_CODES, ERROR_CLASSES, InvalidArgumentError, CommandNotFoundError, NotFoundError,
  ResourceExhaustedError, StreamCutError, TimeoutError, UnauthenticatedError, errorFromAnswer, parseHost, parseRetryAfter, defaultHost,
} from "../dist/index.js";
import { localServer, collect } from "./helpers.mjs";

test("parseHost takes the Go CLI's address forms and refuses the others with a message", () => {
  assert.deepEqual(parseHost("unix:///run/a.sock"), { socket: "/run/a.sock", protocol: "http:", hostname: "airlock", prefix: "" });
  assert.deepEqual(parseHost("http://127.0.0.1:7070"), { protocol: "http:", hostname: "127.0.0.1", port: 7070, prefix: "" });
  assert.deepEqual(parseHost("https://h.example/api/"), { protocol: "https:", hostname: "h.example", port: undefined, prefix: "/api" });
  assert.equal(parseHost("http://[::1]:9").hostname, "::1");
  for (const [bad, why] of [
    ["127.0.0.1:7070", "no scheme"],
    ["/run/a.sock", "no scheme"],
    ["unix://run/a.sock", "must be absolute"],
    ["unix:///", "no socket path"],
    ["ftp://h", "unknown scheme"],
    ["http://u:p@h:1", "no user, query or fragment"],
    ["http://h:1?x=1", "no user, query or fragment"],
  ]) {
    assert.throws(() => parseHost(bad), (e) => e instanceof AirlockError && e.message.includes(why) && e.message.includes(JSON.stringify(bad)), bad);
  }
});

test("defaultHost: AIRLOCK_HOST first, else the root daemon's socket", () => {
  const saved = process.env.AIRLOCK_HOST;
  try {
    process.env.AIRLOCK_HOST = "http://10.0.0.1:1";
    assert.equal(defaultHost(), "http://10.0.0.1:1");
    assert.equal(new Airlock({ apiKey: "k" }).host, "http://10.0.0.1:1");
    delete process.env.AIRLOCK_HOST;
    if (process.geteuid() === 0) assert.equal(defaultHost(), "unix:///run/airlock/airlock.sock");
  } finally {
    if (saved === undefined) delete process.env.AIRLOCK_HOST;
    else process.env.AIRLOCK_HOST = saved;
  }
});

test("every API error code has its class; answers map to them with the daemon's message", () => {
  for (const code of ERROR_CODES) {
    const e = errorFromAnswer(400, 0, Buffer.from(JSON.stringify({ error: { code, message: "m " + code } })));
    assert.ok(e instanceof ERROR_CLASSES[code], code);
    assert.ok(e instanceof APIError);
    assert.equal(e.code, code);
    assert.equal(e.apiMessage, "m " + code);
  }
  const cnf = errorFromAnswer(400, 0, Buffer.from('{"error":{"code":"command_not_found","message":"nope"}}'));
  assert.ok(cnf instanceof CommandNotFoundError && cnf instanceof InvalidArgumentError);
  // Not the API's body (a proxy's page): the status decides, the text is kept.
  const p = errorFromAnswer(404, 0, Buffer.from("<html>gone</html>"));
  assert.ok(p instanceof NotFoundError);
  assert.match(p.message, /gone/);
  const u = errorFromAnswer(418, 0, Buffer.alloc(0));
  assert.equal(u.code, "unknown");
  assert.equal(u.constructor, APIError);
});

test("Retry-After: seconds and HTTP dates", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(""), 0);
  assert.equal(parseRetryAfter("soon"), 0);
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:05 GMT", now), 5000);
  assert.equal(parseRetryAfter("Thu, 01 Jan 2025 00:00:05 GMT", now), 0);
});

const busy = (res, after) => {
  res.writeHead(429, { "content-type": "application/json", "retry-after": after });
  res.end(JSON.stringify({ error: { code: "resource_exhausted", message: "at capacity (test)" } }));
};

test("a 429 is retried after its Retry-After, then succeeds", async (t) => {
  const s = await localServer((req, res, st) => {
    if (st.requests <= 2) return busy(res, "1");
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"keys":[]}');
  });
  t.after(s.close);
  const retries = [];
  const c = new Airlock({ host: s.url, apiKey: "k", onRetry: (i) => retries.push(i) });
  t.after(() => c.close());
  assert.deepEqual(await c.listKeys(), { keys: [] });
  assert.equal(s.state.requests, 3);
  assert.deepEqual(retries.map((r) => [r.attempt, r.delayMs]), [[1, 1000], [2, 1000]]);
  assert.ok(retries[0].error instanceof ResourceExhaustedError);
});

test("a 429 asking for more than 30 s is not waited for; after 3 retries the error is thrown", async (t) => {
  const s = await localServer((req, res) => busy(res, req.url.includes("long") ? "31" : "0"));
  t.after(s.close);
  const c = new Airlock({ host: s.url });
  t.after(() => c.close());
  await assert.rejects(c.getSandbox("long"), (e) => e instanceof ResourceExhaustedError && e.retryAfterMs === 31000 && e.status === 429 && /at capacity \(test\)/.test(e.message));
  assert.equal(s.state.requests, 1);
  await assert.rejects(c.getSandbox("short"), ResourceExhaustedError);
  assert.equal(s.state.requests, 1 + 4);
});

test("a streamed body is never sent twice: its 429 is the caller's", async (t) => {
  const s = await localServer((req, res) => busy(res, "0"));
  t.after(s.close);
  const c = new Airlock({ host: s.url });
  t.after(() => c.close());
  async function* body() {
    yield Buffer.from("part1-");
    yield Buffer.from("part2");
  }
  await assert.rejects(c.writeFile("sb-0", "/x", body()), ResourceExhaustedError);
  assert.equal(s.state.requests, 1);
  assert.equal(s.state.bodies[0].toString(), "part1-part2");
  // Bytes are sent again.
  await assert.rejects(c.writeFile("sb-0", "/x", Buffer.from("b")), ResourceExhaustedError);
  assert.equal(s.state.requests, 1 + 4);
  assert.ok(s.state.bodies.slice(1).every((b) => b.toString() === "b"));
});

test("a server that never answers: TimeoutError at the call's timeout, and the daemon's words otherwise", async (t) => {
  const held = [];
  const s = await localServer((req, res) => held.push(res));
  t.after(s.close);
  const c = new Airlock({ host: s.url, timeoutMs: 300 });
  t.after(() => c.close());
  await assert.rejects(c.getSandbox("sb-1"), (e) => e instanceof TimeoutError && /300 ms/.test(e.message));
  await assert.rejects(c.getSandbox("sb-1", { timeoutMs: 200 }), TimeoutError);
  // Headers then silence: the body's wait is bounded too.
  const s2 = await localServer((req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.write('{"id":');
  });
  t.after(s2.close);
  const c2 = new Airlock({ host: s2.url, timeoutMs: 300 });
  t.after(() => c2.close());
  await assert.rejects(c2.getSandbox("sb-1"), TimeoutError);
  for (const r of held) r.destroy();
});

test("a timeout past Node's longest timer (2^31-1 ms) waits, instead of firing at once", async (t) => {
  const s = await localServer((req, res) => setTimeout(() => res.end('{"status":"ok"}'), 100));
  t.after(s.close);
  const month = 30 * 24 * 3600 * 1000;
  const c = new Airlock({ host: s.url, timeoutMs: month });
  t.after(() => c.close());
  await c.health();
  await c.health({ timeoutMs: 2 ** 31 });
  // The control: a short timeout still fires.
  const c2 = new Airlock({ host: s.url, timeoutMs: 20 });
  t.after(() => c2.close());
  await assert.rejects(c2.health(), TimeoutError);
});

test("an AbortSignal cancels a call with its reason", async (t) => {
  const s = await localServer(() => {});
  t.after(s.close);
  const c = new Airlock({ host: s.url, timeoutMs: 0 });
  t.after(() => c.close());
  const ac = new AbortController();
  const p = c.getSandbox("sb-1", { signal: ac.signal });
  setImmediate(() => ac.abort(new Error("caller gave up")));
  await assert.rejects(p, /caller gave up/);
  await assert.rejects(c.getSandbox("sb-1", { signal: AbortSignal.abort(new Error("before")) }), /before/);
});

test("an unreachable daemon is a ConnectionError that says where and why", async (t) => {
  const c = new Airlock({ host: "unix:///nonexistent/airlock.sock" });
  t.after(() => c.close());
  await assert.rejects(c.health(), (e) => e instanceof ConnectionError && /not running/.test(e.message) && /unix:\/\/\/nonexistent/.test(e.message));
  const l = net.createServer();
  await new Promise((r) => l.listen(0, "127.0.0.1", r));
  const port = l.address().port;
  await new Promise((r) => l.close(r));
  const c2 = new Airlock({ host: `http://127.0.0.1:${port}` });
  t.after(() => c2.close());
  await assert.rejects(c2.listSandboxes(), (e) => e instanceof ConnectionError && /ECONNREFUSED/.test(e.message));
});

test("output streams: NDJSON and SSE parsed alike; an error event is the API's error; a cut event is a StreamCutError", async (t) => {
  const ev = (o) => JSON.stringify(o);
  const bytes = Buffer.from([0xff, 0x00, 0x41]).toString("base64");
  const s = await localServer((req, res) => {
    if (req.url.includes("sb-sse")) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`: hello\r\nid: c1\r\ndata: ${ev({ kind: "stdout", offset: 0, data: bytes, cursor: "c1" })}\r\n\r\nid: c2\rdata: {"kind":"exit",\rdata: "exit_code":0,"offset":0,"cursor":"c2"}\r\r`);
    } else if (req.url.includes("sb-cut")) {
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.end(ev({ kind: "stdout", offset: 0, data: bytes, cursor: "c1" }) + '\n{"kind":"std');
    } else {
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.end(ev({ kind: "stdout", offset: 0, data: bytes, cursor: "c1" }) + "\n" + ev({ error: { code: "not_found", message: "sandbox ended (deleted)" } }) + "\n");
    }
  });
  t.after(s.close);
  const c = new Airlock({ host: s.url });
  t.after(() => c.close());
  const sse = await collect(c.processOutputOnce("sb-sse", "p1", { sse: true }));
  assert.equal(sse.length, 2);
  assert.deepEqual(sse[0].data, Buffer.from([0xff, 0x00, 0x41]));
  assert.equal(sse[1].kind, "exit");
  assert.equal(sse[1].exit_code, 0);
  const seen = [];
  await assert.rejects(
    (async () => {
      for await (const e of c.processOutputOnce("sb-nd", "p1")) seen.push(e);
    })(),
    (e) => e instanceof NotFoundError && e.status === 0 && /sandbox ended \(deleted\)/.test(e.message),
  );
  assert.equal(seen.length, 1);
  await assert.rejects(collect(c.processOutputOnce("sb-cut", "p1")), StreamCutError);
});

test("a cut output stream is reopened from the last cursor, nothing repeated", async (t) => {
  const s = await localServer((req, res, st) => {
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    const u = new URL(req.url, "http://x");
    if (st.requests === 1) {
      assert.equal(u.searchParams.get("cursor"), null);
      res.write(JSON.stringify({ kind: "stdout", offset: 0, data: Buffer.from("a").toString("base64"), cursor: "k1" }) + "\n");
      setTimeout(() => res.socket.destroy(), 20);
      return;
    }
    assert.equal(u.searchParams.get("cursor"), "k1");
    res.end(JSON.stringify({ kind: "stdout", offset: 1, data: Buffer.from("b").toString("base64"), cursor: "k2" }) + "\n" + JSON.stringify({ kind: "exit", offset: 0, exit_code: 0, cursor: "k3" }) + "\n");
  });
  t.after(s.close);
  const c = new Airlock({ host: s.url });
  t.after(() => c.close());
  const evs = await collect(c.processOutput("sb-1", "p1"));
  assert.deepEqual(evs.map((e) => e.cursor), ["k1", "k2", "k3"]);
  assert.equal(s.state.requests, 2);
});

test("a download whose daemon reports a fault in its trailer is that error, not a short archive", async (t) => {
  const s = await localServer((req, res) => {
    res.writeHead(200, { "content-type": "application/x-tar", trailer: "X-Airlock-Error" });
    res.write(Buffer.alloc(700));
    res.addTrailers({ "X-Airlock-Error": JSON.stringify({ code: "too_large", message: "over the limit (test)" }) });
    res.end();
  });
  t.after(s.close);
  const c = new Airlock({ host: s.url });
  t.after(() => c.close());
  await assert.rejects(collect(c.download("sb-1", "/x")), (e) => e.code === "too_large" && /over the limit \(test\)/.test(e.message));
});

test("empty ids and paths are refused before any request", async () => {
  const c = new Airlock({ host: "http://127.0.0.1:9" });
  await assert.rejects(c.getSandbox(""), InvalidArgumentError);
  await assert.rejects(c.readFile("sb-1", ""), InvalidArgumentError);
  await assert.rejects(c.getProcess("sb-1", ""), InvalidArgumentError);
  c.close();
});

test("a 401 from a proxy-like server keeps its status and text", async (t) => {
  const s = await localServer((req, res) => {
    res.writeHead(401);
    res.end("who are you");
  });
  t.after(s.close);
  const c = new Airlock({ host: s.url });
  t.after(() => c.close());
  await assert.rejects(c.listSandboxes(), (e) => e instanceof UnauthenticatedError && e.status === 401 && /who are you/.test(e.message));
});
