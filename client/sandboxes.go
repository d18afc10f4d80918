package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// CreateSandbox creates a sandbox and returns it once it runs.
func (c *Client) CreateSandbox(ctx context.Context, req *api.CreateSandboxRequest) (*api.Sandbox, error) {
	if req == nil {
		req = &api.CreateSandboxRequest{}
	}
	var sb api.Sandbox
	if err := c.call(ctx, http.MethodPost, api.Version+"/sandboxes", nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// GetSandbox returns the sandbox id.
func (c *Client) GetSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodGet, id, "", nil)
}

// ListOptions filter ListSandboxes and AllSandboxes.
type ListOptions struct {
	// States keeps the sandboxes in one of these states (api.State*); all
	// when empty.
	States []string
	// Labels keeps the sandboxes that have all these labels.
	Labels map[string]string
	// Limit is the size of a page (1..1000); 0 is the daemon's default.
	Limit int
	// Cursor is the NextCursor of the previous page; "" for the first.
	Cursor string
}

// query returns o as the query of GET /v1/sandboxes.
func (o ListOptions) query() url.Values {
	q := url.Values{}
	for _, s := range o.States {
		q.Add("state", s)
	}
	keys := make([]string, 0, len(o.Labels))
	for k := range o.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+"="+o.Labels[k])
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

// ListSandboxes returns one page of sandboxes; its NextCursor, when set,
// is the Cursor of the next page.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*api.SandboxList, error) {
	var l api.SandboxList
	if err := c.call(ctx, http.MethodGet, api.Version+"/sandboxes", opts.query(), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// AllSandboxes returns every sandbox that matches opts, following the pages
// from opts.Cursor on.
func (c *Client) AllSandboxes(ctx context.Context, opts ListOptions) ([]api.Sandbox, error) {
	all := []api.Sandbox{}
	seen := map[string]bool{}
	for {
		l, err := c.ListSandboxes(ctx, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, l.Sandboxes...)
		if l.NextCursor == "" {
			return all, nil
		}
		if seen[l.NextCursor] {
			return nil, fmt.Errorf("airlock: list sandboxes: the daemon returned cursor %q twice", l.NextCursor)
		}
		seen[l.NextCursor] = true
		opts.Cursor = l.NextCursor
	}
}

// DeleteSandbox kills the sandbox id and forgets it.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	p, err := sandboxPath(id, "")
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodDelete, p, nil, nil, nil)
}

// SetTimeout makes the sandbox expire d from now (never past the daemon's
// maximum lifetime) and returns it.
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration) (*api.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/timeout", &api.TimeoutRequest{TimeoutSeconds: d.Seconds()})
}

// Pause freezes every process of a running sandbox and returns it; an error
// matching ErrConflict when it is not running.
func (c *Client) Pause(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/pause", nil)
}

// Resume thaws a paused sandbox and returns it.
func (c *Client) Resume(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/resume", nil)
}

// sandboxCall calls an operation on sandbox id that answers a Sandbox.
func (c *Client) sandboxCall(ctx context.Context, method, id, rest string, in any) (*api.Sandbox, error) {
	p, err := sandboxPath(id, rest)
	if err != nil {
		return nil, err
	}
	var sb api.Sandbox
	if err := c.call(ctx, method, p, nil, in, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// DialPort opens a TCP stream to 127.0.0.1:port inside a sandbox, through
// the daemon (GET /v1/sandboxes/{id}/ports/{port}, upgraded): what is
// written goes to the server listening there, and its answer is read.
// Nothing listening is an error matching ErrUnavailable.
func (c *Client) DialPort(ctx context.Context, id string, port int) (*Tunnel, error) {
	p, err := sandboxPath(id, "/ports/"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	var conn net.Conn
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i.Conn }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, c.base+p, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	req.Header.Set("User-Agent", "airlock-go-client")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.wsc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("airlock: port %d: %w", port, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("airlock: port %d: the daemon's answer is not a stream", port)
	}
	return &Tunnel{rwc: rwc, conn: conn}, nil
}

// Tunnel is a stream to a port inside a sandbox (DialPort).
type Tunnel struct {
	rwc  io.ReadWriteCloser // reads start with what the HTTP client buffered
	conn net.Conn           // the connection under it, for CloseWrite
}

func (t *Tunnel) Read(p []byte) (int, error)  { return t.rwc.Read(p) }
func (t *Tunnel) Write(p []byte) (int, error) { return t.rwc.Write(p) }
func (t *Tunnel) Close() error                { return t.rwc.Close() }

// CloseWrite ends the stream's sending half: the server inside reads an
// end of stream and its answer can still be read.
func (t *Tunnel) CloseWrite() error {
	if cw, ok := t.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("airlock: this connection to the daemon cannot close its write half alone")
}
