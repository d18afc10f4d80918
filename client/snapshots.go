package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlock-dev/airlock/api"
)

// CreateSnapshot snapshots a sandbox's workspace (processes are not
// captured). name "" names it after its id.
func (c *Client) CreateSnapshot(ctx context.Context, id string, req *api.CreateSnapshotRequest) (*api.Snapshot, error) {
	if req == nil {
		req = &api.CreateSnapshotRequest{}
	}
	p, err := sandboxPath(id, "/snapshots")
	if err != nil {
		return nil, err
	}
	var sn api.Snapshot
	if err := c.call(ctx, http.MethodPost, p, nil, req, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// ListSnapshots lists the caller's snapshots.
func (c *Client) ListSnapshots(ctx context.Context) (*api.SnapshotList, error) {
	var l api.SnapshotList
	if err := c.call(ctx, http.MethodGet, api.Version+"/snapshots", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

func snapshotPath(ref string) (string, error) {
	s, err := seg("snapshot", ref)
	if err != nil {
		return "", err
	}
	return api.Version + "/snapshots/" + s, nil
}

// GetSnapshot returns a snapshot by id or name.
func (c *Client) GetSnapshot(ctx context.Context, ref string) (*api.Snapshot, error) {
	p, err := snapshotPath(ref)
	if err != nil {
		return nil, err
	}
	var sn api.Snapshot
	if err := c.call(ctx, http.MethodGet, p, nil, nil, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// DeleteSnapshot removes a snapshot (sandboxes made from it keep theirs).
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	p, err := snapshotPath(ref)
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodDelete, p, nil, nil, nil)
}

// Fork makes count sandboxes from a snapshot of a sandbox's current
// state, all or none.
func (c *Client) Fork(ctx context.Context, id string, req *api.ForkRequest) (*api.ForkResult, error) {
	if req == nil {
		req = &api.ForkRequest{}
	}
	p, err := sandboxPath(id, "/fork")
	if err != nil {
		return nil, err
	}
	var r api.ForkResult
	if err := c.call(ctx, http.MethodPost, p, nil, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Restore puts a sandbox's workspace back to a snapshot in place; its
// processes are killed.
func (c *Client) Restore(ctx context.Context, id, snapshot string) (*api.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/restore", &api.RestoreRequest{Snapshot: snapshot})
}

// Changes lists a sandbox's workspace changes since a snapshot (since
// "": since its creation), with unified diffs of text files when diff.
func (c *Client) Changes(ctx context.Context, id, since string, diff bool) (*api.Changes, error) {
	p, err := sandboxPath(id, "/changes")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if since != "" {
		q.Set("since", since)
	}
	if diff {
		q.Set("diff", "true")
	}
	var ch api.Changes
	if err := c.call(ctx, http.MethodGet, p, q, nil, &ch); err != nil {
		return nil, err
	}
	return &ch, nil
}
