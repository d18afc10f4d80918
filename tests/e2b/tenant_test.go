//go:build linux

package e2b_test

import (
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// TestTenants: a tenant's key lists, sees and touches only its tenant's
// sandboxes, on E2B's endpoints and on /v1; an admin key sees all. Each
// denial is next to the same call on the key's own sandbox.
func TestTenants(t *testing.T) {
	d := startE2B(t, "")
	ctx := testdaemon.Ctx(t)
	mk := func(tenant string) string {
		k, err := d.C.CreateTenantKey(ctx, "k-"+tenant, tenant)
		if err != nil {
			t.Fatal(err)
		}
		if k.Tenant != tenant {
			t.Fatalf("key tenant %q, want %q", k.Tenant, tenant)
		}
		return k.Key
	}
	ka, kb := mk("team-a"), mk("team-b")
	if _, err := d.C.CreateTenantKey(ctx, "bad", "no spaces!"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a bad tenant name: %v, want invalid", err)
	}
	as := func(key string) *e2bd { c := *d; c.key = key; return &c }
	a, b, admin := as(ka), as(kb), d

	sa := a.create(t, map[string]any{"templateID": "base"}).SandboxID
	sb := b.create(t, map[string]any{"templateID": "base"}).SandboxID

	ids := func(x *e2bd) string {
		var l []struct {
			SandboxID string `json:"sandboxID"`
		}
		x.api(t, "GET", "/v2/sandboxes", nil).json(t, &l)
		var out []string
		for _, s := range l {
			out = append(out, s.SandboxID)
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	both := []string{sa, sb}
	sort.Strings(both)
	if got := ids(a); got != sa {
		t.Errorf("team-a lists %q, want only %s", got, sa)
	}
	if got := ids(b); got != sb {
		t.Errorf("team-b lists %q, want only %s", got, sb)
	}
	if got := ids(admin); got != strings.Join(both, ",") {
		t.Errorf("admin lists %q, want both", got)
	}

	// E2B control plane.
	wantStatus(t, "a gets its own", a.api(t, "GET", "/sandboxes/"+sa, nil), 200)
	wantStatus(t, "a gets b's", a.api(t, "GET", "/sandboxes/"+sb, nil), 404)
	wantStatus(t, "a sets b's timeout", a.api(t, "POST", "/sandboxes/"+sb+"/timeout", map[string]any{"timeout": 60}), 404)
	wantStatus(t, "a pauses b's", a.api(t, "POST", "/sandboxes/"+sb+"/pause", nil), 404)
	wantStatus(t, "a connects to b's", a.api(t, "POST", "/v2/sandboxes/"+sb+"/connect", map[string]any{"timeout": 60}), 404)
	wantStatus(t, "a kills b's", a.api(t, "DELETE", "/sandboxes/"+sb, nil), 404)
	wantStatus(t, "b's still there for b", b.api(t, "GET", "/sandboxes/"+sb, nil), 200)
	wantStatus(t, "admin gets a's", admin.api(t, "GET", "/sandboxes/"+sa, nil), 200)

	// envd with a key instead of the token.
	stat := map[string]string{"Content-Type": "application/json"}
	envd := func(key, id string) resp {
		h := map[string]string{"X-API-Key": key}
		for k, v := range stat {
			h[k] = v
		}
		return d.envd(t, id, "", "POST", "/filesystem.Filesystem/Stat", h, jsonBody(map[string]any{"path": "/workspace"}))
	}
	wantStatus(t, "a's key on a's envd", envd(ka, sa), 200)
	wantStatus(t, "a's key on b's envd", envd(ka, sb), 401)
	wantStatus(t, "admin key on b's envd", envd(d.key, sb), 200)

	// airlock's own API over TCP.
	ca, err := client.New(d.base, ka)
	if err != nil {
		t.Fatal(err)
	}
	list, err := ca.AllSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 1 || list[0].ID != sa || list[0].Tenant != "team-a" {
		t.Errorf("/v1 list as team-a: %+v %v", list, err)
	}
	if _, err := ca.GetSandbox(ctx, sa); err != nil {
		t.Errorf("/v1 get own: %v", err)
	}
	if _, err := ca.GetSandbox(ctx, sb); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("/v1 get b's as a: %v, want not found", err)
	}
	if _, err := ca.Exec(ctx, sa, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Errorf("/v1 exec in own: %v", err)
	}
	if _, err := ca.Exec(ctx, sb, &api.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("/v1 exec in b's as a: %v, want not found", err)
	}
	if err := ca.DeleteSandbox(ctx, sb); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("/v1 delete b's as a: %v, want not found", err)
	}
	// A sandbox made through /v1 by a is a's on the E2B side too.
	v1a, err := ca.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v1a.Tenant != "team-a" {
		t.Errorf("/v1 create as a: tenant %q", v1a.Tenant)
	}
	wantStatus(t, "a gets its /v1 sandbox through E2B", a.api(t, "GET", "/sandboxes/"+v1a.ID, nil), 200)
	wantStatus(t, "b gets a's /v1 sandbox through E2B", b.api(t, "GET", "/sandboxes/"+v1a.ID, nil), 404)
	// The admin sees all, from /v1 over TCP too.
	cadm, _ := client.New(d.base, d.key)
	all, err := cadm.AllSandboxes(ctx, client.ListOptions{})
	if err != nil || len(all) != 3 {
		t.Errorf("/v1 list as admin: %d %v", len(all), err)
	}

	// Tenants survive a restart.
	d.Restart(syscallTERM)
	if got := ids(a); !strings.Contains(got, sa) || strings.Contains(got, sb) {
		t.Errorf("team-a lists %q after a restart", got)
	}
	r := a.api(t, "GET", "/sandboxes/"+sb, nil)
	if r.status != http.StatusNotFound {
		t.Errorf("a gets b's after a restart: %d", r.status)
	}
}
