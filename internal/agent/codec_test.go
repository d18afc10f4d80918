package agent

import (
	"bytes"
	"encoding/json"
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
		ref, err := json.Marshal((*plainMessage)(m))
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", m.Type, err)
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
	f.Fuzz(func(t *testing.T, in []byte) {
		var got, ref Message
		err := got.UnmarshalJSON(in)
		rerr := json.Unmarshal(in, (*plainMessage)(&ref))
		if (err == nil) != (rerr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", in, err, rerr)
		}
		if err == nil && !reflect.DeepEqual(got, ref) {
			t.Fatalf("%q: decoded %+v, encoding/json decoded %+v", in, got, ref)
		}
	})
}
