package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func recordEv(sb, typ string, i int) RecordEvent {
	return RecordEvent{SandboxID: sb, Time: at(time.Duration(i) * time.Second), Type: typ, Data: []byte(fmt.Sprintf(`{"type":%q,"n":%d}`, typ, i))}
}

func full(sb string, t time.Time) RecordEvent {
	return RecordEvent{Time: t, Type: "loss", Data: []byte(`{"type":"loss","reason":"full"}`)}
}

// The record keeps the first max-1 events of a sandbox, then one loss
// event, then nothing (across batches); a missing sandbox's events are
// skipped; filters by type and time; deletion cascades.
func TestRecordEventsCapFiltersCascade(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "a"})
	mustPut(t, s, &Sandbox{ID: "b"})
	batch := []RecordEvent{recordEv("a", "exec", 0), recordEv("gone", "exec", 1), recordEv("b", "exit", 2), recordEv("a", "exit", 3)}
	stored, err := s.AddRecordEvents(ctx, batch, 4, full)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stored, map[string]int{"a": 2, "b": 1}) || batch[1].ID != 0 || batch[3].ID <= batch[0].ID {
		t.Fatalf("stored %v, ids %d %d %d %d", stored, batch[0].ID, batch[1].ID, batch[2].ID, batch[3].ID)
	}
	// a has 2: one more fits, then the loss event, then nothing.
	more := []RecordEvent{recordEv("a", "exec", 4), recordEv("a", "exec", 5), recordEv("a", "exec", 6)}
	if stored, err = s.AddRecordEvents(ctx, more, 4, full); err != nil || stored["a"] != 2 {
		t.Fatalf("stored %v %v", stored, err)
	}
	if stored, err = s.AddRecordEvents(ctx, []RecordEvent{recordEv("a", "exec", 7)}, 4, full); err != nil || stored["a"] != 0 {
		t.Fatalf("past the cap: stored %v %v", stored, err)
	}
	l, err := s.ListRecordEvents(ctx, RecordFilter{SandboxID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range l {
		types = append(types, e.Type)
	}
	if !reflect.DeepEqual(types, []string{"exec", "exit", "exec", "loss"}) || string(l[3].Data) != `{"type":"loss","reason":"full"}` || l[3].SandboxID != "a" {
		t.Fatalf("capped record: %v %q", types, l[3].Data)
	}
	if l, _ := s.ListRecordEvents(ctx, RecordFilter{SandboxID: "a", Types: []string{"exit", "loss"}}); len(l) != 2 {
		t.Fatalf("types filter: %+v", l)
	}
	if l, _ := s.ListRecordEvents(ctx, RecordFilter{SandboxID: "a", Since: at(3 * time.Second), Limit: 1}); len(l) != 1 || l[0].Type != "exit" {
		t.Fatalf("since and limit: %+v", l)
	}
	if l, _ := s.ListRecordEvents(ctx, RecordFilter{SandboxID: "a", After: l[1].ID}); len(l) != 2 {
		t.Fatalf("after: %+v", l)
	}
	if _, err := s.ListRecordEvents(ctx, RecordFilter{SandboxID: "gone"}); err == nil {
		t.Fatal("events of a missing sandbox: no error")
	} else {
		wantNotFound(t, "ListRecordEvents(gone)", err)
	}
	if err := s.DeleteSandbox(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM record_events WHERE sandbox_id = 'a'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after delete: %d %v", n, err)
	}
	if l, _ := s.ListRecordEvents(ctx, RecordFilter{SandboxID: "b"}); len(l) != 1 {
		t.Fatalf("the other sandbox's record: %+v", l)
	}
}
