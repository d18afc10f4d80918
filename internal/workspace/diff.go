package workspace

import (
	"fmt"
	"strconv"
	"strings"
)

// maxEdits bounds the line diff: past it, a file is shown as replaced
// whole (the diff stays readable and its cost bounded).
const maxEdits = 1000

type opKind byte

const (
	opEqual opKind = iota
	opDelete
	opInsert
)

type op struct {
	kind opKind
	line string
}

// diffLines returns the shortest edit script from a to b (Myers' O(ND)
// algorithm), or a whole replacement when it needs more than maxEdits
// edits.
func diffLines(a, b []string) []op {
	n, m := len(a), len(b)
	max := n + m
	if max == 0 {
		return nil
	}
	limit := max
	if limit > maxEdits {
		limit = maxEdits
	}
	off := limit + 1
	v := make([]int, 2*limit+3)
	var trace [][]int
	found := -1
	for d := 0; d <= limit; d++ {
		snap := make([]int, 2*d+1)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
			}
		}
		for k := -d; k <= d; k++ {
			snap[k+d] = v[off+k]
		}
		trace = append(trace, snap)
		if found >= 0 {
			break
		}
	}
	if found < 0 {
		out := make([]op, 0, n+m)
		for _, l := range a {
			out = append(out, op{opDelete, l})
		}
		for _, l := range b {
			out = append(out, op{opInsert, l})
		}
		return out
	}
	// Walk back through the snapshots.
	var rev []op
	x, y := n, m
	for d := found; d > 0; d-- {
		prev := trace[d-1]
		get := func(k int) int { return prev[k+d-1] }
		k := x - y
		var pk int
		if k == -d || (k != d && get(k-1) < get(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := get(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, op{opEqual, a[x]})
		}
		if x == px {
			y--
			rev = append(rev, op{opInsert, b[y]})
		} else {
			x--
			rev = append(rev, op{opDelete, a[x]})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, op{opEqual, a[x]})
	}
	out := make([]op, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out
}

// splitLines splits text into lines without their newlines. A last line
// without one keeps a "\n" at its end: no other line can hold one, so it
// differs from the same text with a newline, as it should.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if strings.HasSuffix(l, "\n") {
			lines[i] = l[:len(l)-1]
		} else {
			lines[i] = l + "\n"
		}
	}
	return lines
}

// diffName is a file name for a diff's header, quoted as git quotes one
// ("a/x\ny") when it holds a control character, a quote or a backslash:
// the sandbox chose it, and a newline in it would add lines of its own
// making to the diff (a forged hunk).
func diffName(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}

// UnifiedDiff is a unified diff (3 lines of context) from old to new, with
// the given names in its header; empty when they are equal. Lines are
// printed as they are: the caller escapes what it prints to a terminal.
func UnifiedDiff(oldName, newName, old, new string) string {
	if old == new {
		return ""
	}
	a := splitLines(old)
	b := splitLines(new)
	ops := diffLines(a, b)
	const ctx = 3
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", oldName, newName)
	// Positions (0-based) in a and b before each op.
	type pos struct{ a, b int }
	at := make([]pos, len(ops)+1)
	for i, o := range ops {
		at[i+1] = at[i]
		if o.kind != opInsert {
			at[i+1].a++
		}
		if o.kind != opDelete {
			at[i+1].b++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == opEqual {
			i++
			continue
		}
		start := i - ctx
		if start < 0 {
			start = 0
		}
		for start < i && ops[start].kind != opEqual {
			start++
		}
		end := i
		for end < len(ops) {
			if ops[end].kind != opEqual {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == opEqual {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end += min(ctx, run-end)
				break
			}
			end = run
		}
		aStart, bStart := at[start].a, at[start].b
		aLen, bLen := at[end].a-aStart, at[end].b-bStart
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for j := start; j < end; j++ {
			o := ops[j]
			prefix := " "
			switch o.kind {
			case opDelete:
				prefix = "-"
			case opInsert:
				prefix = "+"
			}
			if line, ok := strings.CutSuffix(o.line, "\n"); ok {
				sb.WriteString(prefix + line + "\n\\ No newline at end of file\n")
			} else {
				sb.WriteString(prefix + o.line + "\n")
			}
		}
		i = end
	}
	return sb.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
