package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/e2b"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/rundir"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/server"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// Logger makes the daemon's logger: text or JSON, at a level.
func Logger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if level != "" {
		if err := lv.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
		}
	}
	o := &slog.HandlerOptions{Level: lv}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// Run serves until ctx is cancelled or SIGTERM/SIGINT arrives, then shuts
// down gracefully: readiness fails, listeners close, requests in flight
// get a grace period, warm pool members are destroyed. Callers' sandboxes
// keep running and are re-adopted by the next daemon.
func Run(ctx context.Context, c *Config, log *slog.Logger) error {
	if c.Ephemeral {
		if err := c.ephemeral(); err != nil {
			return err
		}
		defer os.RemoveAll(c.ephemeralDir)
	}
	c.defaults()
	mc, maxUpload, err := c.manager()
	if err != nil {
		return err
	}
	// The TCP listener first: sandboxes must never reach it, so its
	// address goes into their gateways' refusals.
	var tl net.Listener
	if c.Listen != "" {
		if tl, err = net.Listen("tcp", c.Listen); err != nil {
			return fmt.Errorf("listen %s: %w", c.Listen, err)
		}
		defer tl.Close() // on an error before it is served; closing twice is harmless
		mc.HostAccess.Refused = egress.ListenerEndpoints(tl.Addr(), "airlock serve's API")
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	// One daemon per data and state directory: a second one would adopt,
	// fail and remove the first one's sandboxes.
	dataLock, err := lockDir(c.DataDir, "data directory")
	if err != nil {
		return err
	}
	defer dataLock.Close()
	rundir.For(c.StateDir)
	if err := os.MkdirAll(c.StateDir, 0o711); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if !c.Ephemeral {
		// Ephemeral daemons share their state root: each sandbox's state
		// names its live owner, and the runtime sweeps only dead owners'.
		stateLock, err := lockDir(c.StateDir, "state directory")
		if err != nil {
			return err
		}
		defer stateLock.Close()
	}
	st, err := store.Open(ctx, filepath.Join(c.DataDir, "airlock.db"))
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer st.Close()
	if err := os.MkdirAll(filepath.Dir(c.StateDir), 0o711); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	vols, err := c.volumes(log)
	if err != nil {
		return err
	}
	if vols != nil {
		// On every return, a start that fails included: the volumes'
		// pool is unmounted unless something in it is in use (sandboxes
		// that outlive the daemon).
		defer func() {
			if err := vols.Close(); err != nil {
				log.Warn("volumes", "err", err)
			}
		}()
	}
	rt := &native.Runtime{Detached: true, StateRoot: c.StateDir, Volumes: vols, Sleep: mc.SleepAfter >= 0}
	if c.Ephemeral {
		// Its sandboxes end with this process: the kernel kills their
		// inits, and a reaper removes their host state.
		rt.Detached, rt.Reaper = false, true
		mc.EgressDir = filepath.Join(c.ephemeralDir, "egress")
	}
	if rt.Sleep && rt.Detached {
		if err := native.SleepAvailable(); err != nil {
			log.Info("idle sandboxes' agents stay awake (sleep_after)", "reason", err)
		}
	}
	if os.Geteuid() == 0 {
		pool, err := uidpool.Resolve(c.UIDPool)
		if err != nil {
			return fmt.Errorf("config: uid_pool: %w", err)
		}
		rt.UIDPool = &pool
		log.Info("sandbox host ids", "pool", pool.String())
		if mc.MaxSandboxes > pool.Slots() {
			log.Warn("max_sandboxes is above what the uid pool holds; creations past it fail until sandboxes end", "max_sandboxes", mc.MaxSandboxes, "pool_sandboxes", pool.Slots())
		}
	} else if c.UIDPool != nil {
		return errors.New("config: uid_pool needs root: rootless, root inside a sandbox is the daemon's user (one uid)")
	}
	mc.Runtime, mc.Adopter, mc.Store, mc.Log = rt, rt, st, log
	if !c.Ephemeral {
		// gVisor sandboxes beside the native ones, in a state root of
		// their own (runsc's state and the bundles); available while
		// runsc is installed (checked at each creation).
		gv := &gvisor.Runtime{Detached: true, Agent: true, StateRoot: filepath.Clean(c.StateDir) + "-gvisor"}
		mc.Runtimes = map[string]manager.Backend{gvisor.Name: gv}
		if err := gv.Available(); err != nil {
			if mc.DefaultRuntime == gvisor.Name {
				return fmt.Errorf("config: default_runtime gvisor: %w", err)
			}
			log.Info("runtime gvisor unavailable until runsc is installed", "reason", err)
		} else {
			log.Info("runtime gvisor available", "state_dir", gv.StateRoot)
		}
	}
	// One set of caches for every caller (made on first use, mode 0700).
	mc.CacheDir = filepath.Join(c.DataDir, "caches")
	// Workspace snapshots: only with workspaces on volumes (the host
	// path of each sandbox's workspace).
	if vols != nil && !c.Ephemeral {
		mc.SnapshotDir, mc.VolumeDir, mc.Volumes = filepath.Join(c.DataDir, "snapshots"), vols.Dir(), vols
		if vols.Method() == quota.MethodClone {
			log.Info("workspace snapshots: copy-on-write (clones of the volumes' images)", "how", vols.CopyOnWriteInfo())
		} else {
			log.Warn("workspace snapshots: by copying files (time grows with the workspace); for copy-on-write install xfsprogs (mkfs.xfs) or keep the data directory on XFS with reflinks or btrfs, and restart", "reason", vols.CopyOnWriteInfo())
		}
	}
	mc.Metrics = manager.NewMetrics()
	for layer, off := range map[string]bool{"landlock": mc.Insecure.NoLandlock, "seccomp": mc.Insecure.NoSeccomp, "cgroups": mc.Insecure.NoCgroups} {
		if off {
			log.Warn("INSECURE: an isolation layer is off for every sandbox (configuration insecure)", "layer", layer)
		}
	}
	if mc.CgroupParent != "" && !mc.Insecure.NoCgroups {
		// Checked once here: a parent sandboxes cannot be made under
		// would otherwise fail every creation.
		if err := cgroup.CheckParent(mc.CgroupParent); err != nil {
			return fmt.Errorf("config: cgroup_parent %s: %w", mc.CgroupParent, err)
		}
	}
	m, err := manager.New(mc)
	if err != nil {
		return err
	}
	srv := server.New(m, st, mc.Metrics, log)
	srv.MaxUpload = maxUpload
	// E2B's API, on the TCP listener in front of /v1 (no path collides).
	e2bSrv, err := e2b.New(m, st, log, c.DataDir)
	if err != nil {
		return err
	}
	e2bSrv.Domain, e2bSrv.MaxUpload = c.E2BDomain, maxUpload

	ul, err := listenUnix(c.Socket)
	if err != nil {
		return err
	}
	if !c.Ephemeral {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
		defer stop()
	}
	errc := make(chan error, 2)
	servers := []*http.Server{}
	serve := func(l net.Listener, remote bool) {
		h := srv.Handler(remote)
		if remote {
			h = e2bSrv.Handler(h)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		servers = append(servers, hs)
		go func() {
			if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	serve(ul, false)
	if tl != nil {
		serve(tl, true)
	}
	workspaces := "tmpfs in each sandbox"
	if vols != nil {
		workspaces = vols.String()
	}
	log.Info("airlock serve", "socket", c.Socket, "listen", c.Listen, "data_dir", c.DataDir, "state_dir", c.StateDir, "workspaces", workspaces, "pid", os.Getpid())
	if err := m.Recover(ctx); err != nil {
		log.Error("recover", "err", err)
	}
	log.Info("ready", "sandboxes", m.CountByState())
	select {
	case <-ctx.Done():
	case err = <-errc:
		log.Error("serve", "err", err)
	}
	log.Info("shutting down")
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, hs := range servers {
		if hs.Shutdown(sctx) != nil {
			log.Warn("requests still in flight after the grace period; closing them")
			hs.Close()
		}
	}
	os.Remove(c.Socket)
	if c.Ephemeral {
		destroyAll(sctx, m, log)
	}
	m.Close(sctx, true)
	for _, b := range mc.Runtimes {
		if r, ok := b.(interface{ Release() }); ok {
			r.Release()
		}
	}
	log.Info("stopped")
	return err
}

// listenUnix listens on path with mode 0660. A socket file left by a dead
// daemon is replaced; a live daemon on it is an error.
func listenUnix(path string) (net.Listener, error) {
	rundir.For(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another daemon is listening on it", path)
		}
		os.Remove(path)
	}
	old := syscall.Umask(0o117)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l, nil
}

// destroyAll destroys every sandbox of an ephemeral daemon as it stops.
func destroyAll(ctx context.Context, m *manager.Manager, log *slog.Logger) {
	list, err := m.List(ctx, manager.ListOptions{Limit: 1000})
	if err != nil {
		log.Error("destroy sandboxes", "err", err)
		return
	}
	for _, sb := range list.Sandboxes {
		if err := m.Delete(ctx, sb.ID); err != nil {
			log.Error("destroy sandbox", "id", sb.ID, "err", err)
		}
	}
}
