// Package jsonobj encodes and decodes the JSON of airlock's control
// messages field by field, without encoding/json's reflection.
//
// encoding/json builds, the first time a process encodes or decodes a
// struct type, the encoders of that type and of every type it reaches,
// and it runs its scanner over every byte once per level of nesting
// (json.Unmarshal validates its input before decoding it, and again for
// each value a json.Unmarshaler is handed). A sandbox's init starts with
// one message of a few KiB (its setup, mostly the packed seccomp
// program): on every sandbox's start path, those costs were a few tenths
// of a millisecond on each side. The helpers here walk JSON that the
// caller has validated once (json.Valid) and leave to encoding/json only
// what is rare: strings with escapes.
package jsonobj

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// Object calls visit with each key of the JSON object b and the raw
// bytes of its value, in order. b must be valid JSON (json.Valid): the
// walk takes its syntax for granted. A null b visits nothing (as
// encoding/json leaves a struct); any other value than an object is an
// error naming t, as encoding/json's is. Keys with escapes are unescaped.
func Object(b []byte, t reflect.Type, visit func(key, raw []byte) error) error {
	b = skipSpace(b)
	if len(b) == 0 {
		return errors.New("unexpected end of JSON input")
	}
	if IsNull(bytes.TrimRight(b, " \t\r\n")) {
		return nil
	}
	if b[0] != '{' {
		return &json.UnmarshalTypeError{Value: valueKind(b[0]), Type: t}
	}
	for b = skipSpace(b[1:]); len(b) > 0 && b[0] != '}'; {
		keyEnd := stringEnd(b)
		key := b[1 : keyEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if err := json.Unmarshal(b[:keyEnd], &k); err != nil {
				return err
			}
			key = []byte(k)
		}
		b = skipSpace(skipSpace(b[keyEnd:])[1:]) // past the colon
		n := valueEnd(b)
		raw := b[:n]
		b = skipSpace(b[n:])
		if len(b) > 0 && b[0] == ',' {
			b = skipSpace(b[1:])
		}
		if err := visit(key, raw); err != nil {
			return err
		}
	}
	return nil
}

// Array calls visit with the raw bytes of each element of the JSON array
// raw (valid JSON, as for Object). A null raw visits nothing; any other
// value than an array is an error naming t.
func Array(raw []byte, t reflect.Type, visit func(raw []byte) error) error {
	if IsNull(raw) {
		return nil
	}
	if raw[0] != '[' {
		return &json.UnmarshalTypeError{Value: valueKind(raw[0]), Type: t}
	}
	for b := skipSpace(raw[1:]); len(b) > 0 && b[0] != ']'; {
		n := valueEnd(b)
		if err := visit(b[:n]); err != nil {
			return err
		}
		b = skipSpace(b[n:])
		if len(b) > 0 && b[0] == ',' {
			b = skipSpace(b[1:])
		}
	}
	return nil
}

// IsNull reports whether the raw value is JSON's null.
func IsNull(raw []byte) bool { return string(raw) == "null" }

// String decodes the raw JSON string value (valid JSON) as encoding/json
// would into a string: with escapes, through encoding/json itself.
func String(raw []byte) (string, error) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", &json.UnmarshalTypeError{Value: valueKind(raw[0]), Type: reflect.TypeFor[string]()}
	}
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s), nil
	}
	var v string
	err := json.Unmarshal(raw, &v)
	return v, err
}

// Bool decodes the raw JSON value true or false.
func Bool(raw []byte) (bool, error) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, &json.UnmarshalTypeError{Value: valueKind(raw[0]), Type: reflect.TypeFor[bool]()}
}

// Int decodes the raw JSON number as an int64, refusing fractions,
// exponents and overflow as encoding/json does.
func Int(raw []byte) (int64, error) {
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, &json.UnmarshalTypeError{Value: valueKind(raw[0]), Type: reflect.TypeFor[int64]()}
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, &json.UnmarshalTypeError{Value: "number " + string(raw), Type: reflect.TypeFor[int64]()}
	}
	return n, nil
}

// Uint decodes the raw JSON number as a uint64, as Int does.
func Uint(raw []byte) (uint64, error) {
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, &json.UnmarshalTypeError{Value: valueKind(raw[0]), Type: reflect.TypeFor[uint64]()}
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, &json.UnmarshalTypeError{Value: "number " + string(raw), Type: reflect.TypeFor[uint64]()}
	}
	return n, nil
}

// AppendString appends s as a JSON string, as encoding/json writes it
// (HTML characters and invalid UTF-8 escaped, through encoding/json).
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // escapes; never fails for a string
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendKey appends ,"name": (without the comma when b ends an opening
// brace). name must need no escapes.
func AppendKey(b []byte, name string) []byte {
	if len(b) > 0 && b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

// AppendFlag appends ,"name":true when v is set, nothing otherwise (a
// bool with omitempty).
func AppendFlag(b []byte, name string, v bool) []byte {
	if !v {
		return b
	}
	b = AppendKey(b, name)
	return append(b, "true"...)
}

// AppendInt appends ,"name":v, or nothing for a zero v with omitEmpty.
func AppendInt(b []byte, name string, v int64, omitEmpty bool) []byte {
	if v == 0 && omitEmpty {
		return b
	}
	b = AppendKey(b, name)
	return strconv.AppendInt(b, v, 10)
}

// AppendBytes appends ,"name":"<v in standard base64>", as encoding/json
// writes a []byte, or nothing for an empty v (omitempty).
func AppendBytes(b []byte, name string, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = AppendKey(b, name)
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

// Is reports whether an object's key names the field name, as
// encoding/json matches them: case aside.
func Is(key []byte, name string) bool { return bytes.EqualFold(key, []byte(name)) }

// AppendStrings appends ss as a JSON array of strings (null when nil, as
// encoding/json writes a nil slice).
func AppendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// Strings decodes the raw JSON array of strings as encoding/json would
// into old: null gives nil, [] an empty slice; elements are decoded in
// old's backing array where it has room, so that a null element keeps
// what was there.
func Strings(raw []byte, old []string) ([]string, error) {
	if IsNull(raw) {
		return nil, nil
	}
	ss := old[:0]
	err := Array(raw, reflect.TypeFor[[]string](), func(e []byte) error {
		var s string
		if len(ss) < cap(ss) {
			s = ss[:len(ss)+1][len(ss)]
		}
		var err error
		if !IsNull(e) {
			s, err = String(e)
		}
		ss = append(ss, s)
		return err
	})
	if len(ss) == 0 {
		ss = []string{}
	}
	return ss, err
}

// The helpers below walk JSON that json.Valid has accepted.

// skipSpace returns b past its leading JSON white space.
func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// stringEnd returns the length of the JSON string that b starts with.
func stringEnd(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd returns the length of the JSON value that b starts with.
func valueEnd(b []byte) int {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i += stringEnd(b[i:]) - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			depth--
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
		if depth == 0 && (b[i] == '}' || b[i] == ']' || b[i] == '"') {
			return i + 1
		}
	}
	return len(b)
}

// valueKind names the JSON value that starts with c, as encoding/json's
// errors do.
func valueKind(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}
