package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/internal/cache"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// recordSandbox is what `airlock run --record` needs of a sandbox: the
// native runtime's exec listener and init pid.
type recordSandbox interface {
	ExecListener() *os.File
	InitPid() int
}

// openRecord checks everything --record needs before anything is made,
// and opens the record: the file (outside anything the sandbox sees) and
// the proc connector subscription. Any failure is the layer "record".
func openRecord(path string, p *policy.Policy, insecure runtime.Insecure, caches []cache.Mount, egressBase string) (*record.Recorder, *os.File, error) {
	switch {
	case os.Geteuid() != 0:
		return nil, nil, errors.New("--record needs root: the proc connector that reports exec outcomes and exits needs CAP_NET_ADMIN on the host")
	case p.Runtime == policy.RuntimeGVisor:
		return nil, nil, errors.New("--record is not supported by the gvisor runtime (execs happen in gVisor's own kernel, out of the host's seccomp and proc connector); use the native runtime")
	case insecure.NoCgroups:
		return nil, nil, errors.New("--record samples resource use from the sandbox's cgroup: it cannot go with --insecure-no-cgroups")
	}
	abs, err := recordPath(path)
	if err != nil {
		return nil, nil, err
	}
	if err := recordOutsideView(abs, p, caches, egressBase); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(abs, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND|syscallNoFollow, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("record file: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("record file %s: not a regular file", errdefs.Quote(abs))
	}
	rec, err := record.Open(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return rec, f, nil
}

// recordPath makes path absolute with its directory's symlinks resolved
// (the file itself must not be a link).
func recordPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("record file %s: %w", errdefs.Quote(path), err)
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// recordOutsideView refuses a record file anywhere the sandbox can see:
// the workspace, a bind or read-only/writable path, a cache, the egress
// trust files, the image, or the host system directories its root is
// made of.
func recordOutsideView(abs string, p *policy.Policy, caches []cache.Mount, egressBase string) error {
	type seen struct{ what, dir string }
	var views []seen
	add := func(what, dir string) {
		if dir == "" {
			return
		}
		views = append(views, seen{what, dir})
		if r, err := filepath.EvalSymlinks(dir); err == nil && r != dir {
			views = append(views, seen{what, r})
		}
	}
	add("the workspace", p.Workspace)
	add("the image", p.Image)
	for _, d := range p.Filesystem.ReadOnly {
		add("a read-only path", d)
	}
	for _, d := range p.Filesystem.Writable {
		add("a writable path", d)
	}
	for _, b := range p.Filesystem.Binds {
		add("a bind", b.Source)
	}
	for _, c := range caches {
		add("the cache "+c.Name, c.Source)
	}
	add("the egress files", egressBase)
	if p.Image == "" {
		for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
			add("the host system directories", d)
		}
	}
	for _, v := range views {
		if abs == v.dir || strings.HasPrefix(abs, strings.TrimSuffix(v.dir, "/")+"/") {
			return fmt.Errorf("record file %s is inside %s (%s), which the sandbox can see: put it elsewhere", errdefs.Quote(abs), v.what, errdefs.Quote(v.dir))
		}
	}
	return nil
}
