package manager

import (
	"context"
	"fmt"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

type tenantKey struct{}

// WithTenant marks ctx as a call by a tenant's API key: creations belong to
// the tenant, lists show only its sandboxes, and CheckTenant refuses the
// others. An admin key or the unix socket carries no tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	if tenant == "" {
		return ctx
	}
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantOf returns the tenant of the call, and whether it has one.
func TenantOf(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tenantKey{}).(string)
	return t, ok && t != ""
}

// poolTenant is the tenant a sandbox being created is recorded with: none
// for a warm-pool member (it gets its caller's when it is handed out).
func poolTenant(ctx context.Context, pool string) string {
	if pool != "" {
		return ""
	}
	t, _ := TenantOf(ctx)
	return t
}

// CheckTenant refuses, as not found, a sandbox that another tenant owns
// (or an admin's) when the call is a tenant's: nothing about it leaks,
// not even that it exists.
func (m *Manager) CheckTenant(ctx context.Context, id string) error {
	t, ok := TenantOf(ctx)
	if !ok {
		return nil
	}
	m.mu.Lock()
	sb := m.sandboxes[id]
	m.mu.Unlock()
	owner := ""
	if sb != nil {
		sb.mu.Lock()
		owner = sb.rec.Tenant
		sb.mu.Unlock()
	}
	if sb == nil || owner != t {
		return fmt.Errorf("sandbox %s: %w", errdefs.Quote(id), errdefs.ErrNotFound)
	}
	return nil
}
