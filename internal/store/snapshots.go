package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Snapshot is a stored snapshot of a sandbox's workspace; its files live
// in the daemon's data directory, named by ID.
type Snapshot struct {
	ID, Name  string
	Tenant    string
	SandboxID string // the sandbox it was taken of (which may be gone)
	Image     string
	Spec      []byte // the sandbox's spec record (JSON), for compatibility checks
	Labels    map[string]string
	Size      int64 // bytes of the snapshot's files
	Files     int   // entries
	CreatedAt time.Time
}

// PutSnapshot inserts a snapshot; a name the tenant already uses is
// errdefs.ErrExists.
func (s *Store) PutSnapshot(ctx context.Context, sn *Snapshot) error {
	labels, err := json.Marshal(sn.Labels)
	if err != nil {
		return err
	}
	var e timeEnc
	created := e.at(sn.CreatedAt)
	if e.err != nil {
		return e.err
	}
	spec := sn.Spec
	if spec == nil {
		spec = []byte{}
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO snapshots (id, name, tenant, sandbox_id, image, spec, labels, size, files, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, sn.ID, sn.Name, sn.Tenant, sn.SandboxID, sn.Image, spec, labels, sn.Size, sn.Files, created)
		if err != nil && strings.Contains(err.Error(), "UNIQUE") {
			return fmt.Errorf("snapshot %s: %w", errdefs.Quote(sn.Name), errdefs.ErrExists)
		}
		return err
	})
}

const snapshotCols = `id, name, tenant, sandbox_id, image, spec, labels, size, files, created_at`

func scanSnapshot(sc scanner) (*Snapshot, error) {
	var sn Snapshot
	var labels []byte
	var created int64
	if err := sc.Scan(&sn.ID, &sn.Name, &sn.Tenant, &sn.SandboxID, &sn.Image, &sn.Spec, &labels, &sn.Size, &sn.Files, &created); err != nil {
		return nil, err
	}
	if len(labels) > 0 {
		if err := json.Unmarshal(labels, &sn.Labels); err != nil {
			return nil, err
		}
	}
	sn.CreatedAt = decTime(created)
	return &sn, nil
}

// GetSnapshot returns a snapshot by ID or, failing that, by its name in
// tenant.
func (s *Store) GetSnapshot(ctx context.Context, tenant, ref string) (*Snapshot, error) {
	var sn *Snapshot
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		sn, err = scanSnapshot(tx.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`, ref))
		if errors.Is(err, sql.ErrNoRows) {
			sn, err = scanSnapshot(tx.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE tenant = ? AND name = ?`, tenant, ref))
		}
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("snapshot %s: %w", errdefs.Quote(ref), ErrNotFound)
	}
	return sn, err
}

// ListSnapshots returns every snapshot, oldest first.
func (s *Store) ListSnapshots(ctx context.Context) ([]*Snapshot, error) {
	var out []*Snapshot
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+snapshotCols+` FROM snapshots ORDER BY created_at, id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			sn, err := scanSnapshot(rows)
			if err != nil {
				return err
			}
			out = append(out, sn)
		}
		return rows.Err()
	})
	return out, err
}

// DeleteSnapshot removes a snapshot's row.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
		if err != nil {
			return err
		}
		return mustAffect(res, fmt.Sprintf("snapshot %q", id))
	})
}
