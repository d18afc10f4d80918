"""Unit tests against real local servers and crafted archives: addresses,
errors, 429 retries, timeouts, stream parsing and resumption, tar rules."""

import io
import json
import os
import socket
import tarfile
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import airlock
from airlock import _http, _tar


class Server:
    """A real HTTP server on loopback; handler(req) answers each request."""

    def __init__(self, handler):
        outer = self
        self.requests = []

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_ANY(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if self.headers.get("Transfer-Encoding") == "chunked":
                    body = b""
                    while True:
                        size = int(self.rfile.readline().strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        body += self.rfile.read(size)
                        self.rfile.readline()
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                handler(self, len(outer.requests))

            do_GET = do_POST = do_PUT = do_DELETE = do_ANY

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.t = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.t.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def answer(h, status, body=b"", headers=None, ctype="application/json"):
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def err(code, msg):
    return json.dumps({"error": {"code": code, "message": msg}}).encode()


SANDBOX = json.dumps({"id": "sb-0123456789abcdef", "state": "running", "created_at": "t",
                      "last_activity_at": "t", "resources": {}}).encode()


class AddressTest(unittest.TestCase):
    def test_forms(self):
        s = _http.parse_host("unix:///run/x.sock")
        self.assertEqual((s.scheme, s.socket_path), ("unix", "/run/x.sock"))
        s = _http.parse_host("https://example.test:8443/pre/")
        self.assertEqual((s.scheme, s.host, s.port, s.prefix), ("https", "example.test", 8443, "/pre"))
        self.assertEqual(_http.parse_host("http://h").port, 80)

    def test_bad_forms(self):
        for bad, why in [("/run/x.sock", "no scheme"), ("ftp://h", "unknown scheme"),
                         ("unix://rel/x.sock", "absolute"), ("unix:///", "no socket path"),
                         ("http://u:p@h:1", "no user"), ("http://h:99999", "bad port"), ("http://:80", "no host")]:
            with self.assertRaises(airlock.AirlockError) as c:
                airlock.Client(bad)
            self.assertIn(why, str(c.exception), bad)

    def test_env(self):
        old = dict(os.environ)
        try:
            os.environ["AIRLOCK_HOST"] = "http://127.0.0.1:1"
            os.environ["AIRLOCK_API_KEY"] = "k1"
            c = airlock.Client()
            self.assertEqual(c.host, "http://127.0.0.1:1")
            self.assertEqual(c._t.api_key, "k1")
        finally:
            os.environ.clear()
            os.environ.update(old)


class ErrorsTest(unittest.TestCase):
    def setUp(self):
        self.routes = {}
        self.srv = Server(lambda h, n: self.routes[h.path.split("?")[0]](h))
        self.c = airlock.Client(self.srv.url, "key", timeout=10, max_retries=3, max_retry_wait=0.5)

    def tearDown(self):
        self.c.close()
        self.srv.close()

    def test_each_code_is_its_class(self):
        for code, cls in airlock.ERROR_CLASSES.items():
            self.routes["/v1/sandboxes/sb-0123456789abcdef"] = lambda h, code=code: answer(h, 409, err(code, "why " + code))
            with self.assertRaises(cls) as c:
                self.c.get_sandbox("sb-0123456789abcdef")
            self.assertEqual((c.exception.code, c.exception.message, c.exception.status), (code, "why " + code, 409))
        self.assertTrue(issubclass(airlock.CommandNotFound, airlock.InvalidArgument))

    def test_non_api_error_body(self):
        self.routes["/v1/sandboxes/sb-0123456789abcdef"] = lambda h: answer(h, 404, b"<html>nope", ctype="text/html")
        with self.assertRaises(airlock.NotFound) as c:
            self.c.get_sandbox("sb-0123456789abcdef")
        self.assertEqual(c.exception.message, "Not Found")

    def test_key_sent(self):
        self.routes["/v1/sandboxes/sb-0123456789abcdef"] = lambda h: answer(h, 200, SANDBOX)
        self.assertEqual(self.c.get_sandbox("sb-0123456789abcdef").state, "running")
        self.assertEqual(self.srv.requests[-1][2]["Authorization"], "Bearer key")

    def test_429_retried_then_succeeds(self):
        def h(h):
            if len(self.srv.requests) <= 2:
                answer(h, 429, err("resource_exhausted", "full"), {"Retry-After": "0"})
            else:
                answer(h, 201, SANDBOX)
        self.routes["/v1/sandboxes"] = h
        sb = self.c.create_sandbox(labels={"a": "b"})
        self.assertEqual(sb.id, "sb-0123456789abcdef")
        self.assertEqual(len(self.srv.requests), 3)
        self.assertEqual([json.loads(r[3]) for r in self.srv.requests], [{"labels": {"a": "b"}}] * 3)

    def test_429_bounded(self):
        self.routes["/v1/sandboxes"] = lambda h: answer(h, 429, err("resource_exhausted", "full"), {"Retry-After": "1"})
        t0 = time.monotonic()
        with self.assertRaises(airlock.ResourceExhausted) as c:
            self.c.create_sandbox()
        self.assertEqual(len(self.srv.requests), 4)  # 1 + max_retries
        self.assertEqual(c.exception.retry_after, 1.0)
        self.assertGreaterEqual(time.monotonic() - t0, 1.5)  # 3 waits capped at max_retry_wait 0.5

    def test_429_not_retried_when_body_cannot_be_resent(self):
        self.routes["/v1/sandboxes/sb-0123456789abcdef/files"] = lambda h: answer(
            h, 429, err("resource_exhausted", "full"), {"Retry-After": "0"})
        r, w = os.pipe()
        os.write(w, b"data")
        os.close(w)
        with os.fdopen(r, "rb") as f, self.assertRaises(airlock.ResourceExhausted):
            self.c.write_file("sb-0123456789abcdef", "x", f)
        self.assertEqual(len(self.srv.requests), 1)
        # A seekable file is resent whole.
        self.srv.requests.clear()
        with tempfile.TemporaryFile() as f, self.assertRaises(airlock.ResourceExhausted):
            f.write(b"abc")
            f.seek(0)
            self.c.write_file("sb-0123456789abcdef", "x", f)
        self.assertEqual([r[3] for r in self.srv.requests], [b"abc"] * 4)

    def test_429_http_date(self):
        self.assertAlmostEqual(_http._retry_after("Thu, 01 Jan 1970 00:00:00 GMT"), 0.0)
        self.assertEqual(_http._retry_after("7"), 7.0)
        self.assertIsNone(_http._retry_after("soon"))


class TransportTest(unittest.TestCase):
    def test_unreachable_socket(self):
        c = airlock.Client("unix:///nonexistent/airlock.sock", timeout=5)
        with self.assertRaises(airlock.ConnectionFailed) as e:
            c.health()
        self.assertIn("/nonexistent/airlock.sock", str(e.exception))

    def test_unreachable_port(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        with self.assertRaises(airlock.ConnectionFailed):
            airlock.Client(f"http://127.0.0.1:{port}", timeout=5).list_sandboxes()

    def test_timeout_server_never_answers(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        conns = []
        stop = threading.Event()

        def accept():
            while not stop.is_set():
                try:
                    conns.append(s.accept()[0])  # read nothing, answer nothing
                except OSError:
                    return
        threading.Thread(target=accept, daemon=True).start()
        try:
            c = airlock.Client("http://127.0.0.1:%d" % s.getsockname()[1], timeout=0.5)
            t0 = time.monotonic()
            with self.assertRaises(airlock.Timeout):
                c.get_sandbox("sb-0123456789abcdef")
            with self.assertRaises(TimeoutError):  # also the builtin
                c.exec("sb-0123456789abcdef", ["true"], timeout_seconds=0.5)
            self.assertLess(time.monotonic() - t0, 30)
        finally:
            stop.set()
            s.close()
            for x in conns:
                x.close()

    def test_bad_arguments_refused_before_sending(self):
        # Timeouts that are not a number of seconds, and bodies of the
        # wrong type, are the SDK's errors, not Python's (OverflowError,
        # AttributeError), and nothing is sent; the controls go through.
        def h(h, n):
            body = b'{"process_id":"p1","exit_code":0,"stdout":"","stderr":"","duration_ms":1}'
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        srv = Server(h)
        try:
            c = airlock.Client(srv.url, timeout=10)
            for bad in (1e12, -1, float("nan"), "5", True):
                with self.assertRaises(airlock.InvalidArgument, msg=repr(bad)):
                    c.exec("sb-0123456789abcdef", ["true"], timeout_seconds=bad)
            for bad in (-1, 1e12, "60"):
                with self.assertRaises(airlock.InvalidArgument, msg=repr(bad)):
                    airlock.Client(srv.url, timeout=bad)
            with self.assertRaises(TypeError):
                c.write_file("sb-0123456789abcdef", "x", 5)
            with self.assertRaises(TypeError):
                c.exec("sb-0123456789abcdef", ["cat"], stdin=5)
            self.assertEqual(srv.requests, [])
            self.assertEqual(c.exec("sb-0123456789abcdef", ["true"], timeout_seconds=30, stdin="x").exit_code, 0)
            self.assertEqual(len(srv.requests), 1)
        finally:
            srv.close()

    def test_empty_ids_refused(self):
        c = airlock.Client("unix:///nonexistent/airlock.sock")
        with self.assertRaises(airlock.InvalidArgument):
            c.get_sandbox("")
        with self.assertRaises(airlock.InvalidArgument):
            c.exec("sb-1", [])


class TLSTest(unittest.TestCase):
    """https:// through a real TLS server (its certificate made by the Go test)."""

    def test_https(self):
        import ssl
        cert, key = os.environ.get("AIRLOCK_TEST_TLS_CERT"), os.environ.get("AIRLOCK_TEST_TLS_KEY")
        if not cert or not key:
            raise unittest.SkipTest("no test certificate: run through `go test -run TestPythonSDK ./tests/sdkpy/`")
        srv = Server(lambda h, n: answer(h, 200, SANDBOX))
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(cert, key)
        srv.httpd.socket = sctx.wrap_socket(srv.httpd.socket, server_side=True)
        url = srv.url.replace("http://", "https://") + "/prefix"
        try:
            trusted = ssl.create_default_context(cafile=cert)
            c = airlock.Client(url, "k", ssl_context=trusted, timeout=10)
            self.assertEqual(c.get_sandbox("sb-0123456789abcdef").id, "sb-0123456789abcdef")
            self.assertEqual(srv.requests[-1][1], "/prefix/v1/sandboxes/sb-0123456789abcdef")
            self.assertEqual(srv.requests[-1][2]["Authorization"], "Bearer k")
            # A certificate nobody vouched for is refused.
            with self.assertRaises(airlock.ConnectionFailed) as e:
                airlock.Client(url, "k", timeout=10).get_sandbox("sb-0123456789abcdef")
            self.assertIn("CERTIFICATE_VERIFY_FAILED", str(e.exception))
        finally:
            srv.close()


class StreamTest(unittest.TestCase):
    def test_ndjson_resumes_from_cursor(self):
        cursors = []

        def h(h, n):
            q = h.path.partition("?")[2]
            cursors.append(q)
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Connection", "close")
            h.end_headers()
            if n == 1:
                h.wfile.write(b'{"kind":"stdout","offset":0,"data":"/w==","cursor":"c1"}\n{"kind":"stdo')
            else:
                h.wfile.write(b'{"kind":"stderr","offset":0,"data":"YQ==","cursor":"c2"}\n'
                              b'{"kind":"exit","offset":0,"exit_code":3,"cursor":"c3"}\n')
            h.wfile.flush()
            h.close_connection = True
        srv = Server(h)
        try:
            c = airlock.Client(srv.url, timeout=10)
            evs = list(c.process_output("sb-0123456789abcdef", "p1"))
            self.assertEqual([(e.kind, e.data) for e in evs[:2]], [("stdout", b"\xff"), ("stderr", b"a")])
            self.assertEqual((evs[2].kind, evs[2].exit_code), ("exit", 3))
            self.assertEqual(cursors, ["", "cursor=c1"])
        finally:
            srv.close()

    def test_sse_and_error_event(self):
        def h(h, n):
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(b': comment\r\nid: c1\r\ndata: {"kind":"stdout","offset":0,\r\ndata: "data":"aGk=","cursor":"c1"}\r\n\r\n'
                          b'event: error\ndata: {"error":{"code":"not_found","message":"sandbox gone"}}\n\n')
            h.close_connection = True
        srv = Server(h)
        try:
            c = airlock.Client(srv.url, timeout=10)
            it = c.process_output("sb-0123456789abcdef", "p1", sse=True)
            self.assertEqual(next(it).data, b"hi")
            with self.assertRaises(airlock.NotFound) as e:
                next(it)
            self.assertEqual(e.exception.message, "sandbox gone")
            self.assertEqual(srv.requests[0][2]["Accept"], "text/event-stream")
        finally:
            srv.close()

    def test_resumes_across_a_daemon_restart(self):
        # The daemon going down says so in the stream (unavailable), and
        # the next one answers 503 while it starts: both are resumed from
        # the cursor. A not_found (the control) ends it at once.
        cursors = []

        def h(h, n):
            cursors.append(h.path.partition("?")[2])
            if n == 2:
                body = b'{"error":{"code":"unavailable","message":"starting"}}'
                h.send_response(503)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)
                return
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Connection", "close")
            h.end_headers()
            if n == 1:
                h.wfile.write(b'{"kind":"stdout","offset":0,"data":"YQ==","cursor":"c1"}\n'
                              b'{"error":{"code":"unavailable","message":"the daemon is shutting down"}}\n')
            else:
                h.wfile.write(b'{"kind":"stdout","offset":1,"data":"Yg==","cursor":"c2"}\n'
                              b'{"kind":"exit","offset":0,"exit_code":0,"cursor":"c3"}\n')
            h.close_connection = True
        srv = Server(h)
        try:
            c = airlock.Client(srv.url, timeout=10)
            evs = list(c.process_output("sb-0123456789abcdef", "p1"))
            self.assertEqual([(e.kind, e.data) for e in evs], [("stdout", b"a"), ("stdout", b"b"), ("exit", None)])
            self.assertEqual(cursors, ["", "cursor=c1", "cursor=c1"])
        finally:
            srv.close()

    def test_gives_up_bounded(self):
        from airlock import _stream
        old = _stream.FOLLOW_ATTEMPTS
        _stream.FOLLOW_ATTEMPTS = 3

        def h(h, n):
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(b'{"kind":"std')  # always cut
            h.close_connection = True
        srv = Server(h)
        try:
            c = airlock.Client(srv.url, timeout=10)
            with self.assertRaises(airlock.ConnectionFailed):
                list(c.process_output("sb-0123456789abcdef", "p1"))
            self.assertEqual(len(srv.requests), 4)
        finally:
            _stream.FOLLOW_ATTEMPTS = old
            srv.close()


class TrailerTest(unittest.TestCase):
    """An archive that fails after it started: the daemon cuts it short of
    a tar block and names the error in the X-Airlock-Error trailer."""

    def serve(self, trailer):
        whole = tar_of([("t", "dir", None), ("t/a", "file", b"a" * 3000), ("t/b", "file", b"b" * 3000)]).getvalue()
        part = whole[:512 * 5 + 100]  # cut inside t/b

        def h(h, n):
            h.send_response(200)
            h.send_header("Content-Type", "application/x-tar")
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("Trailer", "X-Airlock-Error")
            h.end_headers()
            h.wfile.write(b"%x\r\n%s\r\n0\r\n" % (len(part), part))
            if trailer:
                h.wfile.write(b"X-Airlock-Error: " + trailer + b"\r\n")
            h.wfile.write(b"\r\n")
        return Server(h)

    def test_trailer_error(self):
        srv = self.serve(b'{"code":"too_large","message":"t/b grew past max_size"}')
        d = tempfile.mkdtemp()
        try:
            c = airlock.Client(srv.url, timeout=10)
            with self.assertRaises(airlock.TooLarge) as e:
                c.download_to("sb-0123456789abcdef", "t", os.path.join(d, "t"))
            self.assertEqual(e.exception.message, "t/b grew past max_size")
            self.assertEqual(os.listdir(d), [])
        finally:
            srv.close()
            os.rmdir(d)

    def test_cut_without_trailer(self):
        srv = self.serve(None)
        d = tempfile.mkdtemp()
        try:
            c = airlock.Client(srv.url, timeout=10)
            with self.assertRaises(airlock.StreamError):
                c.download_to("sb-0123456789abcdef", "t", os.path.join(d, "t"))
            self.assertEqual(os.listdir(d), [])
        finally:
            srv.close()
            os.rmdir(d)


def tar_of(entries, fmt=tarfile.PAX_FORMAT):
    """A tar stream of (name, kind, data/target) entries."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for name, kind, v in entries:
            ti = tarfile.TarInfo(name)
            ti.mode = 0o755 if kind == "dir" else 0o644
            if kind == "file":
                ti.size = len(v)
                t.addfile(ti, io.BytesIO(v))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE, "fifo": tarfile.FIFOTYPE,
                       "hard": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE}[kind]
            if kind in ("link", "hard"):
                ti.linkname = v
            t.addfile(ti)
    b.seek(0)
    return b


class TarTest(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()
        self.dst = os.path.join(self.d, "dst")
        os.mkdir(self.dst)

    def tearDown(self):
        import shutil
        shutil.rmtree(self.d)

    def left(self):
        return sorted(os.listdir(self.dst))

    def test_tree_with_links(self):
        x = airlock.untar_to(self.dst, tar_of([
            ("t", "dir", None), ("t/a", "dir", None), ("t/a/f", "file", b"hello"),
            ("t/in", "link", "a/f"), ("t/up", "link", "../../etc/passwd"), ("t/abs", "link", "/etc/passwd"),
            ("t/a/chain", "link", "../in"), ("t/top", "link", ".."), ("top", "link", "t/a/f")]))
        self.assertEqual(os.readlink(os.path.join(self.dst, "t/in")), "a/f")
        self.assertEqual(os.readlink(os.path.join(self.dst, "t/a/chain")), "../in")
        with open(os.path.join(self.dst, "t/a/chain"), "rb") as f:
            self.assertEqual(f.read(), b"hello")
        skipped = sorted((os.path.relpath(s.name, self.dst), s.target) for s in x.skipped_links)
        self.assertEqual(skipped, [("t/abs", "/etc/passwd"), ("t/top", ".."), ("t/up", "../../etc/passwd"),
                                   ("top", "t/a/f")])
        self.assertFalse(os.path.lexists(os.path.join(self.dst, "t/up")))

    def test_refusals_leave_nothing(self):
        cases = [
            ([("/etc/x", "file", b"x")], "absolute"),
            ([("a/../../x", "file", b"x")], '".."'),
            ([("t", "dir", None), ("t/l", "link", "/tmp"), ("t/l/x", "file", b"x")], "symbolic link"),
            ([("t", "dir", None), ("t/p", "fifo", None)], "unsupported entry type"),
            ([("t", "dir", None), ("t/c", "chr", None)], "unsupported entry type"),
            ([("t", "dir", None), ("t/h", "hard", "t/x")], "unsupported entry type"),
        ]
        for entries, why in cases:
            with self.assertRaises(airlock.AirlockError) as c:
                airlock.untar_to(self.dst, tar_of(entries))
            self.assertIn(why, str(c.exception), entries)
            self.assertEqual(self.left(), [], entries)

    def test_size_cap(self):
        with self.assertRaises(airlock.TooLarge):
            airlock.untar_to(self.dst, tar_of([("big", "file", b"x" * 5000)]), max_size=4096)
        self.assertEqual(self.left(), [])
        airlock.untar_to(self.dst, tar_of([("small", "file", b"x" * 100)]), max_size=20000)
        self.assertEqual(self.left(), ["small"])

    def test_never_writes_through_destination_link(self):
        outside = os.path.join(self.d, "outside")
        os.mkdir(outside)
        os.symlink(outside, os.path.join(self.dst, "t"))
        with self.assertRaises(airlock.AirlockError) as c:
            airlock.untar_to(self.dst, tar_of([("t", "dir", None), ("t/x", "file", b"x")]))
        self.assertIn("symbolic link", str(c.exception))
        self.assertEqual(os.listdir(outside), [])
        # A later archive cannot combine with an earlier link to escape.
        os.remove(os.path.join(self.dst, "t"))
        airlock.untar_to(self.dst, tar_of([("t", "dir", None), ("t/l", "link", "sub"), ("t/sub", "dir", None)]))
        x = airlock.untar_to(self.dst, tar_of([("t", "dir", None), ("t/e", "link", "l/../../../outside")]))
        self.assertEqual(len(x.skipped_links), 1)

    def test_download_destination_rules(self):
        link = os.path.join(self.d, "ln")
        os.symlink(self.dst, link)
        with self.assertRaises(airlock.AirlockError) as c:
            _tar.download_to(tar_of([("f", "file", b"x")]), "f", link, 1 << 20)
        self.assertIn("symbolic link", str(c.exception))
        with self.assertRaises(airlock.AirlockError):
            _tar.download_to(tar_of([("a", "file", b"x"), ("b", "file", b"y")]), "a", os.path.join(self.d, "n"), 1 << 20)
        self.assertFalse(os.path.exists(os.path.join(self.d, "n")))
        _tar.download_to(tar_of([("a", "file", b"x")]), "a", os.path.join(self.d, "n"), 1 << 20)
        with open(os.path.join(self.d, "n"), "rb") as f:
            self.assertEqual(f.read(), b"x")
        self.assertEqual([x for x in os.listdir(self.d) if x.startswith(".airlock")], [])


if __name__ == "__main__":
    unittest.main()
