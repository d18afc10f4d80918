package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/rundir"
)

// newBenchDaemon makes the directory of a daemon under measurement; the
// caller sets cfg, starts it and defers cleanup, which deletes every
// sandbox before it stops the daemon (they outlive a daemon by design) and
// removes the directory.
func newBenchDaemon(al, prefix string) (*benchDaemon, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o711)
	return &benchDaemon{airlock: al, dir: dir}, nil
}

// benchDaemon is a daemon under measurement (the serve, gvisor, E2B and
// scale benches), restartable for cleanup.
type benchDaemon struct {
	airlock, dir, cfg string
	cmd               *exec.Cmd
	exited            chan struct{}
	log               syncBuffer
	c                 *client.Client
	// created is set once a sandbox may exist: before that, cleanup has
	// nothing to delete and never restarts a daemon that failed to start.
	created bool
}

func (d *benchDaemon) sock() string { return filepath.Join(d.dir, "airlock.sock") }

// stateDir is the daemon's state directory: as root, beside a default
// daemon's (/run/airlock/serve), on the file system users get (see
// internal/rundir), else in its directory.
func (d *benchDaemon) stateDir() string {
	if os.Geteuid() == 0 {
		return filepath.Join(rundir.Dir, "bench-"+filepath.Base(d.dir))
	}
	return filepath.Join(d.dir, "state")
}

// remove removes the daemon's directories (its state directory's
// -gvisor and -egress siblings too).
func (d *benchDaemon) remove() {
	os.RemoveAll(d.dir)
	for _, s := range []string{"", "-gvisor", "-egress"} {
		os.RemoveAll(d.stateDir() + s)
	}
}

func (d *benchDaemon) start(ctx context.Context) error {
	cfgFile := filepath.Join(d.dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(d.cfg), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(d.airlock, "serve", "--config", cfgFile)
	cmd.Stderr = &d.log
	// Its own process group: a Ctrl-C in the terminal must reach this
	// program only, which deletes the sandboxes before stopping the
	// daemon (a daemon stopped first would leave them running, detached,
	// for the next daemon to adopt).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(d.exited) }()
	d.c, _ = client.New("unix://"+d.sock(), "")
	deadline := time.Now().Add(30 * time.Second)
	for d.c.Ready(ctx) != nil {
		select {
		case <-d.exited:
			return fmt.Errorf("daemon exited: %s\n%s", cmd.ProcessState, d.log.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon not ready after 30s:\n%s", d.log.String())
		}
	}
	return nil
}

func (d *benchDaemon) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return d.cmd != nil
	}
}

// cleanup deletes every sandbox of the daemon (restarting it first if it
// died: its sandboxes outlive it), stops it and removes the directory.
func (d *benchDaemon) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if !d.created {
		if d.alive() {
			d.cmd.Process.Signal(syscall.SIGTERM)
			<-d.exited
		}
		d.remove()
		return
	}
	if !d.alive() {
		if err := d.start(ctx); err != nil {
			logf("cleanup: restart the daemon to delete its sandboxes: %v; left in %s", err, d.dir)
			return
		}
	}
	left := -1
	for try := 0; try < 5; try++ {
		// A creation the interrupted client gave up on may still finish
		// in the daemon: wait for those before listing.
		for i := 0; i < 600 && metric(d.sock(), `airlock_sandboxes{state="creating"}`) > 0; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		all, err := d.c.AllSandboxes(ctx, client.ListOptions{})
		if err != nil {
			logf("cleanup: list: %v", err)
			break
		}
		if left = len(all); left == 0 {
			break
		}
		fmt.Fprintf(os.Stderr, "cleaning up: deleting %d sandboxes\n", len(all))
		ids := make(chan string)
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range ids {
					d.c.DeleteSandbox(ctx, id)
				}
			}()
		}
		for _, s := range all {
			ids <- s.ID
		}
		close(ids)
		wg.Wait()
	}
	// A clean stop destroys the warm pool too.
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		logf("cleanup: daemon did not stop in 60s; killing it")
		d.cmd.Process.Kill()
		<-d.exited
	}
	if left != 0 {
		logf("cleanup: %d sandboxes may be left; the daemon's directories are kept in %s and %s", left, d.dir, d.stateDir())
		return
	}
	d.remove()
}

// syncBuffer is a bytes.Buffer safe for the daemon's stderr copier and
// readers at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil // enough to diagnose
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// createExecMs creates a sandbox, runs `true` in it and deletes it: the
// milliseconds from the request to the exec's answer (the deletion is not
// timed, but its failure is an error).
func createExecMs(ctx context.Context, c *client.Client, req *api.CreateSandboxRequest) (float64, error) {
	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	ex, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
	ms := float64(time.Since(t0).Microseconds()) / 1000
	derr := c.DeleteSandbox(ctx, sb.ID)
	if err == nil && ex.ExitCode != 0 {
		err = fmt.Errorf("true exited %d", ex.ExitCode)
	}
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	if derr != nil {
		return 0, fmt.Errorf("delete: %w", derr)
	}
	return ms, nil
}
