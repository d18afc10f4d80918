//go:build !linux

package rundir

// For does nothing here: only Linux hosts run sandboxes.
func For(path string) {}
