package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkPutProcess is the store's part of every exec: one process
// record written at its end (an upsert of a new row).
func BenchmarkPutProcess(b *testing.B) {
	s, err := Open(context.Background(), b.TempDir()+"/airlock.db")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
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
