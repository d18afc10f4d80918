// Command probe is a static program used as the only binary of a test
// image: it reports what it sees and tries to write into the image.
package main

import (
	"fmt"
	"os"
)

func main() {
	marker, err := os.ReadFile("/etc/marker")
	fmt.Printf("marker=%q err=%v\n", marker, err)
	_, err = os.Stat("/usr/bin/python3")
	fmt.Printf("hostusr=%v\n", err == nil)
	host, _ := os.Hostname()
	fmt.Printf("hostname=%s\n", host)
	err = os.WriteFile("/etc/marker", []byte("changed"), 0o644)
	fmt.Printf("write=%v\n", err)
	b, _ := os.ReadFile("/etc/marker")
	fmt.Printf("after=%s\n", b)
}
