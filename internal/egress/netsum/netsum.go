// Package netsum sums up what a sandbox's egress gateway refused, or could
// not complete, while a command ran: the program in the sandbox often says
// no more than "403 Forbidden" or "502 Bad Gateway", and the audit holds
// every connection. `airlock run` and `airlock exec` print the summary when
// the command has ended; the MCP server's run_command returns it. All three
// count the same records (Problem), which the daemon's audit query selects
// with ?problems=true.
package netsum

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Record is what the summary needs of one audit record.
type Record struct {
	Host               string
	Port               int
	Allowed            bool
	Rule               string // the rule that decided it
	Error              string
	BytesUp, BytesDown int64
}

// Problem reports whether r is counted: a rule denied it, or it failed
// before any byte went either way (the name did not resolve, no address
// answered, the request was malformed). Failures later in a transfer are
// left to the audit. The store's filter for ?problems=true is the same
// condition in SQL.
func Problem(r Record) bool { return denied(r) || failed(r) }

func denied(r Record) bool { return !r.Allowed && r.Rule != "" }

func failed(r Record) bool { return r.Error != "" && r.BytesUp == 0 && r.BytesDown == 0 }

// Kind is one distinct destination and reason, with how often it happened.
type Kind struct {
	Host  string
	Port  int
	Rule  string // the rule that denied it; "" for a failure
	Error string // why it failed (a failure)
	Count int
}

// Target is host:port, or the host alone when there is no port.
func (k Kind) Target() string {
	if k.Port == 0 {
		return k.Host
	}
	return net.JoinHostPort(k.Host, strconv.Itoa(k.Port))
}

// Summary counts problems; safe for concurrent use (the gateway audits
// from many goroutines).
type Summary struct {
	// Max is how many distinct kinds it keeps (0: DefaultMax); the rest
	// are counted, and Print says how many more there were.
	Max int

	mu             sync.Mutex
	denied, failed int
	kinds          []Kind // in the order first seen
	more           int
}

// DefaultMax is how many distinct denials and failures a printed summary
// names.
const DefaultMax = 5

// maxError is the longest error a printed summary repeats, in bytes.
const maxError = 160

// Add counts r if it is a Problem, and reports whether it was.
func (s *Summary) Add(r Record) bool {
	k := Kind{Host: r.Host, Port: r.Port}
	switch {
	case denied(r):
		k.Rule = r.Rule
	case failed(r):
		k.Error = r.Error
	default:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k.Rule != "" {
		s.denied++
	} else {
		s.failed++
	}
	for i := range s.kinds {
		if s.kinds[i].Host == k.Host && s.kinds[i].Port == k.Port && s.kinds[i].Rule == k.Rule && s.kinds[i].Error == k.Error {
			s.kinds[i].Count++
			return true
		}
	}
	limit := s.Max
	if limit <= 0 {
		limit = DefaultMax
	}
	if len(s.kinds) == limit {
		s.more++
		return true
	}
	k.Count = 1
	s.kinds = append(s.kinds, k)
	return true
}

// maxAuditPages bounds the audit pages FromAudit reads.
const maxAuditPages = 10

// FromAudit sums up the problems in sandbox id's egress audit from since
// on, as the daemon c talks to holds it (?problems=true; at most ten pages
// of 1000 records), keeping at most max kinds.
func FromAudit(ctx context.Context, c *client.Client, id string, since time.Time, max int) (*Summary, error) {
	s := &Summary{Max: max}
	q := client.NetworkQuery{Problems: true, Since: since, Limit: 1000}
	for range maxAuditPages {
		page, err := c.NetworkEvents(ctx, id, q)
		if err != nil {
			return s, err
		}
		for _, e := range page.Events {
			s.Add(Record{Host: e.Host, Port: e.Port, Allowed: e.Allowed, Rule: e.Rule, Error: e.Error, BytesUp: e.BytesUp, BytesDown: e.BytesDown})
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	return s, nil
}

// Kinds returns the distinct problems kept, in the order first seen.
func (s *Summary) Kinds() []Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Kind(nil), s.kinds...)
}

// Report says how to allow a denied destination, in a printed summary.
type Report struct {
	// Of says whose connections they were ("the sandbox's connections
	// and requests").
	Of string
	// Where says where every record is ("-v, or --net-log FILE").
	Where string
	// Allow is the command line, or flag, that adds a rule ("--net-allow",
	// "airlock net ID allow"); Policy names the policy's own place for it
	// ("the policy's network.allow"), or "".
	Allow, Policy string
}

// Print writes the summary to w in a few lines prefixed "airlock: ": the
// counts, then each kind, each denial with what would allow it where a
// rule can. Nothing when nothing was counted. What the sandbox chose (host
// names, errors) is quoted when it holds a character that is not
// printable, so that it cannot write escape sequences to a terminal.
func (s *Summary) Print(w io.Writer, how Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.denied+s.failed == 0 {
		return
	}
	var counts []string
	if s.denied > 0 {
		counts = append(counts, fmt.Sprintf("denied %d", s.denied))
	}
	if s.failed > 0 {
		counts = append(counts, fmt.Sprintf("could not complete %d", s.failed))
	}
	fmt.Fprintf(w, "airlock: the egress gateway %s of %s (%s):\n", strings.Join(counts, " and "), how.Of, how.Where)
	for _, k := range s.kinds {
		times := ""
		if k.Count > 1 {
			times = fmt.Sprintf(" (%d times)", k.Count)
		}
		target := "(no destination)"
		if k.Host != "" {
			target = errdefs.Quote(k.Target())
		}
		if k.Rule == "" {
			e := k.Error
			if len(e) > maxError {
				e = strings.ToValidUTF8(e[:maxError], "") + "..."
			}
			fmt.Fprintf(w, "airlock:   %s: failed: %s%s\n", target, printable(e), times)
			continue
		}
		fmt.Fprintf(w, "airlock:   %s: denied: %s%s\n", target, printable(k.Rule), times)
		if ip, ok := strings.CutPrefix(k.Rule, "private address "); ok {
			ip, _, _ = strings.Cut(ip, " ")
			if ip == k.Host {
				fmt.Fprintf(w, "airlock:     a private address is reached only through a rule naming it: %s %s\n", how.Allow, ip)
			} else {
				fmt.Fprintf(w, "airlock:     %s resolves to %s here, an address the gateway refuses unless it is allowed itself; if that address is meant (a mirror, a proxy, split DNS), add %s %s\n", errdefs.Quote(k.Host), ip, how.Allow, ip)
			}
		} else if k.Rule == "not in allowlist" {
			also := ""
			if how.Policy != "" {
				also = " (or " + how.Policy + ")"
			}
			fmt.Fprintf(w, "airlock:     to allow it: %s %s%s\n", how.Allow, target, also)
		}
	}
	if s.more > 0 {
		fmt.Fprintf(w, "airlock:   and %d more\n", s.more)
	}
}

// printable is s, quoted if it holds a character that is not printable.
func printable(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return errdefs.Quote(s)
	}
	return s
}
