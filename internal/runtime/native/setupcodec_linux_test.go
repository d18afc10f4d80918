package native

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	sbx "github.com/airlock-dev/airlock/internal/sandbox"
)

// defaultProgram is the seccomp program of the default policy.
func defaultProgram(t testing.TB) runtime.Program {
	spec, err := sbx.Spec(&policy.Policy{}, sbx.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	return spec.Seccomp
}

// fill sets every field v reaches to a value that is not its zero (n
// makes values differ), strings with characters encoding/json escapes.
func fill(v reflect.Value, n int, prog runtime.Program) {
	switch {
	case v.Type() == reflect.TypeFor[runtime.Program]():
		v.Set(reflect.ValueOf(prog))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("/s%d<&>\"\\\n\u00e9\u2028 \xff", n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int64:
		v.SetInt(-1 << (n % 62))
	case reflect.Uint64:
		v.SetUint(1<<63 + uint64(n))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), n*10+i, prog)
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n*100+i, prog)
		}
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

// TestSetupCodec checks that setup.encode writes what json.Marshal writes
// for the struct's tags, byte for byte, and that setup.decode reads it
// back: with no field set, with each field alone, and with all of them.
// A field added to setup without a place in the codec fails here.
func TestSetupCodec(t *testing.T) {
	prog := defaultProgram(t)
	cases := map[string]setup{"none": {}}
	var all setup
	fill(reflect.ValueOf(&all).Elem(), 1, prog)
	cases["all"] = all
	typ := reflect.TypeFor[setup]()
	for i := range typ.NumField() {
		var one setup
		reflect.ValueOf(&one).Elem().Field(i).Set(reflect.ValueOf(all).Field(i))
		cases[typ.Field(i).Name] = one
	}
	// Present but empty lists, and mounts with their flags off.
	cases["empty lists"] = setup{Protected: []string{}, Mounts: []bindMount{}, Listen: []string{}, Seccomp: runtime.Program{}}
	cases["plain mount"] = setup{Mounts: []bindMount{{Source: "/a", Target: "/b"}}}
	for name, s := range cases {
		want, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		got := s.encode()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encode\n got %s\nwant %s", name, got, want)
			continue
		}
		var back, ref setup
		if err := back.decode(got); err != nil {
			t.Errorf("%s: decode: %v", name, err)
			continue
		}
		if err := json.Unmarshal(got, &ref); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, ref) {
			t.Errorf("%s: decode\n got %+v\nwant %+v (json.Unmarshal)", name, back, ref)
		}
	}
}

// decodeBoth decodes b with setup.decode and with json.Unmarshal, each
// into a copy of start, and reports a difference: in acceptance, or in
// the result when both accept.
func decodeBoth(start setup, b []byte) error {
	clone := func(s setup) setup {
		var c setup
		raw, err := json.Marshal(&s)
		if err != nil {
			panic(err)
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			panic(err)
		}
		return c
	}
	got, want := clone(start), clone(start)
	gotErr, wantErr := got.decode(b), json.Unmarshal(b, &want)
	switch {
	case (gotErr == nil) != (wantErr == nil):
		return fmt.Errorf("decode %q: error %v, json.Unmarshal's %v", b, gotErr, wantErr)
	case gotErr == nil && !reflect.DeepEqual(got, want):
		return fmt.Errorf("decode %q:\n got %+v\nwant %+v (json.Unmarshal)", b, got, want)
	}
	return nil
}

// setupInputs are JSON texts at the edges of what encoding/json accepts
// into a setup.
var setupInputs = []string{
	`{}`, `null`, " null \n", "\t{}\r\n", ` { } `, `[]`, `"x"`, `1`, `true`, ``, `{`, `{"a":}`, `{"state_dir":"a"}x`,
	`{"state_dir":"a","Workspace":"b","HOSTNAME":"c","unknown":{"x":[1,2,{}]},"disk":12}`,
	"{\n\t\"image\" : \"\\u003cimg\\u003e\\n\" ,\r\"etc\":\"\\ud83d\\ude00\"}",
	`{"st\u0061te_dir":"escaped key"}`,
	`{"state_dir":null,"disk":null,"detached":null,"protected":null,"mounts":null,"seccomp":null}`,
	`{"protected":["a",null,"c"],"deny":[],"listen":["127.0.0.1:80"]}`,
	`{"protected":["a","b"],"protected":["c"]}`,
	`{"mounts":[{"source":"/a","target":"/b","writable":true,"dir":true}],"mounts":[{"dir":false,"source":null}]}`,
	`{"mounts":[{"SOURCE":"/a","x":1},{}]}`,
	`{"mounts":[1]}`, `{"mounts":{}}`, `{"mounts":[{"source":1}]}`, `{"protected":"a"}`, `{"protected":[1]}`,
	`{"disk":1.5}`, `{"disk":1e3}`, `{"disk":-0}`, `{"disk":9223372036854775807}`, `{"disk":9223372036854775808}`,
	`{"nofile":-1}`, `{"nofile":18446744073709551615}`, `{"nofile":"1"}`, `{"tmp":true}`,
	`{"detached":1}`, `{"detached":"true"}`, `{"exec_notify":true,"no_seccomp":false}`,
	`{"hostname":"\xff\xfe"}`, `{"hostname":5}`, `{"hostname":{}}`,
	`{"seccomp":""}`, `{"seccomp":"AAAA"}`, `{"seccomp":"AAAAAAAAAAA="}`, `{"seccomp":"!!!!"}`, `{"seccomp":"\u0041AAAAAAAAAA="}`,
	`{"seccomp":1}`, `{"seccomp":[]}`,
}

// TestSetupDecodeLikeEncodingJSON checks that setup.decode accepts what
// json.Unmarshal accepts into a setup, refuses what it refuses, and
// decodes the same values, from a fresh setup and over a filled one.
func TestSetupDecodeLikeEncodingJSON(t *testing.T) {
	prog := defaultProgram(t)
	var filled setup
	fill(reflect.ValueOf(&filled).Elem(), 3, prog)
	valid, err := json.Marshal(&filled)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range append(setupInputs, string(valid)) {
		for _, start := range []setup{{}, filled} {
			if err := decodeBoth(start, []byte(in)); err != nil {
				t.Error(err)
			}
		}
	}
}

// FuzzSetupDecode compares setup.decode with json.Unmarshal on any input.
//
//	go test -run XXX -fuzz FuzzSetupDecode ./internal/runtime/native/
func FuzzSetupDecode(f *testing.F) {
	for _, in := range setupInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := decodeBoth(setup{}, b); err != nil {
			t.Fatal(err)
		}
	})
}
