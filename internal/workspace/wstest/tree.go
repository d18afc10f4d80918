// Package wstest makes large workspaces for tests and benchmarks.
package wstest

import (
	"fmt"
	"os"
	"path/filepath"
)

// MakeTree writes files small files below dir, 1000 to a directory
// (d000/f0000.txt, ...), each holding its own name.
func MakeTree(dir string, files int) error {
	for i := 0; i < files; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
		}
		name := fmt.Sprintf("f%04d.txt", i%1000)
		if err := os.WriteFile(filepath.Join(sub, name), []byte(name+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Path is the path, relative to the tree, of file i of MakeTree.
func Path(i int) string { return fmt.Sprintf("d%03d/f%04d.txt", i/1000, i%1000) }
