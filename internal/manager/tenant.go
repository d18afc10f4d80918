package manager

import (
	"context"
	"regexp"
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

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidTenant reports whether t is a well-formed tenant name.
func ValidTenant(t string) bool { return tenantRE.MatchString(t) }
