package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"

	"github.com/airlock-dev/airlock/internal/jsonobj"
)

// A Message is encoded and decoded one sub-message at a time.
//
// encoding/json builds its encoder of a struct type, and the encoders of
// every type the struct reaches, the first time a process encodes or
// decodes one (decoding builds them too). For Message that was every
// sub-message type of the protocol, in every sandbox's init before it
// could read its setup, and in every agent's heap, for types most
// sandboxes never see (measured: 0.11 MiB of agent PSS per idle sandbox,
// about 1 ms of a cold create, 0.3 ms of CPU per `airlock run`; see
// docs/performance.md). MarshalJSON and UnmarshalJSON below hand
// encoding/json only the sub-message that is there, so a process builds
// the encoders of what it sends and receives, and nothing else. The JSON
// is the same as encoding/json's for the struct's tags (TestMessageCodec).

// subMessages lists the sub-messages of m by their JSON names, in the
// struct's order: for each, a pointer to the field (what json.Unmarshal
// fills) and whether it is set.
func (m *Message) subMessages(visit func(name string, field any, set bool) error) error {
	for _, f := range [...]struct {
		name  string
		field any
		set   bool
	}{
		{"ready", &m.Ready, m.Ready != nil},
		{"error", &m.Error, m.Error != nil},
		{"exec", &m.Exec, m.Exec != nil},
		{"started", &m.Started, m.Started != nil},
		{"exit", &m.Exit, m.Exit != nil},
		{"signal", &m.Signal, m.Signal != nil},
		{"state", &m.State, m.State != nil},
		{"read", &m.Read, m.Read != nil},
		{"data", &m.Data, m.Data != nil},
		{"release", &m.Release, m.Release != nil},
		{"file", &m.File, m.File != nil},
		{"stdin", &m.Stdin, m.Stdin != nil},
		{"hold", &m.Hold, m.Hold != nil},
		{"ack", &m.Ack, m.Ack != nil},
		{"result", &m.Result, m.Result != nil},
	} {
		if err := visit(f.name, f.field, f.set); err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON encodes m as encoding/json would from its tags, building
// encoders only for the sub-messages that are set.
func (m *Message) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 128+len(m.Setup))
	b = append(b, `{"type":`...)
	b = jsonobj.AppendString(b, m.Type)
	if m.Spill {
		b = append(b, `,"spill":true`...)
	}
	if len(m.Setup) > 0 {
		// Setup is the runtime's own encoding, passed through as it is
		// (encoding/json would compact it; it comes compact already).
		if !json.Valid(m.Setup) {
			return nil, errors.New("agent: the setup is not valid JSON")
		}
		b = append(b, `,"setup":`...)
		b = append(b, m.Setup...)
	}
	err := m.subMessages(func(name string, field any, set bool) error {
		if !set {
			return nil
		}
		b = jsonobj.AppendKey(b, name)
		var ok bool
		if b, ok = appendStart(b, field); ok {
			return nil
		}
		v, err := json.Marshal(field)
		if err != nil {
			return err
		}
		b = append(b, v...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// UnmarshalJSON decodes what MarshalJSON (or encoding/json) encodes,
// building decoders only for the sub-messages that are there. Keys match
// the fields' names as encoding/json matches them (case aside); unknown
// keys are skipped.
func (m *Message) UnmarshalJSON(b []byte) error {
	// Validated whole first, as encoding/json does, so that splitting the
	// object below can take its syntax for granted.
	if !json.Valid(b) {
		var v any
		return json.Unmarshal(b, &v) // its syntax error
	}
	if jsonobj.IsNull(bytes.TrimSpace(b)) {
		return nil // as encoding/json leaves a struct
	}
	*m = Message{}
	return jsonobj.Object(b, reflect.TypeFor[Message](), func(key, raw []byte) error {
		var err error
		switch {
		case jsonobj.IsNull(raw) && (jsonobj.Is(key, "type") || jsonobj.Is(key, "spill")):
			return nil // leaves them as they are, as encoding/json does
		case jsonobj.Is(key, "type"):
			m.Type, err = jsonobj.String(raw)
			return err
		case jsonobj.Is(key, "spill"):
			m.Spill, err = jsonobj.Bool(raw)
			return err
		case jsonobj.Is(key, "setup"):
			m.Setup = append(json.RawMessage(nil), raw...)
			return nil
		}
		// Decoded where it is, so that a key given twice merges into one
		// sub-message as with encoding/json.
		return m.subMessages(func(name string, field any, _ bool) error {
			if jsonobj.Is(key, name) {
				if ok, err := decodeStart(raw, field); ok {
					return err
				}
				return json.Unmarshal(raw, field)
			}
			return nil
		})
	})
}
