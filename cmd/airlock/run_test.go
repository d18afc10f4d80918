package main

import (
	"math"
	"os"
	"strings"
	"testing"
)

// An empty path in --ro, --rw or --bind is refused: filepath.Abs would
// make it the current directory, bound into the sandbox. The same flags
// with a path are accepted (the control).
func TestBuildPolicyEmptyPaths(t *testing.T) {
	for name, f := range map[string]runFlags{
		"--ro ''":         {ro: []string{""}},
		"--rw ''":         {rw: []string{""}},
		"--bind :/x":      {binds: []string{":/x"}},
		"--bind :/x:rw":   {binds: []string{":/x:rw"}},
		"--bind /tmp::rw": {binds: []string{"/tmp::rw"}},
	} {
		if _, err := buildPolicy(&f); err == nil || !strings.Contains(err.Error(), "empty path") {
			t.Errorf("%s: %v, want an empty path error", name, err)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	p, err := buildPolicy(&runFlags{ro: []string{"."}, rw: []string{"/tmp"}, binds: []string{".:/x:rw"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Filesystem.ReadOnly[0] != wd || p.Filesystem.Writable[0] != "/tmp" || p.Filesystem.Binds[0].Source != wd || !p.Filesystem.Binds[0].Writable {
		t.Errorf("paths given: %+v", p.Filesystem)
	}
}

// airlock create refuses a --cpu that is not a number (NaN, Inf), which
// reached the request as a JSON encoding error; a number goes through.
func TestCreateCPUNotANumber(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := createRequest(&createFlags{cpu: v}); err == nil || !strings.Contains(err.Error(), "--cpu") {
			t.Errorf("--cpu %v: %v", v, err)
		}
	}
	if req, err := createRequest(&createFlags{cpu: 1.5}); err != nil || req.Resources.CPU != 1.5 {
		t.Errorf("--cpu 1.5: %+v %v", req, err)
	}
}

// --net none with a network rule is refused (the rule was dropped without
// a word); the rule alone makes an allowlist, --net none alone is fine.
func TestNetNoneWithRules(t *testing.T) {
	for name, f := range map[string]runFlags{
		"--net-allow": {net: "none", netAllow: []string{"example.com"}},
		"--net-deny":  {net: "none", netDeny: []string{"example.com"}},
		"--add-host":  {net: "none", addHosts: []string{"a:1.2.3.4"}},
		"--secret":    {net: "none", secrets: []string{"TOKEN@example.com"}},
	} {
		if _, err := buildPolicy(&f); err == nil || !strings.Contains(err.Error(), name+" with --net none") {
			t.Errorf("%s with --net none: %v", name, err)
		}
	}
	if p, err := buildPolicy(&runFlags{netAllow: []string{"example.com"}}); err != nil || p.Network.Mode != "allowlist" {
		t.Errorf("--net-allow alone: %+v %v", p, err)
	}
	if p, err := buildPolicy(&runFlags{net: "none"}); err != nil || p.Network.Mode != "none" {
		t.Errorf("--net none alone: %+v %v", p, err)
	}
}
