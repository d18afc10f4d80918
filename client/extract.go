package client

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/api"
)

// Extracted says what an extraction left out.
type Extracted struct {
	// SkippedLinks are the symbolic links that were not created because
	// they lead out of their tree, in the archive's order.
	SkippedLinks []SkippedLink
}

// SkippedLink is a symbolic link an extraction did not create.
type SkippedLink struct {
	// Name is the local path the link would have had; Target, what it
	// pointed to.
	Name, Target string
}

// UntarTo extracts the tar stream r into the existing directory dst, as a
// download from a sandbox must be: nothing it writes goes through a
// symbolic link, and no link it creates leads anywhere the sandbox picked
// on this host.
//
//   - Only regular files (sparse ones stay sparse), directories and
//     symbolic links are accepted; modes are masked to 0777. An entry whose
//     name is absolute or holds "..", and one whose parent is a symbolic
//     link, are refused with an error naming it.
//   - A symbolic link is created only if it leads, followed one name at a
//     time through the extracted files, only within the top-level entry it
//     is in (the downloaded tree): its target is relative, never climbs
//     above that entry and goes through no link that does not. Links at the
//     top level and the others are left out and listed in the result.
//   - The archive may carry at most opts.MaxSize bytes, and its files may
//     add up to at most as much (see DownloadOptions).
//
// Everything lands in a temporary directory in dst first and is moved into
// place once the whole archive is extracted, so a failure leaves dst as it
// was. In place, an existing file (or link) is replaced and an existing
// directory is merged into; an existing link where the archive has a
// directory is refused before anything moves.
func UntarTo(dst string, r io.Reader, opts DownloadOptions) (*Extracted, error) {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return nil, fmt.Errorf("airlock: untar: %w", err)
	}
	defer root.Close()
	tmp, err := os.MkdirTemp(dst, ".airlock-untar-")
	if err != nil {
		return nil, fmt.Errorf("airlock: untar: %w", err)
	}
	tmpName := filepath.Base(tmp)
	defer root.RemoveAll(tmpName)
	x, err := extract(tmp, r, opts.max(), false)
	if err != nil {
		return nil, err
	}
	tops, err := readDir(root, tmpName)
	if err != nil {
		return nil, fmt.Errorf("airlock: untar: %w", err)
	}
	for _, top := range tops {
		if err := checkPlace(root, path.Join(tmpName, top), top); err != nil {
			return nil, fmt.Errorf("airlock: untar: %w", err)
		}
	}
	for _, top := range tops {
		if err := movePlace(root, path.Join(tmpName, top), top); err != nil {
			return nil, fmt.Errorf("airlock: untar: %w", err)
		}
	}
	if err := x.chmodDirs(root, func(name string) string { return name }); err != nil {
		return nil, err
	}
	return x.result(func(name string) string { return filepath.Join(dst, filepath.FromSlash(name)) }), nil
}

// DownloadTo copies the file or tree p of sandbox id to the local path
// dst, as UntarTo extracts (a link given as p is followed in the sandbox;
// links in a tree that lead out of it are left out and listed, or with
// opts.FollowLinks, come as copies of the file they point to). dst's
// parent must exist. dst itself must not be a symbolic link (it is neither
// written through nor replaced); a file there is replaced, a directory
// merged into with a tree. A failure, such as a download over
// opts.MaxSize, leaves nothing new behind.
func (c *Client) DownloadTo(ctx context.Context, id, p, dst string, opts DownloadOptions) (*Extracted, error) {
	parent, base := filepath.Dir(dst), filepath.Base(dst)
	if base == "." || base == ".." || base == string(filepath.Separator) {
		return nil, fmt.Errorf("airlock: download to %s: name the copy (a path whose last part is not %q)", dst, base)
	}
	root, err := os.OpenRoot(parent)
	if err != nil {
		return nil, fmt.Errorf("airlock: download to %s: %w", dst, err)
	}
	defer root.Close()
	if fi, err := root.Lstat(base); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := root.Readlink(base)
		return nil, fmt.Errorf("airlock: download to %s: it is a symbolic link (to %s), which a download neither writes through nor replaces: remove it, or name the directory it points to", dst, target)
	}
	rc, err := c.Download(ctx, id, p, opts)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tmp, err := os.MkdirTemp(parent, ".airlock-download-")
	if err != nil {
		return nil, fmt.Errorf("airlock: download to %s: %w", dst, err)
	}
	tmpName := filepath.Base(tmp)
	defer root.RemoveAll(tmpName)
	x, err := extract(tmp, rc, opts.max(), true)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e // the daemon's word on the stream
		}
		return nil, err
	}
	if x.top == "" {
		return nil, fmt.Errorf("airlock: download of %s: the archive is empty", p)
	}
	from := path.Join(tmpName, x.top)
	if _, err := root.Lstat(from); err != nil {
		return nil, fmt.Errorf("airlock: download of %s: the archive is a symbolic link that was left out (%s)", p, x.top)
	}
	if err := checkPlace(root, from, base); err != nil {
		return nil, fmt.Errorf("airlock: download to %s: %w", dst, err)
	}
	if err := movePlace(root, from, base); err != nil {
		return nil, fmt.Errorf("airlock: download to %s: %w", dst, err)
	}
	under := func(name string) string { return path.Join(base, strings.TrimPrefix(name, x.top)) }
	if err := x.chmodDirs(root, under); err != nil {
		return nil, err
	}
	return x.result(func(name string) string { return filepath.Join(parent, filepath.FromSlash(under(name))) }), nil
}

// extraction is a tar stream extracted into a fresh directory, its
// symbolic links made last.
type extraction struct {
	root    *os.Root
	single  bool   // one top-level entry only
	top     string // the first entry's top-level name
	dot     bool   // single, and the first entry was "." (see dotTop)
	links   map[string]*pendingLink
	order   []string // link names, in the archive's order
	dirs    map[string]fs.FileMode
	skipped []SkippedLink
}

type pendingLink struct {
	target   string
	replaced bool // by a later entry of the same name
	skipped  bool
}

// dotTop is the top-level name given, in a single download, to an archive
// whose entries are relative to the directory archived.
const dotTop = "root"

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func tooLarge(max int64) error {
	return &Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("the archive holds more than %d bytes, the limit: raise it (MaxSize, --max-size)", max)}
}

// extract extracts r into the directory dir, which nothing else uses.
func extract(dir string, r io.Reader, max int64, single bool) (*extraction, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("airlock: untar: %w", err)
	}
	defer root.Close()
	x := &extraction{root: root, single: single, links: map[string]*pendingLink{}, dirs: map[string]fs.FileMode{}}
	cr := &countReader{r: r}
	tr := tar.NewReader(cr)
	var content int64
	for {
		hdr, err := tr.Next()
		if cr.n > max {
			return nil, tooLarge(max)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, streamErr(err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return nil, fmt.Errorf("airlock: untar: entry %q: %w", hdr.Name, err)
		}
		fail := func(err error) error { return fmt.Errorf("airlock: untar: entry %q: %w", hdr.Name, err) }
		if name == "." {
			if hdr.Typeflag != tar.TypeDir {
				return nil, fail(errors.New("not a directory"))
			}
			if x.single && x.top == "" {
				// Entries relative to the directory archived (a download
				// of /): they go under one top-level name.
				x.dot, x.top = true, dotTop
				if err := root.Mkdir(dotTop, 0o700); err != nil {
					return nil, fail(err)
				}
				x.dirs[dotTop] = fs.FileMode(hdr.Mode) & 0o777
			}
			continue // dst itself: leave it as it is
		}
		if x.dot {
			name = path.Join(dotTop, name)
		}
		top, _, _ := strings.Cut(name, "/")
		switch {
		case x.top == "":
			x.top = top
		case x.single && top != x.top:
			return nil, fail(fmt.Errorf("a second top-level entry (after %q): a download is one file or one tree", x.top))
		}
		// Links are made at the end: one that is a parent now is pending.
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if l, ok := x.links[d]; ok && !l.replaced {
				return nil, fail(fmt.Errorf("%s is a symbolic link: nothing is written through one", d))
			}
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return nil, fail(err)
			}
		}
		if l, ok := x.links[name]; ok {
			l.replaced = true
		}
		mode := fs.FileMode(hdr.Mode) & 0o777
		switch hdr.Typeflag {
		case tar.TypeDir:
			fi, err := root.Lstat(name)
			switch {
			case err == nil && fi.IsDir():
			case err == nil:
				if err := root.Remove(name); err != nil {
					return nil, fail(err)
				}
				fallthrough
			default:
				// Owner-writable until it is in place, so entries can land
				// inside and the moves can take them.
				if err := root.Mkdir(name, 0o700); err != nil {
					return nil, fail(err)
				}
			}
			x.dirs[name] = mode
		case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
			if content += hdr.Size; content > max {
				return nil, tooLarge(max)
			}
			if err := replace(root, name); err != nil {
				return nil, fail(err)
			}
			if err := writeEntry(root, name, tr, hdr); err != nil {
				return nil, fail(streamErr(err))
			}
			if err := root.Chmod(name, mode); err != nil {
				return nil, fail(err)
			}
			if !hdr.ModTime.IsZero() {
				if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
					return nil, fail(err)
				}
			}
		case tar.TypeSymlink:
			if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
				return nil, fail(errors.New("bad symbolic link target"))
			}
			if err := replace(root, name); err != nil {
				return nil, fail(err)
			}
			if _, ok := x.links[name]; !ok {
				x.order = append(x.order, name)
			}
			x.links[name] = &pendingLink{target: hdr.Linkname}
		default:
			return nil, fail(fmt.Errorf("unsupported entry type %q (only files, directories and symbolic links)", string(hdr.Typeflag)))
		}
	}
	if err := x.makeLinks(); err != nil {
		return nil, err
	}
	return x, nil
}

// streamErr keeps the daemon's word on a stream that failed (an *Error
// from its trailer) over tar's.
func streamErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return err
}

// writeEntry writes the content of a regular entry to a new file name.
// A sparse entry's blocks of zeros (its holes, and any others) are left
// as holes.
func writeEntry(root *os.Root, name string, tr *tar.Reader, hdr *tar.Header) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if isSparse(hdr) {
		err = writeSparse(f, tr, hdr.Size)
	} else {
		_, err = io.Copy(f, tr)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// holeBlock is the unit of writeSparse's holes.
const holeBlock = 4096

var zeros [holeBlock]byte

// writeSparse copies size bytes from r to f, skipping the blocks of zeros
// (f ends up with holes there), then sets f's size.
func writeSparse(f *os.File, r io.Reader, size int64) error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		for i := 0; i < n; {
			j := min(i+holeBlock, n)
			if bytes.Equal(buf[i:j], zeros[:j-i]) {
				i = j
				continue
			}
			for j < n {
				k := min(j+holeBlock, n)
				if bytes.Equal(buf[j:k], zeros[:k-j]) {
					break
				}
				j = k
			}
			if _, err := f.WriteAt(buf[i:j], off+int64(i)); err != nil {
				return err
			}
			i = j
		}
		off += int64(n)
		if err != nil {
			return err
		}
	}
	return f.Truncate(size)
}

// replace removes name if it exists and is not a directory.
func replace(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("a directory is in the way")
	}
	return root.Remove(name)
}

// makeLinks creates the pending links that lead only within their tree
// (see leadsInside), the others are listed as skipped. Leaving one out can
// change where another leads, so the check runs until nothing changes.
func (x *extraction) makeLinks() error {
	for changed := true; changed; {
		changed = false
		for _, name := range x.order {
			l := x.links[name]
			if !l.replaced && !l.skipped && !x.leadsInside(name) {
				l.skipped, changed = true, true
			}
		}
	}
	for _, name := range x.order {
		l := x.links[name]
		switch {
		case l.replaced:
		case l.skipped:
			x.skipped = append(x.skipped, SkippedLink{Name: name, Target: l.target})
		default:
			if err := x.root.Symlink(l.target, name); err != nil {
				return fmt.Errorf("airlock: untar: entry %q: %w", name, err)
			}
		}
	}
	return nil
}

// maxHops bounds the links followed in resolving one (Linux's own bound).
const maxHops = 40

// leadsInside reports whether the pending link name, followed, leads only
// within its top-level entry: its target is relative and, resolved one
// name at a time from the link's directory, following the pending links it
// meets (none skipped, none absolute) and lexically past a name that does
// not exist (but never climbing back out of one), never climbs above that
// entry. A link at the top level leads
// out of itself.
func (x *extraction) leadsInside(name string) bool {
	top, rest, ok := strings.Cut(name, "/")
	if !ok {
		return false
	}
	var cur []string // the directory reached, below top
	if d := path.Dir(rest); d != "." {
		cur = strings.Split(d, "/")
	}
	pending := strings.Split(x.links[name].target, "/")
	if path.IsAbs(x.links[name].target) {
		return false
	}
	missing := false
	for hops := 0; len(pending) > 0; {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// After a name the archive does not have, the path is only
			// text: on the host that name may be something else (a link
			// an earlier download left in the destination), and climbing
			// out of it could lead anywhere.
			if len(cur) == 0 || missing {
				return false
			}
			cur = cur[:len(cur)-1]
			continue
		}
		next := append(cur[:len(cur):len(cur)], c)
		if missing {
			cur = next
			continue
		}
		full := path.Join(top, strings.Join(next, "/"))
		if l, ok := x.links[full]; ok && !l.replaced {
			if l.skipped || path.IsAbs(l.target) {
				return false
			}
			if hops++; hops > maxHops {
				return false
			}
			pending = append(strings.Split(l.target, "/"), pending...)
			continue
		}
		if fi, err := x.root.Lstat(full); err != nil || !fi.IsDir() {
			missing = true // lexical from here (ENOENT or ENOTDIR if more follows)
		}
		cur = next
	}
	return true
}

// chmodDirs gives the archive's directories their modes once in place
// (where is the local name of an extracted one), deepest first.
func (x *extraction) chmodDirs(root *os.Root, where func(string) string) error {
	names := make([]string, 0, len(x.dirs))
	for name := range x.dirs {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, name := range names {
		if err := root.Chmod(where(name), x.dirs[name]); err != nil {
			return fmt.Errorf("airlock: untar: %s: %w", name, err)
		}
	}
	return nil
}

// result is what the caller learns; local names a skipped link's path.
func (x *extraction) result(local func(string) string) *Extracted {
	out := &Extracted{}
	for _, s := range x.skipped {
		out.SkippedLinks = append(out.SkippedLinks, SkippedLink{Name: local(s.Name), Target: s.Target})
	}
	return out
}

// checkPlace checks, before anything moves, that the tree from can be
// moved to to (both in root): to does not exist, or is a file or link
// (replaced), or is a directory (merged into) where from is one too. A
// link at to where from is a directory is refused, as is a directory at
// to where from is not.
func checkPlace(root *os.Root, from, to string) error {
	ffi, err := root.Lstat(from)
	if err != nil {
		return err
	}
	tfi, err := root.Lstat(to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case tfi.Mode()&fs.ModeSymlink != 0 && ffi.IsDir():
		return fmt.Errorf("%s is a symbolic link where the download has a directory: nothing is written through one", to)
	case tfi.IsDir() && !ffi.IsDir():
		return fmt.Errorf("%s is a directory where the download has a file", to)
	case !tfi.IsDir():
		return nil // replaced
	}
	entries, err := readDir(root, from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := checkPlace(root, path.Join(from, e), path.Join(to, e)); err != nil {
			return err
		}
	}
	return nil
}

// movePlace moves from to to, as checkPlace allowed.
func movePlace(root *os.Root, from, to string) error {
	ffi, err := root.Lstat(from)
	if err != nil {
		return err
	}
	tfi, err := root.Lstat(to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return root.Rename(from, to)
	case err != nil:
		return err
	case tfi.IsDir() && ffi.IsDir():
		entries, err := readDir(root, from)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := movePlace(root, path.Join(from, e), path.Join(to, e)); err != nil {
				return err
			}
		}
		return nil
	}
	if !ffi.IsDir() {
		return root.Rename(from, to) // replaces the file or link at once
	}
	if err := root.Remove(to); err != nil {
		return err
	}
	return root.Rename(from, to)
}

func readDir(root *os.Root, name string) ([]string, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// entryName checks a tar entry's name and returns it clean, slash-separated
// and relative.
func entryName(n string) (string, error) {
	switch {
	case n == "":
		return "", errors.New("empty name")
	case strings.IndexByte(n, 0) >= 0:
		return "", errors.New("NUL in name")
	case strings.HasPrefix(n, "/") || filepath.IsAbs(n) || filepath.VolumeName(n) != "":
		return "", errors.New("absolute path refused")
	case filepath.Separator != '/' && strings.ContainsRune(n, filepath.Separator):
		return "", fmt.Errorf("name holds %q", filepath.Separator)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", errors.New(`".." refused`)
		}
	}
	return path.Clean(n), nil
}
