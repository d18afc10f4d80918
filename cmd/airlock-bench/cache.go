package main

// `airlock-bench cache` (`make bench-cache`) measures what a persistent Go
// cache saves: the wall time of `airlock run -- go build` of a small
// stdlib-only module (net/http, encoding/json) in a fresh sandbox, without
// a cache (every sandbox rebuilds the standard library) and with
// `--cache go` after one warm-up build has filled the cache (the builds
// that follow are cache hits). The two are run interleaved, N of each;
// each run is a whole `airlock run` (sandbox creation and teardown
// included). The cache lives in a temporary AIRLOCK_CACHE_DIR, removed at
// the end, so the user's caches are neither used nor changed.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

const benchModMain = `package main

import (
	"encoding/json"
	"fmt"
	"net/http"
)

func main() {
	b, _ := json.Marshal(http.StatusOK)
	fmt.Println(string(b))
}
`

func runCache(args []string) int {
	fs := flag.NewFlagSet("cache", flag.ExitOnError)
	n := fs.Int("n", 5, "builds of each configuration")
	airlockPath := fs.String("airlock", "./bin/airlock", "airlock binary to measure")
	fs.Parse(args)
	if *n < 1 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	tmp, goFlags, err := goModule("cache")
	if err != nil {
		logf("airlock-bench cache: %v", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "AIRLOCK_CACHE_DIR="+filepath.Join(tmp, "caches"))
	build := func(cache bool) (float64, error) {
		argv := append([]string{"run"}, goFlags...)
		if cache {
			argv = append(argv, "--cache", "go")
		}
		argv = append(argv, "--", "go", "build", "-o", "/tmp/tiny", ".")
		cmd := exec.Command(*airlockPath, argv...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0).Seconds() * 1000
		if err != nil {
			return 0, fmt.Errorf("%v: %s", err, stderr.String())
		}
		return d, nil
	}
	logf("warm-up: one build with --cache go fills the cache")
	if _, err := build(true); err != nil {
		logf("airlock-bench cache: %v", err)
		return 1
	}
	var without, with []float64
	for i := 0; i < *n; i++ {
		for _, cache := range []bool{i%2 == 1, i%2 == 0} {
			d, err := build(cache)
			if err != nil {
				logf("airlock-bench cache: %v", err)
				return 1
			}
			if cache {
				with = append(with, d)
			} else {
				without = append(without, d)
			}
		}
		progress(i+1, *n)
	}
	a, b := summarize(without), summarize(with)
	fmt.Printf("go build of a stdlib-only module (net/http, encoding/json) in a fresh sandbox, %d runs each\n", *n)
	fmt.Printf("%-22s %12s %12s %12s\n", "", "median", "min", "max")
	fmt.Printf("%-22s %12s %12s %12s\n", "without a cache", secs(a.Median), secs(a.Min), secs(a.Max))
	fmt.Printf("%-22s %12s %12s %12s\n", "with --cache go", secs(b.Median), secs(b.Min), secs(b.Max))
	if b.Median > 0 {
		fmt.Printf("without / with (medians) = %.1fx\n", a.Median/b.Median)
	}
	return 0
}

func secs(msv float64) string { return fmt.Sprintf("%.2fs", msv/1000) }

// goModule makes a temporary directory (the caller removes it) holding a
// small Go module in ws/, and returns the directory with the `airlock run`
// flags that build the module there with the host's Go toolchain.
func goModule(bench string) (tmp string, flags []string, err error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", nil, errors.New("the go tool is not in PATH")
	}
	if r, err := filepath.EvalSymlinks(goBin); err == nil {
		goBin = r
	}
	goRoot := filepath.Dir(filepath.Dir(goBin))
	tmp, err = os.MkdirTemp("", "airlock-bench-"+bench+"-")
	if err != nil {
		return "", nil, err
	}
	ws := filepath.Join(tmp, "ws")
	err = os.Mkdir(ws, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(ws, "go.mod"), []byte("module example.com/tiny\n\ngo 1.21\n"), 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(ws, "main.go"), []byte(benchModMain), 0o644)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return "", nil, err
	}
	return tmp, []string{"--workspace", ws, "--memory", "2GiB", "--disk", "2GiB",
		"-e", "PATH=" + goRoot + "/bin:/usr/bin:/bin", "-e", "GOTOOLCHAIN=local", "-e", "GOFLAGS=-buildvcs=false", "-e", "CGO_ENABLED=0"}, nil
}
