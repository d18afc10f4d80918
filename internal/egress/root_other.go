//go:build !linux

package egress

import (
	"errors"
	"os"
)

func openInRoot(root, path string) (*os.File, error) {
	return nil, errors.New("reading a CA bundle inside a root needs Linux")
}
