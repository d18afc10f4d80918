package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Snapshots: a name is unique per tenant (another tenant may reuse it),
// found by id or by the tenant's name, kept across a reopen, and gone
// after DeleteSnapshot.
func TestSnapshots(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	a := &Snapshot{ID: "snap-0000000000000001", Name: "n", Tenant: "acme", SandboxID: "sb-1", Image: "img",
		Spec: []byte(`{"image":"img"}`), Labels: map[string]string{"k": "v"}, Size: 42, Files: 3, CreatedAt: now}
	if err := s.PutSnapshot(ctx, a); err != nil {
		t.Fatal(err)
	}
	dup := *a
	dup.ID = "snap-0000000000000002"
	if err := s.PutSnapshot(ctx, &dup); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("same name, same tenant: %v, want ErrExists", err)
	}
	dup.Tenant = "globex"
	if err := s.PutSnapshot(ctx, &dup); err != nil {
		t.Errorf("same name, another tenant (control): %v", err)
	}
	s.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetSnapshot(ctx, "acme", "n")
	if err != nil || got.ID != a.ID || got.Labels["k"] != "v" || got.Size != 42 || got.Files != 3 || !got.CreatedAt.Equal(now) || string(got.Spec) != string(a.Spec) {
		t.Errorf("by name: %+v %v", got, err)
	}
	if got, err := s.GetSnapshot(ctx, "", a.ID); err != nil || got.Tenant != "acme" {
		t.Errorf("by id: %+v %v", got, err)
	}
	if _, err := s.GetSnapshot(ctx, "other", "n"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a name of another tenant: %v", err)
	}
	if l, err := s.ListSnapshots(ctx); err != nil || len(l) != 2 {
		t.Errorf("list: %d %v", len(l), err)
	}
	if err := s.DeleteSnapshot(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted twice: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "acme", a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
}
