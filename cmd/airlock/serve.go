//go:build !airlock_lean

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/daemon"
)

func newServeCmd() *cobra.Command {
	var configFile, socket, listen, dataDir, logFormat, logLevel string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: serveShort,
		Long: `Run the sandbox service: agents create sandboxes, run commands, move files
and destroy them over the HTTP API (/v1, described at /v1/openapi.json).

It listens on a unix socket (` + daemon.DefaultSocket() + ` by default, mode 0660)
and, with --listen, on TCP, where every request needs an API key
(airlock keys create). Settings come from --config (YAML), then the
environment (AIRLOCK_SOCKET, AIRLOCK_LISTEN, AIRLOCK_DATA_DIR, AIRLOCK_STATE_DIR,
AIRLOCK_LOG_FORMAT, AIRLOCK_LOG_LEVEL), then flags.

Sandboxes outlive the daemon: after a restart (even kill -9) running
sandboxes are re-adopted, or marked failed and cleaned up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if configFile == "" {
				configFile = os.Getenv("AIRLOCK_CONFIG")
			}
			c, err := daemon.Load(configFile)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			for name, dst := range map[string]*string{"socket": &c.Socket, "listen": &c.Listen, "data-dir": &c.DataDir, "log-format": &c.LogFormat, "log-level": &c.LogLevel} {
				if f.Changed(name) {
					v, _ := f.GetString(name)
					*dst = v
				}
			}
			log, err := daemon.Logger(os.Stderr, c.LogFormat, c.LogLevel)
			if err != nil {
				return err
			}
			return daemon.Run(cmd.Context(), c, log)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&configFile, "config", "c", "", "configuration file (YAML); default $AIRLOCK_CONFIG")
	f.StringVar(&socket, "socket", "", "unix socket to listen on (default "+daemon.DefaultSocket()+")")
	f.StringVar(&listen, "listen", "", "also listen on this TCP address, e.g. 127.0.0.1:7070 (API keys required)")
	f.StringVar(&dataDir, "data-dir", "", "directory of the state database (default /var/lib/airlock as root)")
	f.StringVar(&logFormat, "log-format", "", "text or json (default text)")
	f.StringVar(&logLevel, "log-level", "", "debug, info, warn or error (default info)")
	return cmd
}
