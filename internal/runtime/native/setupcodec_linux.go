package native

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"

	"github.com/airlock-dev/airlock/internal/jsonobj"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// The setup is encoded and decoded field by field (internal/jsonobj): it
// is the first message of every sandbox, a few KiB that are mostly the
// packed seccomp program, and encoding/json spent on it, on each side of
// the start path, the building of its encoders and decoders and several
// passes of its scanner (json.Unmarshal validates the whole message, then
// the program again for runtime.Program's UnmarshalJSON). The JSON is the
// same as encoding/json's for the struct's tags, byte for byte
// (TestSetupCodec): json.Marshal(&setup) remains its reference.

// encode returns s as JSON.
func (s *setup) encode() []byte {
	b := make([]byte, 0, 512+base64.StdEncoding.EncodedLen(8*len(s.Seccomp)))
	b = append(b, '{')
	str := func(name, v string, omitEmpty bool) {
		if v != "" || !omitEmpty {
			b = jsonobj.AppendKey(b, name)
			b = jsonobj.AppendString(b, v)
		}
	}
	strs := func(name string, v []string) { // all omitempty
		if len(v) > 0 {
			b = jsonobj.AppendKey(b, name)
			b = jsonobj.AppendStrings(b, v)
		}
	}
	flag := func(name string, v bool) { b = jsonobj.AppendFlag(b, name, v) } // all omitempty
	num := func(name string, v int64) { b = jsonobj.AppendInt(b, name, v, false) }
	str("state_dir", s.StateDir, false)
	str("image", s.Image, true)
	str("etc", s.Etc, true)
	str("workspace", s.Workspace, false)
	str("workspace_layer", s.WorkspaceLayer, true)
	flag("workspace_volatile", s.WorkspaceVolatile)
	strs("protected", s.Protected)
	strs("idmapped", s.IDMapped)
	if len(s.Mounts) > 0 {
		b = jsonobj.AppendKey(b, "mounts")
		b = append(b, '[')
		for i, m := range s.Mounts {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"source":`...)
			b = jsonobj.AppendString(b, m.Source)
			b = append(b, `,"target":`...)
			b = jsonobj.AppendString(b, m.Target)
			if m.Writable {
				b = append(b, `,"writable":true`...)
			}
			b = append(b, `,"dir":`...)
			b = strconv.AppendBool(b, m.Dir)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	strs("deny", s.Deny)
	flag("workspace_tmpfs", s.WorkspaceTmpfs)
	str("hostname", s.Hostname, false)
	num("disk", s.Disk)
	num("tmp", s.Tmp)
	num("shm", s.Shm)
	b = jsonobj.AppendKey(b, "nofile")
	b = strconv.AppendUint(b, s.NoFile, 10)
	num("fsize", s.FileSize)
	flag("detached", s.Detached)
	flag("sleep", s.Sleep)
	strs("listen", s.Listen)
	flag("exec_notify", s.ExecNotify)
	if len(s.Seccomp) > 0 {
		// As runtime.Program.MarshalJSON: the packed program, as
		// encoding/json writes a []byte (standard base64).
		b = jsonobj.AppendBytes(b, "seccomp", s.Seccomp.Pack())
	}
	flag("no_seccomp", s.NoSeccomp)
	flag("no_landlock", s.NoLandlock)
	return append(b, '}')
}

// decode sets s from the JSON b, as json.Unmarshal(b, s) would: keys
// match the fields' names case aside, unknown keys are skipped, a null
// leaves a string, number or flag as it was and empties a list, and a
// key given twice takes its last value. The first error ends the
// decoding (encoding/json goes on past a value of the wrong type, to
// report it at the end; either way the setup is refused).
func (s *setup) decode(b []byte) error {
	if !json.Valid(b) {
		var v any
		return json.Unmarshal(b, &v) // its syntax error
	}
	return jsonobj.Object(b, reflect.TypeFor[setup](), func(key, raw []byte) error {
		for _, f := range setupFields {
			if jsonobj.Is(key, f.name) {
				if jsonobj.IsNull(raw) && !f.list {
					return nil
				}
				if err := f.decode(s, raw); err != nil {
					return fieldError(f.name, err)
				}
				return nil
			}
		}
		return nil
	})
}

// fieldError adds the field's name to a type error, as encoding/json's
// errors carry it.
func fieldError(name string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field == "" {
		te.Struct, te.Field = "setup", name
	}
	return err
}

// setupFields decode the setup's fields by their JSON names. A list's
// null sets it to nil; any other field keeps its value on a null.
var setupFields = [...]struct {
	name   string
	list   bool
	decode func(s *setup, raw []byte) error
}{
	{"state_dir", false, func(s *setup, raw []byte) (err error) { s.StateDir, err = jsonobj.String(raw); return }},
	{"image", false, func(s *setup, raw []byte) (err error) { s.Image, err = jsonobj.String(raw); return }},
	{"etc", false, func(s *setup, raw []byte) (err error) { s.Etc, err = jsonobj.String(raw); return }},
	{"workspace", false, func(s *setup, raw []byte) (err error) { s.Workspace, err = jsonobj.String(raw); return }},
	{"workspace_layer", false, func(s *setup, raw []byte) (err error) { s.WorkspaceLayer, err = jsonobj.String(raw); return }},
	{"workspace_volatile", false, func(s *setup, raw []byte) (err error) { s.WorkspaceVolatile, err = jsonobj.Bool(raw); return }},
	{"protected", true, func(s *setup, raw []byte) (err error) { s.Protected, err = jsonobj.Strings(raw, s.Protected); return }},
	{"idmapped", true, func(s *setup, raw []byte) (err error) { s.IDMapped, err = jsonobj.Strings(raw, s.IDMapped); return }},
	{"mounts", true, decodeMounts},
	{"deny", true, func(s *setup, raw []byte) (err error) { s.Deny, err = jsonobj.Strings(raw, s.Deny); return }},
	{"workspace_tmpfs", false, func(s *setup, raw []byte) (err error) { s.WorkspaceTmpfs, err = jsonobj.Bool(raw); return }},
	{"hostname", false, func(s *setup, raw []byte) (err error) { s.Hostname, err = jsonobj.String(raw); return }},
	{"disk", false, func(s *setup, raw []byte) (err error) { s.Disk, err = jsonobj.Int(raw); return }},
	{"tmp", false, func(s *setup, raw []byte) (err error) { s.Tmp, err = jsonobj.Int(raw); return }},
	{"shm", false, func(s *setup, raw []byte) (err error) { s.Shm, err = jsonobj.Int(raw); return }},
	{"nofile", false, func(s *setup, raw []byte) (err error) { s.NoFile, err = jsonobj.Uint(raw); return }},
	{"fsize", false, func(s *setup, raw []byte) (err error) { s.FileSize, err = jsonobj.Int(raw); return }},
	{"detached", false, func(s *setup, raw []byte) (err error) { s.Detached, err = jsonobj.Bool(raw); return }},
	{"sleep", false, func(s *setup, raw []byte) (err error) { s.Sleep, err = jsonobj.Bool(raw); return }},
	{"listen", true, func(s *setup, raw []byte) (err error) { s.Listen, err = jsonobj.Strings(raw, s.Listen); return }},
	{"exec_notify", false, func(s *setup, raw []byte) (err error) { s.ExecNotify, err = jsonobj.Bool(raw); return }},
	{"seccomp", true, decodeSeccomp},
	{"no_seccomp", false, func(s *setup, raw []byte) (err error) { s.NoSeccomp, err = jsonobj.Bool(raw); return }},
	{"no_landlock", false, func(s *setup, raw []byte) (err error) { s.NoLandlock, err = jsonobj.Bool(raw); return }},
}

// decodeMounts decodes the mounts list; each mount as encoding/json
// would into a fresh bindMount.
func decodeMounts(s *setup, raw []byte) error {
	if jsonobj.IsNull(raw) {
		s.Mounts = nil
		return nil
	}
	// As encoding/json: elements are decoded where the old list's
	// backing array has room for them.
	mounts := s.Mounts[:0]
	err := jsonobj.Array(raw, reflect.TypeFor[[]bindMount](), func(e []byte) error {
		var m bindMount
		if len(mounts) < cap(mounts) {
			m = mounts[:len(mounts)+1][len(mounts)]
		}
		err := jsonobj.Object(e, reflect.TypeFor[bindMount](), func(key, raw []byte) (err error) {
			if jsonobj.IsNull(raw) {
				return nil
			}
			switch {
			case jsonobj.Is(key, "source"):
				m.Source, err = jsonobj.String(raw)
			case jsonobj.Is(key, "target"):
				m.Target, err = jsonobj.String(raw)
			case jsonobj.Is(key, "writable"):
				m.Writable, err = jsonobj.Bool(raw)
			case jsonobj.Is(key, "dir"):
				m.Dir, err = jsonobj.Bool(raw)
			}
			return err
		})
		mounts = append(mounts, m)
		return err
	})
	if len(mounts) == 0 {
		mounts = []bindMount{}
	}
	s.Mounts = mounts
	return err
}

// decodeSeccomp decodes the packed program as runtime.Program's
// UnmarshalJSON does, without running encoding/json's scanner over it
// again.
func decodeSeccomp(s *setup, raw []byte) error {
	if jsonobj.IsNull(raw) {
		s.Seccomp = nil
		return nil
	}
	if raw[0] != '"' {
		return s.Seccomp.UnmarshalJSON(raw) // its error
	}
	packed, err := base64.StdEncoding.AppendDecode(nil, raw[1:len(raw)-1])
	if err != nil {
		return s.Seccomp.UnmarshalJSON(raw) // its error, or a string with escapes
	}
	p, err := runtime.UnpackProgram(packed)
	if err != nil {
		return err
	}
	s.Seccomp = p
	return nil
}
