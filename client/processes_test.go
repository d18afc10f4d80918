package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// FuzzDecodeOutputEvent: the fast decoder of output events gives exactly
// what decoding the line as JSON gives, an error where that fails, for
// any line; the seeds (run as a plain test) are the shapes it must tell
// apart.
func FuzzDecodeOutputEvent(f *testing.F) {
	code := 3
	for _, ev := range []api.OutputEvent{
		{Kind: api.EventStdout, Stream: api.EventStdout, Offset: 7, Data: []byte("hello\x00\xff world"), Cursor: "12.0"},
		{Kind: api.EventStderr, Stream: api.EventStderr, Data: bytes.Repeat([]byte{0xfb, 0xff}, 5000), Cursor: "0.10000"},
		{Kind: api.EventLost, Stream: api.EventStdout, Offset: 1 << 40, Bytes: 99, Cursor: "1.2"},
		{Kind: api.EventExit, ExitCode: &code, Cursor: "3.4"},
	} {
		b, _ := json.Marshal(ev)
		f.Add(b)
	}
	for _, s := range []string{
		`{"kind":"stdout","data":"aGk=","cursor":"2.0"}`,
		`{"kind":"stdout","data":"aGk\u003d","cursor":"2.0"}`,            // an escape in the data
		`{"kind":"stdout","data":"aG` + "\r" + `k=","cursor":"2.0"}`,     // CR, which base64 would skip
		`{"kind":"stdout","data":"aGk=","data":"","cursor":"2.0"}`,       // the last member wins
		`{"kind":"stdout","data":"aGk=","cursor":"2.0","x":{"data":""}}`, // a nested one does not
		`{"x":{"data":"aGk="},"kind":"stdout"}`,                          // a nested data member
		`{"\"data":"aGk=","kind":"stdout"}`,                              // a key that ends in data
		`{"kind":"stdout","x":"{","data":"aGk="}`,                        // a brace in a string
		`{"kind":"stdout","data":"a!k=","cursor":"2.0"}`,                 // not base64
		`{"kind":"stdout","data":"aGk=","cursor":2}`,                     // a wrong type
		`{"kind":"stdout","data":"aGk="`,                                 // cut short
		`{"kind":"stdout","data": "aGk="}`,
		`{"error":{"code":"unavailable","message":"shutting down"}}`,
		`{"kind":"stdout","data":null}`,
		`[{"data":"aGk="}]`,
		`"data":"aGk="`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast, plain api.OutputEvent
		errFast := decodeOutputEvent(line, &fast)
		errPlain := decodeStreamEvent("output", line, &plain)
		if (errFast == nil) != (errPlain == nil) {
			t.Fatalf("%q: fast decoder error %v, encoding/json's %v", line, errFast, errPlain)
		}
		if errFast != nil {
			return
		}
		if !bytes.Equal(fast.Data, plain.Data) {
			t.Fatalf("%q: data %q, encoding/json's %q", line, fast.Data, plain.Data)
		}
		fast.Data, plain.Data = nil, nil
		if !reflect.DeepEqual(fast, plain) {
			t.Fatalf("%q: %+v, encoding/json's %+v", line, fast, plain)
		}
	})
}
