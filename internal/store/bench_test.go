package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchStore opens a store of its own for b, closed when b ends.
func benchStore(b *testing.B) (*Store, context.Context) {
	s, err := Open(context.Background(), b.TempDir()+"/airlock.db")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, context.Background()
}

// BenchmarkPutProcess is the store's part of every exec: one process
// record written at its end (an upsert of a new row).
func BenchmarkPutProcess(b *testing.B) {
	s, ctx := benchStore(b)
	if err := s.PutSandbox(ctx, &Sandbox{ID: "sb"}); err != nil {
		b.Fatal(err)
	}
	start := time.Now().UTC()
	code := 0
	b.ResetTimer()
	for i := range b.N {
		end := start.Add(time.Millisecond)
		p := &Process{SandboxID: "sb", ID: uint64(i + 1), Argv: []string{"true"}, StartedAt: start, EndedAt: &end, ExitCode: &code}
		if err := s.PutProcess(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssign is the store's part of a creation from a warm pool: the
// member's record rewritten as its caller's (no labels), through
// PutSandbox and through PutAssigned, back to back and after 20 ms of
// idleness (the warm-pool row starts from an idle daemon).
func BenchmarkAssign(b *testing.B) {
	for _, put := range []struct {
		name string
		fn   func(*Store, context.Context, *Sandbox) error
	}{{"PutSandbox", (*Store).PutSandbox}, {"PutAssigned", (*Store).PutAssigned}} {
		for _, pause := range []time.Duration{0, 20 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s/pause=%v", put.name, pause), func(b *testing.B) {
				s, ctx := benchStore(b)
				now := time.Now().UTC()
				exp := now.Add(time.Hour)
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					sb := &Sandbox{ID: fmt.Sprintf("sb%d", i), State: "running", Pool: "default", CreatedAt: now, LastActivity: now}
					if err := s.PutSandbox(ctx, sb); err != nil {
						b.Fatal(err)
					}
					time.Sleep(pause)
					sb.Pool, sb.Spec, sb.ExpiresAt, sb.Deadline = "", []byte(`{"image":""}`), &exp, &exp
					b.StartTimer()
					if err := put.fn(s, ctx, sb); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSetState is one of the one-row updates of a sandbox's life
// (state, creation, expiry, spec, pool).
func BenchmarkSetState(b *testing.B) {
	s, ctx := benchStore(b)
	if err := s.PutSandbox(ctx, &Sandbox{ID: "sb", State: "running"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := s.SetState(ctx, "sb", []string{"paused", "running"}[i%2], "", nil); err != nil {
			b.Fatal(err)
		}
	}
}
