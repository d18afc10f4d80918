package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/errdefs"
)

func newNetCmd() *cobra.Command {
	var asJSON, follow, denied, problems bool
	var dest, since string
	cmd := &cobra.Command{
		Use:   "net ID [policy | allow HOST... | deny HOST... | mode MODE]",
		Short: "Show a sandbox's egress audit, or show and change its network policy",
		Long: `With only ID, print the audit of sandbox ID's egress gateway: one line per
connection or plain-HTTP request, allowed or denied (time, decision, rule,
method, host:port, path, bytes up and down, duration); -f follows new ones
until the sandbox ends; --denied, --problems (denied, or failed before any
byte moved), --dest HOST and --since filter.

  net ID policy          print the network policy
  net ID allow HOST...   allow these rules (and drop them from deny)
  net ID deny HOST...    deny these rules (and drop them from allow)
  net ID mode MODE       set the mode: none, allowlist or open

Changes apply at once; open connections the new policy denies are closed.
A sandbox created with network mode none can only stay in mode none.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, sub, rest := args[0], "", []string(nil)
			if len(args) > 1 {
				sub, rest = args[1], args[2:]
			}
			fl := cmd.Flags()
			if sub != "" {
				for _, f := range []string{"follow", "denied", "problems", "dest", "since"} {
					if fl.Changed(f) {
						return fmt.Errorf("net %s: --%s is for listing the audit, not with %s", arg(id), f, errdefs.Quote(sub))
					}
				}
			}
			var q client.NetworkQuery
			if sub == "" {
				if denied {
					q.Allowed = new(bool)
				}
				q.Problems = problems
				q.Host = dest
				if since != "" {
					t, err := parseSince(since, time.Now())
					if err != nil {
						return err
					}
					q.Since = t
				}
			}
			switch sub {
			case "", "policy":
				if len(rest) > 0 {
					return fmt.Errorf("net %s %s: unexpected arguments %s", arg(id), sub, errdefs.Quote(strings.Join(rest, " ")))
				}
			case "allow", "deny":
				if len(rest) == 0 {
					return fmt.Errorf("net %s %s: name at least one HOST rule", arg(id), sub)
				}
			case "mode":
				if len(rest) != 1 {
					return fmt.Errorf("net %s mode: want one MODE: none, allowlist or open", arg(id))
				}
			default:
				return fmt.Errorf("net %s: unknown subcommand %s (want policy, allow, deny or mode)", arg(id), errdefs.Quote(sub))
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if sub == "" {
				return listNetwork(cmd, c, id, q, follow, asJSON)
			}
			np, err := c.NetworkPolicy(cmd.Context(), id)
			if err != nil {
				return apiFail(cmd, c, "net "+arg(id), err)
			}
			if sub != "policy" {
				switch sub {
				case "allow":
					np.Allow, np.Deny = addRules(np.Allow, rest), dropRules(np.Deny, rest)
				case "deny":
					np.Deny, np.Allow = addRules(np.Deny, rest), dropRules(np.Allow, rest)
				case "mode":
					np.Mode = rest[0]
				}
				if np, err = c.SetNetworkPolicy(cmd.Context(), id, *np); err != nil {
					return apiFail(cmd, c, "net "+arg(id)+" "+sub, err)
				}
			}
			return printPolicy(cmd.OutOrStdout(), np, asJSON)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON: one event per line, or the policy")
	f.BoolVarP(&follow, "follow", "f", false, "follow new events until the sandbox ends")
	f.BoolVar(&denied, "denied", false, "only denied connections and requests")
	f.BoolVar(&problems, "problems", false, "only those denied by a rule or failed before any byte moved (what airlock exec sums up)")
	// Not --host: that is the daemon's address on every client command.
	f.StringVar(&dest, "dest", "", "only connections to this host (exact, as the gateway records it)")
	f.StringVar(&since, "since", "", "only events since a duration ago (10m) or a time (RFC 3339)")
	addHostFlag(cmd)
	return cmd
}

// parseSince parses --since: a duration before now, or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %s: want a duration (10m, 1h30m) or an RFC 3339 time (2006-01-02T15:04:05Z)", errdefs.Quote(v))
}

// listNetwork prints the audit, every page of it, or follows it.
func listNetwork(cmd *cobra.Command, c *client.Client, id string, q client.NetworkQuery, follow, asJSON bool) error {
	w := cmd.OutOrStdout()
	header := !asJSON // still to print, before the first event
	emit := func(ev api.NetworkEvent) error {
		if header {
			io.WriteString(w, networkLine(api.NetworkEvent{}))
			header = false
		}
		if asJSON {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		}
		_, err := io.WriteString(w, networkLine(ev))
		return err
	}
	if follow {
		if err := c.FollowNetwork(cmd.Context(), id, q, emit); err != nil {
			return apiFail(cmd, c, "net "+arg(id), err)
		}
		return nil
	}
	q.Limit = 1000
	seen := map[string]bool{}
	for {
		page, err := c.NetworkEvents(cmd.Context(), id, q)
		if err != nil {
			return apiFail(cmd, c, "net "+arg(id), err)
		}
		for _, ev := range page.Events {
			if err := emit(ev); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			if header {
				io.WriteString(w, networkLine(api.NetworkEvent{}))
			}
			return nil
		}
		if seen[page.NextCursor] {
			return apiFail(cmd, c, "net "+arg(id), errors.New("the daemon returned the same cursor twice"))
		}
		seen[page.NextCursor] = true
		q.Cursor = page.NextCursor
	}
}

// networkLine formats one event as a line of the table; the zero event is
// the header.
func networkLine(ev api.NetworkEvent) string {
	const format = "%-23s  %-8s  %-24s  %-7s  %-32s  %-20s  %7s  %7s  %8s  %s\n"
	if ev.Cursor == "" {
		return fmt.Sprintf(format, "TIME", "DECISION", "RULE", "METHOD", "HOST:PORT", "PATH", "UP", "DOWN", "DURATION", "NOTE")
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	decision := "deny"
	if ev.Allowed {
		decision = "allow"
	}
	d := time.Duration(ev.DurationMs * float64(time.Millisecond))
	dur := d.Round(time.Millisecond).String()
	if d < time.Millisecond {
		dur = d.Round(time.Microsecond).String()
	}
	return fmt.Sprintf(format, ev.Time.Local().Format("2006-01-02 15:04:05.000"), decision, dash(ev.Rule), dash(ev.Method),
		net.JoinHostPort(ev.Host, strconv.Itoa(ev.Port)), dash(ev.Path), sizeOf(ev.BytesUp), sizeOf(ev.BytesDown), dur, note(ev))
}

// note is the last column: the credentials added, and any error.
func note(ev api.NetworkEvent) string {
	var parts []string
	if ev.Credential != "" {
		parts = append(parts, "credential "+ev.Credential)
	}
	if ev.Error != "" {
		parts = append(parts, ev.Error)
	}
	return strings.Join(parts, "; ")
}

// sizeOf formats a byte count: 512B, 4.2K, 1.3M, 2.0G.
func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	f, suffix := float64(n)/unit, "K"
	for _, s := range []string{"M", "G", "T"} {
		if f < unit {
			break
		}
		f, suffix = f/unit, s
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + suffix
}

// addRules appends the rules not in list yet.
func addRules(list, rules []string) []string {
	for _, r := range rules {
		if !slices.Contains(list, r) {
			list = append(list, r)
		}
	}
	return list
}

// dropRules removes the rules from list.
func dropRules(list, rules []string) []string {
	return slices.DeleteFunc(list, func(r string) bool { return slices.Contains(rules, r) })
}

// printPolicy prints a network policy: one line per field, or JSON.
func printPolicy(w io.Writer, np *api.NetworkPolicy, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(np)
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "-"
		}
		return strings.Join(l, " ")
	}
	if _, err := fmt.Fprintf(w, "mode:  %s\nallow: %s\ndeny:  %s\n", np.Mode, list(np.Allow), list(np.Deny)); err != nil {
		return err
	}
	for _, r := range np.HTTP {
		methods, paths := list(r.Methods), list(r.Paths)
		if len(r.Methods) == 0 {
			methods = "any method"
		}
		if len(r.Paths) == 0 {
			paths = "any path"
		}
		if _, err := fmt.Fprintf(w, "http:  %s: %s on %s\n", strings.Join(r.Hosts, " "), methods, paths); err != nil {
			return err
		}
	}
	return nil
}
