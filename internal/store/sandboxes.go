package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sandbox is the stored record of one sandbox. Empty Labels and Spec read
// back as nil.
type Sandbox struct {
	ID, State, Reason string
	Image, Policy     string            // names, as given by the API caller
	Labels            map[string]string // user labels
	Spec              []byte            // opaque JSON owned by the caller (the manager)
	Pool              string            // pool key while an unacquired warm-pool member; "" otherwise

	CreatedAt, LastActivity      time.Time
	ExpiresAt, Deadline, EndedAt *time.Time // TTL expiry, maximum-lifetime deadline, end
	IdleTimeout                  time.Duration

	// HostUID and HostGID are the host ids root inside the sandbox runs
	// as (the first of its leased range as root); 0 when not recorded.
	HostUID, HostGID int

	// Tenant is the tenant of the API key that created it; "" for the
	// daemon's operator (the unix socket, or a key without a tenant).
	Tenant string
}

// Filter selects sandboxes for ListSandboxes. The zero Filter selects all.
type Filter struct {
	States []string          // any of; empty = all
	Labels map[string]string // all must match exactly
	Pool   *string           // nil: any; "": not pooled only; "k": members of pool k
	Tenant *string           // nil: any tenant; else that tenant's only
	Limit  int               // 0: no limit
	Cursor string            // from a previous page
}

const sandboxCols = `id, state, reason, image, policy, spec, pool,
	created_at, last_activity, expires_at, deadline, ended_at, idle_timeout, host_uid, host_gid, tenant`

// upsertSandbox writes a sandbox's row. An upsert, not INSERT OR REPLACE:
// replacing would delete the row and cascade to its processes.
const upsertSandbox = `INSERT INTO sandboxes (` + sandboxCols + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (id) DO UPDATE SET
		state = excluded.state, reason = excluded.reason, image = excluded.image,
		policy = excluded.policy, spec = excluded.spec, pool = excluded.pool,
		created_at = excluded.created_at, last_activity = excluded.last_activity,
		expires_at = excluded.expires_at, deadline = excluded.deadline,
		ended_at = excluded.ended_at, idle_timeout = excluded.idle_timeout,
		host_uid = excluded.host_uid, host_gid = excluded.host_gid, tenant = excluded.tenant`

// sandboxArgs are upsertSandbox's arguments for sb.
func sandboxArgs(sb *Sandbox) ([]any, error) {
	if sb == nil || sb.ID == "" {
		return nil, errors.New("store: sandbox without an ID")
	}
	var e timeEnc
	args := []any{sb.ID, sb.State, sb.Reason, sb.Image, sb.Policy, nilIfEmpty(sb.Spec), sb.Pool,
		e.at(sb.CreatedAt), e.at(sb.LastActivity), e.ptr(sb.ExpiresAt), e.ptr(sb.Deadline), e.ptr(sb.EndedAt),
		int64(sb.IdleTimeout), sb.HostUID, sb.HostGID, sb.Tenant}
	if e.err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", sb.ID, e.err)
	}
	return args, nil
}

// PutSandbox inserts sb or replaces the record with its ID, labels included.
// The sandbox's processes are kept.
func (s *Store) PutSandbox(ctx context.Context, sb *Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := s.preparedExec(ctx, tx, upsertSandbox, args...); err != nil {
			return err
		}
		if _, err := s.preparedExec(ctx, tx, `DELETE FROM labels WHERE sandbox_id = ?`, sb.ID); err != nil {
			return err
		}
		return s.insertLabels(ctx, tx, sb)
	})
}

// PutAssigned is PutSandbox for a sandbox whose stored record, if any, has
// no labels: a new one, or one being handed to its caller, which is when
// a sandbox gets its labels (the manager never changes them after). There
// is nothing to delete first, and a record without labels is one
// statement committed on its own rather than a transaction of two. That
// write is on the path of every creation from a warm pool, which starts
// from an idle daemon (BenchmarkAssign, 300 writes, three runs: after 20
// ms of idleness 463-484 µs this way against 675-680 µs through
// PutSandbox; back to back 209-242 against 268-311 µs).
func (s *Store) PutAssigned(ctx context.Context, sb *Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return err
	}
	if len(sb.Labels) == 0 {
		_, err := s.writeOne(ctx, upsertSandbox, args...)
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := s.preparedExec(ctx, tx, upsertSandbox, args...); err != nil {
			return err
		}
		return s.insertLabels(ctx, tx, sb)
	})
}

// insertLabels adds sb's labels to its record.
func (s *Store) insertLabels(ctx context.Context, tx *sql.Tx, sb *Sandbox) error {
	for k, v := range sb.Labels {
		_, err := s.preparedExec(ctx, tx, `INSERT INTO labels (sandbox_id, key, value) VALUES (?, ?, ?)`, sb.ID, k, v)
		if err != nil {
			return err
		}
	}
	return nil
}

// GetSandbox returns the sandbox with the given ID.
func (s *Store) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var sb *Sandbox
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		return loadLabels(ctx, tx, []*Sandbox{sb})
	})
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// SetState records a sandbox's state, the reason for it and when it ended
// (nil: not ended, which clears any earlier end).
func (s *Store) SetState(ctx context.Context, id, state, reason string, endedAt *time.Time) error {
	var e timeEnc
	ended := e.ptr(endedAt)
	if e.err != nil {
		return fmt.Errorf("sandbox %q: %w", id, e.err)
	}
	return s.update(ctx, id, `UPDATE sandboxes SET state = ?, reason = ?, ended_at = ? WHERE id = ?`, state, reason, ended)
}

// SetCreated records that the runtime made a sandbox: its state and the
// host uid and gid root inside it runs as.
func (s *Store) SetCreated(ctx context.Context, id, state string, hostUID, hostGID int) error {
	return s.update(ctx, id, `UPDATE sandboxes SET state = ?, reason = '', ended_at = NULL, host_uid = ?, host_gid = ? WHERE id = ?`,
		state, hostUID, hostGID)
}

// SetExpiry records when a sandbox's TTL expires (nil: never).
func (s *Store) SetExpiry(ctx context.Context, id string, expiresAt *time.Time) error {
	var e timeEnc
	exp := e.ptr(expiresAt)
	if e.err != nil {
		return fmt.Errorf("sandbox %q: %w", id, e.err)
	}
	return s.update(ctx, id, `UPDATE sandboxes SET expires_at = ? WHERE id = ?`, exp)
}

// SetSpec replaces a sandbox's opaque spec.
func (s *Store) SetSpec(ctx context.Context, id string, spec []byte) error {
	return s.update(ctx, id, `UPDATE sandboxes SET spec = ? WHERE id = ?`, nilIfEmpty(spec))
}

// SetPool records the warm pool a sandbox waits in ("": none).
func (s *Store) SetPool(ctx context.Context, id, pool string) error {
	return s.update(ctx, id, `UPDATE sandboxes SET pool = ? WHERE id = ?`, pool)
}

// update runs a one-row UPDATE whose last parameter is the sandbox ID, as
// a write of its own (writeOne).
func (s *Store) update(ctx context.Context, id, query string, args ...any) error {
	res, err := s.writeOne(ctx, query, append(args, id)...)
	if err != nil {
		return err
	}
	return mustAffect(res, fmt.Sprintf("sandbox %q", id))
}

// TouchMany records the last activity of many sandboxes in one transaction.
// A time never moves last activity backwards, and IDs with no record (a
// sandbox deleted meanwhile) are skipped.
func (s *Store) TouchMany(ctx context.Context, activity map[string]time.Time) error {
	if len(activity) == 0 {
		return nil
	}
	var e timeEnc
	nanos := make(map[string]int64, len(activity))
	for id, t := range activity {
		nanos[id] = e.at(t)
	}
	if e.err != nil {
		return e.err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `UPDATE sandboxes SET last_activity = max(last_activity, ?) WHERE id = ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for id, n := range nanos {
			if _, err := stmt.ExecContext(ctx, n, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteSandbox deletes a sandbox with its labels, processes and egress
// events.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
		if err != nil {
			return err
		}
		return mustAffect(res, fmt.Sprintf("sandbox %q", id))
	})
}

// ListSandboxes returns the sandboxes f selects, ordered by creation time
// then ID. If f.Limit cut the list short, next is the cursor for the rest
// (otherwise ""): the next page starts strictly after the last sandbox
// returned, whatever was inserted or deleted meanwhile.
func (s *Store) ListSandboxes(ctx context.Context, f Filter) (list []*Sandbox, next string, err error) {
	if f.Limit < 0 {
		return nil, "", fmt.Errorf("store: negative limit %d", f.Limit)
	}
	var where []string
	var args []any
	if f.Cursor != "" {
		at, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		where = append(where, `(s.created_at, s.id) > (?, ?)`)
		args = append(args, at, id)
	}
	if len(f.States) > 0 {
		where = append(where, `s.state IN (?`+strings.Repeat(`, ?`, len(f.States)-1)+`)`)
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.Tenant != nil {
		where = append(where, `s.tenant = ?`)
		args = append(args, *f.Tenant)
	}
	if f.Pool != nil {
		where = append(where, `s.pool = ?`)
		args = append(args, *f.Pool)
	}
	if f.Tenant != nil {
		where = append(where, `s.tenant = ?`)
		args = append(args, *f.Tenant)
	}
	keys := make([]string, 0, len(f.Labels))
	for k := range f.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		where = append(where, `EXISTS (SELECT 1 FROM labels l WHERE l.sandbox_id = s.id AND l.key = ? AND l.value = ?)`)
		args = append(args, k, f.Labels[k])
	}
	q := `SELECT ` + sandboxCols + ` FROM sandboxes s`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY s.created_at, s.id`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit+1) // one more, to learn whether there is a next page
	}

	err = s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			sb, err := scanSandbox(rows)
			if err != nil {
				return err
			}
			list = append(list, sb)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if f.Limit > 0 && len(list) > f.Limit {
			list = list[:f.Limit]
			last := list[len(list)-1]
			var e timeEnc
			next = encodeCursor(e.at(last.CreatedAt), last.ID)
		}
		return loadLabels(ctx, tx, list)
	})
	if err != nil {
		return nil, "", err
	}
	return list, next, nil
}

// loadLabels fills in the labels of list.
func loadLabels(ctx context.Context, tx *sql.Tx, list []*Sandbox) error {
	const chunk = 500 // well under SQLite's limit on bound parameters
	byID := make(map[string]*Sandbox, len(list))
	for _, sb := range list {
		byID[sb.ID] = sb
	}
	for i := 0; i < len(list); i += chunk {
		part := list[i:min(i+chunk, len(list))]
		args := make([]any, len(part))
		for j, sb := range part {
			args[j] = sb.ID
		}
		rows, err := tx.QueryContext(ctx, `SELECT sandbox_id, key, value FROM labels
			WHERE sandbox_id IN (?`+strings.Repeat(`, ?`, len(part)-1)+`)`, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, k, v string
			if err := rows.Scan(&id, &k, &v); err != nil {
				rows.Close()
				return err
			}
			sb := byID[id]
			if sb.Labels == nil {
				sb.Labels = map[string]string{}
			}
			sb.Labels[k] = v
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

func scanSandbox(sc scanner) (*Sandbox, error) {
	var sb Sandbox
	var created, last, idle int64
	var exp, deadline, ended sql.NullInt64
	err := sc.Scan(&sb.ID, &sb.State, &sb.Reason, &sb.Image, &sb.Policy, &sb.Spec, &sb.Pool,
		&created, &last, &exp, &deadline, &ended, &idle, &sb.HostUID, &sb.HostGID, &sb.Tenant)
	if err != nil {
		return nil, err
	}
	if len(sb.Spec) == 0 {
		sb.Spec = nil
	}
	sb.CreatedAt, sb.LastActivity = decTime(created), decTime(last)
	sb.ExpiresAt, sb.Deadline, sb.EndedAt = decTimePtr(exp), decTimePtr(deadline), decTimePtr(ended)
	sb.IdleTimeout = time.Duration(idle)
	return &sb, nil
}

func nilIfEmpty(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// A cursor is the (created_at, id) of the last sandbox of a page, as
// base64url("<unix nanoseconds>:<id>").
func encodeCursor(createdAt int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(createdAt, 10) + ":" + id))
}

func decodeCursor(c string) (createdAt int64, id string, err error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	at, id, ok := strings.Cut(string(b), ":")
	if !ok || id == "" {
		return 0, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	createdAt, err = strconv.ParseInt(at, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	return createdAt, id, nil
}
