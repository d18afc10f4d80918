package mcpserver

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/api"
)

// keepBytes is how much of each output stream run_command keeps at the
// start and at the end; what lies between is cut and replaced by a marker.
const keepBytes = 16 << 10

// capture keeps the first and the last limit bytes of a stream and counts
// the rest.
type capture struct {
	limit int
	head  []byte
	tail  []byte
	total int64
	lost  int64 // bytes the daemon dropped before they could be read
}

func newCapture(limit int) *capture { return &capture{limit: limit} }

func (c *capture) write(p []byte) {
	c.total += int64(len(p))
	if n := min(c.limit-len(c.head), len(p)); n > 0 {
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	if len(p) >= c.limit {
		c.tail = append(c.tail[:0], p[len(p)-c.limit:]...)
		return
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - c.limit; over > 0 {
		copy(c.tail, c.tail[over:])
		c.tail = c.tail[:c.limit]
	}
}

// cut is how many bytes of the stream the result leaves out.
func (c *capture) cut() int64 {
	return c.total - int64(len(c.head)) - int64(len(c.tail)) + c.lost
}

// text is the kept output as valid UTF-8, with a marker line where bytes
// were cut.
func (c *capture) text() string {
	if c.cut() == 0 {
		return utf8Text(append(append([]byte{}, c.head...), c.tail...))
	}
	return utf8Text(c.head) + cutMarker(c.cut(), c.limit) + utf8Text(c.tail)
}

func cutMarker(n int64, limit int) string {
	return fmt.Sprintf("\n[... airlock: %d bytes cut here; the first and last %d KiB of this stream are kept ...]\n", n, limit>>10)
}

// utf8Text turns output bytes into a string for JSON: invalid sequences
// become U+FFFD.
func utf8Text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// Workspace is the only directory the file tools reach.
const Workspace = "/workspace"

// workspacePath resolves p (absolute, or relative to /workspace) and
// refuses anything that is not /workspace or under it.
func workspacePath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("path is empty: give a path under %s (or relative to it)", Workspace)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q holds a NUL byte", p)
	}
	if !strings.HasPrefix(p, "/") {
		p = Workspace + "/" + p
	}
	c := path.Clean(p)
	if c != Workspace && !strings.HasPrefix(c, Workspace+"/") {
		return "", fmt.Errorf("path %q is outside %s: the file tools work only under %s (use run_command to look elsewhere)", clip(p), Workspace, Workspace)
	}
	return c, nil
}

// clip shortens a string echoed in an error.
func clip(s string) string {
	if len(s) <= 120 {
		return s
	}
	return s[:120] + fmt.Sprintf("...(%d bytes)", len(s))
}

func fileMode(m int) os.FileMode { return os.FileMode(m) }

// cutAt is how much of data to take to stay within room bytes: room, moved
// back to the start of a UTF-8 character, or the first character whole
// when room cannot hold it.
func cutAt(data []byte, room int) int {
	if room >= len(data) {
		return len(data)
	}
	if room <= 0 {
		return 0
	}
	take := room
	for take > 0 && !utf8.RuneStart(data[take]) {
		take--
	}
	if take == 0 { // a character longer than room: never split it
		_, size := utf8.DecodeRune(data)
		return min(size, len(data))
	}
	return take
}

// cursorAt is the API cursor just after the first take bytes of the output
// event ev (its cursor is "STDOUT.STDERR", the offsets after it).
func cursorAt(ev api.OutputEvent, take int) (string, bool) {
	out, errOff, ok := strings.Cut(ev.Cursor, ".")
	if !ok {
		return "", false
	}
	at := strconv.FormatUint(ev.Offset+uint64(take), 10)
	if ev.Kind == api.EventStdout {
		return at + "." + errOff, true
	}
	return out + "." + at, true
}

// maxEncoded bounds what one answer carries of a file's or a process's
// bytes, as JSON-escaped text: an answer holds it twice (the text for the
// model and the structured content), and stdio clients stop at a frame of
// 10 MiB (the TypeScript SDK's default), ending the session and with it
// every sandbox. A byte can take 6 in JSON (a control character, or <, >
// and & as Go escapes them), so max_bytes alone cannot keep to it.
const maxEncoded = 4 << 20

// jsonCost is the length of b as a JSON string's content, as Go's encoder
// writes it (b is valid UTF-8 or becomes it, U+FFFD costing 3).
func jsonCost(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == '\u2028' || r == '\u2029':
			n += 6
		case r == utf8.RuneError && size == 1:
			n += 3
		default:
			n += size
		}
		i += size
	}
	return n
}

// cutCost is how much of data to take, at a character's start, for its
// JSON cost to stay within room; at least the first character when room
// is positive, so that a reader always moves on.
func cutCost(data []byte, room int) int {
	if room <= 0 {
		return 0
	}
	n, i := 0, 0
	for i < len(data) {
		size := 1
		if data[i] >= utf8.RuneSelf {
			_, size = utf8.DecodeRune(data[i:])
		}
		c := jsonCost(data[i : i+size])
		if n+c > room {
			break
		}
		n += c
		i += size
	}
	if i == 0 {
		_, size := utf8.DecodeRune(data)
		return min(size, len(data))
	}
	return i
}
