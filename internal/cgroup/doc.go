// Package cgroup owns the resource-limit cgroup of one airlock sandbox: it
// detects which cgroup hierarchy the host runs (v1/hybrid or pure v2),
// creates one cgroup per sandbox, writes its limits (memory, swap, pids,
// cpu), moves processes into it, reports OOM kills, freezes, kills every
// process in it and removes it again. Sweep removes cgroups that dead
// owners left behind.
//
// Layout: a sandbox cgroup is <base>/<name>, by convention
// <base>/airlock/<id> (see Prefix). <base> is the hierarchy root
// (/sys/fs/cgroup on v2, each controller mount on v1) or, on v2 when the
// root is not writable, the caller's own (delegated) cgroup read from
// /proc/self/cgroup. A non-empty parent argument is a cgroup path relative
// to the hierarchy root, as printed in /proc/self/cgroup.
//
// Sweep relies on the creation time New stamps on each sandbox directory
// (cgroupfs otherwise reports the time its inode was last loaded, which
// only makes a directory look younger, never older).
//
// On v2, when the base is not the root and has processes of its own (the
// caller's own cgroup, a container's namespace root), the kernel refuses to
// enable controllers below it (EBUSY); New then fails and says so. The
// caller must move its processes into a leaf first.
//
// What this package must never do:
//
//   - leave a half-created cgroup behind: when New fails, every directory it
//     created is removed again before the error is returned;
//   - silently skip a requested limit: a limit whose controller or control
//     file is missing (memory, pids, cpu, swap accounting) is an error that
//     names the controller, the path and the fix (fail closed);
//   - touch cgroups it did not create, except Sweep, which only removes
//     empty, old children of the airlock parent directory;
//   - move the calling process or rewrite the host's cgroup layout beyond
//     enabling the needed controllers in the parents' cgroup.subtree_control.
package cgroup
