package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"

	"github.com/airlock-dev/airlock/internal/jsonobj"
)

// The sub-messages of a sandbox's start (the first exec, ready, started,
// exit) are encoded and decoded field by field: every `airlock run` and
// every sandbox's init exchanges them once, and encoding/json built their
// encoders and decoders first, in both processes (about 0.3 ms of each's
// CPU). The JSON is encoding/json's for the structs' tags
// (TestMessageCodec, TestStartMessagesCodec), and the decoding follows
// json.Unmarshal's (TestMessageDecodeLikeEncodingJSON, FuzzMessageDecode).

// appendStart appends the sub-message field points to, if it is one of
// the start's, and reports whether it was.
func appendStart(b []byte, field any) ([]byte, bool) {
	switch f := field.(type) {
	case **ExecRequest:
		return appendExecRequest(b, *f), true
	case **Ready:
		return appendReady(b, *f), true
	case **Started:
		return appendStarted(b, *f), true
	case **Exit:
		return appendExit(b, *f), true
	}
	return b, false
}

// decodeStart decodes raw into the sub-message field points to, if it is
// one of the start's, as json.Unmarshal(raw, field) would, and reports
// whether it was.
func decodeStart(raw []byte, field any) (bool, error) {
	switch f := field.(type) {
	case **ExecRequest:
		return true, decodeInto(raw, f, decodeExecRequest)
	case **Ready:
		return true, decodeInto(raw, f, decodeReady)
	case **Started:
		return true, decodeInto(raw, f, decodeStarted)
	case **Exit:
		return true, decodeInto(raw, f, decodeExit)
	}
	return false, nil
}

// decodeInto decodes the object raw into *p as encoding/json decodes into
// a pointer to a struct: null sets it to nil, an object is decoded into
// the struct already there (a new one if none).
func decodeInto[T any](raw []byte, p **T, field func(v *T, key, raw []byte) error) error {
	if jsonobj.IsNull(raw) {
		*p = nil
		return nil
	}
	if raw[0] != '{' {
		return jsonobj.Object(raw, reflect.TypeFor[T](), nil) // its type error
	}
	if *p == nil {
		*p = new(T)
	}
	v := *p
	return jsonobj.Object(raw, reflect.TypeFor[T](), func(key, raw []byte) error {
		if jsonobj.IsNull(raw) && !nullable(key) {
			return nil // a null leaves a number, string or flag as it was
		}
		return field(v, key, raw)
	})
}

// nullable reports whether the field named key is one a null sets to nil
// (a list, a map, a pointer) rather than leaving alone.
func nullable(key []byte) bool {
	for _, n := range [...]string{"argv", "env", "placeholders", "steps", "output", "stdout", "stderr"} {
		if jsonobj.Is(key, n) {
			return true
		}
	}
	return false
}

func appendExecRequest(b []byte, r *ExecRequest) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, r.ID, 10)
	b = append(b, `,"argv":`...)
	b = jsonobj.AppendStrings(b, r.Argv)
	b = append(b, `,"env":`...)
	b = jsonobj.AppendStrings(b, r.Env)
	b = append(b, `,"dir":`...)
	b = jsonobj.AppendString(b, r.Dir)
	b = jsonobj.AppendFlag(b, "tty", r.TTY)
	b = jsonobj.AppendFlag(b, "capture", r.Capture)
	b = jsonobj.AppendFlag(b, "hold", r.Hold)
	b = jsonobj.AppendInt(b, "collect", int64(r.Collect), true)
	b = jsonobj.AppendFlag(b, "no_stdin", r.NoStdin)
	b = jsonobj.AppendInt(b, "rows", int64(r.Rows), true)
	b = jsonobj.AppendInt(b, "cols", int64(r.Cols), true)
	return append(b, '}')
}

func decodeExecRequest(r *ExecRequest, key, raw []byte) (err error) {
	switch {
	case jsonobj.Is(key, "id"):
		r.ID, err = jsonobj.Uint(raw)
	case jsonobj.Is(key, "argv"):
		r.Argv, err = jsonobj.Strings(raw, r.Argv)
	case jsonobj.Is(key, "env"):
		r.Env, err = jsonobj.Strings(raw, r.Env)
	case jsonobj.Is(key, "dir"):
		r.Dir, err = jsonobj.String(raw)
	case jsonobj.Is(key, "tty"):
		r.TTY, err = jsonobj.Bool(raw)
	case jsonobj.Is(key, "capture"):
		r.Capture, err = jsonobj.Bool(raw)
	case jsonobj.Is(key, "hold"):
		r.Hold, err = jsonobj.Bool(raw)
	case jsonobj.Is(key, "collect"):
		var n int64
		n, err = jsonobj.Int(raw)
		r.Collect = int(n)
	case jsonobj.Is(key, "no_stdin"):
		r.NoStdin, err = jsonobj.Bool(raw)
	case jsonobj.Is(key, "rows"):
		r.Rows, err = uint16Of(raw)
	case jsonobj.Is(key, "cols"):
		r.Cols, err = uint16Of(raw)
	}
	return err
}

func appendReady(b []byte, r *Ready) []byte {
	b = append(b, `{"landlock_abi":`...)
	b = strconv.AppendInt(b, int64(r.LandlockABI), 10)
	if len(r.Placeholders) > 0 {
		b = append(b, `,"placeholders":`...)
		b = jsonobj.AppendStrings(b, r.Placeholders)
	}
	if len(r.Steps) > 0 {
		b = append(b, `,"steps":{`...)
		// encoding/json writes a map's keys sorted.
		for i, k := range slices.Sorted(maps.Keys(r.Steps)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonobj.AppendString(b, k)
			b = append(b, ':')
			b = strconv.AppendInt(b, r.Steps[k], 10)
		}
		b = append(b, '}')
	}
	b = jsonobj.AppendInt(b, "exec_listener_fd", int64(r.ExecListenerFD), true)
	b = jsonobj.AppendInt(b, "root_fd", int64(r.RootFD), true)
	return append(b, '}')
}

func decodeReady(r *Ready, key, raw []byte) (err error) {
	var n int64
	switch {
	case jsonobj.Is(key, "landlock_abi"):
		n, err = jsonobj.Int(raw)
		r.LandlockABI = int(n)
	case jsonobj.Is(key, "placeholders"):
		r.Placeholders, err = jsonobj.Strings(raw, r.Placeholders)
	case jsonobj.Is(key, "steps"):
		if jsonobj.IsNull(raw) {
			r.Steps = nil
			return nil
		}
		if raw[0] != '{' {
			return jsonobj.Object(raw, reflect.TypeFor[map[string]int64](), nil)
		}
		if r.Steps == nil {
			r.Steps = map[string]int64{}
		}
		err = jsonobj.Object(raw, reflect.TypeFor[map[string]int64](), func(k, v []byte) error {
			var n int64 // a null element is its zero value
			if !jsonobj.IsNull(v) {
				var err error
				if n, err = jsonobj.Int(v); err != nil {
					return err
				}
			}
			r.Steps[string(k)] = n
			return nil
		})
	case jsonobj.Is(key, "exec_listener_fd"):
		n, err = jsonobj.Int(raw)
		r.ExecListenerFD = int(n)
	case jsonobj.Is(key, "root_fd"):
		n, err = jsonobj.Int(raw)
		r.RootFD = int(n)
	}
	return err
}

func appendStarted(b []byte, s *Started) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, s.ID, 10)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(s.Pid), 10)
	return append(b, '}')
}

func decodeStarted(s *Started, key, raw []byte) (err error) {
	switch {
	case jsonobj.Is(key, "id"):
		s.ID, err = jsonobj.Uint(raw)
	case jsonobj.Is(key, "pid"):
		var n int64
		n, err = jsonobj.Int(raw)
		s.Pid = int(n)
	}
	return err
}

func appendExit(b []byte, e *Exit) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, e.ID, 10)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = jsonobj.AppendInt(b, "signal", int64(e.Signal), true)
	if o := e.Output; o != nil {
		b = append(b, `,"output":{`...)
		b = jsonobj.AppendBytes(b, "stdout", o.Stdout)
		b = jsonobj.AppendBytes(b, "stderr", o.Stderr)
		b = append(b, '}')
	}
	return append(b, '}')
}

func decodeExit(e *Exit, key, raw []byte) (err error) {
	var n int64
	switch {
	case jsonobj.Is(key, "id"):
		e.ID, err = jsonobj.Uint(raw)
	case jsonobj.Is(key, "code"):
		n, err = jsonobj.Int(raw)
		e.Code = int(n)
	case jsonobj.Is(key, "signal"):
		n, err = jsonobj.Int(raw)
		e.Signal = int(n)
	case jsonobj.Is(key, "output"):
		err = decodeInto(raw, &e.Output, func(o *Output, key, raw []byte) (err error) {
			switch {
			case jsonobj.Is(key, "stdout"):
				o.Stdout, err = bytesOf(raw)
			case jsonobj.Is(key, "stderr"):
				o.Stderr, err = bytesOf(raw)
			}
			return err
		})
	}
	return err
}

// bytesOf decodes a []byte as encoding/json does: null is nil, a string
// standard base64.
func bytesOf(raw []byte) ([]byte, error) {
	if jsonobj.IsNull(raw) {
		return nil, nil
	}
	if raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		if b, err := base64.StdEncoding.AppendDecode([]byte{}, raw[1:len(raw)-1]); err == nil {
			return b, nil
		}
	}
	var b []byte
	err := json.Unmarshal(raw, &b) // escapes, or its error
	return b, err
}

// uint16Of decodes a number that must fit a uint16.
func uint16Of(raw []byte) (uint16, error) {
	n, err := jsonobj.Uint(raw)
	if err == nil && n > 0xffff {
		err = &json.UnmarshalTypeError{Value: "number " + string(raw), Type: reflect.TypeFor[uint16]()}
	}
	return uint16(n), err
}
