//go:build linux

package native

import (
	"encoding/json"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	sbx "github.com/airlock-dev/airlock/internal/sandbox"
)

// BenchmarkSetupJSON decodes the init's setup for the default policy as
// it travels (the seccomp program packed, runtime.Program) and, for
// comparison, with the program as one JSON object per instruction, as it
// did before: the init decodes it on every sandbox's start path.
//
//	go test -run XXX -bench SetupJSON ./internal/runtime/native/
func BenchmarkSetupJSON(b *testing.B) {
	spec, err := sbx.Spec(&policy.Policy{}, sbx.Opts{})
	if err != nil {
		b.Fatal(err)
	}
	s := setup{StateDir: "/run/airlock/0123456789abcdef", Workspace: "/home/user/project", Protected: spec.Protected, Seccomp: spec.Seccomp}
	packed, err := json.Marshal(&s)
	if err != nil {
		b.Fatal(err)
	}
	type objects struct {
		setup
		Seccomp []runtime.SockFilter `json:"seccomp,omitempty"`
	}
	plain, err := json.Marshal(&objects{setup: s, Seccomp: spec.Seccomp})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("packed", func(b *testing.B) {
		b.SetBytes(int64(len(packed)))
		for b.Loop() {
			var d setup
			if err := json.Unmarshal(packed, &d); err != nil || len(d.Seccomp) != len(spec.Seccomp) {
				b.Fatal(err)
			}
		}
	})
	b.Run("objects", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			var d objects
			if err := json.Unmarshal(plain, &d); err != nil || len(d.Seccomp) != len(spec.Seccomp) {
				b.Fatal(err)
			}
		}
	})
}
