// Shared by the tests: the daemons the Go harness started (tests/sdkts),
// and small local servers for the transport's failure cases.

import * as http from "node:http";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Airlock } from "../dist/index.js";

/** The environment a live test needs; it fails (never skips) when missing, so a harness that forgot it is caught. */
export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through tests/sdkts (go test -run TestTypeScriptSDK ./tests/sdkts/)`);
  return v;
}

/** A client of the unix-socket daemon. */
export function unixClient(opts = {}) {
  return new Airlock({ host: env("AIRLOCK_TEST_UNIX"), ...opts });
}

/** A client of the TCP daemon (one sandbox at most, 1 MiB uploads) with its key. */
export function tcpClient(opts = {}) {
  return new Airlock({ host: env("AIRLOCK_TEST_TCP"), apiKey: env("AIRLOCK_TEST_KEY"), ...opts });
}

/** A local HTTP server answering with handler; returns its URL, its request count and close(). */
export async function localServer(handler) {
  const state = { requests: 0, bodies: [] };
  const sockets = new Set();
  const srv = http.createServer(async (req, res) => {
    state.requests++;
    const parts = [];
    if (req.method !== "GET") for await (const c of req) parts.push(c);
    state.bodies.push(Buffer.concat(parts));
    handler(req, res, state);
  });
  srv.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    state,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => srv.close(r));
    },
  };
}

/** A temporary directory, removed by the returned cleanup. */
export async function tempDir(t) {
  const d = await mkdtemp(join(tmpdir(), "airlock-ts-"));
  t.after(() => rm(d, { recursive: true, force: true }));
  return d;
}

/** Collects an async iterable. */
export async function collect(it) {
  const out = [];
  for await (const x of it) out.push(x);
  return out;
}
