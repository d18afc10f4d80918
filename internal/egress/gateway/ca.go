package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"sync"
	"time"
)

// CA is a sandbox's own certificate authority: the gateway signs, with it,
// the certificates it shows the sandbox for the hosts it intercepts. Only
// the sandbox that was given its certificate trusts it, and its key never
// leaves the gateway's side.
type CA struct {
	cert    *x509.Certificate
	certDER []byte
	key     crypto.Signer

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by host
}

// caValidity is how long a sandbox CA is valid; leafValidity how long the
// certificates it signs are (renewed before they expire).
const (
	caValidity   = 397 * 24 * time.Hour
	leafValidity = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	maxLeaves    = 1024
)

// NewCA makes a CA named for a sandbox: an ECDSA P-256 key and a
// self-signed certificate that may sign only end-entity certificates.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "airlock sandbox " + name, Organization: []string{"airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certDER: der, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// LoadCA reads a CA written by CertPEM and KeyPEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil || cb.Type != "CERTIFICATE" || kb.Type != "PRIVATE KEY" {
		return nil, errors.New("sandbox CA: want a PEM CERTIFICATE and a PEM PRIVATE KEY")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA key: %w", err)
	}
	key, ok := k.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("sandbox CA: not a CA certificate and signing key")
	}
	return &CA{cert: cert, certDER: cb.Bytes, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA certificate, for the sandbox's trust store.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.certDER})
}

// KeyPEM is the CA's private key (PKCS #8). It must never reach the
// sandbox.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Certificate returns the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// leaf returns a certificate for host (a DNS name or an IP address), signed
// by the CA, from a cache.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && now.Add(leafRenew).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.certDER}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

func randSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}
