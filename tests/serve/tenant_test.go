//go:build linux

package serve

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestTenants: a key with a tenant lists, sees and touches only its
// tenant's sandboxes; every call on another tenant's sandbox is "not
// found" and changes nothing (the owner's calls, the controls, succeed
// right after). An operator key and the unix socket see all.
func TestTenants(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := startDaemon(t, "listen: "+addr+"\n")
	ctx := ctxT(t)
	key := func(name, tenant string) *client.Client {
		t.Helper()
		k, err := d.c.CreateTenantKey(ctx, name, tenant)
		if err != nil || k.Tenant != tenant {
			t.Fatalf("create key of tenant %q: %+v %v", tenant, k, err)
		}
		c, _ := client.New("http://"+addr, k.Key)
		return c
	}
	acme, globex, op := key("a", "acme"), key("g", "globex"), key("o", "")
	_, err = d.c.CreateTenantKey(ctx, "bad", "Not A Tenant")
	wantCode(t, "malformed tenant", err, http.StatusBadRequest)

	sa, err := acme.CreateSandbox(ctx, &api.CreateSandboxRequest{Labels: map[string]string{"app": "x"}})
	if err != nil || sa.Tenant != "acme" {
		t.Fatalf("acme create: %+v %v", sa, err)
	}
	sg, err := globex.CreateSandbox(ctx, &api.CreateSandboxRequest{Labels: map[string]string{"app": "x"}})
	if err != nil || sg.Tenant != "globex" {
		t.Fatalf("globex create: %+v %v", sg, err)
	}
	pg, err := globex.StartProcess(ctx, sg.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo secret-output; exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := globex.WriteFile(ctx, sg.ID, "/workspace/g.txt", 0o644, strings.NewReader("globex data")); err != nil {
		t.Fatal(err)
	}

	ids := func(c *client.Client, o client.ListOptions) []string {
		t.Helper()
		l, err := c.AllSandboxes(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sb := range l {
			out = append(out, sb.ID)
		}
		slices.Sort(out)
		return out
	}
	both := []string{sa.ID, sg.ID}
	slices.Sort(both)
	if got := ids(acme, client.ListOptions{}); !slices.Equal(got, []string{sa.ID}) {
		t.Fatalf("acme lists %v, want only %s", got, sa.ID)
	}
	if got := ids(acme, client.ListOptions{Labels: map[string]string{"app": "x"}}); !slices.Equal(got, []string{sa.ID}) {
		t.Fatalf("acme lists by label %v", got)
	}
	if got := ids(globex, client.ListOptions{}); !slices.Equal(got, []string{sg.ID}) {
		t.Fatalf("globex lists %v", got)
	}
	if got := ids(op, client.ListOptions{}); !slices.Equal(got, both) {
		t.Fatalf("the operator key lists %v, want %v", got, both)
	}
	if got := ids(d.c, client.ListOptions{}); !slices.Equal(got, both) {
		t.Fatalf("the unix socket lists %v, want %v", got, both)
	}
	if v, err := op.GetSandbox(ctx, sg.ID); err != nil || v.Tenant != "globex" {
		t.Fatalf("operator get: %+v %v", v, err)
	}

	// Every kind of call from acme on globex's sandbox: not found.
	notFound := func(what string, err error) {
		t.Helper()
		wantCode(t, "acme "+what+" of globex's sandbox", err, http.StatusNotFound)
	}
	_, err = acme.GetSandbox(ctx, sg.ID)
	notFound("get", err)
	_, err = acme.Exec(ctx, sg.ID, &api.ExecRequest{Argv: []string{"true"}})
	notFound("exec", err)
	_, err = acme.StartProcess(ctx, sg.ID, &api.ExecRequest{Argv: []string{"true"}})
	notFound("start", err)
	_, err = acme.ListProcesses(ctx, sg.ID)
	notFound("list processes", err)
	_, err = acme.GetProcess(ctx, sg.ID, pg.ID)
	notFound("get process", err)
	notFound("output", acme.FollowOutput(ctx, sg.ID, pg.ID, "", func(api.OutputEvent) error { return nil }))
	notFound("stdin", acme.WriteStdin(ctx, sg.ID, pg.ID, strings.NewReader("x"), false))
	notFound("signal", acme.Signal(ctx, sg.ID, pg.ID, "KILL"))
	_, _, err = acme.ReadFile(ctx, sg.ID, "/workspace/g.txt", client.DownloadOptions{})
	notFound("read file", err)
	notFound("write file", acme.WriteFile(ctx, sg.ID, "/workspace/g.txt", 0o644, strings.NewReader("overwritten")))
	_, err = acme.List(ctx, sg.ID, "/workspace")
	notFound("list files", err)
	_, err = acme.NetworkPolicy(ctx, sg.ID)
	notFound("network policy", err)
	_, err = acme.NetworkEvents(ctx, sg.ID, client.NetworkQuery{})
	notFound("network audit", err)
	_, err = acme.SetTimeout(ctx, sg.ID, 5*time.Second)
	notFound("set timeout", err)
	_, err = acme.Pause(ctx, sg.ID)
	notFound("pause", err)
	notFound("delete", acme.DeleteSandbox(ctx, sg.ID))

	// The controls: globex's sandbox, process and file are as they were.
	if v, err := globex.GetSandbox(ctx, sg.ID); err != nil || v.State != api.StateRunning {
		t.Fatalf("globex get after acme's attempts: %+v %v", v, err)
	}
	p, err := globex.GetProcess(ctx, sg.ID, pg.ID)
	if err != nil || p.State != api.ProcessRunning {
		t.Fatalf("globex's process after acme's attempts: %+v %v", p, err)
	}
	rc, _, err := globex.ReadFile(ctx, sg.ID, "/workspace/g.txt", client.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "globex data" {
		t.Fatalf("globex's file after acme's attempts: %q", b)
	}
	if res, err := acme.Exec(ctx, sa.ID, &api.ExecRequest{Argv: []string{"echo", "own"}}); err != nil || !bytes.Equal(res.Stdout, []byte("own\n")) {
		t.Fatalf("acme exec in its own sandbox: %+v %v", res, err)
	}
	// The operator key reaches any tenant's sandbox.
	if res, err := op.Exec(ctx, sg.ID, &api.ExecRequest{Argv: []string{"cat", "/workspace/g.txt"}}); err != nil || string(res.Stdout) != "globex data" {
		t.Fatalf("operator exec in globex's sandbox: %+v %v", res, err)
	}
	if err := globex.DeleteSandbox(ctx, sg.ID); err != nil {
		t.Fatalf("globex delete: %v", err)
	}

	// Caches are per tenant: what acme's sandboxes write, globex's and the
	// operator's never read; acme's next sandbox does (the control).
	withCache := func(c *client.Client) *api.Sandbox {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{Caches: []string{"pip"}})
		if err != nil {
			t.Fatalf("create with a cache: %v", err)
		}
		return sb
	}
	readCache := func(c *client.Client, id string) string {
		t.Helper()
		res, err := c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", "cat /cache/pip/mark 2>/dev/null; true"}})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	a1 := withCache(acme)
	if res, err := acme.Exec(ctx, a1.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo acme-wrote > /cache/pip/mark"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write the cache: %+v %v", res, err)
	}
	if got := readCache(acme, withCache(acme).ID); got != "acme-wrote\n" {
		t.Fatalf("control: acme's next sandbox reads %q from its cache", got)
	}
	if got := readCache(globex, withCache(globex).ID); got != "" {
		t.Fatalf("globex's sandbox reads acme's cache: %q", got)
	}
	if got := readCache(op, withCache(op).ID); got != "" {
		t.Fatalf("the operator's sandbox reads acme's cache: %q", got)
	}

	// The CLI: keys create --tenant and the tenant column.
	out, err := exec.Command(airlockBin, "keys", "create", "--host", "unix://"+d.sock, "--tenant", "initech", "--name", "cli").Output()
	if err != nil || !strings.HasPrefix(string(out), "alk_") {
		t.Fatalf("keys create --tenant: %q %v", out, err)
	}
	out, err = exec.Command(airlockBin, "keys", "ls", "--host", "unix://"+d.sock).Output()
	if err != nil || !strings.Contains(string(out), "initech") || !strings.Contains(string(out), "TENANT") {
		t.Fatalf("keys ls: %q %v", out, err)
	}
}
