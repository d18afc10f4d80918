package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/egress/netsum"
)

type execFlags struct {
	tty, interactive bool
	env              []string
	cwd              string
	timeout          time.Duration
}

func newExecCmd() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox of the daemon",
		Long: `Run a command in sandbox ID and exit with its status (128+N when a signal N
killed it). Its stdout and stderr are streamed here as it runs; Ctrl-C and
SIGTERM are forwarded to it. Without -i its stdin is empty; with -i it reads
this stdin. With -t it runs on a terminal that takes this stdin and prints on
this stdout (raw mode when stdin is a terminal, window size kept in step).
Once the command has ended, what the sandbox's egress gateway
denied or could not complete since it started is summed up on stderr in a
few lines, each denial with the 'airlock net ID allow' rule that would
allow it.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExec(cmd, &f, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.BoolVarP(&f.tty, "tty", "t", false, "run the command on a terminal")
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "feed this stdin to the command (without -t)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE, or pass KEY from this environment (repeatable)")
	fl.StringVarP(&f.cwd, "workdir", "w", "", "working directory in the sandbox (default /workspace)")
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the command after that long (exit 124)")
	addHostFlag(cmd)
	return cmd
}

// execArgs splits the arguments of exec into the sandbox id and the
// command, dropping the "--" between them (flags stop at the id, so it is
// still there).
func execArgs(args []string) (string, []string, error) {
	id, argv := args[0], args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return "", nil, errors.New("exec: no command given (airlock exec ID -- COMMAND [ARG...])")
	}
	return id, argv, nil
}

func runExec(cmd *cobra.Command, f *execFlags, args []string) error {
	id, argv, err := execArgs(args)
	if err != nil {
		return err
	}
	env, err := parseEnv(f.env)
	if err != nil {
		return err
	}
	if f.timeout < 0 {
		return fmt.Errorf("--timeout %s: must be positive", f.timeout)
	}
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	req := &api.ExecRequest{Argv: argv, Env: env, Cwd: f.cwd, TimeoutSeconds: f.timeout.Seconds()}
	if f.tty {
		return execTTY(cmd, c, id, req)
	}
	return execPlain(cmd, c, id, req, f)
}

// signalName is the name the API takes for sig ("INT").
func signalName(sig os.Signal) string {
	if s, ok := sig.(unix.Signal); ok {
		if n := unix.SignalName(s); n != "" {
			return strings.TrimPrefix(n, "SIG")
		}
		return fmt.Sprint(int(s))
	}
	return sig.String()
}

// forwarded are the signals exec hands to the command rather than dying.
var forwarded = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT}

func execPlain(cmd *cobra.Command, c *client.Client, id string, req *api.ExecRequest, f *execFlags) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	p, err := c.StartProcess(ctx, id, req)
	if err != nil {
		return startFail(cmd, c, err)
	}

	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, forwarded...)
	defer signal.Stop(sigc)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case sig := <-sigc:
				if err := c.Signal(ctx, id, p.ID, signalName(sig)); err != nil && !errors.Is(err, client.ErrConflict) {
					fmt.Fprintf(stderr, "airlock: cannot forward %v: %s\n", sig, describe(c, err))
				}
			}
		}
	}()

	if f.interactive {
		go feedStdin(ctx, c, id, p.ID, os.Stdin, stderr)
	} else if err := c.CloseStdin(ctx, id, p.ID); err != nil && !errors.Is(err, client.ErrConflict) && !errors.Is(err, client.ErrNotFound) {
		fmt.Fprintf(stderr, "airlock: warning: cannot close the command's stdin: %s\n", describe(c, err))
	}

	var exit *api.OutputEvent
	err = c.FollowOutput(ctx, id, p.ID, "", outputPrinter(cmd, func(ev api.OutputEvent) { exit = &ev }))
	if err != nil {
		return apiFail(cmd, c, "exec", err)
	}
	netSummary(ctx, c, id, p.StartedAt, stderr)
	code := -1
	switch {
	case exit.Signal != 0:
		code = 128 + exit.Signal
	case exit.ExitCode != nil:
		code = *exit.ExitCode
	}
	if code != 0 {
		// The exit event may not tell it all (a timeout).
		if pr, err := c.GetProcess(ctx, id, p.ID); err == nil {
			if pr.TimedOut {
				fmt.Fprintf(stderr, "airlock: timeout: the command was killed after %s\n", f.timeout)
				return exitError{exitTimeout}
			}
			if code < 0 {
				code = processCode(pr)
			}
		}
	}
	if code < 0 {
		fmt.Fprintf(stderr, "airlock: exec: the daemon did not report the status of process %s\n", p.ID)
		return exitError{exitAPI}
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// netSummary prints what sandbox id's egress gateway denied or could not
// complete since a command started (other processes of the sandbox may
// have made some of it), each denial with the airlock net rule that would
// allow it. Best effort, like the command's own output: a daemon that
// cannot answer says so at the next call.
func netSummary(ctx context.Context, c *client.Client, id string, since time.Time, w io.Writer) {
	sum, err := netsum.FromAudit(ctx, c, id, since, netsum.DefaultMax)
	if err != nil {
		return
	}
	sum.Print(w, netsum.Report{Of: "the sandbox's connections and requests since the command started",
		Where: "all of them: airlock net " + id + " --problems", Allow: "airlock net " + id + " allow"})
}

// startFail reports a command that could not be started: 127 when it does
// not exist in the sandbox, 126 when it cannot be executed (as a shell and
// `airlock run` report them), otherwise the API failure's status.
func startFail(cmd *cobra.Command, c *client.Client, err error) error {
	code := exitAPI
	switch {
	case errors.Is(err, client.ErrCommandNotFound):
		code = exitNotFound
	case errors.Is(err, client.ErrNotExecutable):
		code = exitNotExec
	}
	apiFail(cmd, c, "exec", err)
	return exitError{code}
}

// processCode is a finished process's status as a shell reports it, or -1.
func processCode(p *api.Process) int {
	switch {
	case p.Signal != 0:
		return 128 + p.Signal
	case p.ExitCode != nil:
		return *p.ExitCode
	}
	return -1
}

// feedStdin copies r to the process's stdin, one request per read so that
// what is typed arrives as it is typed, and closes it at end-of-file.
func feedStdin(ctx context.Context, c *client.Client, id, pid string, r io.Reader, stderr io.Writer) {
	gone := func(err error) bool {
		return errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrNotFound) || ctx.Err() != nil
	}
	buf := make([]byte, 64<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := c.WriteStdin(ctx, id, pid, bytes.NewReader(buf[:n]), false); err != nil {
				if !gone(err) {
					fmt.Fprintf(stderr, "airlock: cannot write to the command's stdin: %s\n", describe(c, err))
				}
				return
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				fmt.Fprintf(stderr, "airlock: reading stdin: %v\n", rerr)
			}
			if err := c.CloseStdin(ctx, id, pid); err != nil && !gone(err) {
				fmt.Fprintf(stderr, "airlock: cannot close the command's stdin: %s\n", describe(c, err))
			}
			return
		}
	}
}

func execTTY(cmd *cobra.Command, c *client.Client, id string, req *api.ExecRequest) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	fd := int(os.Stdin.Fd())
	isTerm := term.IsTerminal(fd)
	if t := os.Getenv("TERM"); t != "" {
		if _, set := req.Env["TERM"]; !set {
			if req.Env == nil {
				req.Env = map[string]string{}
			}
			req.Env["TERM"] = t
		}
	}
	start := api.PTYStart{ExecRequest: *req}
	if isTerm {
		if cols, rows, err := term.GetSize(fd); err == nil {
			start.Cols, start.Rows = uint16(cols), uint16(rows)
		}
	}

	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, append([]os.Signal{unix.SIGWINCH}, forwarded...)...)
	defer signal.Stop(sigc)

	s, err := c.PTY(ctx, id, start)
	if err != nil {
		return startFail(cmd, c, err)
	}
	defer s.Close()

	restore := func() {}
	if isTerm {
		if state, err := term.MakeRaw(fd); err == nil {
			var once sync.Once
			restore = func() { once.Do(func() { term.Restore(fd, state) }) }
			defer restore()
		}
	}
	go func() {
		if _, err := io.Copy(s, os.Stdin); err == nil && !isTerm {
			// End of piped input: what a terminal sends for end-of-file.
			s.Write([]byte{4})
		}
	}()
	copied := make(chan struct{})
	go func() { defer close(copied); io.Copy(cmd.OutOrStdout(), s) }()

	type result struct {
		exit api.PTYExit
		err  error
	}
	waitc := make(chan result, 1)
	go func() {
		ex, err := s.Wait()
		waitc <- result{ex, err}
	}()
	for {
		select {
		case sig := <-sigc:
			if sig == unix.SIGWINCH {
				if cols, rows, err := term.GetSize(fd); err == nil {
					s.Resize(uint16(cols), uint16(rows))
				}
				continue
			}
			s.Signal(signalName(sig))
		case r := <-waitc:
			select {
			case <-copied:
			case <-time.After(2 * time.Second):
			}
			restore()
			if r.err == nil && r.exit.ProcessID != "" {
				// After the terminal is restored: lines of their own.
				if pr, err := c.GetProcess(ctx, id, r.exit.ProcessID); err == nil {
					netSummary(ctx, c, id, pr.StartedAt, stderr)
				}
			}
			if r.err != nil {
				if r.exit.Error != "" {
					// The command could not run.
					fmt.Fprintf(stderr, "airlock: exec: %s\n", r.exit.Error)
					if code := ptyCode(r.exit); code > 0 && code < 256 {
						return exitError{code}
					}
					return exitError{exitNotExec}
				}
				return apiFail(cmd, c, "exec", r.err)
			}
			if code := ptyCode(r.exit); code != 0 {
				return exitError{code}
			}
			return nil
		}
	}
}

// ptyCode is a PTY command's status as a shell reports it.
func ptyCode(e api.PTYExit) int {
	if e.Signal != 0 {
		return 128 + e.Signal
	}
	return e.ExitCode
}
