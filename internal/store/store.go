// Package store owns the persistent state of the sandbox daemon (`airlock
// serve`): sandboxes with their labels, processes and egress audit records,
// and API keys, all in one SQLite file. The file is opened in WAL mode with
// synchronous=NORMAL, so every committed write survives the daemon being
// killed (kill -9) at any moment; only a power loss or kernel crash can lose
// the last few commits.
//
// The store is a durable record keeper and nothing more. It must never hold
// a secret in clear: API keys are kept only as SHA-256 hashes, and a key's
// secret exists exactly once, in the return value of CreateKey. It must never
// decide policy: what a state means, when a sandbox expires or idles out,
// which pool it belongs to, what a key may do and how many audit records to
// keep are the caller's business; the store records what it is told and
// answers queries about it.
//
// Writes are serialized inside the process (one IMMEDIATE transaction at a
// time), so concurrent callers never see SQLITE_BUSY; reads run in parallel
// on a small pool of connections, which WAL allows.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound is wrapped by every error about a record that does not exist.
var ErrNotFound = errdefs.ErrNotFound

// ErrBadCursor is wrapped by the error ListSandboxes returns for a cursor it
// did not give out.
var ErrBadCursor = errors.New("bad cursor")

// Store is the daemon's persistent state. It is safe for concurrent use.
type Store struct {
	db    *sql.DB
	wtok  chan struct{}    // write token: holding it is the right to write
	now   func() time.Time // the clock; replaced in tests
	paths []string         // the database file and its WAL and shared-memory files
	stmts sync.Map         // query text -> *sql.Stmt, see prepared
}

// Open opens the store at path, creating the file (mode 0600) and its parent
// directory (mode 0700) if needed, and brings the schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// Create the file ourselves so SQLite never creates it with its default
	// 0644; SQLite gives the -wal and -shm files the database file's mode.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	f.Close()
	if err := os.Chmod(abs, 0o600); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}

	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate") // read-only transactions still use a plain BEGIN
	// A file: URI escapes any '?', '#' or '%' in the path.
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// WAL lets readers run alongside the one writer; more connections than
	// CPUs buys nothing.
	conns := max(4, runtime.GOMAXPROCS(0)) + 1
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)

	s := &Store{
		db:    db,
		wtok:  make(chan struct{}, 1),
		now:   time.Now,
		paths: []string{abs, abs + "-wal", abs + "-shm"},
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", abs, err)
	}
	return s, nil
}

// Close closes the database, waiting for statements in progress.
func (s *Store) Close() error {
	s.stmts.Range(func(_, v any) bool {
		v.(*sql.Stmt).Close()
		return true
	})
	return s.db.Close()
}

// migrations[i] takes the schema from version i to version i+1; the version
// is kept in PRAGMA user_version. Never edit a released migration: append.
var migrations = []string{
	`CREATE TABLE sandboxes (
		id            TEXT PRIMARY KEY,
		state         TEXT NOT NULL,
		reason        TEXT NOT NULL,
		image         TEXT NOT NULL,
		policy        TEXT NOT NULL,
		spec          BLOB,
		pool          TEXT NOT NULL,
		created_at    INTEGER NOT NULL,
		last_activity INTEGER NOT NULL,
		expires_at    INTEGER,
		deadline      INTEGER,
		ended_at      INTEGER,
		idle_timeout  INTEGER NOT NULL
	) STRICT;
	CREATE INDEX sandboxes_order ON sandboxes (created_at, id);
	CREATE INDEX sandboxes_state ON sandboxes (state);
	CREATE INDEX sandboxes_pool ON sandboxes (pool);
	CREATE TABLE labels (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		key        TEXT NOT NULL,
		value      TEXT NOT NULL,
		PRIMARY KEY (sandbox_id, key)
	) STRICT, WITHOUT ROWID;
	CREATE INDEX labels_key_value ON labels (key, value);
	CREATE TABLE processes (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		id         INTEGER NOT NULL,
		argv       BLOB NOT NULL,
		cwd        TEXT NOT NULL,
		tty        INTEGER NOT NULL,
		started_at INTEGER NOT NULL,
		ended_at   INTEGER,
		exit_code  INTEGER,
		signal     INTEGER NOT NULL,
		timed_out  INTEGER NOT NULL,
		PRIMARY KEY (sandbox_id, id)
	) STRICT;
	CREATE TABLE api_keys (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL,
		hash       BLOB NOT NULL,
		created_at INTEGER NOT NULL,
		revoked_at INTEGER,
		last_used  INTEGER
	) STRICT;`,
	// 2: the egress gateways' audit records. AUTOINCREMENT: an id is never
	// reused, even after the newest rows were deleted, so ids work as
	// cursors.
	`CREATE TABLE egress_events (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		time       INTEGER NOT NULL,
		proto      TEXT NOT NULL,
		method     TEXT NOT NULL,
		host       TEXT NOT NULL,
		port       INTEGER NOT NULL,
		path       TEXT NOT NULL,
		addr       TEXT NOT NULL,
		allowed    INTEGER NOT NULL,
		rule       TEXT NOT NULL,
		bytes_up   INTEGER NOT NULL,
		bytes_down INTEGER NOT NULL,
		duration   INTEGER NOT NULL,
		error      TEXT NOT NULL,
		credential TEXT NOT NULL
	) STRICT;
	CREATE INDEX egress_events_sandbox ON egress_events (sandbox_id, id);`,
	// 3: the host uid and gid root inside a sandbox runs as (the first
	// of its leased range as root; 0: not recorded).
	`ALTER TABLE sandboxes ADD COLUMN host_uid INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE sandboxes ADD COLUMN host_gid INTEGER NOT NULL DEFAULT 0;`,
	// 4: why a process ended when it did not end of its own accord.
	`ALTER TABLE processes ADD COLUMN end_reason TEXT NOT NULL DEFAULT '';`,
	// 5: tenants. A key with a tenant sees only its tenant's sandboxes.
	`ALTER TABLE api_keys ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
	CREATE INDEX sandboxes_tenant ON sandboxes (tenant, created_at, id);`,
	// 6: the activity record of sandboxes made with record: true. data is
	// the event as JSON; type and time are copied out for the filters.
	`CREATE TABLE record_events (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		time       INTEGER NOT NULL,
		type       TEXT NOT NULL,
		data       BLOB NOT NULL
	) STRICT;
	CREATE INDEX record_events_sandbox ON record_events (sandbox_id, id);`,
	// 7: snapshots of sandboxes' workspaces. No foreign key to sandboxes:
	// a snapshot outlives its sandbox. (tenant, name) is unique: a name
	// names one snapshot per tenant.
	`CREATE TABLE snapshots (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL,
		tenant     TEXT NOT NULL,
		sandbox_id TEXT NOT NULL,
		image      TEXT NOT NULL,
		spec       BLOB NOT NULL,
		labels     BLOB NOT NULL,
		size       INTEGER NOT NULL,
		files      INTEGER NOT NULL,
		created_at INTEGER NOT NULL
	) STRICT;
	CREATE UNIQUE INDEX snapshots_name ON snapshots (tenant, name);`,
	// 8: egress events by start time: a ?since= query (airlock exec's and
	// run_command's summaries ask for the records since a command
	// started) finds its first id here instead of reading every record
	// the sandbox kept (57 ms with 100k of them).
	`CREATE INDEX egress_events_time ON egress_events (sandbox_id, time);`,
}

// migrate applies the migrations the database has not seen, each in its own
// transaction together with the version bump.
func (s *Store) migrate(ctx context.Context) error {
	for target := 1; target <= len(migrations); target++ {
		err := s.write(ctx, func(tx *sql.Tx) error {
			var v int
			if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
				return err
			}
			if v > len(migrations) {
				return fmt.Errorf("schema version %d is newer than this binary knows (%d)", v, len(migrations))
			}
			if v >= target {
				return nil
			}
			if _, err := tx.ExecContext(ctx, migrations[target-1]); err != nil {
				return fmt.Errorf("migration %d: %w", target, err)
			}
			_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", target))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// write runs fn in an IMMEDIATE transaction, one writer at a time, and
// commits if fn returns nil.
func (s *Store) write(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := s.turn(ctx); err != nil {
		return err
	}
	defer func() { <-s.wtok }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// stmt returns query prepared. The statement is prepared once and kept
// (database/sql then prepares it once per connection): SQLite parses a
// query's text on every plain Exec, which was about half of the store's
// CPU time per process start and end. Only for the queries of the busiest
// writes; each distinct text is kept until Close.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	v, ok := s.stmts.Load(query)
	if !ok {
		st, err := s.db.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		if v, ok = s.stmts.LoadOrStore(query, st); ok {
			st.Close()
		}
	}
	return v.(*sql.Stmt), nil
}

// turn waits for this writer's turn (the write token; the caller gives it
// back), or for ctx to end.
func (s *Store) turn(ctx context.Context) error {
	select {
	case s.wtok <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeOne runs one prepared statement as a write of its own: SQLite
// commits it alone (autocommit), atomically, without the round trips of a
// transaction's BEGIN and COMMIT; writers still take turns as in write.
func (s *Store) writeOne(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := s.turn(ctx); err != nil {
		return nil, err
	}
	defer func() { <-s.wtok }()
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// preparedExec runs a prepared query (stmt) in tx.
func (s *Store) preparedExec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

// read runs fn in a read-only transaction, so that it sees one snapshot.
func (s *Store) read(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}

// mustAffect turns an update that touched no row into ErrNotFound.
func mustAffect(res sql.Result, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return nil
}

// Times are stored as UTC Unix nanoseconds. The zero time.Time is stored as
// 0 (and 0 read back as the zero time); a nil *time.Time is NULL.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// timeEnc encodes times, remembering the first one out of range.
type timeEnc struct{ err error }

func (e *timeEnc) at(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if t.Before(minTime) || t.After(maxTime) {
		if e.err == nil {
			e.err = fmt.Errorf("time %v out of range (years 1678 to 2262)", t)
		}
		return 0
	}
	return t.UnixNano()
}

func (e *timeEnc) ptr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return e.at(*t)
}

func decTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func decTimePtr(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := decTime(n.Int64)
	return &t
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }
