package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestNullArgumentsWithDefaults: go-sdk v1.8.0 panics on a call whose
// arguments are null when the input schema has defaults (the server's
// schemas have none); the middleware turns that panic into a tool error.
func TestNullArgumentsWithDefaults(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)
	srv.AddReceivingMiddleware(recoverPanics(slog.New(slog.NewTextHandler(io.Discard, nil))))
	type in struct {
		X string `json:"x,omitempty"`
	}
	sch, _ := jsonschema.For[in](nil)
	sch.Properties["x"].Default = json.RawMessage(`"d"`)
	mcp.AddTool(srv, &mcp.Tool{Name: "d", InputSchema: sch}, func(_ context.Context, _ *mcp.CallToolRequest, i in) (*mcp.CallToolResult, any, error) {
		return nil, nil, nil
	})
	cs := connectInMemory(t, srv)
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "d", Arguments: json.RawMessage("null")})
	if err != nil || !r.IsError || !strings.Contains(textOf(r), "internal error in airlock mcp while handling tools/call") {
		t.Fatalf("null arguments with defaults: %+v %v", r, err)
	}
}
