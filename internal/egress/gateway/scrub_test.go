package gateway

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// naiveReplace is the meaning of a replacer, written plainly: scan left
// to right; at each position replace the longest old that matches there.
func naiveReplace(s string, pairs []string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		best := -1
		for k := 0; k+1 < len(pairs); k += 2 {
			if old := pairs[k]; old != "" && strings.HasPrefix(s[i:], old) && (best < 0 || len(old) > len(pairs[best])) {
				best = k
			}
		}
		if best < 0 {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(pairs[best+1])
		i += len(pairs[best])
	}
	return b.String()
}

// chunks is a reader that returns its data in reads of random sizes
// (1 byte at least), the way a network does.
type chunks struct {
	data []byte
	rnd  *rand.Rand
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), 1+c.rnd.IntN(40))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// readSizes reads r to the end with buffers of random sizes.
func readSizes(r io.Reader, rnd *rand.Rand) ([]byte, error) {
	var out []byte
	for {
		p := make([]byte, 1+rnd.IntN(64))
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// TestReplacerStreams: whatever the cuts between reads, the stream comes
// out as the whole string would, which is what the plain definition says;
// overlapping olds, olds that are prefixes of others (base64 with and
// without padding) and olds of different lengths than their news.
func TestReplacerStreams(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	pairSets := [][]string{
		{"s3cr3t", "PLACEHOLDER-LONGER"},
		{"abab", "X", "ab", "YY", "b", ""},
		{"c2VjcmV0", "cGg", "c2VjcmV0PQ==", "cGg9PQ==", "secret", "ph"},
		{"aaaa", "b", "aaa", "cc"},
		{"xyz", "xyzxyz"}, // a new that contains its old: no loop
	}
	for _, pairs := range pairSets {
		r := newReplacer(pairs)
		alphabet := "abcxyz3sert=QVPc2jmRlw0"
		for range 300 {
			var b strings.Builder
			for range rnd.IntN(300) {
				if rnd.IntN(8) == 0 {
					b.WriteString(pairs[2*rnd.IntN(len(pairs)/2)])
				} else {
					b.WriteByte(alphabet[rnd.IntN(len(alphabet))])
				}
			}
			in := b.String()
			want := naiveReplace(in, pairs)
			if got := r.Replace(in); got != want {
				t.Fatalf("pairs %q: Replace(%q) = %q, want %q", pairs, in, got, want)
			}
			got, err := io.ReadAll(r.reader(&chunks{data: []byte(in), rnd: rnd}))
			if err != nil || string(got) != want {
				t.Fatalf("pairs %q: streamed %q = %q (%v), want %q", pairs, in, got, err, want)
			}
			// Reads of any size, small ones too (which do not take the
			// direct path).
			got, err = readSizes(r.reader(&chunks{data: []byte(in), rnd: rnd}), rnd)
			if err != nil || string(got) != want {
				t.Fatalf("pairs %q: read in pieces %q = %q (%v), want %q", pairs, in, got, err, want)
			}
		}
	}
}

// TestScrubReaderLargeUnchanged: a large body without any old passes
// byte for byte, whatever the reads; the control, with the secret in it
// at chunk boundaries, is scrubbed.
func TestScrubReaderLargeUnchanged(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	const secret = "tok-0123456789"
	r := newReplacer([]string{secret, "airlock-placeholder"})
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(rnd.Uint32()) // random bytes: the secret does not occur
	}
	if bytes.Contains(data, []byte(secret)) {
		t.Fatal("bad luck: the random data holds the secret")
	}
	got, err := io.ReadAll(r.reader(bytes.NewReader(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a body without the secret changed (%d bytes in, %d out, %v)", len(data), len(got), err)
	}
	// The same, with the secret across each boundary of the reader's reads.
	for _, at := range []int{0, scrubChunk - 5, 2*scrubChunk - 1, 3 * scrubChunk, len(data) - len(secret)} {
		copy(data[at:], secret)
	}
	got, err = io.ReadAll(r.reader(bytes.NewReader(data)))
	if err != nil || bytes.Contains(got, []byte(secret)) || bytes.Count(got, []byte("airlock-placeholder")) != 5 {
		t.Fatalf("secret left or placeholders missing: %d placeholders, %v", bytes.Count(got, []byte("airlock-placeholder")), err)
	}
}

// TestScrubReaderHoldsOnlyPrefixes: a streamed body is not held back
// (an event stream's last line goes out at once), except bytes that may
// begin a secret; those wait for what decides them. A stream that breaks
// there does not hand them over.
func TestScrubReaderHoldsOnlyPrefixes(t *testing.T) {
	r := newReplacer([]string{"s3cr3t", "PH"})
	pr, pw := io.Pipe()
	sr := r.reader(pr)
	got := make(chan string, 8)
	go func() {
		buf := make([]byte, 100)
		for {
			n, err := sr.Read(buf)
			if n > 0 {
				got <- string(buf[:n])
			}
			if err != nil {
				got <- "err: " + err.Error()
				return
			}
		}
	}()
	next := func() string {
		select {
		case s := <-got:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("the reader held back what it had")
			return ""
		}
	}
	pw.Write([]byte("data: 1\n\n"))
	if s := next(); s != "data: 1\n\n" {
		t.Fatalf("first event: %q", s)
	}
	pw.Write([]byte("x=s3c"))
	if s := next(); s != "x=" {
		t.Fatalf("before a possible secret: %q", s)
	}
	pw.Write([]byte("r3t;s3"))
	if s := next(); s != "PH;" {
		t.Fatalf("the secret completed: %q", s)
	}
	pw.Write([]byte("x"))
	if s := next(); s != "s3x" {
		t.Fatalf("a prefix that was not the secret: %q", s)
	}
	pw.Write([]byte("s3cr"))
	pw.CloseWithError(errors.New("connection reset"))
	if s := next(); s != "err: connection reset" {
		t.Fatalf("a stream broken inside a secret gave %q", s)
	}
	// At a clean end, a prefix of a secret is just data.
	out, err := io.ReadAll(r.reader(strings.NewReader("end s3cr")))
	if err != nil || string(out) != "end s3cr" {
		t.Fatalf("%q %v", out, err)
	}
}

// FuzzReplacerStream: streaming with any cuts agrees with Replace.
func FuzzReplacerStream(f *testing.F) {
	f.Add("abab ab s3cr3t c2VjcmV0PQ==", uint64(1))
	f.Add("", uint64(2))
	f.Fuzz(func(t *testing.T, in string, seed uint64) {
		r := newReplacer([]string{"s3cr3t", "PH", "c2VjcmV0", "cGg", "c2VjcmV0PQ==", "cGg9PQ==", "abab", "Z", "ab", ""})
		want := r.Replace(in)
		rnd := rand.New(rand.NewPCG(seed, seed))
		got, err := io.ReadAll(r.reader(&chunks{data: []byte(in), rnd: rnd}))
		if err != nil || string(got) != want {
			t.Fatalf("%q: streamed %q, whole %q", in, got, want)
		}
		got, err = readSizes(r.reader(&chunks{data: []byte(in), rnd: rnd}), rnd)
		if err != nil || string(got) != want {
			t.Fatalf("%q: read in pieces %q, whole %q", in, got, want)
		}
	})
}
