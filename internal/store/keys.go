package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// ErrBadKey is wrapped by Authenticate's error for a key that is malformed,
// unknown or revoked.
var ErrBadKey = errors.New("invalid or revoked API key")

// Key is an API key's record. The secret is not part of it: it is never
// stored, only its hash.
type Key struct {
	ID, Name  string
	CreatedAt time.Time
	RevokedAt *time.Time // nil while valid
	LastUsed  *time.Time // to within a minute; nil if never used
	// Tenant limits the key to its tenant's sandboxes; "" is an admin key,
	// which sees every sandbox.
	Tenant string
}

// An API key reads alk_<id>_<secret>: id is 12 lowercase hex digits, secret
// is 32 random bytes in unpadded base64url (43 characters, which may include
// '_', so the key is split by position).
const (
	keyPrefix    = "alk_"
	keyIDLen     = 12
	keySecretLen = 43
	keyLen       = len(keyPrefix) + keyIDLen + 1 + keySecretLen
)

// lastUsedEvery bounds how often Authenticate writes LastUsed, so that
// authenticating is not a write per request.
const lastUsedEvery = time.Minute

// CreateKey creates an API key named name. The returned secret is the whole
// key, to be shown to its owner once: the store keeps only its hash.
func (s *Store) CreateKey(ctx context.Context, name string) (secret string, k *Key, err error) {
	return s.CreateTenantKey(ctx, name, "")
}

// CreateTenantKey creates an API key of a tenant ("" for an admin key).
func (s *Store) CreateTenantKey(ctx context.Context, name, tenant string) (secret string, k *Key, err error) {
	raw := make([]byte, 32)
	rand.Read(raw) // crypto/rand.Read never returns an error
	sec := base64.RawURLEncoding.EncodeToString(raw)
	var e timeEnc
	created := e.at(s.now())
	k = &Key{Name: name, CreatedAt: decTime(created), Tenant: tenant}
	err = s.write(ctx, func(tx *sql.Tx) error {
		for range 3 { // 48-bit IDs: a collision is unlikely, but cheap to retry
			idb := make([]byte, keyIDLen/2)
			rand.Read(idb)
			k.ID = hex.EncodeToString(idb)
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM api_keys WHERE id = ?`, k.ID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, name, hash, created_at, tenant) VALUES (?, ?, ?, ?, ?)`,
					k.ID, name, hashSecret(sec), created, tenant)
				return err
			}
			if err != nil {
				return err
			}
		}
		return errors.New("store: could not find a free key ID")
	})
	if err != nil {
		return "", nil, err
	}
	return keyPrefix + k.ID + "_" + sec, k, nil
}

// Authenticate returns the key whose whole text is secret, if it is valid.
// Recording LastUsed is best effort: a failure to write it does not fail the
// authentication.
func (s *Store) Authenticate(ctx context.Context, secret string) (*Key, error) {
	id, sec, ok := parseKey(secret)
	if !ok {
		return nil, fmt.Errorf("malformed key: %w", ErrBadKey)
	}
	var hash []byte
	k, err := scanKey(s.db.QueryRowContext(ctx,
		`SELECT id, name, created_at, revoked_at, last_used, tenant, hash FROM api_keys WHERE id = ?`, id), &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("key %s: %w", id, ErrBadKey)
	}
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(hash, hashSecret(sec)) != 1 {
		return nil, fmt.Errorf("key %s: %w", id, ErrBadKey)
	}
	if k.RevokedAt != nil {
		return nil, fmt.Errorf("key %s revoked: %w", id, ErrBadKey)
	}
	now := s.now()
	if k.LastUsed == nil || now.Sub(*k.LastUsed) >= lastUsedEvery {
		var e timeEnc
		n := e.at(now)
		err := s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used = ?
				WHERE id = ? AND (last_used IS NULL OR last_used <= ?)`, n, id, n-int64(lastUsedEvery))
			return err
		})
		if err == nil {
			k.LastUsed = decTimePtr(sql.NullInt64{Int64: n, Valid: true})
		}
	}
	return k, nil
}

// ListKeys returns all keys, revoked ones included, oldest first.
func (s *Store) ListKeys(ctx context.Context) ([]*Key, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT id, name, created_at, revoked_at, last_used, tenant FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []*Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, k)
	}
	return list, rows.Err()
}

// RevokeKey revokes a key for good. Revoking a revoked key keeps the first
// revocation time.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	var e timeEnc
	now := e.at(s.now())
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, now, id)
		if err != nil {
			return err
		}
		return mustAffect(res, "key "+errdefs.Quote(id))
	})
}

// hashSecret hashes the secret part of a key. A single SHA-256 is enough:
// the secret is 256 random bits, so there is nothing for a slow password
// hash (bcrypt, argon2) to protect against brute force.
func hashSecret(sec string) []byte {
	h := sha256.Sum256([]byte(sec))
	return h[:]
}

// parseKey splits alk_<id>_<secret>, checking the shape of both parts.
func parseKey(key string) (id, sec string, ok bool) {
	if len(key) != keyLen || key[:len(keyPrefix)] != keyPrefix || key[len(keyPrefix)+keyIDLen] != '_' {
		return "", "", false
	}
	id, sec = key[len(keyPrefix):len(keyPrefix)+keyIDLen], key[len(keyPrefix)+keyIDLen+1:]
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	if b, err := base64.RawURLEncoding.Strict().DecodeString(sec); err != nil || len(b) != 32 {
		return "", "", false
	}
	return id, sec, true
}

// scanKey scans id, name, created_at, revoked_at, last_used and, if extra
// is given, more columns into it.
func scanKey(sc scanner, extra ...any) (*Key, error) {
	var k Key
	var created int64
	var revoked, used sql.NullInt64
	if err := sc.Scan(append([]any{&k.ID, &k.Name, &created, &revoked, &used, &k.Tenant}, extra...)...); err != nil {
		return nil, err
	}
	k.CreatedAt, k.RevokedAt, k.LastUsed = decTime(created), decTimePtr(revoked), decTimePtr(used)
	return &k, nil
}
