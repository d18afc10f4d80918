package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// archiveOptions say how tarOut archives a path.
type archiveOptions struct {
	// max bounds the archive's size (see archiveSize); 0: no bound.
	max int64
	// follow archives a symlink that leads out of the tree as the regular
	// file it points to (the others stay links).
	follow bool
}

// Limits of a sparse file's map: past them the file goes whole (it is
// bounded by max like any other).
const maxExtents = 1 << 16

// archiveSize is what tarOut checks against max before it writes a byte:
// the stream's length, and the sizes of the files in it (holes of sparse
// files included, as a reader of the copy sees them); the larger counts.
type archiveSize struct {
	stream, content int64
}

func (a archiveSize) bytes() int64 { return max(a.stream, a.content) }

// tarOut writes path (a file or a directory tree) to w as a tar stream
// whose entries are named under path's base name. A symlink given as path
// is followed (the copy of a link is what it points to); symlinks inside a
// tree are stored as links, or with opts.follow, when they lead out of the
// tree, as the regular file they point to. A sparse file is stored sparse
// (PAX format 1.0, as GNU tar writes it), so its holes cost nothing in the
// stream. FIFOs, sockets and devices are refused (KindInvalid), as is an
// archive over opts.max (KindTooLarge); both are found by a first walk,
// before anything is written, so the caller can answer with the error.
// ready is called once that walk passed, before the stream starts.
func tarOut(src string, w io.Writer, opts archiveOptions, ready func() error) error {
	if _, err := measureArchive(src, opts); err != nil {
		return err
	}
	if err := ready(); err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err := walkArchive(src, opts, func(e *archEntry) error { return e.write(w, tw) })
	if err != nil {
		return err
	}
	return tw.Close()
}

// measureArchive walks the archive of src as tarOut would write it and
// returns its size, or the error tarOut would fail with: over opts.max,
// or a file that cannot be archived.
func measureArchive(src string, opts archiveOptions) (archiveSize, error) {
	size := archiveSize{stream: 1024} // the two zero blocks that end it
	err := walkArchive(src, opts, func(e *archEntry) error {
		n, err := e.streamSize()
		size.stream += n
		if e.hdr.Typeflag == tar.TypeReg {
			size.content += e.hdr.Size
		}
		if err == nil && opts.max > 0 && size.bytes() > opts.max {
			err = tooLargef("download of %s: more than %d bytes, the limit: raise it (max_size, --max-size) or download less", src, opts.max)
		}
		return err
	})
	return size, err
}

// archEntry is one entry of an archive: its header and, for a regular
// file, where its content comes from.
type archEntry struct {
	hdr *tar.Header
	src string // the file to read (the link's target for a followed link)
	// extents are the data of a sparse file (nil: not sparse).
	extents []extent
}

// extent is a range of a sparse file that holds data.
type extent struct{ off, len int64 }

// walkArchive calls fn with every entry of the archive of src, in the
// order tarOut writes them.
func walkArchive(src string, opts archiveOptions, fn func(*archEntry) error) error {
	top := filepath.Base(src)
	if top == "/" {
		top = "."
	}
	fi, err := os.Stat(src) // src itself is followed
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		e, err := fileEntry(src, top, fi)
		if err != nil {
			return err
		}
		return fn(e)
	}
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := path.Join(top, filepath.ToSlash(rel))
		var e *archEntry
		switch {
		case fi.IsDir():
			e = &archEntry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime().Truncate(time.Second)}}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if opts.follow && !staysInside(root, p) {
				if tfi, err := os.Stat(p); err == nil && tfi.Mode().IsRegular() {
					e, err = fileEntry(p, name, tfi)
					if err != nil {
						return err
					}
					break
				}
			}
			e = &archEntry{hdr: &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: fi.ModTime().Truncate(time.Second)}}
		default:
			if e, err = fileEntry(p, name, fi); err != nil {
				return err
			}
		}
		return fn(e)
	})
}

// fileEntry is the entry of the regular file p (fi: its Stat), or an
// error naming p if it is anything else.
func fileEntry(p, name string, fi fs.FileInfo) (*archEntry, error) {
	if !fi.Mode().IsRegular() {
		return nil, invalidf("%s is %s: only regular files, directories and symbolic links can be downloaded", p, FileKind(fi.Mode()))
	}
	e := &archEntry{src: p, hdr: &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime().Truncate(time.Second)}}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < fi.Size() {
		f, err := openRegular(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if e.extents, err = dataExtents(f, fi.Size()); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return e, nil
}

// openRegular opens p for reading without blocking on a FIFO, and refuses
// anything but a regular file (p may have changed since it was looked at).
func openRegular(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = invalidf("%s is %s: only regular files, directories and symbolic links can be downloaded", p, FileKind(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// dataExtents lists the ranges of f that hold data (SEEK_DATA/SEEK_HOLE).
// It returns nil when the file is not sparse after all, or has too many
// ranges to be worth a map.
func dataExtents(f *os.File, size int64) ([]extent, error) {
	var out []extent
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole up to the end
		}
		if err != nil {
			if err == unix.EINVAL { // no SEEK_DATA here: send it whole
				return nil, nil
			}
			return nil, err
		}
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		hole = min(hole, size)
		out = append(out, extent{data, hole - data})
		if len(out) > maxExtents {
			return nil, nil
		}
		off = hole
	}
	if len(out) == 1 && out[0] == (extent{0, size}) {
		return nil, nil
	}
	// The map ends with the file's end, so that a trailing hole keeps the
	// size (GNU tar does the same).
	return append(out, extent{size, 0}), nil
}

// blocks rounds n up to tar's 512-byte blocks.
func blocks(n int64) int64 { return (n + 511) &^ 511 }

// countWriter counts what goes through it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// streamSize is the number of bytes e takes in the stream.
func (e *archEntry) streamSize() (int64, error) {
	if e.extents != nil {
		pax, data := e.sparseHeader()
		return 512 + blocks(int64(len(pax))) + 512 + blocks(data), nil
	}
	var c countWriter
	if err := tar.NewWriter(&c).WriteHeader(e.hdr); err != nil {
		return 0, fmt.Errorf("%s: %w", e.hdr.Name, err)
	}
	return c.n + blocks(e.hdr.Size), nil
}

// write writes e to the stream: through tw, or for a sparse file by hand
// to w (tw knows no sparse files), between tw's entries.
func (e *archEntry) write(w io.Writer, tw *tar.Writer) error {
	if e.extents != nil {
		if err := tw.Flush(); err != nil {
			return err
		}
		return e.writeSparse(w)
	}
	if err := tw.WriteHeader(e.hdr); err != nil {
		return fmt.Errorf("%s: %w", e.hdr.Name, err)
	}
	if e.hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := openRegular(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	if n, err := io.CopyN(tw, f, e.hdr.Size); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: the file shrank while it was archived (%d of %d bytes)", e.src, n, e.hdr.Size)
		}
		return err
	}
	return nil
}

// sparseHeader returns the PAX records of a sparse entry (GNU format 1.0)
// and the size of its data: the map padded to a block, then the extents.
func (e *archEntry) sparseHeader() (pax string, data int64) {
	data = blocks(int64(len(e.sparseMap()))) // padded to a block
	for _, x := range e.extents {
		data += x.len
	}
	recs := [][2]string{
		{"GNU.sparse.major", "1"},
		{"GNU.sparse.minor", "0"},
		{"GNU.sparse.name", e.hdr.Name},
		{"GNU.sparse.realsize", strconv.FormatInt(e.hdr.Size, 10)},
	}
	if data > maxOctal {
		recs = append(recs, [2]string{"size", strconv.FormatInt(data, 10)})
	}
	var b strings.Builder
	for _, r := range recs {
		b.WriteString(paxRecord(r[0], r[1]))
	}
	return b.String(), data
}

// sparseMap is the map at the start of a sparse entry's data: the number
// of extents, then each one's offset and length, one number a line.
func (e *archEntry) sparseMap() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", len(e.extents))
	for _, x := range e.extents {
		fmt.Fprintf(&b, "%d\n%d\n", x.off, x.len)
	}
	return b.String()
}

// maxOctal is the largest size a header's 11 octal digits hold.
const maxOctal = 1<<33 - 1

// paxRecord formats one PAX record: "LEN KEY=VALUE\n", LEN counting
// itself.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3 // space, =, newline
	l := len(strconv.Itoa(n))
	if len(strconv.Itoa(n+l)) > l {
		l++
	}
	return strconv.Itoa(n+l) + " " + k + "=" + v + "\n"
}

// writeSparse writes e, a sparse file, as GNU tar's PAX format 1.0 does: a
// PAX header with the GNU.sparse records, a ustar header named
// DIR/GNUSparseFile.0/NAME whose data is the map followed by the extents.
func (e *archEntry) writeSparse(w io.Writer) error {
	f, err := openRegular(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	pax, data := e.sparseHeader()
	dir, file := path.Split(e.hdr.Name)
	blk := ustarBlock(path.Join(dir, "PaxHeaders.0", file), tar.TypeXHeader, int64(len(pax)), e.hdr)
	buf := make([]byte, 0, 1024+blocks(int64(len(pax))))
	buf = append(buf, blk[:]...)
	buf = append(buf, pax...)
	buf = pad(buf)
	blk = ustarBlock(path.Join(dir, "GNUSparseFile.0", file), tar.TypeReg, data, e.hdr)
	buf = append(buf, blk[:]...)
	buf = pad(append(buf, e.sparseMap()...))
	if _, err := w.Write(buf); err != nil {
		return err
	}
	for _, x := range e.extents {
		if n, err := io.Copy(w, io.NewSectionReader(f, x.off, x.len)); err != nil {
			return err
		} else if n < x.len {
			return fmt.Errorf("%s: the file shrank while it was archived", e.src)
		}
	}
	_, err = w.Write(make([]byte, blocks(data)-data))
	return err
}

// pad pads b with NULs to a whole number of blocks.
func pad(b []byte) []byte {
	return append(b, make([]byte, blocks(int64(len(b)))-int64(len(b)))...)
}

// ustarBlock is a ustar header block named name (cut to the 100 bytes the
// field holds: readers take the real name from the PAX records) with the
// mode and time of h. A size over 11 octal digits is left to the PAX
// "size" record.
func ustarBlock(name string, typ byte, size int64, h *tar.Header) (b [512]byte) {
	if len(name) > 100 {
		name = name[:100]
	}
	if size > maxOctal {
		size = 0
	}
	copy(b[0:100], name)
	octal := func(f []byte, v int64) { copy(f, fmt.Sprintf("%0*o", len(f)-1, v)) }
	octal(b[100:108], h.Mode&0o7777)
	octal(b[108:116], 0)
	octal(b[116:124], 0)
	octal(b[124:136], size)
	octal(b[136:148], max(h.ModTime.Unix(), 0))
	b[156] = typ
	copy(b[257:265], "ustar\x0000")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// staysInside reports whether the symlink p, inside the tree at root
// (both real paths), leads only through the tree when it is followed:
// its target is relative and, resolved one name at a time, following the
// links it meets (none absolute) and lexically past a name that does not
// exist, never goes above root. It is the rule the host applies to the
// links it receives (client.UntarTo), run here to tell which links to
// follow.
func staysInside(root, p string) bool {
	rel, err := filepath.Rel(root, filepath.Dir(p))
	if err != nil {
		return false
	}
	var cur []string
	if rel != "." {
		cur = strings.Split(rel, "/")
	}
	target, err := os.Readlink(p)
	if err != nil || target == "" || path.IsAbs(target) {
		return false
	}
	pending := strings.Split(target, "/")
	missing := false
	for hops := 0; len(pending) > 0; {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
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
		fi, err := os.Lstat(filepath.Join(root, filepath.Join(next...)))
		switch {
		case err != nil:
			missing = true // resolved lexically from here
		case fi.Mode()&fs.ModeSymlink != 0:
			if hops++; hops > 40 {
				return false
			}
			t, err := os.Readlink(filepath.Join(root, filepath.Join(next...)))
			if err != nil || t == "" || path.IsAbs(t) {
				return false
			}
			pending = append(strings.Split(t, "/"), pending...)
			continue
		case !fi.IsDir():
			missing = true // ENOTDIR if anything follows: lexical from here
		}
		cur = next
	}
	return true
}

// tarIn extracts a tar stream into dir. Every name must stay inside dir:
// absolute names, "..", NUL bytes and over-long names are refused with an
// error naming the entry, and os.Root keeps symlinks planted by earlier
// entries (or already there) from leading a write out of dir. Only files,
// directories and symlinks are accepted.
func tarIn(dir string, r io.Reader) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return invalidf("bad tar stream: %v", err)
		}
		name, err := entryName(hdr.Name)
		if err == errSkip {
			continue // "./", the target directory itself
		}
		if err != nil {
			return err
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, mode|0o700)
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err = root.MkdirAll(d, 0o755); err != nil {
					break
				}
			}
			var f *os.File
			if f, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		case tar.TypeSymlink:
			err = root.Symlink(hdr.Linkname, name)
		default:
			return invalidf("tar entry %q: type %q not accepted (files, directories and symlinks only)", hdr.Name, string(hdr.Typeflag))
		}
		if err != nil {
			return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
	}
}

// entryName checks one tar entry name and returns it cleaned, relative.
func entryName(n string) (string, error) {
	switch {
	case n == "":
		return "", invalidf("tar entry with an empty name")
	case len(n) > maxPath:
		return "", invalidf("tar entry name of %d bytes is longer than %d", len(n), maxPath)
	case strings.ContainsRune(n, 0):
		return "", invalidf("tar entry %q contains a NUL byte", n)
	case path.IsAbs(n):
		return "", invalidf("tar entry %q is absolute", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", invalidf("tar entry %q leaves the target directory", n)
		}
	}
	clean := path.Clean(n)
	if clean == "." {
		return "", errSkip
	}
	return clean, nil
}

var errSkip = errors.New("skip")
