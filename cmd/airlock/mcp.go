//go:build !airlock_lean

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/daemon"
	"github.com/airlock-dev/airlock/internal/mcpserver"
)

func newMCPCmd() *cobra.Command {
	var o mcpserver.Options
	var logLevel string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: mcpShort,
		Long: `Serve airlock sandboxes as MCP tools: create_sandbox, list_sandboxes,
destroy_sandbox, run_command, start_command, read_output, write_stdin,
stop_command, read_file, write_file, list_files, network_audit.

Claude Code:   claude mcp add airlock -- airlock mcp

It speaks MCP on stdin/stdout. With --listen ADDR it serves streamable HTTP
at http://ADDR/mcp instead, and every request needs the bearer token in
$` + mcpserver.TokenEnv + ` (at least 16 characters).

It uses the daemon named by --host (or $AIRLOCK_HOST, with $AIRLOCK_API_KEY),
else the one answering on ` + daemon.DefaultSocket() + `; without
one, or with --standalone or --config FILE, it runs a private daemon in its
own process (socket and store under ` + daemon.EphemeralRoot() + `), configured
by FILE in airlock serve's format. Without root, that needs cgroup_parent:
or insecure: {no_cgroups: true} in FILE.

The model may use only the named policies given with --policy (the first is
the default; none: the daemon's default policy), hold at most
--max-sandboxes sandboxes, and run commands for at most --max-exec-timeout.
The tools reach only the sandboxes this server created; when the client goes
(stdin closes) or on SIGTERM, it destroys them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(logLevel)); err != nil {
				return errors.New("--log-level: want debug, info, warn or error")
			}
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
			o.APIKey = os.Getenv("AIRLOCK_API_KEY")
			o.Token = os.Getenv(mcpserver.TokenEnv)
			if cmd.Flags().Changed("max-sandboxes") && o.MaxSandboxes < 1 {
				return errors.New("--max-sandboxes must be at least 1")
			}
			if cmd.Flags().Changed("max-exec-timeout") && o.MaxExecTimeout < time.Second {
				// 0 would mean the default to the server's options.
				return fmt.Errorf("--max-exec-timeout %v: want at least 1s", o.MaxExecTimeout)
			}
			if err := mcpserver.Run(cmd.Context(), o); err != nil {
				// One line (a YAML error spans several).
				msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), ":\n", ": ")
				return errors.New(strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Host, "host", "", "daemon address: unix:///path/to.sock, http://host:port or https://host:port (default $AIRLOCK_HOST, else the local daemon's socket if one answers, else standalone)")
	f.BoolVar(&o.Standalone, "standalone", false, "run a private daemon in this process even if one answers on the default socket")
	f.StringVarP(&o.ConfigFile, "config", "c", "", "configuration of the private daemon (YAML, airlock serve's format: policies, images, limits); implies --standalone")
	f.StringArrayVar(&o.Policies, "policy", nil, "a named policy the model may use (repeatable; the first is the default; none: the daemon's default policy)")
	f.IntVar(&o.MaxSandboxes, "max-sandboxes", mcpserver.DefaultMaxSandboxes, "most sandboxes the model may hold at once")
	f.DurationVar(&o.MaxExecTimeout, "max-exec-timeout", mcpserver.DefaultMaxExecTimeout, "longest timeout run_command may use")
	f.StringVar(&o.Listen, "listen", "", "serve streamable HTTP at http://ADDR/mcp instead of stdio (needs $"+mcpserver.TokenEnv+")")
	f.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error (the log goes to stderr)")
	return cmd
}
