package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// plainMessage is Message without its methods: what encoding/json makes
// of the struct's tags, the reference for Message's own codec.
type plainMessage Message

// fill sets every field reachable from v (a settable value) to something
// other than its zero value.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s<&>\"é\n" + strings.Repeat("x", depth))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(-7 - depth))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(uint64(9 + depth))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		if depth > 4 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`{"k":[1,"two"]}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		e := reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}

// TestMessageCodec: Message's own encoding is byte for byte what
// encoding/json makes of its tags, for each sub-message set (and for all
// of them at once), and it decodes what encoding/json encodes into the same
// value; every sub-message field is in subMessages, under its tag's name.
func TestMessageCodec(t *testing.T) {
	mt := reflect.TypeOf(Message{})
	var names []string
	(&Message{}).subMessages(func(name string, _ any, _ bool) error {
		names = append(names, name)
		return nil
	})
	var want []string
	for i := 0; i < mt.NumField(); i++ {
		tag, _, _ := strings.Cut(mt.Field(i).Tag.Get("json"), ",")
		if mt.Field(i).Type.Kind() == reflect.Pointer {
			want = append(want, tag)
		} else if tag != "type" && tag != "spill" && tag != "setup" {
			t.Errorf("Message field %s (%q) is neither a sub-message nor type, spill or setup: teach codec.go about it", mt.Field(i).Name, tag)
		}
	}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("subMessages names %v, Message's pointer fields (in order) %v", names, want)
	}

	var cases []*Message
	for i := 0; i < mt.NumField(); i++ {
		if mt.Field(i).Type.Kind() != reflect.Pointer {
			continue
		}
		m := &Message{Type: mt.Field(i).Name}
		fill(reflect.ValueOf(m).Elem().Field(i), 0)
		cases = append(cases, m)
	}
	all := &Message{}
	fill(reflect.ValueOf(all).Elem(), 0)
	cases = append(cases, all,
		&Message{Type: TypeSetup, Setup: json.RawMessage(`{"state_dir":"/run/x","disk":5}`)},
		&Message{Type: TypeExit, Spill: true},
		&Message{Type: "tab\there"}, &Message{Type: "a\\b"}, &Message{Type: "<&>"},
		&Message{})
	for _, m := range cases {
		checkLikeEncodingJSON(t, m)
	}
}

// checkLikeEncodingJSON checks that m encodes byte for byte as
// encoding/json encodes it from the struct's tags, also through
// json.Marshal, and decodes back as encoding/json decodes it.
func checkLikeEncodingJSON(t *testing.T, m *Message) {
	t.Helper()
	ref, err := json.Marshal((*plainMessage)(m))
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.MarshalJSON()
	if err != nil {
		t.Fatalf("%q: %v", m.Type, err)
	}
	if !bytes.Equal(got, ref) {
		t.Errorf("%q: encoded\n%s\nencoding/json:\n%s", m.Type, got, ref)
	}
	// json.Marshal of a Message goes through MarshalJSON.
	if via, _ := json.Marshal(m); !bytes.Equal(via, ref) {
		t.Errorf("%q: json.Marshal gave\n%s", m.Type, via)
	}
	var back, refBack Message
	if err := back.UnmarshalJSON(ref); err != nil {
		t.Fatalf("%q: decode: %v", m.Type, err)
	}
	if err := json.Unmarshal(ref, (*plainMessage)(&refBack)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, refBack) {
		t.Errorf("%q: decoded %+v, encoding/json decoded %+v", m.Type, back, refBack)
	}
}

// decodeLikeEncodingJSON reports a difference between Message's decoding
// of in and encoding/json's: in acceptance, or in the message when both
// accept it.
func decodeLikeEncodingJSON(in []byte) error {
	var got, ref Message
	err := got.UnmarshalJSON(in)
	rerr := json.Unmarshal(in, (*plainMessage)(&ref))
	if (err == nil) != (rerr == nil) {
		return fmt.Errorf("%q: error %v, encoding/json's %v", in, err, rerr)
	}
	if err == nil && !reflect.DeepEqual(got, ref) {
		return fmt.Errorf("%q: decoded %+v, encoding/json decoded %+v", in, got, ref)
	}
	return nil
}

// TestMessageDecodeLikeEncodingJSON: input encoding/json takes in its own
// way (nulls, unknown and differently cased keys, whitespace) decodes the
// same through Message's codec, and input it refuses is refused.
func TestMessageDecodeLikeEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"type":"exit","exit":{"id":3,"code":2}}`,
		`{"type":"exit","exit":null,"ready":null}`,
		`{"TYPE":"exec","Exec":{"id":1,"argv":["a","b"]},"unknown":{"x":[1,2]}}`,
		" { \"type\" : \"setup\" , \"setup\" : { \"a\" : [ 1 ] } } ",
		`{"type":"setup","setup":null}`,
		`{"type":"data","data":{"seq":1,"data":"aGVsbG8="}}`,
		`null`,
		`{}`,
		`{"type":"file_result","result":{"seq":1,"entries":[{"name":"a}b\"c"},{"name":"]"}],"error":"x,y"}}`,
		`{"\u0074ype":"exit","exit":{"id":1} , "spill" : false }`,
		`{"type":"data","data":{"seq":1,"from":2,"eof":true},"x":[{"y":[]},-1.5e3,true,null]}`,
		"{\n\t\"type\":\"ack\",\r\n\"ack\":{}}",
		`{"type":"exit","type":null,"spill":true,"Spill":null,"exit":{"id":1}}`,
		`{"type":"a\u0062\n","spill":false}`,
	} {
		var got, ref Message
		err := got.UnmarshalJSON([]byte(in))
		rerr := json.Unmarshal([]byte(in), (*plainMessage)(&ref))
		if err != nil || rerr != nil {
			t.Errorf("%s: %v / encoding/json: %v", in, err, rerr)
			continue
		}
		if !reflect.DeepEqual(got, ref) {
			t.Errorf("%s: decoded %+v, encoding/json decoded %+v", in, got, ref)
		}
	}
	for _, in := range []string{
		`{"type":"exit","exit":{"id":"three"}}`,
		`{"type":"exit"`,
		`{"type":"exit"} trailing`,
		`{"type":5}`,
		`{"spill":"yes"}`,
		`{"type":["a"]}`,
		`[]`,
		``,
	} {
		var got Message
		if err := got.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%q decoded without an error: %+v", in, got)
		}
		var ref Message
		if err := json.Unmarshal([]byte(in), (*plainMessage)(&ref)); err == nil {
			t.Errorf("control: encoding/json took %q", in)
		}
	}
	// The setup is passed through as it is, so it must be JSON.
	if _, err := (&Message{Type: TypeSetup, Setup: json.RawMessage(`{"a":`)}).MarshalJSON(); err == nil {
		t.Error("a setup that is not JSON was encoded")
	}
}

// FuzzMessageDecode: on any input, Message's decoder and encoding/json's
// (from the struct's tags) both refuse it or decode the same message.
func FuzzMessageDecode(f *testing.F) {
	f.Add([]byte(`{"type":"exit","exit":{"id":3,"code":2}}`))
	f.Add([]byte(`{"type":"file_result","result":{"seq":1,"entries":[{"name":"a}b\"c"}],"error":"x,y"}}`))
	f.Add([]byte(`{"TYPE":"exec","Exec":{"argv":["a"]},"z":[1,{"a":null}],"setup":{"b":"}"}}`))
	f.Add([]byte(`{"\u0074ype":"ack","ack":{}, "spill":true}`))
	f.Add([]byte(`{"type":"exit","exit":{"id":1},"Exit":{"code":2},"type":"x","setup":[1],"setup":{}}`))
	for _, in := range startInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := decodeLikeEncodingJSON(in); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStartMessagesCodec: the start's sub-messages, encoded field by
// field (subcodec.go), are byte for byte what encoding/json writes with
// no field set, with each field alone and with all of them, and decode
// back as encoding/json decodes them.
func TestStartMessagesCodec(t *testing.T) {
	var cases []*Message
	for _, field := range []string{"Exec", "Ready", "Started", "Exit"} {
		f := reflect.ValueOf(&Message{}).Elem().FieldByName(field)
		st := f.Type().Elem()
		// None set.
		m := &Message{Type: field}
		reflect.ValueOf(m).Elem().FieldByName(field).Set(reflect.New(st))
		cases = append(cases, m)
		// Each alone, then all.
		full := reflect.New(st)
		fill(full.Elem(), 0)
		for i := 0; i < st.NumField(); i++ {
			m := &Message{Type: field + "." + st.Field(i).Name}
			one := reflect.New(st)
			one.Elem().Field(i).Set(full.Elem().Field(i))
			reflect.ValueOf(m).Elem().FieldByName(field).Set(one)
			cases = append(cases, m)
		}
		m = &Message{Type: field + ".all"}
		reflect.ValueOf(m).Elem().FieldByName(field).Set(full)
		cases = append(cases, m)
	}
	cases = append(cases,
		&Message{Type: "empty lists", Exec: &ExecRequest{Argv: []string{}, Env: []string{}}, Ready: &Ready{Placeholders: []string{}, Steps: map[string]int64{}}},
		&Message{Type: "steps", Ready: &Ready{Steps: map[string]int64{"z": 1, "a<": -2, "m\u00e9": 3}}},
		&Message{Type: "outputs", Exit: &Exit{Output: &Output{}}},
		&Message{Type: "stderr only", Exit: &Exit{Output: &Output{Stderr: []byte{0, 0xff, '"'}}}},
		&Message{Type: "stdout only", Exit: &Exit{Output: &Output{Stdout: []byte("out\n")}}},
		&Message{Type: "big", Exec: &ExecRequest{ID: 1<<64 - 1, Rows: 65535, Cols: 1, Collect: -1 << 63}, Started: &Started{ID: 1 << 63, Pid: 1<<63 - 1}})
	for _, m := range cases {
		checkLikeEncodingJSON(t, m)
	}
}

// startInputs are edge cases of the start's sub-messages for the
// decoder: nulls, repeated keys, case, escapes, wrong types, overflow.
var startInputs = []string{
	`{"type":"exec","exec":{"id":1,"argv":["a",null,"\u0062"],"env":null,"dir":"/w","tty":true,"rows":24,"cols":80}}`,
	`{"exec":{"id":null,"argv":null,"dir":null,"collect":null,"capture":null}}`,
	`{"exec":{"argv":["a","b"]},"exec":{"argv":["c"],"hold":true},"EXEC":{"Dir":"x"}}`,
	`{"exec":{"rows":65536}}`, `{"exec":{"rows":-1}}`, `{"exec":{"id":-1}}`, `{"exec":{"id":1.5}}`, `{"exec":{"collect":9223372036854775808}}`,
	`{"exec":[]}`, `{"exec":"x"}`, `{"exec":{"argv":"a"}}`, `{"exec":{"argv":[1]}}`, `{"exec":{"tty":1}}`, `{"exec":{"dir":{}}}`,
	`{"ready":{"landlock_abi":6,"placeholders":["p"],"steps":{"b":2,"a":1,"a":3,"c":null},"exec_listener_fd":5,"root_fd":6}}`,
	`{"ready":{"steps":null}}`, `{"ready":{"steps":{}}}`, `{"ready":{"steps":[]}}`, `{"ready":{"steps":{"x":"1"}}}`, `{"ready":{"steps":{"\u00e9":1}}}`,
	`{"ready":{"steps":{"a":1}},"ready":{"steps":{"b":2}}}`,
	`{"started":{"id":3,"pid":42}}`, `{"started":null}`, `{"Started":{"PID":7}}`, `{"started":{"pid":"7"}}`,
	`{"exit":{"id":3,"code":-1,"signal":9,"output":{"stdout":"aGk=","stderr":null}}}`,
	`{"exit":{"output":null}}`, `{"exit":{"output":{}}}`, `{"exit":{"output":{"stdout":""}}}`, `{"exit":{"output":{"stdout":"!!"}}}`,
	`{"exit":{"output":{"stdout":"aG\u006b="}}}`, `{"exit":{"output":{"stdout":1}}}`, `{"exit":{"output":[]}}`,
	`{"exit":{"output":{"stdout":"aGk="}},"exit":{"output":{"stderr":"aGk="}}}`,
	`{"exit":{"code":2147483648,"signal":-9223372036854775808}}`,
}

// TestStartMessagesDecodeLikeEncodingJSON: the start's sub-messages
// decode as encoding/json decodes them, refusals included.
func TestStartMessagesDecodeLikeEncodingJSON(t *testing.T) {
	for _, in := range startInputs {
		if err := decodeLikeEncodingJSON([]byte(in)); err != nil {
			t.Error(err)
		}
	}
}
