package agent

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"testing"
)

type failAfter struct {
	r   io.Reader
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, f.err
	}
	return n, err
}

func TestFramed(t *testing.T) {
	data := make([]byte, 300<<10+17)
	rand.New(rand.NewSource(1)).Read(data)
	// A complete stream reads back whole, then io.EOF.
	var buf bytes.Buffer
	if err := CopyFramed(&buf, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	framed := bytes.Clone(buf.Bytes())
	got, err := io.ReadAll(FramedReader(bytes.NewReader(framed)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("round trip: %d bytes, %v", len(got), err)
	}
	// Empty content is just the end mark.
	buf.Reset()
	CopyFramed(&buf, bytes.NewReader(nil))
	if got, err := io.ReadAll(FramedReader(&buf)); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q %v", got, err)
	}
	// A source that fails: no end mark, and the reader says so.
	buf.Reset()
	boom := errors.New("client gone")
	if err := CopyFramed(&buf, &failAfter{bytes.NewReader(data[:1000]), boom}); !errors.Is(err, boom) {
		t.Fatalf("CopyFramed of a failing source: %v", err)
	}
	if _, err := io.ReadAll(FramedReader(&buf)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a stream without its end mark: %v, want io.ErrUnexpectedEOF", err)
	}
	// Cut at every kind of place: never a clean end.
	for _, cut := range []int{0, 2, 4, 5, 4 + maxFrame, 4 + maxFrame + 3, len(framed) - 4, len(framed) - 1} {
		if _, err := io.ReadAll(FramedReader(bytes.NewReader(framed[:cut]))); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
	// An oversized frame length is refused, not allocated.
	if _, err := io.ReadAll(FramedReader(bytes.NewReader([]byte{0x7f, 0xff, 0xff, 0xff, 1}))); err == nil {
		t.Errorf("an oversized frame was accepted")
	}
}
