//go:build linux

package serve

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// hashedOutput is a command that writes n random bytes to its stdout and
// then, to its stderr, their SHA-256 as computed inside the sandbox (as
// sha256sum prints it): what arrives is checked against that.
func hashedOutput(n int64) []string {
	return []string{"sh", "-c", fmt.Sprintf("{ head -c %d /dev/urandom | tee /proc/self/fd/3 | sha256sum >&2; } 3>&1", n)}
}

// received hashes the stdout a reader got and keeps its stderr.
type received struct {
	h      hash.Hash
	n      int64
	stderr bytes.Buffer
	lost   uint64
	exit   *api.OutputEvent
}

func newReceived() *received { return &received{h: sha256.New()} }

func (r *received) event(ev api.OutputEvent) error {
	switch ev.Kind {
	case api.EventStdout:
		r.h.Write(ev.Data)
		r.n += int64(len(ev.Data))
	case api.EventStderr:
		r.stderr.Write(ev.Data)
	case api.EventLost:
		r.lost += ev.Bytes
	case api.EventExit:
		r.exit = &ev
	}
	return nil
}

// check compares what arrived with what the sandbox hashed.
func (r *received) check(t *testing.T, what string, n int64) {
	t.Helper()
	got := hex.EncodeToString(r.h.Sum(nil))
	want, _, _ := strings.Cut(r.stderr.String(), " ")
	if r.lost != 0 || r.n != n || got != want {
		t.Fatalf("%s: got %d of %d bytes (%d reported lost), sha256 %s, the sandbox's %q", what, r.n, n, r.lost, got, r.stderr.String())
	}
	if r.exit == nil || r.exit.ExitCode == nil || *r.exit.ExitCode != 0 {
		t.Fatalf("%s: exit event %+v", what, r.exit)
	}
}

// longCtx is a context for tests that move a lot of data.
func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

const streamBytes = 1 << 30

// TestOutputBackpressure: a client that is attached and reading gets every
// byte of a process that writes far faster than the output travels (1 GiB
// of random data through a 1 MiB buffer in the agent): through `airlock
// exec`, the SDK's NDJSON follow stream and an SSE stream, the SHA-256 of
// what arrived equals the one computed inside the sandbox, and no byte is
// reported lost. The process is slowed down instead.
func TestOutputBackpressure(t *testing.T) {
	d := startDaemon(t, "")
	ctx := longCtx(t)
	sb := d.create(t, nil)

	t.Run("cli", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, airlockBin, append([]string{"exec", sb.ID, "--"}, hashedOutput(streamBytes)...)...)
		cmd.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+d.sock)
		r := newReceived()
		cmd.Stderr = &r.stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(r.h, stdout)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("airlock exec: %v\n%s", err, r.stderr.String())
		}
		r.n = n
		zero := 0
		r.exit = &api.OutputEvent{ExitCode: &zero}
		if strings.Contains(r.stderr.String(), "lost") {
			t.Fatalf("airlock exec reported lost output:\n%.2000s", r.stderr.String())
		}
		r.check(t, "airlock exec", streamBytes)
		t.Logf("airlock exec: %d MiB in %v", streamBytes>>20, time.Since(start).Round(time.Millisecond))
	})

	t.Run("sdk", func(t *testing.T) {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: hashedOutput(streamBytes)})
		if err != nil {
			t.Fatal(err)
		}
		r := newReceived()
		start := time.Now()
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, "", r.event); err != nil {
			t.Fatal(err)
		}
		r.check(t, "FollowOutput", streamBytes)
		t.Logf("FollowOutput (NDJSON): %d MiB in %v", streamBytes>>20, time.Since(start).Round(time.Millisecond))
	})

	t.Run("sse", func(t *testing.T) {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: hashedOutput(streamBytes)})
		if err != nil {
			t.Fatal(err)
		}
		s, err := d.c.Output(ctx, sb.ID, p.ID, client.OutputOptions{Follow: true, SSE: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r := newReceived()
		start := time.Now()
		for {
			ev, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			r.event(ev)
		}
		r.check(t, "SSE", streamBytes)
		t.Logf("SSE: %d MiB in %v", streamBytes>>20, time.Since(start).Round(time.Millisecond))
	})
}

// TestOutputBackpressureReaders: several attached readers, one of them
// slow, each get every byte; a reader that goes away stops holding the
// process back, which then finishes with ring semantics (a later reader is
// told exactly how much was lost, as a reader of a process nobody was
// attached to is); exec keeps the first max_output bytes exactly while the
// process writes far more, and reports the rest as truncated.
func TestOutputBackpressureReaders(t *testing.T) {
	d := startDaemon(t, "")
	ctx := longCtx(t)
	sb := d.create(t, nil)
	const n = 32 << 20

	t.Run("two readers", func(t *testing.T) {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: hashedOutput(n)})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		rs := []*received{newReceived(), newReceived()}
		errs := make([]error, 2)
		for i, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = d.c.FollowOutput(ctx, sb.ID, p.ID, "", func(ev api.OutputEvent) error {
					if i == 1 {
						time.Sleep(5 * time.Millisecond) // a slow client
					}
					return r.event(ev)
				})
			}()
		}
		wg.Wait()
		for i, r := range rs {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			r.check(t, fmt.Sprintf("reader %d", i), n)
		}
	})

	t.Run("attach after start", func(t *testing.T) {
		// The output is held from the start: a reader that attaches a
		// moment after the process has written far more than the agent's
		// buffer (as airlock exec does, after closing stdin) misses
		// nothing.
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: hashedOutput(n)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		r := newReceived()
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, "", r.event); err != nil {
			t.Fatal(err)
		}
		r.check(t, "reader attached after a second", n)
	})

	t.Run("stdin", func(t *testing.T) {
		// A process fed a large stdin with the request writes more output
		// meanwhile than the agent buffers, before any reader could
		// attach: exec gets its first MiB, and a background process's
		// follower every byte.
		in := make([]byte, 16<<20)
		crand.Read(in)
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat"}, Stdin: in})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || !res.StdoutTruncated || !bytes.HasPrefix(res.Stdout, in[:1<<20]) {
			t.Fatalf("exec cat: exit %d, truncated %v, first MiB equal %v", res.ExitCode, res.StdoutTruncated, bytes.HasPrefix(res.Stdout, in[:1<<20]))
		}
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat"}, Stdin: in})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.c.CloseStdin(ctx, sb.ID, p.ID); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		lost := uint64(0)
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, "", func(ev api.OutputEvent) error {
			if ev.Kind == api.EventStdout {
				out.Write(ev.Data)
			}
			lost += ev.Bytes
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if lost != 0 || !bytes.Equal(out.Bytes(), in) {
			t.Fatalf("background cat: %d bytes back of %d, %d lost, equal %v", out.Len(), len(in), lost, bytes.Equal(out.Bytes(), in))
		}
	})

	t.Run("reader gone", func(t *testing.T) {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: hashedOutput(n)})
		if err != nil {
			t.Fatal(err)
		}
		s, err := d.c.Output(ctx, sb.ID, p.ID, client.OutputOptions{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := s.Next(); err != nil || ev.Kind != api.EventStdout {
			t.Fatalf("first event: %+v %v", ev, err)
		}
		s.Close()
		// Held back by nobody, the process runs to its end...
		done, err := d.c.WaitProcess(ctx, sb.ID, p.ID, 5*time.Minute)
		if err != nil || done.State != api.ProcessExited {
			t.Fatalf("process after its reader left: %+v %v", done, err)
		}
		// ...and its buffer kept only the tail: a reader from the start
		// learns how much it lost, and gets the rest.
		r := newReceived()
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, "", r.event); err != nil {
			t.Fatal(err)
		}
		if r.lost == 0 || int64(r.lost)+r.n != n || r.n > 1<<20 {
			t.Fatalf("after the reader left: %d bytes lost, %d read, want %d in all with at most 1 MiB read", r.lost, r.n, n)
		}
	})

	t.Run("exec cap", func(t *testing.T) {
		// seq's output is known here: the first MiB must be exactly its
		// first MiB, however far the process outruns the reader.
		const count = 3000000
		var want bytes.Buffer
		for i := 1; i <= count; i++ {
			want.WriteString(strconv.Itoa(i))
			want.WriteByte('\n')
		}
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"seq", strconv.Itoa(count)}})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || !res.StdoutTruncated || !bytes.HasPrefix(res.Stdout, want.Bytes()[:1<<20]) {
			t.Fatalf("exec: exit %d, truncated %v, stdout starts %q", res.ExitCode, res.StdoutTruncated, res.Stdout[:min(len(res.Stdout), 40)])
		}
		m := regexp.MustCompile(`\[airlock: output truncated, (\d+) more bytes not shown\]`).FindSubmatch(res.Stdout[1<<20:])
		if m == nil {
			t.Fatalf("no truncation marker after the first MiB: %q", res.Stdout[1<<20:])
		}
		if more, _ := strconv.Atoi(string(m[1])); more <= 0 || more > want.Len()-1<<20 {
			t.Fatalf("truncation marker counts %d more bytes, the output has %d beyond the cap", more, want.Len()-1<<20)
		}
		// A child left behind holds the output open: exec answers when
		// the process exits, with what it wrote.
		res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo hi; sleep 600 &"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hi\n" {
			t.Fatalf("exec with a background child: %+v %v", res, err)
		}
	})
}

// TestOutputBackpressureRestart: the daemon restarts (SIGTERM, SIGKILL)
// while a client is attached to a process that writes far more than the
// agent buffers: the reader's hold outlives the daemon for a grace period,
// so the client, which resumes at its cursor with the next daemon, gets
// every byte.
func TestOutputBackpressureRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			d := startDaemon(t, "")
			ctx := longCtx(t)
			sb := d.create(t, nil)
			const n = 64 << 20
			p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: hashedOutput(n)})
			if err != nil {
				t.Fatal(err)
			}
			r := newReceived()
			half := make(chan struct{})
			var once sync.Once
			followed := make(chan error, 1)
			c := d.c // the client keeps the socket's path across the restart
			go func() {
				followed <- c.FollowOutput(ctx, sb.ID, p.ID, "", func(ev api.OutputEvent) error {
					time.Sleep(2 * time.Millisecond) // a slow client: the process waits for it
					if r.n >= 8<<20 {
						once.Do(func() { close(half) })
					}
					return r.event(ev)
				})
			}()
			select {
			case <-half:
			case err := <-followed:
				t.Fatalf("follow ended before the restart: %v", err)
			}
			d.restart(sig)
			if err := <-followed; err != nil {
				t.Fatal(err)
			}
			r.check(t, "across the restart", n)
		})
	}
}
