//go:build !linux

package runtime

// CheckWritableSource is Linux's; elsewhere there is nothing to check.
func CheckWritableSource(what, path string) error { return nil }
