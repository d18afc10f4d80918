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
// counting the denials and early failures in den.
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

// denials counts what the egress gateway refused, or could not complete,
// during a run, for the lines airlock run prints when the command has
// ended: the program in the sandbox often says no more than "403
// Forbidden" or "502 Bad Gateway". A name that resolves to a private
// address here (a mirror, a proxy, split DNS) is denied even though the
// name is allowed; a name that does not resolve fails.
type denials struct {
	mu             sync.Mutex
	denied, failed int
	kinds          []denial // distinct target and reason, in the order first seen
	more           int      // distinct ones past maxDenialKinds
}

type denial struct {
	target, host string
	rule         string // the rule that denied it; "" for a failure
	err          string // why it failed (a failure)
	n            int
}

// maxDenialKinds is how many distinct denials and failures the summary
// names.
const maxDenialKinds = 5

// maxDenialError is the longest error the summary repeats, in bytes.
const maxDenialError = 160

// add counts r if a rule denied it, or if it failed before any byte went
// either way (the name did not resolve, no address answered, the request
// was malformed). Failures later in a transfer are left to the log.
func (d *denials) add(r gateway.Record) {
	k := denial{host: r.Host, target: r.Host}
	switch {
	case !r.Allowed && r.Rule != "":
		k.rule = r.Rule
	case r.Error != "" && r.BytesUp == 0 && r.BytesDown == 0:
		k.err = r.Error
		if len(k.err) > maxDenialError {
			k.err = strings.ToValidUTF8(k.err[:maxDenialError], "") + "..."
		}
	default:
		return
	}
	if r.Port != 0 {
		k.target = net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if k.rule != "" {
		d.denied++
	} else {
		d.failed++
	}
	for i := range d.kinds {
		if d.kinds[i].target == k.target && d.kinds[i].rule == k.rule && d.kinds[i].err == k.err {
			d.kinds[i].n++
			return
		}
	}
	if len(d.kinds) == maxDenialKinds {
		d.more++
		return
	}
	k.n = 1
	d.kinds = append(d.kinds, k)
}

// report prints the denials and failures, each denial with what would
// allow it where that is a flag, in a few lines; nothing when there were
// none.
func (d *denials) report(w io.Writer, logged bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.denied+d.failed == 0 {
		return
	}
	var counts []string
	if d.denied > 0 {
		counts = append(counts, fmt.Sprintf("denied %d", d.denied))
	}
	if d.failed > 0 {
		counts = append(counts, fmt.Sprintf("could not complete %d", d.failed))
	}
	where := "every connection and request: -v, or --net-log FILE"
	if logged {
		where = "every connection and request is in the --net-log file"
	}
	fmt.Fprintf(w, "airlock: the egress gateway %s of the sandbox's connections and requests (%s):\n", strings.Join(counts, " and "), where)
	for _, k := range d.kinds {
		times := ""
		if k.n > 1 {
			times = fmt.Sprintf(" (%d times)", k.n)
		}
		target := "(no destination)"
		if k.target != "" {
			target = errdefs.Quote(k.target)
		}
		if k.rule == "" {
			fmt.Fprintf(w, "airlock:   %s: failed: %s%s\n", target, printable(k.err), times)
			continue
		}
		fmt.Fprintf(w, "airlock:   %s: denied: %s%s\n", target, printable(k.rule), times)
		if ip, ok := strings.CutPrefix(k.rule, "private address "); ok {
			ip, _, _ = strings.Cut(ip, " ")
			if ip == k.host {
				fmt.Fprintf(w, "airlock:     a private address is reached only through a rule naming it: --net-allow %s\n", ip)
			} else {
				fmt.Fprintf(w, "airlock:     %s resolves to %s here, an address the gateway refuses unless it is allowed itself; if that address is meant (a mirror, a proxy, split DNS), add --net-allow %s\n", errdefs.Quote(k.host), ip, ip)
			}
		} else if k.rule == "not in allowlist" {
			fmt.Fprintf(w, "airlock:     to allow it: --net-allow %s (or the policy's network.allow)\n", target)
		}
	}
	if d.more > 0 {
		fmt.Fprintf(w, "airlock:   and %d more\n", d.more)
	}
}

// printable is s, quoted if it holds a character that is not printable
// (what the sandbox chose, such as a host name, may be in it).
func printable(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return errdefs.Quote(s)
	}
	return s
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
