//go:build linux

// Package sdkpy runs the Python SDK's test suite (sdk/python/tests) against
// real daemons: one over its unix socket (with TCP and an API key too) and
// one limited to a single sandbox, for a real 429.
package sdkpy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testdaemon"
)

func TestMain(m *testing.M) { os.Exit(testdaemon.Main(m, "sdkpy")) }

// python returns the python3 to use ($AIRLOCK_TEST_PYTHON, else python3
// in PATH), or why there is none (>= 3.9).
func python() (string, string) {
	name := "python3"
	if p := os.Getenv("AIRLOCK_TEST_PYTHON"); p != "" {
		name = p
	}
	py, err := exec.LookPath(name)
	if err != nil {
		return "", name + " is not in PATH"
	}
	out, err := exec.Command(py, "-c", "import sys; print('%d %d' % sys.version_info[:2])").Output()
	if err != nil {
		return "", "python3 does not run: " + err.Error()
	}
	var major, minor int
	fmt.Sscan(string(out), &major, &minor)
	if major < 3 || (major == 3 && minor < 9) {
		return "", fmt.Sprintf("python3 is %d.%d; the SDK needs 3.9 or newer", major, minor)
	}
	return py, ""
}

func repoRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestPythonSDK installs the SDK with pip from the source tree (no
// package index), then runs its unittest suite with the daemons'
// addresses in the environment. Any skipped Python test fails it: every
// test has a daemon here.
func TestPythonSDK(t *testing.T) {
	testdaemon.Need(t)
	py, why := python()
	if why != "" {
		t.Skip(why)
	}
	root := repoRoot(t)
	sdk := filepath.Join(root, "sdk", "python")

	// The egress test's hosts resolve to the host's loopback, where the
	// Python test serves.
	addr := testdaemon.FreeAddr(t)
	d := testdaemon.Start(t, "listen: "+addr+"\negress_hosts:\n  api.test: [127.0.0.1]\n  other.test: [127.0.0.1]\n")
	key := d.Key(t, "sdkpy")
	limited := testdaemon.Start(t, "max_sandboxes: 1\nqueue_timeout: 200ms\n")

	// pip install ./sdk/python, offline, into a private directory.
	site := t.TempDir()
	build := t.TempDir()
	src := filepath.Join(build, "src")
	if out, err := exec.Command("cp", "-r", sdk, src).CombinedOutput(); err != nil {
		t.Fatalf("copy the SDK: %v\n%s", err, out)
	}
	pip := exec.Command(py, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check",
		"--target", site, src)
	pip.Env = append(os.Environ(), "PIP_NO_INPUT=1")
	if out, err := pip.CombinedOutput(); err != nil {
		if !bytes.Contains(out, []byte("No module named pip")) {
			t.Fatalf("pip install ./sdk/python: %v\n%s", err, out)
		}
		// No pip: build the wheel with the in-tree backend, as pip would,
		// and unpack it.
		t.Log("python3 has no pip: installing the wheel the build backend makes")
		inst := exec.Command(py, "-c", `import sys, zipfile, airlock_build
name = airlock_build.build_wheel(sys.argv[1])
zipfile.ZipFile(sys.argv[1] + "/" + name).extractall(sys.argv[2])`, build, site)
		inst.Dir = src
		if out, err := inst.CombinedOutput(); err != nil {
			t.Fatalf("build the wheel: %v\n%s", err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(site, "airlock", "py.typed")); err != nil {
		t.Fatalf("the installed package lacks py.typed: %v", err)
	}

	certFile, keyFile := selfSigned(t)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The tests import the installed copy, not the source tree.
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = src
	os.RemoveAll(filepath.Join(src, "airlock"))
	cmd.Env = append(os.Environ(),
		"PYTHONPATH="+site,
		"PYTHONDONTWRITEBYTECODE=1",
		"AIRLOCK_OPENAPI="+filepath.Join(root, "api", "openapi.json"),
		"AIRLOCK_README="+filepath.Join(root, "README.md"),
		"AIRLOCK_TEST_UNIX=unix://"+d.Sock,
		"AIRLOCK_TEST_TCP=http://"+addr,
		"AIRLOCK_TEST_KEY="+key,
		"AIRLOCK_TEST_LIMITED=unix://"+limited.Sock,
		"AIRLOCK_TEST_TLS_CERT="+certFile,
		"AIRLOCK_TEST_TLS_KEY="+keyFile,
		"AIRLOCK_HOST=", "AIRLOCK_API_KEY=",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	text := out.String()
	t.Logf("python3 -m unittest (%v):\n%s", time.Since(t0).Round(time.Millisecond), text)
	if err != nil {
		t.Fatalf("the Python suite failed: %v", err)
	}
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests? in`).FindStringSubmatch(text)
	if ran == nil {
		t.Fatal("no test summary in the output")
	}
	if n, _ := strconv.Atoi(ran[1]); n < 40 {
		t.Fatalf("only %d Python tests ran", n)
	}
	if m := regexp.MustCompile(`(?m)^(.*) \.\.\. skipped (.*)$`).FindAllString(text, -1); len(m) > 0 {
		t.Fatalf("Python tests were skipped, though every daemon they need runs:\n%s", strings.Join(m, "\n"))
	}
	if strings.Contains(text, "skipped=") {
		t.Fatal("the Python suite reports skipped tests")
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key (PEM), for
// the Python tests' local HTTPS server.
func selfSigned(t *testing.T) (string, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "airlock sdkpy test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
