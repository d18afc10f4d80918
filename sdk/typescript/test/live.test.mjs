// Every API area against the real daemon on a unix socket
// ($AIRLOCK_TEST_UNIX), with its negative cases.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { lstat, mkdir, readFile, readdir, readlink, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  APIError, CommandNotFoundError, FailedPreconditionError, InvalidArgumentError, NotFoundError, NotImplementedError, Sandbox, TooLargeError,
} from "../dist/index.js";
import { collect, tempDir, unixClient } from "./helpers.mjs";

const c = unixClient();
test.after(() => c.close());

/** A sandbox deleted at the test's end. */
async function sandbox(t, opts = {}) {
  const sb = await Sandbox.create({ client: c, ...opts });
  t.after(() => sb.close());
  return sb;
}

test("sandbox lifecycle: create with labels, env and files; get, list by label, pause, resume, timeout, close", async (t) => {
  const tag = randomBytes(4).toString("hex");
  const sb = await Sandbox.create({ client: c, labels: { suite: "sdkts", tag }, env: { GREETING: "hi" }, files: [{ path: "seed.txt", content: "seeded", mode: 0o600 }] });
  t.after(() => sb.close()); // a failed assertion must not leave it behind (close is idempotent)
  assert.match(sb.id, /^sb-[0-9a-f]{16}$/);
  assert.equal(sb.state, "running");
  assert.equal(sb.info.runtime, "native");
  assert.equal((await c.getSandbox(sb.id)).labels.tag, tag);
  const listed = await c.listSandboxes({ labels: { tag } });
  assert.deepEqual(listed.sandboxes.map((s) => s.id), [sb.id]);
  assert.deepEqual((await c.listSandboxes({ labels: { tag: tag + "-other" } })).sandboxes, []);
  assert.ok((await collect(c.sandboxes({ state: "running" }))).some((s) => s.id === sb.id));
  const r = await sb.exec(["sh", "-c", 'echo "$GREETING"; cat seed.txt; echo; stat -c %a seed.txt']);
  assert.equal(r.stdout.toString(), "hi\nseeded\n600\n");
  await sb.pause();
  assert.equal(sb.state, "paused");
  await assert.rejects(sb.pause(), FailedPreconditionError);
  await sb.resume();
  assert.equal(sb.state, "running");
  await sb.setTimeout(120);
  const left = Date.parse(sb.info.expires_at) - Date.now();
  assert.ok(left > 60_000 && left <= 121_000, `expires in ${left} ms`);
  await sb.close();
  await sb.close(); // again: nothing
  await assert.rejects(c.getSandbox(sb.id), (e) => e instanceof NotFoundError && e.status === 404 && e.apiMessage.length > 0);
  await assert.rejects(c.deleteSandbox(sb.id), NotFoundError);
});

test("exec: output, exit code, stdin, cwd and env; bytes that are not UTF-8 arrive as they are", async (t) => {
  const sb = await sandbox(t);
  const r = await sb.exec("echo out; echo err >&2; exit 7");
  assert.equal(r.exit_code, 7);
  assert.equal(r.stdout.toString(), "out\n");
  assert.equal(r.stderr.toString(), "err\n");
  const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  const cat = await sb.exec(["cat"], { stdin: all });
  assert.deepEqual(cat.stdout, all);
  const bad = await sb.exec(["printf", "\\377\\376\\000ok"]);
  assert.deepEqual(bad.stdout, Buffer.from([0xff, 0xfe, 0x00, 0x6f, 0x6b]));
  const w = await sb.exec(["sh", "-c", "pwd; echo $X"], { cwd: "/tmp", env: { X: "y" } });
  assert.equal(w.stdout.toString(), "/tmp\ny\n");
});

test("exec: a missing command is CommandNotFoundError with the daemon's message; a slow one times out", async (t) => {
  const sb = await sandbox(t);
  await assert.rejects(sb.exec(["no-such-command-xyz"]), (e) => e instanceof CommandNotFoundError && e instanceof InvalidArgumentError && /no-such-command-xyz/.test(e.message));
  const r = await sb.exec(["sleep", "30"], { timeout_seconds: 0.5 });
  assert.equal(r.timed_out, true);
  assert.notEqual(r.exit_code, 0);
  await assert.rejects(c.exec(sb.id, []), InvalidArgumentError);
});

test("background process: streamed output, stdin, wait, and reattaching by cursor without repeats", async (t) => {
  const sb = await sandbox(t);
  const p = await sb.start(["sh", "-c", "echo first; read line; echo got:$line; printf '\\377' >&2"]);
  assert.match(p.id, /^p\d+$/);
  const it = p.output()[Symbol.asyncIterator]();
  const first = (await it.next()).value;
  assert.equal(first.kind, "stdout");
  assert.equal(first.data.toString(), "first\n");
  await it.return();
  const cursor = p.cursor;
  assert.ok(cursor);
  await p.write("line1\n", { close: true });
  // A new handle, reattached after the first event.
  const again = await sb.process(p.id);
  const rest = await collect(again.output({ cursor }));
  const out = Buffer.concat(rest.filter((e) => e.kind === "stdout").map((e) => e.data)).toString();
  assert.equal(out, "got:line1\n");
  assert.deepEqual(Buffer.concat(rest.filter((e) => e.kind === "stderr").map((e) => e.data)), Buffer.from([0xff]));
  assert.equal(rest.at(-1).kind, "exit");
  assert.equal(rest.at(-1).exit_code, 0);
  const done = await p.wait();
  assert.equal(done.state, "exited");
  assert.equal(done.exit_code, 0);
  // The whole output again from the start, over SSE.
  const sse = await collect(c.processOutput(sb.id, p.id, { sse: true }));
  assert.equal(Buffer.concat(sse.filter((e) => e.kind === "stdout").map((e) => e.data)).toString(), "first\ngot:line1\n");
  assert.ok((await sb.processes()).some((x) => x.id === p.id));
  assert.ok((await sb.processes({ state: "exited" })).some((x) => x.id === p.id));
  assert.ok(!(await sb.processes({ state: "running" })).some((x) => x.id === p.id));
  await assert.rejects(sb.process("p999999"), NotFoundError);
});

test("signals: TERM ends a process, a bad signal is refused", async (t) => {
  const sb = await sandbox(t);
  const p = await sb.start(["sleep", "600"]);
  await assert.rejects(p.signal("NOSUCHSIG"), InvalidArgumentError);
  const still = await p.wait({ timeoutMs: 1000 });
  assert.equal(still.state, "running");
  await p.signal("TERM");
  const done = await p.wait();
  assert.equal(done.state, "exited");
  assert.equal(done.signal, 15);
});

// The daemon ends the followers of a deleted sandbox with an error event
// ("sandbox ended (...)"); the stream ends with it as the API's error.
test("a sandbox deleted mid-stream ends the stream with the daemon's error, not a hang", async (t) => {
  const sb = await Sandbox.create({ client: c });
  t.after(() => sb.close());
  const p = await sb.start(["sh", "-c", "echo started; exec sleep 600"]);
  const seen = [];
  const reading = (async () => {
    for await (const ev of p.output()) {
      seen.push(ev);
      if (ev.kind === "stdout") await sb.close();
    }
  })();
  // The daemon says the sandbox was deleted (not found), never a made-up exit.
  await assert.rejects(reading, (e) => e instanceof NotFoundError && /ended \(deleted\)/.test(e.apiMessage));
  assert.equal(seen[0].data.toString(), "started\n");
});

test("files: write, read, text, stat, list, mkdir, rename, remove; missing ones are NotFoundError", async (t) => {
  const sb = await sandbox(t);
  const f = sb.files;
  await f.mkdir("d/e", { mode: 0o750 });
  await f.write("d/e/a.bin", Buffer.from([0, 255, 1]), { mode: 0o640 });
  assert.deepEqual(await f.read("d/e/a.bin"), Buffer.from([0, 255, 1]));
  const st = await f.stat("/workspace/d/e/a.bin");
  assert.equal(st.size, 3);
  assert.equal(st.mode, 0o640);
  assert.equal((await f.stat("d/e")).dir, true);
  await f.writeText("d/t.txt", "héllo");
  assert.equal(await f.readText("d/t.txt"), "héllo");
  assert.deepEqual((await f.list("d")).map((e) => e.name).sort(), ["e", "t.txt"]);
  await f.rename("d/t.txt", "d/u.txt");
  assert.equal(await f.exists("d/t.txt"), false);
  assert.equal(await f.exists("d/u.txt"), true);
  await assert.rejects(f.remove("d"), (e) => e.status === 409 || e.status === 400);
  await f.remove("d", { recursive: true });
  await assert.rejects(f.read("d/u.txt"), NotFoundError);
  await assert.rejects(f.stat("nope"), NotFoundError);
  await f.write("small", "0123456789");
  await assert.rejects(f.read("small", { maxSize: 5 }), TooLargeError);
});

test("a 48 MiB file streamed in and out keeps its sha256", async (t) => {
  const sb = await sandbox(t);
  const size = 48 << 20;
  const hash = createHash("sha256");
  async function* source() {
    for (let n = 0; n < size; n += 1 << 20) {
      const b = randomBytes(1 << 20);
      hash.update(b);
      yield b;
    }
  }
  await sb.files.write("big.bin", source());
  const want = hash.digest("hex");
  const inside = await sb.exec(["sha256sum", "big.bin"]);
  assert.equal(inside.stdout.toString().split(" ")[0], want);
  const back = await sb.files.read("big.bin");
  assert.equal(back.length, size);
  assert.equal(createHash("sha256").update(back).digest("hex"), want);
});

test("trees: upload, download, links leaving the tree skipped, size cap, a destination link refused", async (t) => {
  const sb = await sandbox(t);
  const d = await tempDir(t);
  const src = join(d, "proj");
  await mkdir(join(src, "sub"), { recursive: true });
  await writeFile(join(src, "sub/m.py"), "print(1)\n", { mode: 0o755 });
  await writeFile(join(src, "r.txt"), "readme");
  await symlink("sub/m.py", join(src, "main"));
  await sb.files.upload(src, "/workspace");
  assert.equal((await sb.exec(["sh", "-c", "cat proj/r.txt; echo; readlink proj/main; stat -c %a proj/sub/m.py"])).stdout.toString(), "readme\nsub/m.py\n755\n");
  await sb.exec(["sh", "-c", "ln -s /etc/passwd proj/esc; ln -s ../../.. proj/sub/up"]);
  const res = await sb.files.download("proj", join(d, "copy"));
  assert.deepEqual(res.skippedLinks.map((s) => [s.name, s.target]).sort(), [
    [join(d, "copy/esc"), "/etc/passwd"],
    [join(d, "copy/sub/up"), "../../.."],
  ]);
  assert.equal(await readFile(join(d, "copy/r.txt"), "utf8"), "readme");
  assert.equal(await readlink(join(d, "copy/main")), "sub/m.py");
  assert.equal(((await lstat(join(d, "copy/sub/m.py"))).mode & 0o777), 0o755);
  await assert.rejects(lstat(join(d, "copy/esc")), { code: "ENOENT" });
  // followLinks: the escaping link comes as the file it points to in the sandbox.
  const res2 = await sb.files.download("proj", join(d, "copy2"), { followLinks: true });
  assert.ok((await readFile(join(d, "copy2/esc"), "utf8")).includes("root:"));
  assert.ok(!res2.skippedLinks.some((s) => s.target === "/etc/passwd"));
  // Over the cap: refused, nothing left behind.
  await sb.exec(["sh", "-c", "head -c 300000 /dev/zero > proj/zeros"]);
  const before = await readdir(d);
  await assert.rejects(sb.files.download("proj", join(d, "copy3"), { maxSize: 100000 }), TooLargeError);
  assert.deepEqual(await readdir(d), before);
  // A destination that is a symbolic link is neither written through nor replaced.
  await mkdir(join(d, "elsewhere"));
  await symlink(join(d, "elsewhere"), join(d, "trap"));
  await assert.rejects(sb.files.download("proj", join(d, "trap")), /symbolic link/);
  assert.deepEqual(await readdir(join(d, "elsewhere")), []);
  await assert.rejects(sb.files.download("nope", join(d, "copy4")), NotFoundError);
});

test("pty: a terminal with its size; output, input and exit code; a missing command is its error", async (t) => {
  const sb = await sandbox(t);
  const pty = await sb.pty(["sh", "-c", "stty size; read x; echo got:$x; exit 3"], { cols: 100, rows: 30 });
  let out = "";
  let sent = false;
  for await (const b of pty) {
    out += b.toString();
    if (!sent && out.includes("30 100")) {
      sent = true;
      await pty.write("abc\n");
    }
  }
  assert.match(out, /30 100/);
  assert.match(out, /got:abc/);
  const exit = await pty.wait();
  assert.equal(exit.exit_code, 3);
  const bad = await sb.pty(["no-such-command-xyz"]);
  await assert.rejects(bad.wait(), CommandNotFoundError);
});

test("pty: resize and signals reach the process; closing the session hangs it up", async (t) => {
  const sb = await sandbox(t);
  const pty = await sb.pty(["sh", "-c", "read a; stty size; exec sleep 600"], { cols: 80, rows: 24 });
  await pty.resize(132, 50);
  await pty.write("go\n");
  let out = "";
  for await (const b of pty) {
    out += b.toString();
    if (/50 132/.test(out)) break;
  }
  assert.match(out, /50 132/);
  await pty.signal("TERM");
  const exit = await pty.wait();
  assert.equal(exit.signal, 15);
  // A session closed by the client: its process is hung up, and the process list says it ended.
  const p2 = await sb.pty(["sleep", "601"]);
  const find = async () => (await sb.processes()).find((p) => p.info.tty && p.info.argv[1] === "601");
  let proc;
  for (let i = 0; i < 200 && !(proc = await find()); i++) await new Promise((r) => setTimeout(r, 50));
  assert.ok(proc, "the PTY process is not listed");
  assert.equal(proc.info.state, "running");
  p2.close();
  const done = await proc.wait({ timeoutMs: 30_000 });
  assert.equal(done.state, "exited", "the PTY process still runs after its session closed");
});

test("network: the audit records a denied request; the policy changes live; a sandbox without network keeps none", async (t) => {
  const sb = await sandbox(t, { policy: "network:\n  mode: allowlist\n  allow: [allowed.invalid]\n" });
  const pol = await sb.network.policy();
  assert.equal(pol.mode, "allowlist");
  assert.deepEqual(pol.allow, ["allowed.invalid"]);
  const r = await sb.exec(["sh", "-c", "curl -s -o /dev/null -w '%{http_code}' http://denied.invalid/x || true"]);
  assert.notEqual(r.stdout.toString(), "200");
  // Wait for the record on the live stream (bounded), then read it as a page.
  const followed = [];
  for await (const ev of sb.network.follow({ allowed: false }, { signal: AbortSignal.timeout(30_000) })) {
    followed.push(ev);
    break;
  }
  assert.equal(followed[0].host, "denied.invalid");
  assert.equal(followed[0].allowed, false);
  const page = await sb.network.events({ allowed: false });
  assert.equal(page.events[0].host, "denied.invalid");
  assert.equal(page.events[0].cursor, followed[0].cursor);
  assert.deepEqual((await sb.network.events({ allowed: true })).events, []);
  assert.deepEqual((await sb.network.events({ problems: true })).events.map((e) => e.host), ["denied.invalid"]);
  assert.deepEqual((await sb.network.events({ cursor: page.events.at(-1).cursor })).events, []);
  const next = await sb.network.setPolicy({ mode: "allowlist", allow: ["allowed.invalid"], deny: ["denied.invalid"] });
  assert.deepEqual(next.deny, ["denied.invalid"]);
  await assert.rejects(sb.network.setPolicy({ mode: "bogus" }), InvalidArgumentError);
  const none = await sandbox(t);
  assert.equal((await none.network.policy()).mode, "none");
  await assert.rejects(none.network.setPolicy({ mode: "open" }), FailedPreconditionError);
});

test("record: followEvents sees an exec live, recordEvents pages it; a sandbox without record is FailedPreconditionError", async (t) => {
  if (process.geteuid() !== 0) {
    // The denial: a daemon that is not root cannot keep the record.
    await assert.rejects(Sandbox.create({ client: c, record: true }), NotImplementedError);
    return;
  }
  const sb = await sandbox(t, { record: true });
  assert.equal(sb.info.record, true);
  const ac = new AbortController();
  const seen = (async () => {
    for await (const ev of c.followEvents(sb.id, { type: "exec" }, { signal: AbortSignal.any([ac.signal, AbortSignal.timeout(30_000)]) })) {
      if (ev.argv?.[1] === "ts-record") return ev;
    }
  })();
  // The stream is open once its first answer came; an exec made after
  // any earlier one is in it either way (from the start of the record).
  await sb.exec(["/bin/true", "ts-record"]);
  const ev = await seen;
  ac.abort();
  assert.equal(ev.type, "exec");
  assert.equal(ev.result, "ok");
  const page = await c.recordEvents(sb.id, { type: ["start", "exec"] });
  assert.deepEqual(page.events.map((e) => e.type), ["start", "exec"]);
  assert.equal(page.events[1].cursor, ev.cursor);
  const plain = await sandbox(t);
  await assert.rejects(c.recordEvents(plain.id), FailedPreconditionError);
});

test("portTunnel: a TCP stream to a server inside the sandbox; a bad port and a closed one are errors", async (t) => {
  const sb = await sandbox(t);
  await sb.start(["python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"]);
  let answer = "";
  for (let i = 0; i < 100 && !answer.startsWith("HTTP/1.0 200"); i++) {
    try {
      const s = await c.portTunnel(sb.id, 8000);
      s.end("GET / HTTP/1.0\r\n\r\n");
      answer = Buffer.concat(await collect(s)).toString();
    } catch (e) {
      if (!(e instanceof APIError)) throw e; // the server is not listening yet
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert.match(answer, /^HTTP\/1\.0 200/);
  await assert.rejects(c.portTunnel(sb.id, 0), (e) => e instanceof InvalidArgumentError && e.message === "airlock: port 0: want 1 to 65535 (invalid_argument)");
  await assert.rejects(c.portTunnel(sb.id, 8001), (e) => e instanceof APIError && e.status === 503);
  await assert.rejects(c.portTunnel("sb-0000000000000000", 8000), NotFoundError);
});

test("health, ready, metrics and the OpenAPI document", async () => {
  await c.health();
  await c.ready();
  assert.match(await c.metrics(), /^# (HELP|TYPE) airlock_/m);
  assert.equal((await c.openapi()).openapi.startsWith("3."), true);
});

test("snapshots: create, changes, fork, restore, delete; a name in use, an unknown snapshot", async (t) => {
  const sb = await sandbox(t);
  await sb.exec(["sh", "-c", "echo one > /workspace/a && mkdir /workspace/d"]);
  let sn;
  try {
    sn = await c.createSnapshot(sb.id, { name: `ts-${sb.id}` });
  } catch (e) {
    if (e instanceof NotImplementedError) return t.skip(`this daemon keeps no snapshots: ${e.message}`);
    throw e;
  }
  t.after(() => c.deleteSnapshot(sn.id).catch(() => {}));
  assert.equal(sn.processes, false);
  assert.equal((await c.getSnapshot(sn.name)).id, sn.id);
  await assert.rejects(c.createSnapshot(sb.id, { name: sn.name }), (e) => e instanceof APIError && e.status === 409);
  await sb.exec(["sh", "-c", "echo two > /workspace/a && rmdir /workspace/d"]);
  const ch = await c.sandboxChanges(sb.id, { since: sn.id, diff: true });
  assert.deepEqual(ch.changes.map((x) => `${x.kind} ${x.path}`).sort(), ["deleted d/", "modified a"]);
  assert.deepEqual((await sb.changes({ since: sn.name })).changes.map((x) => x.path).sort(), ["a", "d/"]);
  const kids = await sb.fork(1);
  t.after(async () => { for (const k of kids) await k.close(); });
  assert.equal((await kids[0].exec(["cat", "/workspace/a"])).stdout.toString(), "two\n");
  const fr = await c.forkSandbox(sb.id, { count: 2 });
  for (const bad of [0, -1, 1.5]) await assert.rejects(sb.fork(bad), InvalidArgumentError);
  t.after(async () => {
    for (const f of fr.sandboxes) await c.deleteSandbox(f.id).catch(() => {});
    await c.deleteSnapshot(fr.snapshot.id).catch(() => {});
  });
  assert.equal(fr.sandboxes.length, 2);
  assert.equal((await c.exec(fr.sandboxes[1].id, ["cat", "/workspace/a"])).stdout.toString(), "two\n");
  await sb.restore(sn.id);
  assert.equal(sb.id, sb.info.id);
  assert.equal((await sb.exec(["sh", "-c", "cat /workspace/a; ls /workspace"])).stdout.toString(), "one\na\nd\n");
  await assert.rejects(c.restoreSandbox(sb.id, "no-such-snapshot"), NotFoundError);
  await c.deleteSnapshot(sn.id);
  await assert.rejects(c.getSnapshot(sn.id), NotFoundError);
});
