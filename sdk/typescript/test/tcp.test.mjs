// The daemon over TCP ($AIRLOCK_TEST_TCP): API keys (good, missing, wrong,
// revoked), keys refused over TCP, a real 429 from its one-sandbox limit
// and its retry, and its 1 MiB upload cap.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Airlock, PermissionDeniedError, ResourceExhaustedError, Sandbox, TooLargeError, UnauthenticatedError } from "../dist/index.js";
import { env, tcpClient } from "./helpers.mjs";

const host = () => env("AIRLOCK_TEST_TCP");
/** The TCP daemon's own unix socket, where keys are made. */
const admin = () => new Airlock({ host: env("AIRLOCK_TEST_TCP_UNIX") });

test("over TCP with a key: a sandbox is created, used and deleted; no key is needed for /healthz", async (t) => {
  const c = tcpClient();
  t.after(() => c.close());
  const sb = await Sandbox.create({ client: c });
  try {
    assert.equal((await sb.exec(["echo", "tcp"])).stdout.toString(), "tcp\n");
  } finally {
    await sb.close();
  }
  const anon = new Airlock({ host: host(), apiKey: "" });
  t.after(() => anon.close());
  await anon.health();
});

test("a missing or wrong key is UnauthenticatedError with the daemon's message", async (t) => {
  for (const key of ["", "alk_0000_wrong"]) {
    const c = new Airlock({ host: host(), apiKey: key });
    t.after(() => c.close());
    await assert.rejects(c.listSandboxes(), (e) => e instanceof UnauthenticatedError && e.status === 401 && e.apiMessage.length > 0, JSON.stringify(key));
  }
});

test("the environment gives the address and the key (AIRLOCK_HOST, AIRLOCK_API_KEY)", async (t) => {
  const saved = [process.env.AIRLOCK_HOST, process.env.AIRLOCK_API_KEY];
  t.after(() => {
    process.env.AIRLOCK_HOST = saved[0] ?? "";
    process.env.AIRLOCK_API_KEY = saved[1] ?? "";
  });
  process.env.AIRLOCK_HOST = host();
  process.env.AIRLOCK_API_KEY = env("AIRLOCK_TEST_KEY");
  const c = Airlock.fromEnv();
  t.after(() => c.close());
  assert.ok(Array.isArray((await c.listSandboxes()).sandboxes));
  process.env.AIRLOCK_API_KEY = "alk_bad";
  const bad = Airlock.fromEnv();
  t.after(() => bad.close());
  await assert.rejects(bad.listSandboxes(), UnauthenticatedError);
});

test("a revoked key stops working at once; keys are managed over the unix socket only", async (t) => {
  const a = admin();
  t.after(() => a.close());
  const k = await a.createKey("sdkts-revoke");
  assert.ok(k.key && k.id);
  assert.ok((await a.listKeys()).keys.some((x) => x.id === k.id && !x.key));
  const c = new Airlock({ host: host(), apiKey: k.key });
  t.after(() => c.close());
  await c.listSandboxes();
  await a.revokeKey(k.id);
  await assert.rejects(c.listSandboxes(), UnauthenticatedError);
  assert.ok((await a.listKeys()).keys.find((x) => x.id === k.id).revoked_at);
  const tc = tcpClient();
  t.after(() => tc.close());
  await assert.rejects(tc.createKey("over-tcp"), PermissionDeniedError);
  await assert.rejects(tc.listKeys(), PermissionDeniedError);
});

test("a real 429 at the one-sandbox limit: the error with Retry-After, then a retry that succeeds once room frees up", async (t) => {
  const c0 = tcpClient({ maxRetries: 0 });
  t.after(() => c0.close());
  const first = await Sandbox.create({ client: c0 });
  let firstClosed = false;
  t.after(() => (firstClosed ? undefined : first.close()));
  await assert.rejects(Sandbox.create({ client: c0 }), (e) => e instanceof ResourceExhaustedError && e.status === 429 && e.retryAfterMs > 0 && /capacity|room/.test(e.apiMessage));
  const retries = [];
  const c = tcpClient({
    onRetry: (info) => {
      retries.push(info);
      if (!firstClosed) {
        firstClosed = true;
        first.close(); // room frees up while the client waits
      }
    },
  });
  t.after(() => c.close());
  const second = await Sandbox.create({ client: c });
  try {
    assert.ok(retries.length >= 1);
    assert.ok(retries[0].error instanceof ResourceExhaustedError);
    assert.equal(retries[0].delayMs, retries[0].error.retryAfterMs);
    assert.ok(retries[0].delayMs <= 30_000);
    assert.equal((await second.exec(["true"])).exit_code, 0);
  } finally {
    await second.close();
  }
});

test("an upload over the daemon's limit is TooLargeError with the daemon's message; under it, the file is written", async (t) => {
  const c = tcpClient();
  t.after(() => c.close());
  const sb = await Sandbox.create({ client: c });
  t.after(() => sb.close());
  await assert.rejects(sb.files.write("big.txt", Buffer.alloc(2 << 20, 0x61)), (e) => e instanceof TooLargeError && e.status === 413 && e.apiMessage.length > 0);
  async function* stream() {
    for (let i = 0; i < 4; i++) yield Buffer.alloc(512 << 10, 0x62);
  }
  await assert.rejects(sb.files.write("big.txt", stream()), TooLargeError);
  // The control: under the limit it is written.
  await sb.files.write("keep.txt", Buffer.alloc(512 << 10, 0x63));
  assert.equal((await sb.files.stat("keep.txt")).size, 512 << 10);
});

// The daemon must commit nothing of an upload that did not arrive whole.
test("an upload over the daemon's limit leaves the file as it was (bytes and stream)", async (t) => {
  const c = tcpClient();
  t.after(() => c.close());
  const sb = await Sandbox.create({ client: c });
  t.after(() => sb.close());
  await sb.files.write("keep.txt", "original");
  await assert.rejects(sb.files.write("keep.txt", Buffer.alloc(2 << 20, 0x61)), TooLargeError);
  assert.equal((await sb.files.stat("keep.txt")).size, 8, "the file was replaced by the part of the upload that arrived");
  assert.equal(await sb.files.readText("keep.txt"), "original");
  async function* stream() {
    for (let i = 0; i < 4; i++) yield Buffer.alloc(512 << 10, 0x62);
  }
  await assert.rejects(sb.files.write("keep.txt", stream()), TooLargeError);
  assert.equal((await sb.files.stat("keep.txt")).size, 8, "the file was replaced by the part of the upload that arrived");
});
