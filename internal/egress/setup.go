package egress

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/egress/rules"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// Where a sandbox with network access finds its CA: the system bundle
// (the host's, or the image's, with the sandbox CA added) and the CA alone.
const (
	BundlePath = "/etc/ssl/certs/ca-certificates.crt"
	CAPath     = "/etc/ssl/certs/airlock-sandbox-ca.pem"
)

// TrustEnv points the TLS clients people run in sandboxes at the bundle
// that trusts the sandbox CA: OpenSSL, Go and Python's ssl
// (SSL_CERT_FILE), curl, requests and pip, git, Node (which adds
// NODE_EXTRA_CA_CERTS to its own roots), Cargo, Deno and the AWS SDKs.
func TrustEnv() map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       BundlePath,
		"CURL_CA_BUNDLE":      BundlePath,
		"REQUESTS_CA_BUNDLE":  BundlePath,
		"PIP_CERT":            BundlePath,
		"GIT_SSL_CAINFO":      BundlePath,
		"CARGO_HTTP_CAINFO":   BundlePath,
		"AWS_CA_BUNDLE":       BundlePath,
		"NODE_EXTRA_CA_CERTS": CAPath,
		"DENO_CERT":           CAPath,
	}
}

// Setup is what a sandbox with network access gets from egress before it
// starts: its CA (whose key stays outside), the files and variables that
// make the sandbox trust it, and its credentials with their placeholders.
type Setup struct {
	Dir   string
	CA    *gateway.CA
	Creds []*Bound
	// Binds mount the trust files into the sandbox, read-only.
	Binds []runtime.Bind
	// Env holds the trust variables and each credential's placeholder.
	Env map[string]string
}

// SecretLookup finds a secret by name in `airlock serve`'s configuration.
// Its errors must not hold the value.
type SecretLookup func(name string) (string, error)

// Files in a Setup's directory (outside the sandbox).
const (
	caFile          = "ca.pem"
	caKeyFile       = "ca-key.pem"
	bundleFile      = "bundle.pem"
	placeholderFile = "placeholders.json"
)

// Prepare makes a sandbox's CA and trust files in dir (created, 0700) and
// resolves n's credentials. root is the sandbox's root filesystem ("" for
// the host's): its system CA bundle, the first of knownBundles found,
// read inside root, comes first in the sandbox's bundle (none: the CA
// alone). Every credential must resolve: a sandbox does not start with a
// credential it was promised missing.
func Prepare(dir, name string, n policy.Network, root string, lookup SecretLookup) (*Setup, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress setup: %w", err)
	}
	ca, err := gateway.NewCA(name)
	if err != nil {
		return nil, fmt.Errorf("egress setup: sandbox CA: %w", err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, fmt.Errorf("egress setup: sandbox CA: %w", err)
	}
	base, err := systemBundle(root)
	if err != nil {
		return nil, fmt.Errorf("egress setup: %w", err)
	}
	placeholders := map[string]string{}
	for i := range n.Credentials {
		placeholders[fmt.Sprint(i)] = newPlaceholder()
	}
	ph, _ := json.Marshal(placeholders)
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{caKeyFile, key, 0o600},
		{caFile, ca.CertPEM(), 0o644},
		{bundleFile, append(slices.Clip(base), ca.CertPEM()...), 0o644}, // base is shared: Clip makes append copy
		{placeholderFile, ph, 0o600},
	} {
		if err := writeFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return nil, fmt.Errorf("egress setup: %w", err)
		}
	}
	return finish(dir, ca, n, placeholders, lookup)
}

// Load reads back the Setup Prepare made in dir (after a daemon restart),
// resolving the credentials again.
func Load(dir string, n policy.Network, lookup SecretLookup) (*Setup, error) {
	cert, err1 := os.ReadFile(filepath.Join(dir, caFile))
	key, err2 := os.ReadFile(filepath.Join(dir, caKeyFile))
	ph, err3 := os.ReadFile(filepath.Join(dir, placeholderFile))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("egress setup: %w", err)
	}
	ca, err := gateway.LoadCA(cert, key)
	if err != nil {
		return nil, err
	}
	var placeholders map[string]string
	if err := json.Unmarshal(ph, &placeholders); err != nil {
		return nil, fmt.Errorf("egress setup: %s: %w", placeholderFile, err)
	}
	return finish(dir, ca, n, placeholders, lookup)
}

func finish(dir string, ca *gateway.CA, n policy.Network, placeholders map[string]string, lookup SecretLookup) (*Setup, error) {
	s := &Setup{Dir: dir, CA: ca, Env: TrustEnv(), Binds: []runtime.Bind{
		{Source: filepath.Join(dir, bundleFile), Target: BundlePath},
		{Source: filepath.Join(dir, caFile), Target: CAPath},
	}}
	for i, c := range n.Credentials {
		b, err := bind(i, c, placeholders[fmt.Sprint(i)], lookup)
		if err != nil {
			return nil, err
		}
		s.Creds = append(s.Creds, b)
		if b.Env != "" {
			s.Env[b.Env] = b.Placeholder
		}
	}
	return s, nil
}

func bind(i int, c policy.Credential, placeholder string, lookup SecretLookup) (*Bound, error) {
	name := c.Name
	for _, alt := range []string{c.Env, c.Header, fmt.Sprintf("credential %d", i)} {
		if name == "" {
			name = alt
		}
	}
	if placeholder == "" {
		return nil, fmt.Errorf("credential %s: no placeholder recorded", name)
	}
	b := &Bound{Name: name, Env: c.Env, Placeholder: placeholder, header: c.Header, format: c.Format}
	for _, h := range c.Hosts {
		p, err := rules.ParsePattern(h)
		if err != nil {
			return nil, fmt.Errorf("credential %s: %w", name, err)
		}
		if !p.IsName() {
			return nil, fmt.Errorf("credential %s: %q is an address: credentials are bound to names only", name, h)
		}
		b.hosts = append(b.hosts, p)
	}
	if len(b.hosts) == 0 {
		return nil, fmt.Errorf("credential %s: bound to no host", name)
	}
	v, err := ResolveSecret(c.Secret, lookup)
	if err != nil {
		return nil, fmt.Errorf("credential %s: %w: %w", name, err, errdefs.ErrInvalid)
	}
	b.secret = v
	b.makeSpellings()
	return b, nil
}

// maxSecret bounds a secret read from a file.
const maxSecret = 64 << 10

// ResolveSecret reads a secret from where src says: env:VAR, file:PATH,
// or a name lookup knows. Errors never hold the value.
func ResolveSecret(src string, lookup SecretLookup) (string, error) {
	kind, ref, err := policy.ParseSecret(src)
	if err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	var v string
	switch {
	case kind == policy.SecretEnv:
		var ok bool
		if v, ok = os.LookupEnv(ref); !ok {
			return "", fmt.Errorf("secret env:%s: $%s is not set in airlock's environment", ref, ref)
		}
	case kind == policy.SecretFile:
		f, err := os.Open(ref)
		if err != nil {
			return "", fmt.Errorf("secret file:%s: %w", ref, err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
		f.Close()
		if err != nil {
			return "", fmt.Errorf("secret file:%s: %w", ref, err)
		}
		if len(b) > maxSecret {
			return "", fmt.Errorf("secret file:%s: larger than %d bytes", ref, maxSecret)
		}
		v = strings.TrimRight(string(b), "\r\n")
	case lookup == nil:
		return "", fmt.Errorf("secret %q: named secrets come from airlock serve's configuration (secrets:); here, use env:VAR or file:PATH", src)
	default:
		if v, err = lookup(ref); err != nil {
			return "", err
		}
	}
	if v == "" {
		return "", fmt.Errorf("secret %s: empty", src)
	}
	if strings.ContainsAny(v, "\r\n\x00") {
		return "", fmt.Errorf("secret %s: contains a line break or NUL, which cannot go in a header", src)
	}
	return v, nil
}

func newPlaceholder() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "airlock-placeholder-" + hex.EncodeToString(b)
}

// writeFile writes data atomically with mode.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// knownBundles are where distributions keep the system CA bundle.
var knownBundles = []string{
	BundlePath, // Debian, Ubuntu, Alpine, Arch
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // Fedora, RHEL
	"/etc/pki/tls/certs/ca-bundle.crt",                  // older RHEL
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/ssl/cert.pem",                                 // Alpine, others
}

// maxBundle bounds a system CA bundle.
const maxBundle = 8 << 20

// systemBundle returns the certificates of root's system CA bundle, read
// inside root (an image's symlinks cannot reach the host's files), as PEM;
// nothing else in the file is kept. The result is cached while the file
// is unchanged: decoding it took 2 ms of every networked sandbox's start.
func systemBundle(root string) ([]byte, error) {
	if root == "" {
		root = "/"
	}
	for _, p := range knownBundles {
		f, err := openInRoot(root, p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxBundle {
			return nil, fmt.Errorf("CA bundle: %s in %s: not a regular file of at most %d bytes", p, root, maxBundle)
		}
		key := bundleKey{root: root, path: p, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			key.dev, key.ino = uint64(st.Dev), st.Ino
		}
		bundles.Lock()
		out, ok := bundles.m[key]
		bundles.Unlock()
		if ok {
			return out, nil
		}
		b, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		for len(b) > 0 {
			var blk *pem.Block
			if blk, b = pem.Decode(b); blk == nil {
				break
			}
			if blk.Type == "CERTIFICATE" && len(blk.Headers) == 0 {
				out = append(out, pem.EncodeToMemory(blk)...)
			}
		}
		bundles.Lock()
		for k := range bundles.m {
			if k.root == root {
				delete(bundles.m, k) // an older state of this root's bundle
			}
		}
		bundles.m[key] = out
		bundles.Unlock()
		return out, nil
	}
	return nil, nil
}

// bundleKey identifies one state of a root's system bundle file.
type bundleKey struct {
	root, path string
	dev, ino   uint64
	size       int64
	mtime      int64
}

// bundles caches systemBundle's results (callers must not modify them).
var bundles = struct {
	sync.Mutex
	m map[bundleKey][]byte
}{m: map[bundleKey][]byte{}}
