package manager

import (
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/internal/cache"
	"github.com/airlock-dev/airlock/internal/policy"
)

// prepareCaches makes (or checks) the host directories of p's caches in
// the daemon's cache directory. One set serves every caller: API keys
// carry no tenant, so per-key caches would isolate nothing.
func (c *Config) prepareCaches(p *policy.Policy) ([]cache.Mount, error) {
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
	ms, err := cache.Prepare(c.CacheDir, os.Geteuid(), cs)
	if err != nil {
		return nil, fmt.Errorf("caches: %w", err)
	}
	return ms, nil
}
