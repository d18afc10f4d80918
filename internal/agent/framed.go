package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Framed content: chunks of at most maxFrame bytes, each preceded by its
// length (4 bytes, big-endian), then an end mark (a length of 0). A stream
// cut anywhere before the end mark reads as io.ErrUnexpectedEOF, never as
// a complete one, so what writes the content can tell a finished upload
// from one whose source failed.
const maxFrame = 64 << 10

// CopyFramed copies src to w framed, and writes the end mark only once src
// has ended without an error.
func CopyFramed(w io.Writer, src io.Reader) error {
	buf := make([]byte, 4+maxFrame)
	for {
		n, err := src.Read(buf[4:])
		if n > 0 {
			binary.BigEndian.PutUint32(buf[:4], uint32(n))
			if _, werr := w.Write(buf[:4+n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			_, werr := w.Write([]byte{0, 0, 0, 0})
			return werr
		}
		if err != nil {
			return err
		}
	}
}

// FramedReader reads what CopyFramed wrote: the content, then io.EOF after
// the end mark; io.ErrUnexpectedEOF if the stream ends before it.
func FramedReader(r io.Reader) io.Reader { return &framedReader{r: r} }

type framedReader struct {
	r    io.Reader
	left uint32 // bytes left in the current frame
	done bool
	err  error
}

func (f *framedReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.done {
		return 0, io.EOF
	}
	for f.left == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			f.err = fmt.Errorf("content cut before its end: %w", err)
			return 0, f.err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 {
			f.done = true
			return 0, io.EOF
		}
		if n > maxFrame {
			f.err = fmt.Errorf("framed content: a frame of %d bytes (the most is %d)", n, maxFrame)
			return 0, f.err
		}
		f.left = n
	}
	if uint32(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= uint32(n)
	if err != nil && (f.left > 0 || !errors.Is(err, io.EOF)) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		f.err = fmt.Errorf("content cut before its end: %w", err)
		return n, f.err
	}
	return n, nil
}
