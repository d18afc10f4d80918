package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/egress/netsum"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// startEgress serves the sandbox's proxy listeners with a gateway enforcing
// the policy's network rules, logging every connection and request and
// counting the denials and early failures in den.
func startEgress(sb runtime.Sandbox, p *policy.Policy, setup *egress.Setup, f *runFlags, rec *record.Recorder, den *netsum.Summary, stderr io.Writer) (*egress.Gateway, error) {
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
		den.Add(netRecord(r))
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

// netRecord is the summary's view of an audit record.
func netRecord(r gateway.Record) netsum.Record {
	return netsum.Record{Host: r.Host, Port: r.Port, Allowed: r.Allowed, Rule: r.Rule, Error: r.Error, BytesUp: r.BytesUp, BytesDown: r.BytesDown}
}

// runReport is how airlock run's summary says where the records are and
// what allows a destination. A name that resolves to a private address
// here (a mirror, a proxy, split DNS) is denied even though the name is
// allowed; a name that does not resolve fails.
func runReport(logged bool) netsum.Report {
	where := "every connection and request: -v, or --net-log FILE"
	if logged {
		where = "every connection and request is in the --net-log file"
	}
	return netsum.Report{Of: "the sandbox's connections and requests", Where: where, Allow: "--net-allow", Policy: "the policy's network.allow"}
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
