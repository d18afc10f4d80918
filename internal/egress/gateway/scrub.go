package gateway

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// replacer replaces byte strings (secrets) in headers and streamed bodies.
// At each position the longest string that matches is replaced; matches
// do not overlap; the output of a stream is the same however it is cut
// into reads.
type replacer struct {
	olds, news [][]byte // longest old first
	// roots are the olds no other old is a prefix of: where an old
	// occurs, one of them does, so only they are searched for.
	roots  [][]byte
	first  [256]bool
	maxLen int
}

// newReplacer makes a replacer of old, new pairs, or returns nil when
// there is nothing to replace. Empty olds and olds equal to their new are
// dropped; of two equal olds the first counts.
func newReplacer(pairs []string) *replacer {
	r := &replacer{}
	seen := map[string]bool{}
	type pair struct{ old, new string }
	var ps []pair
	for i := 0; i+1 < len(pairs); i += 2 {
		old, new := pairs[i], pairs[i+1]
		if old == "" || old == new || seen[old] {
			continue
		}
		seen[old] = true
		ps = append(ps, pair{old, new})
	}
	if len(ps) == 0 {
		return nil
	}
	slices.SortStableFunc(ps, func(a, b pair) int { return len(b.old) - len(a.old) })
	for _, p := range ps {
		r.olds = append(r.olds, []byte(p.old))
		r.news = append(r.news, []byte(p.new))
		r.first[p.old[0]] = true
		r.maxLen = max(r.maxLen, len(p.old))
	}
	for i, old := range r.olds {
		root := true
		for j, o := range r.olds {
			root = root && (j == i || !bytes.HasPrefix(old, o))
		}
		if root {
			r.roots = append(r.roots, old)
		}
	}
	return r
}

// Replace returns s with every old replaced.
func (r *replacer) Replace(s string) string {
	out, _ := r.step(nil, []byte(s), true, make([]int, len(r.roots)))
	return string(out)
}

// header replaces olds in every value of h.
func (r *replacer) header(h http.Header) {
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = r.Replace(v)
		}
	}
}

// step appends buf to dst with olds replaced, and returns how much of buf
// it consumed. Unless final, it holds back the bytes from the first
// position whose rest of buf is a proper prefix of an old: what follows
// decides them. next is scratch space, one int per root.
func (r *replacer) step(dst, buf []byte, final bool, next []int) ([]byte, int) {
	for k := range next {
		next[k] = -2 // not searched yet
	}
	i, hold := 0, -1
	for {
		if hold < i {
			hold = len(buf)
			if !final {
				hold = r.partial(buf, i)
			}
		}
		// The earliest match: the first of a root at or after i.
		m := r.index(buf, i, next)
		// A match at or after a held position waits: a longer old, or
		// one starting earlier, may complete it.
		if m < 0 || m >= hold {
			return append(dst, buf[i:hold]...), hold
		}
		// The longest old there (none is cut short by the end of buf:
		// that would be a held position).
		mk := 0
		for !bytes.HasPrefix(buf[m:], r.olds[mk]) {
			mk++
		}
		dst = append(dst, buf[i:m]...)
		dst = append(dst, r.news[mk]...)
		i = m + len(r.olds[mk])
	}
}

// index returns the first position at or after i where a root occurs in
// buf, or -1. next caches each root's first position found (-2: not
// searched yet; -1: none), still valid for an i at most that position.
func (r *replacer) index(buf []byte, i int, next []int) int {
	m := -1
	for k, root := range r.roots {
		if next[k] == -2 || next[k] >= 0 && next[k] < i {
			if j := bytes.Index(buf[i:], root); j >= 0 {
				next[k] = i + j
			} else {
				next[k] = -1
			}
		}
		if p := next[k]; p >= 0 && (m < 0 || p < m) {
			m = p
		}
	}
	return m
}

// partial returns the first position p >= from where buf[p:] is a proper
// prefix of an old (an old may start there and end in data not read yet),
// or len(buf).
func (r *replacer) partial(buf []byte, from int) int {
	for p := max(from, len(buf)-r.maxLen+1); p < len(buf); p++ {
		if !r.first[buf[p]] {
			continue
		}
		tail := buf[p:]
		for _, old := range r.olds {
			if len(old) > len(tail) && bytes.HasPrefix(old, tail) {
				return p
			}
		}
	}
	return len(buf)
}

// scrubChunk is how much a scrubReader reads from its source at once.
const scrubChunk = 32 << 10

// scrubReader is a stream with a replacer's olds replaced. It holds back
// at most maxLen-1 bytes, and only those that may begin an old.
type scrubReader struct {
	r    *replacer
	src  io.Reader
	in   []byte // read, not yet consumed
	out  []byte // replaced, not yet returned
	off  int    // returned of out
	err  error  // the source's, once it gave one
	next []int
}

func (r *replacer) reader(src io.Reader) *scrubReader {
	return &scrubReader{r: r, src: src, in: make([]byte, 0, scrubChunk+r.maxLen), next: make([]int, len(r.roots))}
}

// Read reads into p directly while nothing is replaced (in holds only
// what was held back); otherwise through in and out.
func (s *scrubReader) Read(p []byte) (int, error) {
	for s.off == len(s.out) {
		if s.err != nil {
			return 0, s.err
		}
		direct := len(p) >= len(s.in)+s.r.maxLen
		var buf []byte
		if direct {
			h := copy(p, s.in)
			n, err := s.src.Read(p[h:])
			buf, s.err = p[:h+n], err
		} else {
			if cap(s.in)-len(s.in) < scrubChunk/2 {
				s.in = slices.Grow(s.in, scrubChunk)
			}
			n, err := s.src.Read(s.in[len(s.in):cap(s.in)])
			s.in, s.err = s.in[:len(s.in)+n], err
			buf = s.in
		}
		if s.err != nil && !errors.Is(s.err, io.EOF) {
			// A broken stream: what is held back may be the start of a
			// secret, cut short on purpose; it is dropped.
			return 0, s.err
		}
		final := s.err != nil
		if direct {
			hold := len(buf)
			if !final {
				hold = s.r.partial(buf, 0)
			}
			if m := s.r.index(buf, 0, s.resetNext()); m < 0 || m >= hold {
				s.in = append(s.in[:0], buf[hold:]...)
				if hold > 0 {
					return hold, nil
				}
				continue
			}
			s.in = append(s.in[:0], buf...)
		}
		var used int
		s.out, used = s.r.step(s.out[:0], s.in, final, s.next)
		s.off = 0
		s.in = s.in[:copy(s.in, s.in[used:])]
	}
	n := copy(p, s.out[s.off:])
	s.off += n
	return n, nil
}

func (s *scrubReader) resetNext() []int {
	for k := range s.next {
		s.next[k] = -2
	}
	return s.next
}

// scrubBody makes resp's body go to the sandbox with r's olds replaced:
// decoded first if the server sent it gzip or deflate encoded (it was
// asked for identity), and sent without a length, which replacing
// changes; false when there is no body (HEAD, 204, 304). A body in
// another encoding cannot be scrubbed: an error.
func scrubBody(resp *http.Response, r *replacer) (bool, error) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return false, nil
	}
	var codings []string
	for _, v := range resp.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	var body io.Reader = resp.Body
	switch {
	case len(codings) == 0:
	case len(codings) > 1:
		return false, fmt.Errorf("the body is encoded %s: it cannot be scrubbed of secrets", strings.Join(codings, ", "))
	case codings[0] == "gzip" || codings[0] == "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return false, fmt.Errorf("the gzip-encoded body: %w", err)
		}
		body = zr
	case codings[0] == "deflate":
		// RFC 9110's deflate is zlib; some servers send raw deflate.
		br := bufio.NewReader(body)
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return false, fmt.Errorf("the deflate-encoded body: %w", err)
			}
			body = zr
		} else {
			body = flate.NewReader(br)
		}
	default:
		return false, fmt.Errorf("the body is encoded %s: it cannot be scrubbed of secrets", codings[0])
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Body = struct {
		io.Reader
		io.Closer
	}{r.reader(body), resp.Body}
	return true, nil
}
