package client

import (
	"context"
	"net/http"

	"github.com/airlock-dev/airlock/api"
)

// CreateKey creates an API key named name ("" for none). The answer's Key is
// the secret: it is shown this once and never again. Keys are managed only
// over the daemon's unix socket: over TCP, CreateKey, ListKeys and RevokeKey
// fail with ErrForbidden.
func (c *Client) CreateKey(ctx context.Context, name string) (*api.APIKey, error) {
	return c.CreateTenantKey(ctx, name, "")
}

// CreateTenantKey creates an API key of a tenant: it lists, sees and
// touches only its tenant's sandboxes ("" makes an admin key).
func (c *Client) CreateTenantKey(ctx context.Context, name, tenant string) (*api.APIKey, error) {
	var k api.APIKey
	if err := c.call(ctx, http.MethodPost, api.Version+"/keys", nil, &api.CreateKeyRequest{Name: name, Tenant: tenant}, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListKeys returns the API keys, revoked ones included, without their
// secrets.
func (c *Client) ListKeys(ctx context.Context) ([]api.APIKey, error) {
	var l api.KeyList
	if err := c.call(ctx, http.MethodGet, api.Version+"/keys", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Keys, nil
}

// RevokeKey revokes the API key kid: requests bearing it fail from now on.
func (c *Client) RevokeKey(ctx context.Context, kid string) error {
	s, err := seg("key id", kid)
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodDelete, api.Version+"/keys/"+s, nil, nil, nil)
}
