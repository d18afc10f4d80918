package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func newEventsCmd() *cobra.Command {
	var asJSON, follow bool
	var types []string
	var since string
	cmd := &cobra.Command{
		Use:   "events ID",
		Short: "Show a sandbox's activity record (sandboxes made with --record)",
		Long: `Print the activity record of sandbox ID, made with airlock create --record:
written by the daemon, never by code inside the sandbox. One line per event:
time, type, pid in the sandbox, and what happened (an exec's argv, result
and working directory; an exit's status and duration; a network request;
a resource use sample; a loss of events and why). -f follows new events
until the sandbox ends; --type (repeatable or comma-separated) and --since
filter; --json prints the events as JSON lines.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			var q client.EventsQuery
			for _, t := range types {
				for _, s := range strings.Split(t, ",") {
					if s = strings.TrimSpace(s); s != "" {
						q.Types = append(q.Types, s)
					}
				}
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				q.Since = t
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return listEvents(cmd, c, id, q, follow, asJSON)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON: one event per line")
	f.BoolVarP(&follow, "follow", "f", false, "follow new events until the sandbox ends")
	f.StringArrayVar(&types, "type", nil, "only events of this type: start, exec, exit, net, usage, loss, end (repeatable)")
	f.StringVar(&since, "since", "", "only events since a duration ago (10m) or a time (RFC 3339)")
	addHostFlag(cmd)
	return cmd
}

// listEvents prints the record, every page of it, or follows it.
func listEvents(cmd *cobra.Command, c *client.Client, id string, q client.EventsQuery, follow, asJSON bool) error {
	w := cmd.OutOrStdout()
	emit := func(ev api.RecordEvent) error {
		if asJSON {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		}
		_, err := io.WriteString(w, eventLine(ev))
		return err
	}
	if follow {
		if err := c.FollowEvents(cmd.Context(), id, q, emit); err != nil {
			return apiFail(cmd, c, "events "+arg(id), err)
		}
		return nil
	}
	q.Limit = 1000
	seen := map[string]bool{}
	for {
		page, err := c.Events(cmd.Context(), id, q)
		if err != nil {
			return apiFail(cmd, c, "events "+arg(id), err)
		}
		for _, ev := range page.Events {
			if err := emit(ev); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		if seen[page.NextCursor] {
			return apiFail(cmd, c, "events "+arg(id), errors.New("the daemon returned the same cursor twice"))
		}
		seen[page.NextCursor] = true
		q.Cursor = page.NextCursor
	}
}

// eventLine formats one event as a line: time, type, pid, detail.
func eventLine(ev api.RecordEvent) string {
	pid := "-"
	if ev.Pid != 0 {
		pid = strconv.Itoa(ev.Pid)
	}
	var d string
	switch ev.Type {
	case api.RecordStart:
		d = "record of " + ev.Sandbox
	case api.RecordExec:
		argv, _ := json.Marshal(ev.Argv)
		d = fmt.Sprintf("[%s] %s %s", ev.Result, ev.Path, argv)
		if ev.PathTarget != "" {
			d += " -> " + ev.PathTarget
		}
		if ev.ArgvTruncated {
			d += " (argv truncated)"
		}
		d += fmt.Sprintf(" cwd=%s ppid=%d", ev.Cwd, ev.PPid)
	case api.RecordExit:
		switch {
		case ev.Lost:
			d = "exit not seen"
		case ev.Exited && ev.Code != nil:
			d = fmt.Sprintf("exited %d", *ev.Code)
		default:
			d = fmt.Sprintf("killed by signal %d", ev.Signal)
			if ev.Core {
				d += " (core dumped)"
			}
		}
		if ev.DurationMs != nil {
			d += " after " + time.Duration(*ev.DurationMs*float64(time.Millisecond)).Round(time.Millisecond).String()
		}
	case api.RecordNet:
		decision := "deny"
		if ev.Allowed != nil && *ev.Allowed {
			decision = "allow"
		}
		d = fmt.Sprintf("%s %s %s:%d%s (%s)", decision, ev.Method, ev.Host, ev.Port, ev.URLPath, ev.Rule)
		if ev.Error != "" {
			d += " " + ev.Error
		}
	case api.RecordUsage:
		num := func(p *uint64) string {
			if p == nil {
				return "-"
			}
			return strconv.FormatUint(*p, 10)
		}
		cpu := "-"
		if ev.CPUNs != nil {
			cpu = time.Duration(*ev.CPUNs).Round(time.Millisecond).String()
		}
		mem := "-"
		if ev.MemoryBytes != nil {
			mem = sizeOf(int64(*ev.MemoryBytes))
		}
		d = fmt.Sprintf("cpu=%s memory=%s pids=%s", cpu, mem, num(ev.Pids))
	default:
		d = ev.Reason
		if ev.Error != "" {
			d += " " + ev.Error
		}
	}
	return fmt.Sprintf("%-23s  %-5s  %6s  %s\n", ev.Time.Local().Format("2006-01-02 15:04:05.000"), ev.Type, pid, d)
}
