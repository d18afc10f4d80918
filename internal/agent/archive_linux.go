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
	"strings"
)

// tarOut writes path (a file or a directory tree) to w as a tar stream.
// Symlinks are stored as links, never followed.
func tarOut(root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	base := filepath.Dir(root)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() && link == "" {
			return nil // devices, sockets, fifos: not content
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
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
