package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// hostLinesCases are request heads and the Host values textproto reads
// from them; ok false marks the heads hostLines leaves to textproto.
var hostLinesCases = []struct {
	head  string
	hosts []string
	ok    bool
}{
	{"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", []string{"a.test"}, true},
	{"GET http://a.test/ HTTP/1.1\r\nhOsT:a.test \t\r\nAccept: */*\r\n\r\n", []string{"a.test"}, true},
	{"GET http://a.test/ HTTP/1.1\nHOST: \t b.test\n\n", []string{"b.test"}, true},
	{"GET http://a.test/ HTTP/1.1\r\nHost:\r\n\r\n", []string{""}, true},
	{"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: 1\r\nhost: b.test\r\n\r\n", []string{"a.test", "b.test"}, true},
	{"GET http://a.test/ HTTP/1.1\r\nAccept: */*\r\n\r\n", nil, true},
	// Names that are not Host.
	{"GET http://a.test/ HTTP/1.1\r\nHosts: b.test\r\nX-Host: c.test\r\nHost-X: d\r\n\r\n", nil, true},
	// A folded line joins the line before it, in textproto's way.
	{"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n b.test\r\n\r\n", []string{"a.test b.test"}, false},
	{"GET http://a.test/ HTTP/1.1\r\nX: 1\r\n\tHost: b.test\r\n\r\n", nil, false},
}

func TestHostLines(t *testing.T) {
	for _, tc := range hostLinesCases {
		hosts, ok := hostLines([]byte(tc.head))
		if ok != tc.ok || ok && !slices.Equal(hosts, tc.hosts) {
			t.Errorf("hostLines(%q) = %q, %v; want %q, %v", tc.head, hosts, ok, tc.hosts, tc.ok)
		}
		// Whichever way the head is read, headReader gives textproto's
		// values.
		var hr headReader
		want, err := hr.parseHosts([]byte(tc.head))
		if err != nil {
			t.Fatalf("textproto refused %q: %v", tc.head, err)
		}
		if !slices.Equal(want, tc.hosts) {
			t.Errorf("textproto reads %q from %q, the case says %q", want, tc.head, tc.hosts)
		}
		_, got, _, err := hr.read(bufio.NewReader(strings.NewReader(tc.head)))
		if len(tc.hosts) > 1 {
			if err == nil {
				t.Errorf("read(%q) took several Host lines", tc.head)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.hosts) {
			t.Errorf("read(%q) = %q, %v; want %q", tc.head, got, err, tc.hosts)
		}
	}
}

// FuzzHostLines: where hostLines answers, it answers as textproto does.
func FuzzHostLines(f *testing.F) {
	for _, tc := range hostLinesCases {
		f.Add([]byte(tc.head))
	}
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost : a\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\n Host: a\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		end := headEnd(data)
		if end < 0 {
			return
		}
		head := data[:end]
		var hr headReader
		want, err := hr.parseHosts(head)
		if err != nil {
			return // refused by http.ReadRequest as well
		}
		got, ok := hostLines(head)
		if ok && !slices.Equal(got, want) {
			t.Fatalf("hostLines(%q) = %q, textproto reads %q", head, got, want)
		}
		// http.ReadRequest reads the same head (or refuses it).
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err == nil && req.URL.Host == "" && len(want) == 1 && req.Host != want[0] {
			t.Fatalf("ReadRequest's Host %q, textproto reads %q from %q", req.Host, want, head)
		}
	})
}

// TestWriteKnownLength: for the responses plainLength accepts,
// writeKnownLength writes what http.Response.Write writes, bytes and
// errors alike, and reads the body to its end.
func TestWriteKnownLength(t *testing.T) {
	big := strings.Repeat("x", smallBody+1000)
	cases := []struct {
		raw    string
		close  bool
		http10 bool // the client's request was HTTP/1.0
		badKey bool // a header name that is not a token (dropped)
	}{
		{raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\nX-B: 2\r\nX-A: 1\r\nx-a: 3\r\n\r\nhello"},
		{raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello", close: true},
		{raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Ok: 1\r\n\r\nhello", badKey: true},
		{raw: "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nhi"},
		{raw: "HTTP/1.1 299 Something  Else \r\nContent-Length: 2\r\nEmpty:\r\nSpaced:   a  b  \r\n\r\nhi"},
		{raw: "HTTP/1.0 404 Not Found\r\nContent-Length: 3\r\n\r\nnot", http10: true},
		{raw: "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 10\r\n\r\nshort"}, // the body ends early
		{raw: "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big},
	}
	for _, tc := range cases {
		read := func() (*http.Response, *eofBody) {
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(tc.raw)), nil)
			if err != nil {
				t.Fatalf("%q: %v", tc.raw, err)
			}
			stripHop(resp.Header)
			resp.ProtoMajor, resp.ProtoMinor, resp.Close = 1, 1, tc.close
			if tc.http10 {
				resp.ProtoMinor = 0
			}
			if tc.badKey {
				resp.Header["Bad Key:"] = []string{"x\r\ny"}
			}
			b := &eofBody{r: resp.Body}
			resp.Body = b
			return resp, b
		}
		resp, b := read()
		if !plainLength(resp) {
			t.Fatalf("%q: not a plain response", tc.raw)
		}
		var want bytes.Buffer
		werr := resp.Write(&want)
		resp, b2 := read()
		var got bytes.Buffer
		bw := bufio.NewWriter(&got)
		gerr := writeKnownLength(bw, resp, b2)
		bw.Flush()
		if got.String() != want.String() || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Errorf("%q:\nwriteKnownLength %q, %v\nResponse.Write   %q, %v", tc.raw, got.String(), gerr, want.String(), werr)
		}
		if b.eof != b2.eof || !b2.closed {
			t.Errorf("%q: body read to its end %v (Response.Write %v), closed %v", tc.raw, b2.eof, b.eof, b2.closed)
		}
	}
	// What plainLength leaves to Response.Write.
	for _, raw := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nclose-delimited",
	} {
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if plainLength(resp) {
			t.Errorf("%q taken as a plain response", raw)
		}
	}
}

// eofBody records whether its reader was read to io.EOF and closed.
type eofBody struct {
	r           io.ReadCloser
	eof, closed bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *eofBody) Close() error { b.closed = true; return b.r.Close() }
