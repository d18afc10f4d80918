package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxFileSize is the largest policy file Load accepts.
const MaxFileSize = 1 << 20

// Load reads the policy file at path and parses it (see Parse). Relative
// host paths in the file (image, workspace, filesystem.read_only,
// filesystem.writable, filesystem.binds[].source) resolve against the
// file's directory. Errors are prefixed with path as given.
func Load(path string) (*Policy, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read policy: " + err.Error()}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read policy: " + unwrapPathError(err).Error()}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read policy: " + unwrapPathError(err).Error()}
	}
	if len(data) > MaxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("policy file is larger than %d bytes", MaxFileSize)}
	}
	return parse(path, filepath.Dir(abs), data)
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse parses a policy file's contents and validates the result (see
// Validate). name is used in error messages and as Policy.Source. If name
// is an absolute path, relative host paths resolve against its directory;
// otherwise they stay relative and Validate rejects them (use Load).
//
// An empty file (or one holding only comments) is the default policy.
// Every error is an *Error naming the file, the line and the key.
func Parse(name string, data []byte) (*Policy, error) {
	base := ""
	if filepath.IsAbs(name) {
		base = filepath.Dir(name)
	}
	return parse(name, base, data)
}

func parse(name, base string, data []byte) (p *Policy, err error) {
	defer func() {
		// yaml.v3 has panicked on hostile input before; never let that
		// take the CLI down.
		if r := recover(); r != nil {
			p, err = nil, &Error{File: name, Msg: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()
	d := &decoder{file: name, base: base, p: &Policy{Source: name, pos: map[string]int{}}}
	if err := d.document(data); err != nil {
		return nil, err
	}
	if err := d.p.Validate(); err != nil {
		return nil, err
	}
	return d.p, nil
}

type decoder struct {
	file string
	base string // directory relative host paths resolve against; "" = none
	p    *Policy
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a yaml.v3 syntax error into an *Error.
func (d *decoder) yamlError(err error) error {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: d.file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{File: d.file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

func (d *decoder) document(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil // empty file
		}
		return d.yamlError(err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == io.EOF:
	case err != nil:
		return d.yamlError(err)
	default:
		return &Error{File: d.file, Line: next.Line, Msg: "multiple YAML documents in one policy file (remove the \"---\")"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	return d.top(doc.Content[0])
}

// Known keys, in the order error messages list them.
var (
	workspaceKeys  = []string{"path", "mode"}
	topKeys        = []string{"image", "workspace", "runtime", "filesystem", "resources", "environment", "seccomp", "network", "caches"}
	filesystemKeys = []string{"read_only", "writable", "deny", "binds", "protect"}
	bindKeys       = []string{"source", "target", "mode"}
	protectKeys    = []string{"add", "remove"}
	resourceKeys   = []string{"memory", "swap", "pids", "cpu", "timeout", "disk", "tmp", "shm", "nofile", "fsize"}
	environKeys    = []string{"set", "pass"}
	seccompKeys    = []string{"deny"}
	networkKeys    = []string{"mode", "allow", "deny", "http", "credentials", "max_connections", "max_bytes"}
	httpRuleKeys   = []string{"hosts", "methods", "paths"}
	credentialKeys = []string{"name", "hosts", "secret", "env", "header", "format"}
)

func (d *decoder) top(n *yaml.Node) error {
	p := d.p
	return d.mapping(n, "", topKeys, func(key, _ string, v *yaml.Node) (err error) {
		switch key {
		case "image":
			p.Image, err = d.hostPath(v, key)
		case "workspace":
			if deref(v).Kind != yaml.MappingNode {
				p.Workspace, err = d.hostPath(v, key)
				break
			}
			err = d.mapping(v, key, workspaceKeys, func(k, name string, v *yaml.Node) (err error) {
				if name == "path" {
					p.Workspace, err = d.hostPath(v, k)
					return err
				}
				if p.WorkspaceMode, err = d.str(v, k); err == nil && p.WorkspaceMode == "" {
					return d.errf(v, k, "empty workspace mode: want %s, %s or %s", WorkspaceApply, WorkspaceReview, WorkspaceLive)
				}
				return err
			})
		case "runtime":
			p.Runtime, err = d.str(v, key)
		case "filesystem":
			err = d.filesystem(v, key)
		case "caches":
			err = d.strings(v, key, &p.Caches)
		case "resources":
			err = d.resources(v, key)
		case "environment":
			err = d.environment(v, key)
		case "seccomp":
			err = d.mapping(v, key, seccompKeys, func(k, _ string, v *yaml.Node) error {
				return d.list(v, k, func(k string, item *yaml.Node) error {
					s, err := d.str(item, k)
					p.Seccomp.Deny = append(p.Seccomp.Deny, s)
					return err
				})
			})
		case "network":
			err = d.mapping(v, key, networkKeys, func(k, name string, v *yaml.Node) (err error) {
				switch name {
				case "mode":
					p.Network.Mode, err = d.str(v, k)
					return err
				case "allow", "deny":
					dst := &p.Network.Allow
					if name == "deny" {
						dst = &p.Network.Deny
					}
					return d.strings(v, k, dst)
				case "max_connections":
					s, err := d.str(v, k)
					if err != nil {
						return err
					}
					if n, err := strconv.Atoi(s); err != nil || n < 0 || n > 1<<20 {
						return d.errf(v, k, "invalid number of connections %q (want a whole number, 0 for the default)", s)
					} else {
						p.Network.MaxConnections = n
					}
					return nil
				case "max_bytes":
					p.Network.MaxBytes, err = d.size(v, k)
					return err
				case "http":
					return d.list(v, k, func(k string, item *yaml.Node) error {
						var r HTTPRule
						err := d.mapping(item, k, httpRuleKeys, func(k, name string, v *yaml.Node) error {
							switch name {
							case "hosts":
								return d.strings(v, k, &r.Hosts)
							case "methods":
								return d.strings(v, k, &r.Methods)
							}
							return d.strings(v, k, &r.Paths)
						})
						p.Network.HTTP = append(p.Network.HTTP, r)
						return err
					})
				case "credentials":
					return d.list(v, k, func(k string, item *yaml.Node) error {
						var c Credential
						err := d.mapping(item, k, credentialKeys, func(k, name string, v *yaml.Node) (err error) {
							switch name {
							case "hosts":
								return d.strings(v, k, &c.Hosts)
							case "name":
								c.Name, err = d.str(v, k)
							case "secret":
								c.Secret, err = d.str(v, k)
							case "env":
								c.Env, err = d.str(v, k)
							case "header":
								c.Header, err = d.str(v, k)
							case "format":
								c.Format, err = d.str(v, k)
							}
							return err
						})
						p.Network.Credentials = append(p.Network.Credentials, c)
						return err
					})
				}
				return nil
			})
		}
		return err
	})
}

func (d *decoder) filesystem(n *yaml.Node, key string) error {
	fs := &d.p.Filesystem
	return d.mapping(n, key, filesystemKeys, func(key, _ string, v *yaml.Node) error {
		switch last(key) {
		case "read_only":
			return d.list(v, key, func(k string, item *yaml.Node) error {
				s, err := d.hostPath(item, k)
				fs.ReadOnly = append(fs.ReadOnly, s)
				return err
			})
		case "writable":
			return d.list(v, key, func(k string, item *yaml.Node) error {
				s, err := d.hostPath(item, k)
				fs.Writable = append(fs.Writable, s)
				return err
			})
		case "deny":
			return d.list(v, key, func(k string, item *yaml.Node) error {
				s, err := d.sandboxPath(item, k)
				fs.Deny = append(fs.Deny, s)
				return err
			})
		case "binds":
			return d.list(v, key, func(k string, item *yaml.Node) error {
				b, err := d.bind(item, k)
				fs.Binds = append(fs.Binds, b)
				return err
			})
		case "protect":
			return d.mapping(v, key, protectKeys, func(key, _ string, v *yaml.Node) error {
				return d.list(v, key, func(k string, item *yaml.Node) error {
					s, err := d.str(item, k)
					if err == nil && s == "" {
						err = d.errf(item, k, "empty path")
					}
					if last(key) == "add" {
						fs.Protect.Add = append(fs.Protect.Add, s)
					} else {
						fs.Protect.Remove = append(fs.Protect.Remove, s)
					}
					return err
				})
			})
		}
		return nil
	})
}

func (d *decoder) bind(n *yaml.Node, key string) (Bind, error) {
	var b Bind
	var haveSource, haveTarget bool
	err := d.mapping(n, key, bindKeys, func(k, _ string, v *yaml.Node) (err error) {
		switch last(k) {
		case "source":
			haveSource = true
			b.Source, err = d.hostPath(v, k)
		case "target":
			haveTarget = true
			b.Target, err = d.sandboxPath(v, k)
		case "mode":
			var m string
			if m, err = d.str(v, k); err != nil {
				return err
			}
			switch m {
			case "ro":
			case "rw":
				b.Writable = true
			default:
				return d.errf(v, k, "invalid mode %q (want ro or rw)", m)
			}
		}
		return err
	})
	if err != nil {
		return b, err
	}
	if n = deref(n); n.Kind != yaml.MappingNode {
		return b, d.errf(n, key, "expected a mapping with source, target and mode, got %s", describe(n))
	}
	switch {
	case !haveSource:
		return b, d.errf(n, key, "missing source")
	case !haveTarget:
		return b, d.errf(n, key, "missing target")
	}
	return b, nil
}

func (d *decoder) resources(n *yaml.Node, key string) error {
	r := &d.p.Resources
	return d.mapping(n, key, resourceKeys, func(key, _ string, v *yaml.Node) (err error) {
		switch last(key) {
		case "memory":
			r.Memory, err = d.size(v, key)
		case "swap":
			r.Swap, err = d.size(v, key)
		case "disk":
			r.Disk, err = d.size(v, key)
		case "tmp":
			r.Tmp, err = d.size(v, key)
		case "shm":
			r.Shm, err = d.size(v, key)
		case "fsize":
			r.FileSize, err = d.size(v, key)
		case "pids":
			var s string
			if s, err = d.str(v, key); err != nil {
				return err
			}
			if r.Pids, err = strconv.ParseInt(s, 10, 64); err != nil || r.Pids < 0 {
				return d.errf(v, key, "invalid number of processes %q (want a whole number >= 0)", s)
			}
		case "nofile":
			var s string
			if s, err = d.str(v, key); err != nil {
				return err
			}
			if r.NoFile, err = strconv.ParseUint(s, 10, 64); err != nil {
				return d.errf(v, key, "invalid number of open files %q (want a whole number >= 0)", s)
			}
		case "cpu":
			var s string
			if s, err = d.str(v, key); err != nil {
				return err
			}
			if r.CPU, err = strconv.ParseFloat(s, 64); err != nil || math.IsNaN(r.CPU) || math.IsInf(r.CPU, 0) {
				return d.errf(v, key, "invalid number of cores %q (want a number such as 1 or 1.5)", s)
			}
			if r.CPU <= 0 {
				return d.errf(v, key, "invalid number of cores %q (must be > 0; leave cpu out for no limit)", s)
			}
		case "timeout":
			var s string
			if s, err = d.str(v, key); err != nil {
				return err
			}
			if r.Timeout, err = time.ParseDuration(s); err != nil {
				if _, nerr := strconv.ParseFloat(s, 64); nerr == nil && s != "0" {
					return d.errf(v, key, "invalid duration %q: missing unit (for example %ss or 10m)", s, s)
				}
				return d.errf(v, key, "invalid duration %q (want a Go duration such as 90s, 10m or 1h30m)", s)
			}
			if r.Timeout < 0 {
				return d.errf(v, key, "invalid duration %q: must not be negative", s)
			}
		}
		return err
	})
}

func (d *decoder) size(n *yaml.Node, key string) (int64, error) {
	s, err := d.str(n, key)
	if err != nil {
		return 0, err
	}
	v, err := ParseSize(s)
	if err != nil {
		return 0, d.errf(n, key, "%v", err)
	}
	return v, nil
}

func (d *decoder) environment(n *yaml.Node, key string) error {
	env := &d.p.Environment
	return d.mapping(n, key, environKeys, func(key, _ string, v *yaml.Node) error {
		if last(key) == "pass" {
			return d.list(v, key, func(k string, item *yaml.Node) error {
				s, err := d.str(item, k)
				env.Pass = append(env.Pass, s)
				return err
			})
		}
		return d.mapping(v, key, nil, func(k, name string, v *yaml.Node) error {
			s, err := d.str(v, k)
			if err != nil {
				return err
			}
			if env.Set == nil {
				env.Set = map[string]string{}
			}
			env.Set[name] = s
			return nil
		})
	})
}

// mapping walks the mapping n at key path key. Keys must be strings, must
// not repeat, and, if known is not nil, must be in known. fn is called
// with each key's full path (see keyPath), its raw name and its value,
// after the key's line is recorded.
// A null value (an empty section) is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, key string, known []string, fn func(key, name string, v *yaml.Node) error) error {
	orig := n
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return d.errf(orig, key, "expected a mapping, got %s", describe(n))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := deref(n.Content[i]), n.Content[i+1]
		if kn.Kind != yaml.ScalarNode || isNull(kn) {
			return d.errf(n.Content[i], key, "keys must be strings, got %s", describe(kn))
		}
		name := kn.Value
		full := keyPath(key, name)
		if kn.Tag == "!!merge" {
			return d.errf(kn, key, "YAML merge keys (<<) are not supported")
		}
		if first, dup := seen[name]; dup {
			return d.errf(kn, full, "duplicate key (first defined on line %d)", first)
		}
		seen[name] = kn.Line
		if known != nil && !contains(known, name) {
			return d.errf(kn, full, "unknown key (known: %s)", strings.Join(known, ", "))
		}
		d.p.pos[full] = kn.Line
		if err := fn(full, name, v); err != nil {
			return err
		}
	}
	return nil
}

// list walks the sequence n at key path key, calling fn with each item's
// path ("key[i]") after recording its line. Null is an empty list.
func (d *decoder) list(n *yaml.Node, key string, fn func(key string, item *yaml.Node) error) error {
	orig := n
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		hint := ""
		if n.Kind == yaml.ScalarNode {
			hint = fmt.Sprintf(" (write [%s] for a one-item list)", n.Value)
		}
		return d.errf(orig, key, "expected a list, got %s%s", describe(n), hint)
	}
	for i, item := range n.Content {
		k := fmt.Sprintf("%s[%d]", key, i)
		d.p.pos[k] = item.Line
		if err := fn(k, item); err != nil {
			return err
		}
	}
	return nil
}

// str returns the text of a scalar. Numbers and booleans are taken as
// written ("0755" stays "0755"); null is an error.
// strings appends a list of strings to dst.
func (d *decoder) strings(n *yaml.Node, key string, dst *[]string) error {
	return d.list(n, key, func(k string, item *yaml.Node) error {
		s, err := d.str(item, k)
		*dst = append(*dst, s)
		return err
	})
}

func (d *decoder) str(n *yaml.Node, key string) (string, error) {
	orig := n
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		return "", d.errf(orig, key, "expected a single value, got %s", describe(n))
	}
	if isNull(n) {
		return "", d.errf(orig, key, "missing value (use \"\" for an empty string)")
	}
	return n.Value, nil
}

// hostPath reads a host path, resolving a relative one against d.base.
func (d *decoder) hostPath(n *yaml.Node, key string) (string, error) {
	s, err := d.str(n, key)
	if err != nil {
		return "", err
	}
	switch {
	case s == "":
		return "", d.errf(n, key, "empty path")
	case s == "~" || strings.HasPrefix(s, "~/"):
		return "", d.errf(n, key, "%q: ~ is not expanded; use an absolute path or one relative to the policy file", s)
	case filepath.IsAbs(s):
		return filepath.Clean(s), nil
	case d.base != "":
		return filepath.Join(d.base, s), nil
	}
	return filepath.Clean(s), nil
}

// sandboxPath reads a path inside the sandbox; Validate checks it is absolute.
func (d *decoder) sandboxPath(n *yaml.Node, key string) (string, error) {
	s, err := d.str(n, key)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", d.errf(n, key, "empty path")
	}
	return filepath.Clean(s), nil
}

func (d *decoder) errf(n *yaml.Node, key, format string, args ...any) error {
	return &Error{File: d.file, Line: n.Line, Key: key, Msg: fmt.Sprintf(format, args...)}
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// keyPath appends name to the dotted key path parent. Names that are not
// plain identifiers are quoted, so that a key path is always one line and
// unambiguous: environment.set."A B".
func keyPath(parent, name string) string {
	plain := name != ""
	for _, c := range name {
		if !(c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			plain = false
			break
		}
	}
	if !plain {
		name = strconv.Quote(name)
	}
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func last(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
