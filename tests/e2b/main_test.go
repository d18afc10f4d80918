//go:build linux

// Package e2b_test drives airlock serve's E2B-compatible API from outside:
// with the official E2B JS SDK (TestSDK, pinned by sdk/package-lock.json)
// and with plain HTTP for the refusals the SDK never sends.
package e2b_test

import (
	"os"
	"testing"

	"github.com/airlock-dev/airlock/internal/testdaemon"
)

func TestMain(m *testing.M) { os.Exit(testdaemon.Main(m, "e2b")) }
