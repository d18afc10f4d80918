package manager

import (
	"context"
	"regexp"
	"sync"
)

// A caller's tenant travels in its request's context. The operator (the
// unix socket, or an API key without a tenant) has none and sees every
// sandbox; a tenant's caller sees, lists and touches only its tenant's.

type tenantKey struct{}

// WithTenant returns ctx for a caller of tenant t ("" for the operator).
func WithTenant(ctx context.Context, t string) context.Context {
	if t == "" {
		return ctx
	}
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantOf returns ctx's tenant and whether the caller is limited to it.
func TenantOf(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tenantKey{}).(string)
	return t, ok
}

// maySee reports whether ctx's caller may see a sandbox of tenant.
func maySee(ctx context.Context, tenant string) bool {
	t, limited := TenantOf(ctx)
	return !limited || t == tenant
}

var tenantRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`) }) // compiled on first use, not at every start

// ValidTenant reports whether t is a well-formed tenant name.
func ValidTenant(t string) bool { return tenantRE().MatchString(t) }

// poolTenant is the tenant a sandbox being created is recorded with: none
// for a warm-pool member (it gets its caller's when it is handed out).
func poolTenant(ctx context.Context, pool string) string {
	if pool != "" {
		return ""
	}
	t, _ := TenantOf(ctx)
	return t
}

// CheckTenant refuses, as not found, a sandbox that ctx's caller may not
// see (another tenant's, or a pool member): nothing about it leaks, not
// even that it exists. The manager's own calls check the same way.
func (m *Manager) CheckTenant(ctx context.Context, id string) error {
	_, err := m.lookup(ctx, id)
	return err
}
