package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

func newPortCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "port ID PORT [--listen ADDR]",
		Short: "Forward a local port to a port inside a sandbox",
		Long: `Forward connections to a local address (default: a free loopback port) to
127.0.0.1:PORT inside sandbox ID, through the daemon, until interrupted.
The daemon connects from outside into the sandbox's network namespace, so
the sandbox's egress policy is unchanged. The local address is printed
first, on a line of its own.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return fmt.Errorf("port %s: want 1 to 65535", arg(args[1]))
			}
			// An empty host would listen on every interface: only when
			// said so.
			if host, _, err := net.SplitHostPort(listen); err != nil || host == "" {
				return fmt.Errorf("--listen %s: want HOST:PORT with a host (0.0.0.0:PORT for every interface)", errdefs.Quote(listen))
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			// Check once, before listening, that the port answers.
			probe, err := c.DialPort(cmd.Context(), id, port)
			if err != nil {
				return apiFail(cmd, c, "port", err)
			}
			probe.Close()
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen %s: %v", arg(listen), err)
			}
			defer l.Close()
			fmt.Fprintln(cmd.OutOrStdout(), l.Addr().String())
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: forwarding %s to port %d of sandbox %s (Ctrl-C stops)\n", l.Addr(), port, id)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			go func() { <-ctx.Done(); l.Close() }()
			var wg sync.WaitGroup
			defer wg.Wait()
			for {
				lc, err := l.Accept()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("accept: %v", err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer lc.Close()
					rc, err := c.DialPort(ctx, id, port)
					if err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "airlock: port: %s\n", describe(c, err))
						return
					}
					defer rc.Close()
					// Each end of stream is passed on as a half-close, so a
					// client that ends its request still reads the answer.
					done := make(chan struct{})
					go func() {
						if _, err := io.Copy(rc, lc); err != nil || rc.CloseWrite() != nil {
							rc.Close()
						}
						close(done)
					}()
					if _, err := io.Copy(lc, rc); err != nil || lc.(*net.TCPConn).CloseWrite() != nil { // Listen("tcp") accepts TCP
						lc.Close()
					}
					<-done
				}()
			}
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "the local address to listen on")
	addHostFlag(cmd)
	return cmd
}
