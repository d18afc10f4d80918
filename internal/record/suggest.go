package record

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"
	"time"
)

// Suggest turns a record into the narrowest airlock policy that would
// have allowed the recorded run, as a commented YAML policy file:
// network hosts:ports it reached (allowed), with the loopback or private
// addresses they resolved to as IP rules beside them (the gateway needs
// both for such an address); the requests that were denied, as comments
// (left denied); resources from the usage peaks with headroom; and, as
// comments, the programs it ran. source names the record in the header.
func Suggest(evs []Event, source string) string {
	var b strings.Builder
	var start, end time.Time
	sandbox := ""
	progs := map[string]int{}
	execs := 0
	type hp struct {
		host string
		port int
	}
	allowed := map[hp]int{}
	ips := map[string]hp{}
	denied := map[hp][]string{}
	var peakMem, peakPids uint64
	var maxCores float64
	var prev *Event
	losses := 0
	for i := range evs {
		e := &evs[i]
		switch e.Type {
		case TypeStart:
			start, sandbox = e.Time, e.Sandbox
		case TypeEnd:
			end = e.Time
		case TypeLoss:
			losses++
		case TypeExec:
			if e.Result == ResultFailed {
				continue
			}
			execs++
			p := e.Path
			if e.PathTarget != "" {
				p += " -> " + e.PathTarget
			}
			progs[p]++
		case TypeNet:
			if e.Host == "" || e.Allowed == nil {
				continue
			}
			k := hp{strings.ToLower(e.Host), e.Port}
			if !*e.Allowed {
				denied[k] = append(denied[k], cmp.Or(e.Rule, e.Error)) // a name that did not resolve has no rule
				continue
			}
			allowed[k]++
			if ap, err := netip.ParseAddrPort(e.Addr); err == nil && needsIPRule(ap.Addr().Unmap()) && ap.Addr().Unmap().String() != k.host {
				ips[netip.AddrPortFrom(ap.Addr().Unmap(), uint16(e.Port)).String()] = k
			}
		case TypeUsage:
			if e.MemoryPeak != nil && *e.MemoryPeak > peakMem {
				peakMem = *e.MemoryPeak
			}
			if e.MemoryBytes != nil && *e.MemoryBytes > peakMem {
				peakMem = *e.MemoryBytes
			}
			if e.Pids != nil && *e.Pids > peakPids {
				peakPids = *e.Pids
			}
			if prev != nil && e.CPUNs != nil && prev.CPUNs != nil && *e.CPUNs >= *prev.CPUNs {
				if dt := e.Time.Sub(prev.Time); dt >= 500*time.Millisecond {
					if c := float64(*e.CPUNs-*prev.CPUNs) / float64(dt); c > maxCores {
						maxCores = c
					}
				}
			}
			if e.CPUNs != nil {
				prev = e
			}
		}
	}
	fmt.Fprintf(&b, "# airlock policy suggested by `airlock policy suggest` from the activity record\n# %s", source)
	if sandbox != "" {
		fmt.Fprintf(&b, " (sandbox %s", sandbox)
		if !start.IsZero() && !end.IsZero() {
			fmt.Fprintf(&b, ", a run of %s", end.Sub(start).Round(time.Millisecond))
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ".\n# It allows what the recorded run did and nothing else it can name: review it\n# before use. Flags given to that run (--add-host, --secret, --workspace) are not\n# in the record and are not repeated here.\n")
	if losses > 0 {
		fmt.Fprintf(&b, "#\n# WARNING: the record has %d loss event(s): some events were missed.\n", losses)
	}
	fmt.Fprintf(&b, "#\n# Programs run (%d execs, %d distinct):\n", execs, len(progs))
	names := make([]string, 0, len(progs))
	for p := range progs {
		names = append(names, p)
	}
	sort.Strings(names)
	for i, p := range names {
		if i == 50 {
			fmt.Fprintf(&b, "#   ... and %d more\n", len(names)-50)
			break
		}
		fmt.Fprintf(&b, "#   %s (%dx)\n", commentSafe(p), progs[p])
	}
	b.WriteString("#\n# Writable paths: the record's file events cover the workspace only, so none\n# outside it can be derived; run with --workspace DIR --review to see what a\n# run changes.\n\n")

	b.WriteString("network:\n")
	if len(allowed) == 0 {
		b.WriteString("  mode: none # the recorded run made no allowed request\n")
	} else {
		b.WriteString("  mode: allowlist\n  allow:\n")
		keys := make([]hp, 0, len(allowed))
		for k := range allowed {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].host != keys[j].host {
				return keys[i].host < keys[j].host
			}
			return keys[i].port < keys[j].port
		})
		for _, k := range keys {
			fmt.Fprintf(&b, "    - %q # %d allowed request(s) or connection(s)\n", hostPort(k.host, k.port), allowed[k])
		}
		ipKeys := make([]string, 0, len(ips))
		for ip := range ips {
			ipKeys = append(ipKeys, ip)
		}
		sort.Strings(ipKeys)
		for _, ip := range ipKeys {
			fmt.Fprintf(&b, "    - %q # what %s resolved to: a loopback, private or reserved address needs its own IP rule\n", ip, commentSafe(hostPort(ips[ip].host, ips[ip].port)))
		}
	}
	if len(denied) > 0 {
		b.WriteString("  # Denied during the recording, left denied:\n")
		keys := make([]hp, 0, len(denied))
		for k := range denied {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return hostPort(keys[i].host, keys[i].port) < hostPort(keys[j].host, keys[j].port)
		})
		for _, k := range keys {
			fmt.Fprintf(&b, "  #   %s (%dx: %s)\n", commentSafe(hostPort(k.host, k.port)), len(denied[k]), commentSafe(denied[k][0]))
		}
	}

	b.WriteString("\nresources:\n")
	if peakMem > 0 {
		// 1.5x the peak, at least 64 MiB, in 16 MiB steps.
		mem := max(uint64(float64(peakMem)*1.5), 64<<20)
		mem = (mem + 16<<20 - 1) / (16 << 20) * 16
		fmt.Fprintf(&b, "  memory: %dMiB # peak %.1f MiB\n", mem, float64(peakMem)/(1<<20))
	} else {
		b.WriteString("  # memory: no usage sample in the record\n")
	}
	if peakPids > 0 {
		fmt.Fprintf(&b, "  pids: %d # peak %d tasks (airlock's agent included)\n", max(2*peakPids, 32), peakPids)
	}
	if maxCores > 0 {
		cpu := math.Max(0.5, math.Ceil(maxCores*1.5*2)/2)
		fmt.Fprintf(&b, "  cpu: %g # peak %.2f cores over a sample\n", cpu, maxCores)
	}
	if !start.IsZero() && !end.IsZero() {
		fmt.Fprintf(&b, "  # timeout: the recorded run took %s; set one if the workload is bounded\n", end.Sub(start).Round(time.Millisecond))
	}
	return b.String()
}

func hostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// commentSafe keeps text from the sandbox on one comment line.
func commentSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// needsIPRule reports addresses the gateway refuses unless an IP rule
// names them: loopback, private, link-local, shared and reserved ranges.
func needsIPRule(a netip.Addr) bool {
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() {
		return true
	}
	for _, p := range []string{"100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "2001:db8::/32"} {
		if netip.MustParsePrefix(p).Contains(a) {
			return true
		}
	}
	return false
}
