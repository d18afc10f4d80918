// Package rundir keeps airlock's directories under /run (as root:
// /run/airlock, /run/airlock-gvisor, /run/airlock-egress) in memory.
//
// Every sandbox's start and end writes there: its state directory, its
// state file (twice), its uid lease, its OCI bundle with gVisor. /run is a
// tmpfs on most hosts, but not on all (containers, small VMs without an
// init system), and on a disk file system each of those operations waits
// for the journal whenever other disk work is going on: a daemon's cold
// creation lost 0.3 to 1.5 ms to it, `airlock run` about 0.5 ms. So where
// the file system below is not memory-backed and the directory is new or
// empty, the first airlock process that needs it mounts a tmpfs there,
// which stays until the host restarts, as /run's own content would. A
// directory that already holds something (the state of running sandboxes,
// or what an earlier boot left on a disk-backed /run) is used as it is:
// nothing is ever hidden under the mount. `airlock doctor` says which.
//
// Failing to mount is not an error: this is speed, not isolation.
package rundir

// Dir is airlock's runtime directory as root.
const Dir = "/run/airlock"
