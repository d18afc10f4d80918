"""Tests against real daemons that tests/sdkpy (go test -run TestPythonSDK)
starts: AIRLOCK_TEST_UNIX (its unix socket), AIRLOCK_TEST_TCP and
AIRLOCK_TEST_KEY (TCP with an API key), AIRLOCK_TEST_LIMITED (a daemon of
one sandbox). Without them these tests skip (and the Go test fails)."""

import asyncio
import hashlib
import os
import shutil
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import airlock
import airlock.aio as aio

UNIX = os.environ.get("AIRLOCK_TEST_UNIX", "")
TCP = os.environ.get("AIRLOCK_TEST_TCP", "")
KEY = os.environ.get("AIRLOCK_TEST_KEY", "")
LIMITED = os.environ.get("AIRLOCK_TEST_LIMITED", "")


def need(*vals):
    if not all(vals):
        raise unittest.SkipTest("no daemon: run through `go test -run TestPythonSDK ./tests/sdkpy/`")


class Live(unittest.TestCase):
    def setUp(self):
        need(UNIX)
        self.c = airlock.Client(UNIX, timeout=60)
        self.tmp = tempfile.mkdtemp()
        self.made = []

    def tearDown(self):
        for sb in self.made:
            sb.delete()
        self.c.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sandbox(self, **kw):
        sb = airlock.Sandbox.create(client=self.c, **kw)
        self.made.append(sb)
        return sb


class SnapshotTest(Live):
    def test_snapshot_fork_restore_changes(self):
        sb = self.sandbox()
        self.assertEqual(sb.exec("echo one > /workspace/a && mkdir /workspace/d").exit_code, 0)
        try:
            sn = self.c.create_snapshot(sb.id, name="py-" + sb.id, labels={"k": "v"})
        except airlock.Unimplemented as e:
            raise unittest.SkipTest(f"this daemon keeps no snapshots: {e}")
        try:
            self.assertFalse(sn.processes)
            self.assertEqual(self.c.get_snapshot(sn.name).id, sn.id)
            self.assertIn(sn.id, [s.id for s in self.c.list_snapshots().snapshots])
            with self.assertRaises(airlock.AlreadyExists):
                self.c.create_snapshot(sb.id, name=sn.name)
            self.assertEqual(sb.exec("echo two > /workspace/a && rmdir /workspace/d").exit_code, 0)
            ch = self.c.sandbox_changes(sb.id, since=sn.id, diff=True)
            self.assertEqual(sorted((c.kind, c.path) for c in ch.changes), [("deleted", "d/"), ("modified", "a")])
            self.assertIn("+two", [c for c in ch.changes if c.path == "a"][0].diff)
            self.assertEqual([c.path for c in sb.changes(since=sn.name).changes], [c.path for c in ch.changes])
            kids = sb.fork(1)
            self.made.extend(kids)
            self.assertEqual(kids[0].exec("cat /workspace/a").text, "two\n")
            fr = self.c.fork_sandbox(sb.id, count=2)
            for bad in (0, -1):
                with self.assertRaises(airlock.InvalidArgument):
                    sb.fork(bad)
            for f in fr.sandboxes:
                self.made.append(airlock.Sandbox.get(f.id, client=self.c))
            self.assertEqual(len(fr.sandboxes), 2)
            self.assertEqual(self.c.exec(fr.sandboxes[0].id, "cat /workspace/a").text, "two\n")
            self.assertEqual(sb.restore(sn.id).id, sb.id)
            self.assertEqual(sb.exec("cat /workspace/a; ls /workspace").text, "one\na\nd\n")
            with self.assertRaises(airlock.NotFound):
                self.c.restore_sandbox(sb.id, "no-such-snapshot")
            self.c.delete_snapshot(fr.snapshot.id)
        finally:
            self.c.delete_snapshot(sn.id)
        with self.assertRaises(airlock.NotFound):
            self.c.get_snapshot(sn.id)


class SandboxTest(Live):
    def test_lifecycle(self):
        with airlock.Sandbox.create(client=self.c, labels={"suite": "py", "n": "1"}, timeout=300) as sb:
            self.assertEqual(sb.state, "running")
            self.assertEqual(sb.info.runtime, "native")
            self.assertTrue(sb.info.expires_at)
            self.assertEqual(airlock.Sandbox.get(sb.id, client=self.c).info.labels, {"suite": "py", "n": "1"})
            ids = [s.id for s in airlock.Sandbox.list(label={"suite": "py"}, client=self.c)]
            self.assertIn(sb.id, ids)
            self.assertNotIn(sb.id, [s.id for s in airlock.Sandbox.list(label="suite=other", client=self.c)])
            self.assertEqual(sb.pause().state, "paused")
            with self.assertRaises(airlock.FailedPrecondition):
                sb.pause()
            self.assertEqual(sb.resume().state, "running")
            self.assertEqual(sb.exec("echo back").stdout, b"back\n")
            before = sb.info.expires_at
            self.assertNotEqual(sb.set_timeout(1000).expires_at, before)
            with self.assertRaises(airlock.InvalidArgument):
                sb.set_timeout(-1)
        # The with block deleted it.
        with self.assertRaises(airlock.NotFound):
            self.c.get_sandbox(sb.id)
        with self.assertRaises(airlock.NotFound):
            self.c.delete_sandbox(sb.id)
        sb.delete()  # gone already: not an error

    def test_pagination(self):
        for _ in range(3):
            self.sandbox(labels={"page": "yes"})
        first = self.c.list_sandboxes(label={"page": "yes"}, limit=2)
        self.assertEqual(len(first.sandboxes), 2)
        self.assertTrue(first.next_cursor)
        rest = self.c.list_sandboxes(label={"page": "yes"}, limit=2, cursor=first.next_cursor)
        self.assertEqual(len(rest.sandboxes), 1)
        ids = {s.id for s in first.sandboxes + rest.sandboxes}
        self.assertEqual(ids, {s.id for s in self.made})
        self.assertEqual({s.id for s in self.c.all_sandboxes(label={"page": "yes"})}, ids)
        with self.assertRaises(airlock.InvalidArgument):
            self.c.list_sandboxes(cursor="not-a-cursor!")

    def test_bad_create(self):
        with self.assertRaises(airlock.InvalidArgument):
            self.c.create_sandbox(policy_name="no-such-policy")
        with self.assertRaises(airlock.InvalidArgument):
            self.c.create_sandbox(runtime="no-such-runtime")
        with self.assertRaises(airlock.NotFound):
            self.c.get_sandbox("sb-0000000000000000")

    def test_create_with_files_env(self):
        sb = self.sandbox(files={"in.txt": "given"}, env={"GREETING": "hi"})
        self.assertEqual(sb.exec("cat in.txt; echo $GREETING").stdout, b"givenhi\n")


class ExecTest(Live):
    def test_exec(self):
        sb = self.sandbox()
        r = sb.exec(["sh", "-c", "printf 'a\\377\\376b'; printf 'err\\200' >&2; exit 7"])
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (7, b"a\xff\xfeb", b"err\x80"))
        self.assertFalse(r.ok)
        self.assertEqual(r.text, "a\ufffd\ufffdb")
        r = sb.exec("cat; pwd; echo $X", stdin=b"in\n", env={"X": "y"}, cwd="/tmp")
        self.assertEqual(r.stdout, b"in\n/tmp\ny\n")
        r = sb.exec("sleep 30", timeout=0.5)
        self.assertTrue(r.timed_out)
        r = sb.exec("head -c 100000 /dev/zero", max_output_bytes=1000)
        self.assertTrue(r.stdout_truncated)
        self.assertLess(len(r.stdout), 100000)
        with self.assertRaises(airlock.CommandNotFound) as e:
            sb.exec(["no-such-command"])
        self.assertIn("no-such-command", e.exception.message)
        with self.assertRaises(airlock.NotExecutable):
            sb.files.write("script", b"#!/bin/sh\n", mode=0o644)
            sb.exec(["./script"])
        with self.assertRaises(airlock.NotFound):
            self.c.exec("sb-0000000000000000", ["true"])

    def test_processes(self):
        sb = self.sandbox()
        p = sb.spawn("echo one; read x; echo got $x; echo two >&2; exit 3")
        self.assertEqual(p.info.state, "running")
        self.assertIn(p.id, [q.id for q in sb.processes()])
        self.assertIn(p.id, [q.id for q in sb.processes(state="running")])
        self.assertNotIn(p.id, [q.id for q in sb.processes(state="exited")])
        p.write("line\n", close=True)
        out = list(p.stream())
        self.assertEqual(b"".join(d for s, d in out if s == "stdout"), b"one\ngot line\n")
        self.assertEqual(b"".join(d for s, d in out if s == "stderr"), b"two\n")
        self.assertEqual(p.wait(30).exit_code, 3)
        # Output that is not UTF-8 comes as bytes, in order.
        b = sb.spawn("printf 'x\\377\\000y'; printf '\\376' >&2")
        got = {"stdout": b"", "stderr": b""}
        for stream, data in b.stream():
            got[stream] += data
        self.assertEqual(got, {"stdout": b"x\xff\x00y", "stderr": b"\xfe"})
        # Reattach by cursor: a new handle from the middle reads only the rest.
        q = sb.spawn("echo a; cat; echo c")
        evs = q.output()
        first = next(evs)
        self.assertEqual(first.data, b"a\n")
        evs.close()
        q2 = sb.process(q.id, cursor=q.cursor)
        q2.write(b"b\n", close=True)
        rest = [e for e in q2.output() if e.kind == "stdout"]
        self.assertEqual(b"".join(e.data for e in rest), b"b\nc\n")
        # SSE carries the same events.
        self.assertEqual([(e.kind, e.data) for e in q.output(cursor="", sse=True)],
                         [(e.kind, e.data) for e in q.output(cursor="")])
        # follow=False: what is there now, and the stream ends.
        r = sb.spawn("echo now; sleep 30")
        deadline = time.monotonic() + 30
        got = b""
        while b"now" not in got and time.monotonic() < deadline:
            got = b"".join(e.data or b"" for e in r.output(cursor="", follow=False))
        self.assertEqual(got, b"now\n")
        r.signal("TERM")
        self.assertEqual(r.wait(30).signal, 15)
        with self.assertRaises(airlock.InvalidArgument):
            r.signal("NOSUCHSIG")
        with self.assertRaises(airlock.NotFound):
            sb.process("p999999")
        # Output dropped before anyone read it (past the last MiB kept) is
        # counted, not silently missing; the control read whole has none.
        big = sb.spawn("head -c 3000000 /dev/zero")
        big.wait(60)
        n = sum(len(d) for s, d in big.stream() if s == "stdout")
        self.assertEqual(n + big.lost_bytes, 3000000)
        self.assertGreater(big.lost_bytes, 0)
        small = sb.spawn("head -c 1000 /dev/zero")
        self.assertEqual(sum(len(d) for s, d in small.stream()), 1000)
        self.assertEqual(small.lost_bytes, 0)

    def test_port_tunnel(self):
        sb = self.sandbox()
        sb.spawn(["python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"])
        answer = b""
        for _ in range(100):
            try:
                with self.c.port_tunnel(sb.id, 8000) as t:
                    t.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    t.shutdown()  # the answer still comes back
                    while True:
                        b = t.recv(65536)
                        if not b:
                            break
                        answer += b
                break
            except airlock.APIError:  # not listening yet
                time.sleep(0.1)
        self.assertTrue(answer.startswith(b"HTTP/1.0 200"), answer[:100])
        with self.assertRaises(airlock.InvalidArgument) as e:
            self.c.port_tunnel(sb.id, 0)
        self.assertEqual(str(e.exception), "airlock: port 0: want 1 to 65535 (invalid_argument)")
        with self.assertRaises(airlock.Unavailable):
            self.c.port_tunnel(sb.id, 8001)
        with self.assertRaises(airlock.NotFound):
            self.c.port_tunnel("sb-0000000000000000", 8000)

    def test_deleted_mid_stream(self):
        sb = self.sandbox()
        p = sb.spawn("echo started; sleep 300")
        it = p.output()
        self.assertEqual(next(it).data, b"started\n")
        done = threading.Event()
        rest = []
        errs = []

        def read():
            try:
                rest.extend(it)
            except airlock.AirlockError as e:
                errs.append(e)
            done.set()
        threading.Thread(target=read, daemon=True).start()
        sb.delete()
        self.assertTrue(done.wait(60), "the stream did not end after the sandbox was deleted")
        # It ends with the API's error: the sandbox was deleted (not found),
        # never a made-up exit.
        self.assertEqual(len(errs), 1, "the stream ended without an error: %r" % rest[-1:])
        self.assertIsInstance(errs[0], airlock.NotFound)
        self.assertIn("ended (deleted)", errs[0].message)
        with self.assertRaises(airlock.NotFound):
            list(p.output(cursor=""))

    def test_pty(self):
        sb = self.sandbox()
        with sb.pty(["sh", "-c", "stty size; read x; stty size; tty; echo got:$x"], cols=100, rows=30) as t:
            out = b""
            while b"30 100" not in out:
                b = t.recv(timeout=30)
                self.assertIsNotNone(b, out)
                out += b
            t.resize(120, 40)
            t.send("hello\n")
            out += t.read_all(timeout=30)
        self.assertIn(b"40 120", out)
        self.assertIn(b"/dev/pts/", out)
        self.assertIn(b"got:hello", out)
        self.assertEqual(t.exit.exit_code, 0)
        with self.assertRaises(airlock.CommandNotFound):
            with sb.pty(["no-such-command"]) as t:
                t.read_all(timeout=30)
        with self.assertRaises(airlock.NotFound):
            self.c.pty("sb-0000000000000000", ["sh"])


class FilesTest(Live):
    def test_files(self):
        sb = self.sandbox()
        f = sb.files
        f.write("d/a.txt", "héllo")
        f.write("d/b.bin", b"\x00\xff", mode=0o600)
        self.assertEqual(f.read_text("d/a.txt"), "héllo")
        self.assertEqual(f.read("/workspace/d/b.bin"), b"\x00\xff")
        self.assertEqual(f.stat("d/b.bin").mode & 0o777, 0o600)
        self.assertEqual(sorted(e.name for e in f.list("d")), ["a.txt", "b.bin"])
        f.mkdir("e/f/g")
        self.assertTrue(f.stat("e/f/g").dir)
        f.rename("d/a.txt", "e/a.txt")
        self.assertFalse(f.exists("d/a.txt"))
        self.assertTrue(f.exists("e/a.txt"))
        with self.assertRaises(airlock.AirlockError):
            f.remove("e")  # not empty
        f.remove("e", recursive=True)
        self.assertFalse(f.exists("e"))
        with self.assertRaises(airlock.NotFound):
            f.read("nope")
        with self.assertRaises(airlock.TooLarge):
            f.read("d/b.bin", max_size=1)

    def test_40mib_round_trip(self):
        sb = self.sandbox()
        data = os.urandom(40 << 20)
        want = hashlib.sha256(data).hexdigest()
        src = os.path.join(self.tmp, "big")
        with open(src, "wb") as fh:
            fh.write(data)
        with open(src, "rb") as fh:
            sb.files.write("big", fh)
        self.assertEqual(sb.exec("sha256sum big").stdout.split()[0].decode(), want)
        self.assertEqual(hashlib.sha256(sb.files.read("big")).hexdigest(), want)
        got = os.path.join(self.tmp, "big.copy")
        sb.files.download("big", got)
        with open(got, "rb") as fh:
            self.assertEqual(hashlib.sha256(fh.read()).hexdigest(), want)
        with self.assertRaises(airlock.TooLarge):
            sb.files.download("big", os.path.join(self.tmp, "capped"), max_size=1 << 20)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "capped")))

    def test_trees(self):
        sb = self.sandbox()
        src = os.path.join(self.tmp, "proj")
        os.makedirs(os.path.join(src, "pkg"))
        with open(os.path.join(src, "pkg", "m.py"), "w") as fh:
            fh.write("x = 1\n")
        os.symlink("pkg/m.py", os.path.join(src, "link"))
        sb.files.upload(src, "up")
        self.assertEqual(sb.exec("cat up/proj/link; readlink up/proj/link").stdout, b"x = 1\npkg/m.py\n")
        sb.exec("cd up/proj && ln -s /etc/passwd out && ln -s ../../../etc escape && printf z > pkg/z")
        dst = os.path.join(self.tmp, "back")
        x = sb.files.download("up/proj", dst)
        self.assertEqual(sorted((os.path.basename(s.name), s.target) for s in x.skipped_links),
                         [("escape", "../../../etc"), ("out", "/etc/passwd")])
        self.assertEqual(os.readlink(os.path.join(dst, "link")), "pkg/m.py")
        self.assertFalse(os.path.lexists(os.path.join(dst, "out")))
        with open(os.path.join(dst, "pkg", "z")) as fh:
            self.assertEqual(fh.read(), "z")
        # follow_links brings copies of what they point to.
        x = sb.files.download("up/proj", os.path.join(self.tmp, "followed"), follow_links=True)
        self.assertNotIn("out", [os.path.basename(s.name) for s in x.skipped_links])
        with open(os.path.join(self.tmp, "followed", "out"), "rb") as fh:
            self.assertIn(b"root:", fh.read())
        self.assertFalse(os.path.islink(os.path.join(self.tmp, "followed", "out")))
        # The destination is never a link written through.
        victim = os.path.join(self.tmp, "victim")
        os.mkdir(victim)
        os.symlink(victim, os.path.join(self.tmp, "ln"))
        with self.assertRaises(airlock.AirlockError):
            sb.files.download("up/proj", os.path.join(self.tmp, "ln"))
        self.assertEqual(os.listdir(victim), [])
        with self.assertRaises(airlock.NotFound):
            sb.files.download("nope", os.path.join(self.tmp, "nope"))
        # A FIFO in the tree fails the download with the daemon's word,
        # even when found after the archive started, and leaves nothing.
        sb.exec("mkdir -p fifo/a && printf x > fifo/a/1 && mkfifo fifo/z")
        with self.assertRaises(airlock.APIError) as e:
            sb.files.download("fifo", os.path.join(self.tmp, "fifo"))
        self.assertIn("fifo", e.exception.message.lower())
        self.assertFalse(any(n.startswith(".airlock") for n in os.listdir(self.tmp)))


class _Web(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        b = b"hello " + self.headers["Host"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)


class NetworkTest(Live):
    def test_audit_and_policy(self):
        web = ThreadingHTTPServer(("127.0.0.1", 0), _Web)
        threading.Thread(target=web.serve_forever, daemon=True).start()
        port = web.server_address[1]
        try:
            sb = self.sandbox(policy="network:\n  mode: allowlist\n  allow: [api.test, 127.0.0.1]\n")
            def curl(host):
                return "curl -s -m 20 -o /dev/null -w '%{http_code}' http://" + host + ":" + str(port) + "/"
            self.assertEqual(sb.exec(curl("api.test")).stdout, b"200")
            self.assertEqual(sb.exec(curl("other.test")).stdout, b"403")
            page = sb.network.events()
            self.assertEqual({(e.host, e.allowed) for e in page.events}, {("api.test", True), ("other.test", False)})
            self.assertEqual([e.host for e in sb.network.events(allowed=False).events], ["other.test"])
            self.assertEqual([e.host for e in sb.network.events(problems=True).events], ["other.test"])
            self.assertEqual(len(sb.network.events(limit=1).events), 1)
            pol = sb.network.policy()
            self.assertEqual((pol.mode, pol.allow), ("allowlist", ["api.test", "127.0.0.1"]))
            self.assertEqual(sb.network.set_policy(mode="allowlist", allow=["api.test", "other.test", "127.0.0.1"]).allow,
                             ["api.test", "other.test", "127.0.0.1"])
            self.assertEqual(sb.exec(curl("other.test")).stdout, b"200")
            with self.assertRaises(airlock.InvalidArgument):
                sb.network.set_policy(mode="allowlist", allow=["bad host name!"])
            self.assertEqual(sb.network.policy().allow, ["api.test", "other.test", "127.0.0.1"])
            # follow streams the audit and ends when the sandbox does.
            it = sb.network.follow()
            seen = [next(it) for _ in range(3)]
            self.assertEqual(len({e.cursor for e in seen}), 3)
            sse = sb.network.follow(sse=True)
            self.assertEqual([next(sse).cursor for _ in range(3)], [e.cursor for e in seen])
            sse.close()
            ended = threading.Event()
            threading.Thread(target=lambda: (list(it), ended.set()), daemon=True).start()
            sb.delete()
            self.assertTrue(ended.wait(60), "the network stream did not end with the sandbox")
            plain = self.sandbox()
            with self.assertRaises(airlock.FailedPrecondition):
                plain.network.set_policy(mode="allowlist", allow=["api.test"])
        finally:
            web.shutdown()
            web.server_close()


class RecordTest(Live):
    def test_record_events(self):
        if os.geteuid() != 0:
            # The denial: a daemon that is not root cannot keep the record.
            with self.assertRaises(airlock.Unimplemented):
                self.sandbox(record=True)
            return
        sb = self.sandbox(record=True)
        self.assertTrue(sb.info.record)
        it = self.c.follow_events(sb.id, type="exec")
        self.assertEqual(sb.exec(["/bin/true", "py-record"]).exit_code, 0)
        ev = next(it)
        self.assertEqual((ev.type, ev.argv, ev.result), ("exec", ["/bin/true", "py-record"], "ok"))
        it.close()
        page = self.c.record_events(sb.id, type=["start", "exec"])
        self.assertEqual([e.type for e in page.events], ["start", "exec"])
        self.assertEqual(page.events[1].cursor, ev.cursor)
        # The control: a sandbox without record has no events.
        with self.assertRaises(airlock.FailedPrecondition):
            self.c.record_events(self.sandbox().id)


class TCPKeyTest(unittest.TestCase):
    def test_key(self):
        need(UNIX, TCP, KEY)
        c = airlock.Client(TCP, KEY)
        with airlock.Sandbox.create(client=c) as sb:
            self.assertEqual(sb.exec(["echo", "tcp"]).stdout, b"tcp\n")
            with sb.pty(["sh", "-c", "echo over-tcp"]) as t:  # the WebSocket carries the key too
                self.assertIn(b"over-tcp", t.read_all(timeout=30))
        with self.assertRaises(airlock.Unauthenticated):
            airlock.Client(TCP, "wrong-key").pty("sb-0000000000000000", ["sh"])
        with self.assertRaises(airlock.Unauthenticated):
            airlock.Client(TCP, "wrong-key").list_sandboxes()
        old = os.environ.pop("AIRLOCK_API_KEY", None)
        try:
            with self.assertRaises(airlock.Unauthenticated) as e:
                airlock.Client(TCP).list_sandboxes()
            self.assertTrue(e.exception.message)
        finally:
            if old is not None:
                os.environ["AIRLOCK_API_KEY"] = old
        # Keys are managed over the unix socket only.
        with self.assertRaises(airlock.PermissionDenied):
            c.list_keys()
        u = airlock.Client(UNIX)
        k = u.create_key("py-test")
        self.assertTrue(k.key)
        self.assertIn(k.id, [x.id for x in u.list_keys().keys])
        self.assertEqual(airlock.Client(TCP, k.key).list_sandboxes().sandboxes is not None, True)
        u.revoke_key(k.id)
        with self.assertRaises(airlock.Unauthenticated):
            airlock.Client(TCP, k.key).list_sandboxes()
        with self.assertRaises(airlock.NotFound):
            u.revoke_key("no-such-key")

    def test_env_names(self):
        need(TCP, KEY)
        old = dict(os.environ)
        try:
            os.environ["AIRLOCK_HOST"], os.environ["AIRLOCK_API_KEY"] = TCP, KEY
            airlock.Client.from_env().ready()
            airlock.Client().health()
        finally:
            os.environ.clear()
            os.environ.update(old)


class LimitTest(unittest.TestCase):
    def test_real_429(self):
        need(LIMITED)
        c = airlock.Client(LIMITED, max_retries=0)
        with airlock.Sandbox.create(client=c):
            t0 = time.monotonic()
            with self.assertRaises(airlock.ResourceExhausted) as e:
                c.create_sandbox()
            self.assertEqual(e.exception.status, 429)
            self.assertGreater(e.exception.retry_after, 0)
            self.assertIn("live of 1", e.exception.message)
            self.assertLess(time.monotonic() - t0, 60)
            # With retries, the call waits the Retry-After and gets the slot
            # once the first sandbox is gone.
            r = airlock.Client(LIMITED, max_retries=5, max_retry_wait=10)
            first = c.all_sandboxes()[0]
            threading.Timer(0.2, lambda: c.delete_sandbox(first.id)).start()
            sb = r.create_sandbox()
            r.delete_sandbox(sb.id)
        self.assertEqual(c.all_sandboxes(), [])


class AsyncTest(unittest.TestCase):
    def test_asyncio(self):
        need(UNIX)

        async def main():
            c = aio.Client(UNIX)
            async with aio.Sandbox.create(client=c, labels={"async": "1"}) as sb:
                self.assertEqual((await sb.exec("echo async")).stdout, b"async\n")
                await sb.files.write("f.txt", "text")
                self.assertEqual(await sb.files.read_text("f.txt"), "text")
                self.assertEqual([e.name for e in await sb.files.list(".")], ["f.txt"])
                # Two calls at once.
                a, b = await asyncio.gather(sb.exec("echo a"), sb.exec("echo b"))
                self.assertEqual((a.stdout, b.stdout), (b"a\n", b"b\n"))
                p = await sb.spawn("echo x; echo y >&2")
                kinds = [ev.kind async for ev in p.output()]
                self.assertEqual(sorted(kinds), ["exit", "stderr", "stdout"])
                self.assertEqual((await p.wait(30)).exit_code, 0)
                self.assertIsInstance(p.id, str)
                got = await aio.Sandbox.get(sb.id, client=c)
                self.assertEqual(got.id, sb.id)
                self.assertIn(sb.id, [s.id for s in await aio.Sandbox.list(label={"async": "1"}, client=c)])
                with self.assertRaises(airlock.CommandNotFound):
                    await sb.exec(["no-such-command"])
                t = await sb.pty(["sh", "-c", "read x; echo pty:$x"])
                await t.send("in\n")
                self.assertIn(b"pty:in", await t.read_all(30))
                self.assertEqual(t.exit.exit_code, 0)
                await t.close()
                sid = sb.id
            with self.assertRaises(airlock.NotFound):
                await c.get_sandbox(sid)
            # More open streams than the loop's default executor has threads
            # (min(32, CPUs + 4)): other calls still run (they waited for
            # good with 6 streams on 2 CPUs).
            async with aio.Sandbox.create(client=c) as sb3:
                n = (os.cpu_count() or 1) + 8
                cats = [await sb3.spawn("cat") for _ in range(n)]

                async def follow(p):
                    return [d async for _, d in p.stream()]

                tasks = [asyncio.create_task(follow(p)) for p in cats]
                await asyncio.sleep(0.5)
                await asyncio.wait_for(asyncio.gather(*[p.write(b"x\n", close=True) for p in cats]), 30)
                self.assertEqual(await asyncio.wait_for(asyncio.gather(*tasks), 30), [[b"x\n"]] * n)
            sb2 = await aio.Sandbox.create(client=c)
            await sb2.delete()
            await c.__aexit__(None, None, None)

        asyncio.run(asyncio.wait_for(main(), 120))


if __name__ == "__main__":
    unittest.main()
