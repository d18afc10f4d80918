package seccomp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// argSamples are argument vectors that the default rules allow (plus a
// zero and an all-ones vector): a denied syscall must be EPERM for all.
var argSamples = [][]uint64{
	{},
	{afInet, sockStream, 0},
	{afUnix, sockStream, 0},
	{afNetlink, sockRaw, netlinkRoute},
	{cloneThreadFlags},
	{sigchld},
	{0, tcgets},
	{perQuery},
	{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)},
}

// FuzzDeny: random deny lists (and random extra names) never make Compile
// fail or exceed the kernel limit, never leave a denied syscall allowed,
// and never take away anything that was not denied.
func FuzzDeny(f *testing.F) {
	f.Add([]byte{}, "")
	f.Add([]byte{0, 0, 1}, "")
	f.Add([]byte{1, 0, 16, 0, 41, 0, 56, 0, 135}, "")
	f.Add([]byte{0, 0, 0}, "mkdir,read")
	f.Add([]byte{1}, "open,iopl")
	f.Add([]byte{0}, "foo")
	f.Add([]byte{0, 1, 2}, "read,,write")
	every := []byte{0}
	for i := 0; i < 400; i++ {
		every = append(every, byte(i>>8), byte(i))
	}
	f.Add(every, "")
	every[0] = 1
	f.Add(every, "")
	alternate := []byte{0}
	for i := 0; i < 400; i += 2 {
		alternate = append(alternate, byte(i>>8), byte(i))
	}
	f.Add(alternate, "socket,clone3,ioctl")

	f.Fuzz(func(t *testing.T, data []byte, extra string) {
		goarch := "amd64"
		if len(data) > 0 && data[0]&1 == 1 {
			goarch = "arm64"
		}
		a, err := archFor(goarch)
		if err != nil {
			t.Fatal(err)
		}
		names := a.sortedNames()
		var deny []string
		for i := 1; i+1 < len(data); i += 2 {
			deny = append(deny, names[(int(data[i])<<8|int(data[i+1]))%len(names)])
		}
		unknown, hasUnknown := "", false
		if extra != "" {
			for _, n := range strings.Split(extra, ",") {
				deny = append(deny, n)
				if !hasUnknown && !knownAnywhere(n) {
					unknown, hasUnknown = n, true
				}
			}
		}

		p := defaultFor(goarch)
		orig := defaultFor(goarch)
		if err := p.Deny(deny...); hasUnknown {
			want := fmt.Sprintf("seccomp: unknown syscall %q", unknown)
			if err == nil || err.Error() != want {
				t.Fatalf("Deny(%q) = %v, want %s", deny, err, want)
			}
			b1, _ := json.Marshal(p)
			b2, _ := json.Marshal(orig)
			if string(b1) != string(b2) {
				t.Fatal("failed Deny changed the profile")
			}
			return
		} else if err != nil {
			t.Fatalf("Deny(%q): %v", deny, err)
		}

		prog, err := p.compileFor(a)
		if err != nil {
			t.Fatalf("Compile after Deny(%q): %v", deny, err)
		}
		if len(prog) > MaxInstructions {
			t.Fatalf("%d instructions", len(prog))
		}
		flt := newFilter(t, a, prog)
		denied := map[string]bool{}
		for _, n := range append(deny, forbidden...) {
			denied[n] = true
		}
		for n := range denied {
			if _, ok := a.table[n]; !ok {
				continue
			}
			for _, args := range argSamples {
				if got := flt.sys(t, n, args...); got != wantEPERM {
					t.Fatalf("denied %s%#x: %s", n, args, actionName(got))
				}
			}
		}
		// Everything not denied behaves as in the default profile.
		ref := newFilter(t, a, mustCompile(t, orig, a))
		for _, n := range names {
			if denied[n] {
				continue
			}
			for _, args := range argSamples {
				if got, want := flt.sys(t, n, args...), ref.sys(t, n, args...); got != want {
					t.Fatalf("%s%#x not denied but changed: %s, default %s", n, args, actionName(got), actionName(want))
				}
			}
		}
		for _, n := range p.Allow {
			if slices.Contains(p.Denied, n) {
				t.Fatalf("%s both allowed and denied", n)
			}
		}
	})
}

func mustCompile(t testing.TB, p *Profile, a *archInfo) []SockFilter {
	t.Helper()
	prog, err := p.compileFor(a)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}
