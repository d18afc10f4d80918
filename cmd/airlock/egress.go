package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// startEgress serves the sandbox's proxy listeners with a gateway enforcing
// the policy's network rules, logging every connection and request and
// counting the denials in den.
func startEgress(sb runtime.Sandbox, p *policy.Policy, setup *egress.Setup, f *runFlags, rec *record.Recorder, den *denials, stderr io.Writer) (*egress.Gateway, error) {
	hosts, err := parseHosts(f.addHosts)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var logw io.Writer
	if f.netLog != "" {
		lf, err := os.OpenFile(f.netLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--net-log: %w", err)
		}
		logw = lf
	} else if f.verbose {
		logw = stderr
	}
	audit := func(r gateway.Record) {
		if rec != nil {
			rec.Write(netEvent(r))
		}
		den.add(r)
		if logw == nil {
			return
		}
		b, _ := json.Marshal(auditLine(r))
		mu.Lock()
		logw.Write(append(b, '\n'))
		mu.Unlock()
	}
	// The user's own machine: a policy may open any port of its loopback
	// (host.airlock.internal:PORT).
	return egress.Start(sb, p.Network, egress.Options{Sandbox: sb.ID(), Hosts: hosts, Audit: audit, Setup: setup,
		Host: egress.HostAccess{AnyPort: true}})
}

// denials counts what the egress gateway refused during a run, for the
// lines airlock run prints when the command has ended: the program in the
// sandbox often says no more than "403 Forbidden" or "connection
// refused", and a name that resolves to a private address here (a mirror,
// a proxy, split DNS) is denied even though the name is allowed.
type denials struct {
	mu    sync.Mutex
	n     int
	kinds []denial // distinct target and rule, in the order first seen
	more  int      // distinct ones past maxDenialKinds
}

type denial struct {
	target, host, rule string
	n                  int
}

// maxDenialKinds is how many distinct denials the summary names.
const maxDenialKinds = 5

func (d *denials) add(r gateway.Record) {
	if d == nil || r.Allowed || r.Rule == "" {
		return
	}
	target := r.Host
	if r.Port != 0 {
		target = net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	for i := range d.kinds {
		if d.kinds[i].target == target && d.kinds[i].rule == r.Rule {
			d.kinds[i].n++
			return
		}
	}
	if len(d.kinds) == maxDenialKinds {
		d.more++
		return
	}
	d.kinds = append(d.kinds, denial{target: target, host: r.Host, rule: r.Rule, n: 1})
}

// report prints the denials, each with what would allow it where that is a
// flag, in a few lines; nothing when there were none.
func (d *denials) report(w io.Writer, logged bool) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		return
	}
	where := "every connection and request: -v, or --net-log FILE"
	if logged {
		where = "every connection and request is in the --net-log file"
	}
	what := "connections or requests"
	if d.n == 1 {
		what = "connection or request"
	}
	fmt.Fprintf(w, "airlock: the egress gateway denied %d %s (%s):\n", d.n, what, where)
	for _, k := range d.kinds {
		times := ""
		if k.n > 1 {
			times = fmt.Sprintf(" (%d times)", k.n)
		}
		rule := k.rule
		if strings.ContainsFunc(rule, func(r rune) bool { return !unicode.IsPrint(r) }) {
			rule = errdefs.Quote(rule)
		}
		fmt.Fprintf(w, "airlock:   %s: %s%s\n", errdefs.Quote(k.target), rule, times)
		if ip, ok := strings.CutPrefix(k.rule, "private address "); ok {
			ip, _, _ = strings.Cut(ip, " ")
			fmt.Fprintf(w, "airlock:     %s resolves to %s here, an address the gateway refuses unless it is allowed itself; if that address is meant (a mirror, a proxy, split DNS), add --net-allow %s\n", errdefs.Quote(k.host), ip, ip)
		} else if k.rule == "not in allowlist" {
			fmt.Fprintf(w, "airlock:     to allow it: --net-allow %s (or the policy's network.allow)\n", errdefs.Quote(k.target))
		}
	}
	if d.more > 0 {
		fmt.Fprintf(w, "airlock:   and %d more\n", d.more)
	}
}

// netEvent is the activity record's form of one audit record.
func netEvent(r gateway.Record) *record.Event {
	allowed := r.Allowed
	d := float64(r.Duration.Microseconds()) / 1000
	return &record.Event{Type: record.TypeNet, Time: r.Time.UTC(), Proto: r.Proto, Method: r.Method, Host: r.Host, Port: r.Port,
		Addr: r.Addr, URLPath: r.Path, Allowed: &allowed, Rule: r.Rule, Error: r.Error, BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMS: &d}
}

// auditLine is the JSON form of one audit record.
func auditLine(r gateway.Record) map[string]any {
	m := map[string]any{
		"time": r.Time, "sandbox": r.Sandbox, "proto": r.Proto, "method": r.Method, "host": r.Host, "port": r.Port,
		"allowed": r.Allowed, "rule": r.Rule, "bytes_up": r.BytesUp, "bytes_down": r.BytesDown,
		"duration_ms": float64(r.Duration.Microseconds()) / 1000,
	}
	if r.Path != "" {
		m["path"] = r.Path
	}
	if r.Addr != "" {
		m["addr"] = r.Addr
	}
	if r.Error != "" {
		m["error"] = r.Error
	}
	if r.Credential != "" {
		m["credential"] = r.Credential
	}
	return m
}

// parseHosts parses --add-host NAME:IP flags.
func parseHosts(flags []string) (map[string][]netip.Addr, error) {
	hosts := map[string][]netip.Addr{}
	for _, h := range flags {
		name, ip, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("--add-host %s: want NAME:IP", errdefs.Quote(h))
		}
		if err := egress.AddHost(hosts, name, ip); err != nil {
			return nil, fmt.Errorf("--add-host %s: %v", errdefs.Quote(h), err)
		}
	}
	return hosts, nil
}
