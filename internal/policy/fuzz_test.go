package policy

import (
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		full,
		"image: /a\n---\nimage: /b\n",
		"resources: {memory: 1.5GiB, cpu: 0.25, timeout: 1h, pids: 7, nofile: 9, fsize: 1K}\n",
		"filesystem:\n  binds:\n    - {source: /a, target: /b, mode: rw}\n  protect: {add: [x/y], remove: [.idea]}\n",
		"environment:\n  set: {A: \"1\", B: 'x y', C: \"\\u00e9\"}\n  pass: [TERM]\n",
		"seccomp: {deny: [ptrace, chmod]}\n",
		"workspace: {path: /w, mode: review}\n",
		"a: &x [1]\nb: *x\n",
		"filesystem: {deny: &d [/a], read_only: *d}\n",
		"resources:\n  memory: 12XB\n",
		"[1, 2",
		"? |\n  a\n: 1\n",
		"environment:\n  set: {\"A\\nB\": 1}\n",
		"\t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Parse("f.yaml", []byte(src))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml:") {
				t.Fatalf("error does not start with the file name: %q", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error has several lines: %q", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse succeeded but Validate fails: %v", err)
		}
		for _, r := range p.ProtectedPaths() {
			if strings.HasPrefix(r, "/") || r == ".." || strings.HasPrefix(r, "../") {
				t.Fatalf("protected path %q escapes the workspace", r)
			}
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		q, err := Parse("f.yaml", out)
		if err != nil {
			t.Fatalf("re-parsing the marshalled policy: %v\n%s", err, out)
		}
		if !samePolicy(p, q) {
			t.Fatalf("round trip changed the policy:\n%+v\n%+v\n%s", *p, *q, out)
		}
	})
}

func TestMarshalRoundTrip(t *testing.T) {
	p, err := Parse("f.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse("f.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !samePolicy(p, q) {
		t.Errorf("round trip changed the policy:\n%+v\n%+v\n%s", *p, *q, out)
	}
	if !strings.Contains(string(out), "memory: 512MiB\n") {
		t.Errorf("Marshal output:\n%s", out)
	}
}
