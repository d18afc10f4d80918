//go:build linux

// Package sdkts runs the TypeScript SDK's own test suite (sdk/typescript,
// node's built-in test runner) against real daemons: one on a unix socket,
// one on TCP with an API key, a one-sandbox limit and a 1 MiB upload cap.
package sdkts

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
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

func TestMain(m *testing.M) { os.Exit(testdaemon.Main(m, "sdkts")) }

// minPass is the fewest node tests that must pass.
const minPass = 30

// repoRoot is the repository's root, from this package's directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// needNode skips the test without node >= 18 and npm; it returns node's
// major version.
func needNode(t testing.TB) int {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not in PATH (the TypeScript SDK needs Node >= 18)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not in PATH (it installs the SDK's pinned dev dependencies)")
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		t.Skipf("node --version: %v", err)
	}
	m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(bytes.TrimSpace(out))
	if m == nil {
		t.Skipf("node --version said %q", out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	if major < 18 {
		t.Skipf("node %s is older than 18", bytes.TrimSpace(out))
	}
	return major
}

// preparePackage copies sdk/typescript (without node_modules and dist)
// into a temporary directory and runs `npm ci` there, which installs the
// pinned dev dependencies and builds dist/ (the prepare script).
func preparePackage(t testing.TB) string {
	t.Helper()
	src := filepath.Join(repoRoot(t), "sdk", "typescript")
	tmp := t.TempDir()
	pkg := filepath.Join(tmp, "pkg")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && (rel == "node_modules" || rel == "dist" || strings.HasPrefix(d.Name(), ".readme-")) {
			return filepath.SkipDir
		}
		dst := filepath.Join(pkg, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy the package: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(tmp, "npm-cache"), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(pkg, "dist", "index.js")); err != nil {
		t.Fatalf("npm ci did not build dist/: %v", err)
	}
	return pkg
}

// tapSummary reads the counts node's TAP reporter prints at the end.
func tapSummary(out string) map[string]int {
	counts := map[string]int{}
	re := regexp.MustCompile(`^# (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$`)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := re.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil {
			counts[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	return counts
}

func TestTypeScriptSDK(t *testing.T) {
	testdaemon.Need(t)
	major := needNode(t)
	pkg := preparePackage(t)

	unix := testdaemon.Start(t, "")
	addr := testdaemon.FreeAddr(t)
	tcp := testdaemon.Start(t, fmt.Sprintf("listen: %s\nmax_sandboxes: 1\nqueue_timeout: 200ms\nmax_upload: 1M", addr))
	key := tcp.Key(t, "sdkts")

	files, err := filepath.Glob(filepath.Join(pkg, "test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s/test: %v", pkg, err)
	}
	// TAP is the default reporter when stdout is not a terminal; newer
	// nodes take it by name, and run the files one at a time when told.
	args := []string{"--test"}
	if major >= 20 {
		args = append(args, "--test-reporter=tap", "--test-concurrency=1")
	}
	args = append(args, files...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(),
		"AIRLOCK_HOST=", "AIRLOCK_API_KEY=",
		"AIRLOCK_TEST_UNIX=unix://"+unix.Sock,
		"AIRLOCK_TEST_TCP=http://"+addr,
		"AIRLOCK_TEST_TCP_UNIX=unix://"+tcp.Sock,
		"AIRLOCK_TEST_KEY="+key,
		"AIRLOCK_OPENAPI="+filepath.Join(repoRoot(t), "api", "openapi.json"),
		"AIRLOCK_README="+filepath.Join(repoRoot(t), "README.md"),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run()
	counts := tapSummary(out.String())
	t.Logf("node --test: %v in %v: %v", runErr, time.Since(start).Round(time.Millisecond), counts)
	if runErr != nil || counts["fail"] > 0 || counts["cancelled"] > 0 {
		t.Errorf("node tests failed (%v):\n%s", runErr, testdaemon.Tail(out.String(), 400))
	}
	if counts["skipped"] > 0 || counts["todo"] > 0 {
		t.Errorf("%d node tests skipped and %d todo; every test must run here:\n%s", counts["skipped"], counts["todo"], testdaemon.Tail(out.String(), 200))
	}
	if counts["pass"] < minPass {
		t.Errorf("only %d node tests passed, want at least %d:\n%s", counts["pass"], minPass, testdaemon.Tail(out.String(), 200))
	}
}
