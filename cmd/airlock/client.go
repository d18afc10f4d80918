package main

// The commands that talk to a daemon (`airlock serve`) through package
// client share what is here: the --host flag, the client, and how API
// errors are reported (one line, exit 1; usage errors exit 2).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/errdefs"
)

// exitAPI is the status of a command the daemon refused or could not serve.
const exitAPI = 1

// addHostFlag adds --host to a command that talks to the daemon.
func addHostFlag(cmd *cobra.Command) {
	cmd.Flags().String("host", "", "daemon address: unix:///path/to.sock, http://host:port or https://host:port (default $AIRLOCK_HOST, else the local daemon's socket)")
}

// newClient returns a client of the daemon named by --host (or
// $AIRLOCK_HOST, or the default socket) with the key in $AIRLOCK_API_KEY.
func newClient(cmd *cobra.Command) (*client.Client, error) {
	host, _ := cmd.Flags().GetString("host")
	c, err := client.New(host, os.Getenv("AIRLOCK_API_KEY"))
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "airlock: "))
	}
	return c, nil
}

// apiFail reports err on one line of stderr, prefixed with what when it is
// not empty, and returns the error that makes airlock exit 1.
func apiFail(cmd *cobra.Command, c *client.Client, what string, err error) error {
	msg := describe(c, err)
	if what != "" {
		msg = what + ": " + msg
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %s\n", errdefs.Clip(msg))
	return exitError{exitAPI}
}

// arg returns a command-line argument for an error line: as given when it
// is short, quoted and cut to its start (errdefs.Quote) when it is longer
// than errdefs.MaxEcho bytes.
func arg(s string) string {
	if len(s) <= errdefs.MaxEcho {
		return s
	}
	return errdefs.Quote(s)
}

// describe turns an error of the client into a message for people.
func describe(c *client.Client, err error) string {
	if c != nil && isUnreachable(err) {
		inner := err
		var ue *url.Error
		if errors.As(err, &ue) {
			inner = ue.Err
		}
		if c.Socket() != "" {
			return fmt.Sprintf("cannot reach the airlock daemon at %s: it is not running (start it with `airlock serve`), or set AIRLOCK_HOST or --host to where it listens (%v)", c.Host(), inner)
		}
		return fmt.Sprintf("cannot reach the airlock daemon at %s: %v", c.Host(), inner)
	}
	// The SDK's errors start with "airlock: ", and so does the line.
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "airlock: "), ": airlock: ", ": ")
}

// isUnreachable reports whether err says nothing listens where the daemon
// should.
func isUnreachable(err error) bool {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist)
}

// eachRef runs do for every reference a command was given (sandbox ids,
// snapshot names): one that fails is reported and the others still run;
// the result is the last failure. A daemon that cannot be reached ends it
// at once (every other call would say the same).
func eachRef(cmd *cobra.Command, c *client.Client, verb string, refs []string, do func(context.Context, string) error) error {
	var failed error
	for _, ref := range refs {
		if err := do(cmd.Context(), ref); err != nil {
			failed = apiFail(cmd, c, verb+" "+arg(ref), err)
			if isUnreachable(err) {
				break
			}
		}
	}
	return failed
}

// parsePairs parses repeated K=V flags into a map.
func parsePairs(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %s: want KEY=VALUE", flag, errdefs.Quote(p))
		}
		m[k] = v
	}
	return m, nil
}

// parseEnv parses repeated -e flags: KEY=VALUE, or KEY to pass KEY's value
// from this environment (skipped when unset).
func parseEnv(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if k == "" {
			return nil, fmt.Errorf("--env %s: want KEY=VALUE or KEY", errdefs.Quote(p))
		}
		if !ok {
			if v, ok = os.LookupEnv(k); !ok {
				continue
			}
		}
		m[k] = v
	}
	return m, nil
}

// formatLabels returns labels as "k=v,k2=v2", sorted, or "-".
func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// shortDuration formats d for a table: "45s", "12m", "3h", "2d".
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
