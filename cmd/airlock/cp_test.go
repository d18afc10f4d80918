package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/client"
)

func TestParseCpArgs(t *testing.T) {
	const id = "sb-0123456789abcdef"
	for _, tc := range []struct {
		src, dst string
		s, d     cpArg
		err      string
	}{
		{src: "file.txt", dst: id + ":/workspace/", s: cpArg{path: "file.txt"}, d: cpArg{remote: true, id: id, path: "/workspace/"}},
		{src: id + ":out", dst: ".", s: cpArg{remote: true, id: id, path: "out"}, d: cpArg{path: "."}},
		{src: "-", dst: id + ":/tmp", s: cpArg{path: "-"}, d: cpArg{remote: true, id: id, path: "/tmp"}},
		{src: id + ":/etc/hosts", dst: "-", s: cpArg{remote: true, id: id, path: "/etc/hosts"}, d: cpArg{path: "-"}},
		{src: id + ":/a:b", dst: "x", s: cpArg{remote: true, id: id, path: "/a:b"}, d: cpArg{path: "x"}},
		// Only a real sandbox id makes a side remote.
		{src: "./" + id + ":x", dst: id + ":/y", s: cpArg{path: "./" + id + ":x"}, d: cpArg{remote: true, id: id, path: "/y"}},
		{src: "C:/x", dst: id + ":/y", s: cpArg{path: "C:/x"}, d: cpArg{remote: true, id: id, path: "/y"}},
		{src: "sb-0123456789ABCDEF:/x", dst: "y", err: "neither"},
		{src: "sb-0123:/x", dst: "y", err: "neither"},
		{src: "a", dst: "b", err: "neither"},
		{src: id + ":/a", dst: "sb-fedcba9876543210:/b", err: "both"},
		{src: id + ":", dst: "x", err: "no path"},
		{src: "", dst: id + ":/x", err: "empty local path"},
	} {
		t.Run(tc.src+" "+tc.dst, func(t *testing.T) {
			s, d, err := parseCpArgs(tc.src, tc.dst)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s != tc.s || d != tc.d {
				t.Errorf("got %+v %+v, want %+v %+v", s, d, tc.s, tc.d)
			}
		})
	}
}

func TestRemoteBase(t *testing.T) {
	for p, want := range map[string]string{"/workspace/out/": "out", "out": "out", ".": "workspace", "a/b.txt": "b.txt"} {
		if got, err := remoteBase(p); err != nil || got != want {
			t.Errorf("remoteBase(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	if _, err := remoteBase("/"); err == nil {
		t.Error("remoteBase(/) accepted")
	}
}

func tarNames(t *testing.T, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(n))}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(n))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func readNames(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name)
	}
}

func TestRenameTar(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string
		err  string
	}{
		{name: "file", in: []string{"a.txt"}, want: []string{"new"}},
		{name: "tree", in: []string{"src/", "src/a", "src/sub/", "src/sub/b"}, want: []string{"new/", "new/a", "new/sub/", "new/sub/b"}},
		{name: "dot root", in: []string{"./", "./a", "sub/", "sub/b"}, want: []string{"new/", "new/a", "new/sub/", "new/sub/b"}},
		{name: "two roots", in: []string{"a", "b"}, err: "several top-level"},
		{name: "outside", in: []string{"../x"}, err: "outside"},
		{name: "absolute", in: []string{"/x"}, err: "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := renameTar(&out, bytes.NewReader(tarNames(t, tc.in...)), "new")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readNames(t, out.Bytes()); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("names %q, want %q", got, tc.want)
			}
		})
	}
}

func TestExecArgs(t *testing.T) {
	id, argv, err := execArgs([]string{"sb-0123456789abcdef", "--", "ls", "-l", "--", "x"})
	if err != nil || id != "sb-0123456789abcdef" || !reflect.DeepEqual(argv, []string{"ls", "-l", "--", "x"}) {
		t.Errorf("got %q %q %v", id, argv, err)
	}
	if _, argv, _ = execArgs([]string{"sb-0123456789abcdef", "ls", "-l"}); !reflect.DeepEqual(argv, []string{"ls", "-l"}) {
		t.Errorf("without --: %q", argv)
	}
	if _, _, err := execArgs([]string{"sb-0123456789abcdef", "--"}); err == nil {
		t.Error("no command accepted")
	}
}

func TestDownloadOptions(t *testing.T) {
	parse := func(download bool, args ...string) (client.DownloadOptions, error) {
		cmd := newCpCmd()
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		return downloadOptions(cmd, download)
	}
	if o, err := parse(true); err != nil || o.MaxSize != 1<<30 || o.FollowLinks {
		t.Errorf("defaults: %+v, %v; want 1 GiB, links not followed", o, err)
	}
	if o, err := parse(true, "--max-size", "20G", "--follow-links"); err != nil || o.MaxSize != 20<<30 || !o.FollowLinks {
		t.Errorf("--max-size 20G --follow-links: %+v, %v", o, err)
	}
	for _, bad := range []string{"0", "-1", "lots", "1Q"} {
		if _, err := parse(true, "--max-size", bad); err == nil || !strings.Contains(err.Error(), "--max-size") {
			t.Errorf("--max-size %s: %v", bad, err)
		}
	}
	// Uploads take neither.
	if _, err := parse(false); err != nil {
		t.Errorf("upload without the flags: %v", err)
	}
	for _, f := range [][]string{{"--max-size", "1M"}, {"--follow-links"}} {
		if _, err := parse(false, f...); err == nil || !strings.Contains(err.Error(), "from a sandbox") {
			t.Errorf("upload with %v: %v", f, err)
		}
	}
}

func TestWarnSkipped(t *testing.T) {
	var b bytes.Buffer
	warnSkipped(&b, nil)
	if b.Len() != 0 {
		t.Errorf("nothing skipped, yet: %q", b.String())
	}
	warnSkipped(&b, []client.SkippedLink{{Name: "out/a", Target: "/etc/shadow"}})
	if got := b.String(); !strings.Contains(got, "left out 1 symbolic link that leads out") || !strings.Contains(got, "  \"out/a\" -> \"/etc/shadow\"\n") {
		t.Errorf("one: %q", got)
	}
	// The names are the sandbox's: no control character reaches the
	// terminal.
	b.Reset()
	warnSkipped(&b, []client.SkippedLink{{Name: "out/\x1b]52;c;AAAA\x07", Target: "\x1b[2J"}})
	if got := b.String(); strings.ContainsAny(got, "\x1b\x07") || !strings.Contains(got, `\x1b`) {
		t.Errorf("control characters: %q", got)
	}
	var many []client.SkippedLink
	for i := range 25 {
		many = append(many, client.SkippedLink{Name: fmt.Sprint("l", i), Target: "/"})
	}
	b.Reset()
	warnSkipped(&b, many)
	if got := b.String(); !strings.Contains(got, "left out 25 symbolic links that lead out") || strings.Count(got, " -> ") != maxListed || !strings.Contains(got, "and 5 more") {
		t.Errorf("25: %q", got)
	}
}
