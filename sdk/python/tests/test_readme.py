"""The README's Python snippets (the ```python blocks of its "Python SDK"
section), each run as a script against the daemon at AIRLOCK_TEST_UNIX."""

import os
import re
import subprocess
import sys
import unittest

README = os.environ.get("AIRLOCK_README") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "README.md")


def snippets():
    with open(README) as f:
        text = f.read()
    m = re.search(r"^## Python SDK\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        return []
    return re.findall(r"^```python\n(.*?)^```", m.group(1), re.S | re.M)


class ReadmeTest(unittest.TestCase):
    def test_snippets(self):
        blocks = snippets()
        self.assertGreaterEqual(len(blocks), 3, "the README's Python SDK section lost its snippets")
        host = os.environ.get("AIRLOCK_TEST_UNIX", "")
        if not host:
            raise unittest.SkipTest("no daemon: run through `go test -run TestPythonSDK ./tests/sdkpy/`")
        env = dict(os.environ, AIRLOCK_HOST=host)
        env.pop("AIRLOCK_API_KEY", None)
        for i, code in enumerate(blocks):
            with self.subTest(snippet=i):
                p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
                self.assertEqual(p.returncode, 0, f"snippet {i}:\n{code}\nstdout: {p.stdout!r}\nstderr: {p.stderr!r}")
                self.assertTrue(p.stdout, f"snippet {i} printed nothing")
        out = subprocess.run([sys.executable, "-c", blocks[0]], env=env, capture_output=True, timeout=120).stdout
        self.assertIn(b"0 b'42\\n'", out)


if __name__ == "__main__":
    unittest.main()
