package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// RecordEvent is one stored event of a sandbox's activity record.
type RecordEvent struct {
	// ID is assigned by AddRecordEvents: increasing in the order events
	// are stored and never reused, so it is a cursor.
	ID        int64
	SandboxID string
	Time      time.Time
	Type      string
	Data      []byte // the event as JSON
}

// RecordFilter selects events for ListRecordEvents.
type RecordFilter struct {
	SandboxID string    // required
	After     int64     // only events with a greater ID (a cursor); 0: from the oldest
	Types     []string  // only these types; empty: all
	Since     time.Time // only events at or after it; zero: any time
	Limit     int       // 0: no limit
}

// AddRecordEvents stores events in one transaction, in order, and sets
// their IDs. A sandbox keeps at most max events: the first max-1 it
// made, then the event full(sandbox, time) returns (the record's loss
// event saying it is full), then nothing more: later events are skipped
// with ID 0, as are those of a sandbox that does not exist (deleted
// meanwhile). It returns how many events were stored, per sandbox.
func (s *Store) AddRecordEvents(ctx context.Context, events []RecordEvent, max int, full func(sandbox string, at time.Time) RecordEvent) (map[string]int, error) {
	if max < 2 {
		return nil, fmt.Errorf("record events: max %d is below 2", max)
	}
	var e timeEnc
	for i := range events {
		e.at(events[i].Time)
	}
	if e.err != nil {
		return nil, fmt.Errorf("record events: %w", e.err)
	}
	stored := map[string]int{}
	err := s.write(ctx, func(tx *sql.Tx) error {
		clear(stored)
		count := map[string]int{} // events the sandbox has; -1: it does not exist
		ins, err := tx.PrepareContext(ctx, `INSERT INTO record_events (sandbox_id, time, type, data) VALUES (?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer ins.Close()
		insert := func(ev *RecordEvent) error {
			var e timeEnc
			res, err := ins.ExecContext(ctx, ev.SandboxID, e.at(ev.Time), ev.Type, ev.Data)
			if err != nil {
				return err
			}
			if ev.ID, err = res.LastInsertId(); err != nil {
				return err
			}
			count[ev.SandboxID]++
			stored[ev.SandboxID]++
			return nil
		}
		for i := range events {
			ev := &events[i]
			ev.ID = 0
			n, seen := count[ev.SandboxID]
			if !seen {
				var one int
				err := tx.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, ev.SandboxID).Scan(&one)
				switch {
				case errors.Is(err, sql.ErrNoRows):
					n = -1
				case err != nil:
					return err
				default:
					if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM record_events WHERE sandbox_id = ?`, ev.SandboxID).Scan(&n); err != nil {
						return err
					}
				}
				count[ev.SandboxID] = n
			}
			switch {
			case n < 0 || n >= max:
				continue
			case n == max-1:
				last := full(ev.SandboxID, ev.Time)
				last.SandboxID = ev.SandboxID
				if err := insert(&last); err != nil {
					return err
				}
				continue
			}
			if err := insert(ev); err != nil {
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

// ListRecordEvents returns the events f selects, by ascending ID. It
// returns ErrNotFound if the sandbox does not exist.
func (s *Store) ListRecordEvents(ctx context.Context, f RecordFilter) ([]RecordEvent, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("store: negative limit %d", f.Limit)
	}
	where := []string{`sandbox_id = ?`, `id > ?`}
	args := []any{f.SandboxID, f.After}
	if len(f.Types) > 0 {
		where = append(where, `type IN (?`+strings.Repeat(`, ?`, len(f.Types)-1)+`)`)
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	if !f.Since.IsZero() {
		var e timeEnc
		since := e.at(f.Since)
		if e.err != nil {
			return nil, e.err
		}
		where = append(where, `time >= ?`)
		args = append(args, since)
	}
	q := `SELECT id, sandbox_id, time, type, data FROM record_events WHERE ` + strings.Join(where, ` AND `) + ` ORDER BY id`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	var list []RecordEvent
	err := s.read(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, f.SandboxID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sandbox %q: %w", f.SandboxID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ev RecordEvent
			var at int64
			if err := rows.Scan(&ev.ID, &ev.SandboxID, &at, &ev.Type, &ev.Data); err != nil {
				return err
			}
			ev.Time = decTime(at)
			list = append(list, ev)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}
