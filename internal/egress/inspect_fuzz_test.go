package egress

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
)

// FuzzRequestPath: whatever the escaped path, a request the rules allow
// under "/repos/" names, once decoded and cleaned the way a server would,
// a path under "/repos/"; and "/user" never covers "/users".
func FuzzRequestPath(f *testing.F) {
	for _, s := range []string{"/repos/a", "/repos/../admin", "/repos/%2e%2e/admin", "/repos/..%2fadmin", "/repos//x", "/user", "/users", "/user/keys", "/repos/a%00b", "/repos/./x", "/repos/%252e%252e/x", "/REPOS/x", "/repos/..;/admin"} {
		f.Add(s)
	}
	hr, err := compileHTTP([]policy.HTTPRule{{Hosts: []string{"api.example.com"}, Paths: []string{"/repos/", "/user"}}})
	if err != nil {
		f.Fatal(err)
	}
	in := &inspection{rules: []*httpRule{&hr[0]}}
	f.Fuzz(func(t *testing.T, escaped string) {
		if !in.Request("GET", escaped).Allow {
			return
		}
		p, err := url.PathUnescape(escaped)
		if err != nil {
			t.Fatalf("allowed %q, which does not decode: %v", escaped, err)
		}
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && clean != "/" {
			clean += "/"
		}
		if clean != p {
			t.Fatalf("allowed %q, which a server reads as %q", escaped, clean)
		}
		if !strings.HasPrefix(p, "/repos/") && p != "/user" && !strings.HasPrefix(p, "/user/") {
			t.Fatalf("allowed %q (%q), outside the rules", escaped, p)
		}
	})
}
