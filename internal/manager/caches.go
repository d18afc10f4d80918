package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/cache"
	"github.com/airlock-dev/airlock/internal/policy"
)

// prepareCaches makes (or checks) the host directories of p's caches in
// the daemon's cache directory: one set for the operator (the unix socket
// and keys without a tenant), and one per tenant, so that no tenant reads
// what another's sandboxes wrote.
func (c *Config) prepareCaches(ctx context.Context, p *policy.Policy) ([]cache.Mount, error) {
	if len(p.Caches) == 0 {
		return nil, nil
	}
	if c.CacheDir == "" {
		return nil, invalid("caches: this daemon keeps no caches")
	}
	cs, err := cache.ParseAll(p.Caches)
	if err != nil {
		return nil, invalid("caches: %v", err)
	}
	ms, err := cache.Prepare(c.tenantCacheDir(ctx), os.Geteuid(), cs)
	if err != nil {
		return nil, fmt.Errorf("caches: %w", err)
	}
	return ms, nil
}

// tenantCacheDir is where ctx's caller's caches live: CacheDir for the
// operator, and CacheDir-tenants/TENANT for a tenant (a directory beside
// CacheDir, so that no cache name can collide with a tenant's).
func (c *Config) tenantCacheDir(ctx context.Context) string {
	if t, ok := TenantOf(ctx); ok {
		return filepath.Join(c.CacheDir+"-tenants", t)
	}
	return c.CacheDir
}
