package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/airlock-dev/airlock/internal/initbin"
)

// version is the source's version, set by `make build` (-ldflags -X,
// from `git describe --always --dirty`); a plain `go build` leaves it
// empty and the module's version stands in.
var version string

// versionString is what `airlock --version` prints after "airlock version".
func versionString() string {
	v := version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	s := fmt.Sprintf("%s (%s, %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if initbin.BuildID != "" {
		s += ", build " + initbin.BuildID
	}
	return s + ")"
}
