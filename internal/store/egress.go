package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// EgressEvent is the stored audit record of one connection or request
// through a sandbox's egress gateway.
type EgressEvent struct {
	// ID is assigned by AddEgressEvents: increasing in the order events
	// are stored and never reused, so it is a cursor.
	ID        int64
	SandboxID string
	Time      time.Time // when the connection or request started
	Proto     string
	Method    string
	Host      string
	Port      int
	Path      string
	Addr      string
	Allowed   bool
	Rule      string
	BytesUp   int64
	BytesDown int64
	Duration  time.Duration
	Error     string
	// Credential names the credentials the gateway added (never values).
	Credential string
}

// EgressFilter selects events for ListEgressEvents.
type EgressFilter struct {
	SandboxID string // required
	After     int64  // only events with a greater ID (a cursor); 0: from the oldest
	Allowed   *bool  // nil: both decisions
	// Problems keeps only the events netsum.Problem counts: denied by a
	// rule, or failed before any byte moved either way.
	Problems bool
	Host     string    // exact match; "": any host
	Since    time.Time // only events that started at or after it; zero: any time
	Limit    int       // 0: no limit
}

const egressCols = `id, sandbox_id, time, proto, method, host, port, path, addr, allowed, rule,
	bytes_up, bytes_down, duration, error, credential`

// AddEgressEvents stores events in one transaction, in order, and sets
// their IDs. Events of a sandbox that does not exist (deleted meanwhile)
// are skipped, with ID 0. Then, in the same transaction, every sandbox
// named in keep loses all but its newest keep[id] events. It returns how
// many events were stored, per sandbox.
func (s *Store) AddEgressEvents(ctx context.Context, events []EgressEvent, keep map[string]int) (map[string]int, error) {
	var e timeEnc
	times := make([]int64, len(events))
	for i := range events {
		times[i] = e.at(events[i].Time)
	}
	if e.err != nil {
		return nil, fmt.Errorf("egress events: %w", e.err)
	}
	for id, n := range keep {
		if n < 0 {
			return nil, fmt.Errorf("egress events of sandbox %q: keep %d is negative", id, n)
		}
	}
	stored := map[string]int{}
	err := s.write(ctx, func(tx *sql.Tx) error {
		clear(stored)
		exists := map[string]bool{}
		ins, err := tx.PrepareContext(ctx, `INSERT INTO egress_events (`+strings.TrimPrefix(egressCols, "id, ")+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer ins.Close()
		for i := range events {
			ev := &events[i]
			ev.ID = 0
			ok, seen := exists[ev.SandboxID]
			if !seen {
				var one int
				err := tx.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, ev.SandboxID).Scan(&one)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
				ok = err == nil
				exists[ev.SandboxID] = ok
			}
			if !ok {
				continue
			}
			res, err := ins.ExecContext(ctx, ev.SandboxID, times[i], ev.Proto, ev.Method, ev.Host, ev.Port, ev.Path,
				ev.Addr, ev.Allowed, ev.Rule, ev.BytesUp, ev.BytesDown, int64(ev.Duration), ev.Error, ev.Credential)
			if err != nil {
				return err
			}
			if ev.ID, err = res.LastInsertId(); err != nil {
				return err
			}
			stored[ev.SandboxID]++
		}
		for id, n := range keep {
			// The id of the (n+1)-th newest event, and everything older, go.
			_, err := tx.ExecContext(ctx, `DELETE FROM egress_events WHERE sandbox_id = ?1 AND id <= (
				SELECT id FROM egress_events WHERE sandbox_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)`, id, n)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for i := range events {
			events[i].ID = 0
		}
		return nil, err
	}
	return stored, nil
}

// ListEgressEvents returns the events f selects, by ascending ID. It
// returns ErrNotFound if the sandbox does not exist.
func (s *Store) ListEgressEvents(ctx context.Context, f EgressFilter) ([]EgressEvent, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("store: negative limit %d", f.Limit)
	}
	// args[afterArg] is the id the scan starts after (Since may move it).
	const afterArg = 1
	where := []string{`sandbox_id = ?`, `id > ?`}
	args := []any{f.SandboxID, f.After}
	if f.Allowed != nil {
		where = append(where, `allowed = ?`)
		args = append(args, *f.Allowed)
	}
	if f.Problems {
		where = append(where, `((NOT allowed AND rule != '') OR (error != '' AND bytes_up = 0 AND bytes_down = 0))`)
	}
	if f.Host != "" {
		where = append(where, `host = ?`)
		args = append(args, f.Host)
	}
	var since int64
	if !f.Since.IsZero() {
		var e timeEnc
		since = e.at(f.Since)
		if e.err != nil {
			return nil, e.err
		}
		where = append(where, `time >= ?`)
		args = append(args, since)
	}
	q := `SELECT ` + egressCols + ` FROM egress_events WHERE ` + strings.Join(where, ` AND `) + ` ORDER BY id`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	var list []EgressEvent
	err := s.read(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, f.SandboxID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sandbox %q: %w", f.SandboxID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if !f.Since.IsZero() {
			// Ids follow the order records were stored, not their start
			// times, but none before the first recent one can qualify:
			// the scan by id starts there.
			var first sql.NullInt64
			err := tx.QueryRowContext(ctx, `SELECT min(id) FROM egress_events INDEXED BY egress_events_time
				WHERE sandbox_id = ? AND time >= ?`, f.SandboxID, since).Scan(&first)
			if err != nil {
				return err
			}
			if !first.Valid {
				return nil
			}
			args[afterArg] = max(f.After, first.Int64-1)
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ev EgressEvent
			var at, dur int64
			if err := rows.Scan(&ev.ID, &ev.SandboxID, &at, &ev.Proto, &ev.Method, &ev.Host, &ev.Port, &ev.Path,
				&ev.Addr, &ev.Allowed, &ev.Rule, &ev.BytesUp, &ev.BytesDown, &dur, &ev.Error, &ev.Credential); err != nil {
				return err
			}
			ev.Time, ev.Duration = decTime(at), time.Duration(dur)
			list = append(list, ev)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}
