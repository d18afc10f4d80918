# The few commands people need. Everything builds static (CGO_ENABLED=0).
export CGO_ENABLED := 0
GO ?= go

.PHONY: build install-runsc test unit e2e bench bench-serve bench-scale bench-e2b bench-egress bench-cache bench-review bench-record bench-procs serve fmt vet lint clean

# airlock embeds the sandbox init (cmd/airlock-init, internal/initbin): a
# small program that links only the sandbox code, started as every sandbox's
# PID 1. bin/airlock is the lean build (tag airlock_lean): it links neither
# the daemon nor its dependencies and embeds the complete program
# (internal/fullbin, itself embedding the init), which it executes for serve,
# mcp and doctor. All three get one random build id, so an airlock never
# starts another build's init. A plain `go build ./cmd/airlock` works too: the
# complete program without an embedded init (it re-executes itself, slower).
BUILD_ID := $(shell od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
VERSION := $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS := -X github.com/airlock-dev/airlock/internal/initbin.BuildID=$(BUILD_ID) -X main.version=$(VERSION)

# bin/airlock is linked to a scratch file and copied into place: the Go
# linker writes its output through a shared memory mapping, and a program
# the kernel holds in its page cache in that form started ~1 ms slower per
# `airlock run` here (CPU and wall, ~4%). The same bytes written with
# write(2), or read sequentially after a cache drop, did not; read back
# page by page by an exec's faults (after a reboot) they did, 1.2-1.9 ms
# (docs/performance.md).
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o internal/initbin/airlock-init ./cmd/airlock-init
	@# The runtime-free PID 1 of one-shot gVisor sandboxes has its own entry
	@# point (cmd/airlock-pid1); other architectures embed an empty file.
	if [ "$$($(GO) env GOOS)/$$($(GO) env GOARCH)" = linux/amd64 ]; then \
		$(GO) build -trimpath -ldflags '$(LDFLAGS) -E main.start' -o internal/initbin/airlock-pid1 ./cmd/airlock-pid1; \
	else : > internal/initbin/airlock-pid1; fi
	$(GO) build -trimpath -tags airlock_init -ldflags '$(LDFLAGS)' -o internal/fullbin/airlock-full ./cmd/airlock
	$(GO) build -trimpath -tags airlock_init,airlock_lean -ldflags '$(LDFLAGS)' -o bin/.airlock.link ./cmd/airlock
	cp bin/.airlock.link bin/.airlock.new && mv -f bin/.airlock.new bin/airlock && rm -f bin/.airlock.link

# gVisor's runsc at the pinned version, for `--runtime gvisor` and for the
# conformance table that `make test` runs on every installed backend.
install-runsc:
	scripts/install-runsc

# The test command README.md and .ci/run use: vet, unit tests, then the
# end-to-end probes against the real binary (as root they also re-run as the
# unprivileged user nobody).
test: vet
	$(GO) test -count=1 -p 1 -timeout 20m ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: files above need formatting'; exit 1; }
	$(GO) vet ./...
	@# The lean build's own files (tag airlock_lean), with empty stand-ins
	@# for the programs `make build` embeds.
	@tmp=$$(mktemp -d) && touch $$tmp/empty && \
	printf '{"Replace":{"%s":"%s","%s":"%s","%s":"%s"}}' "$(CURDIR)/internal/initbin/airlock-init" "$$tmp/empty" "$(CURDIR)/internal/initbin/airlock-pid1" "$$tmp/empty" "$(CURDIR)/internal/fullbin/airlock-full" "$$tmp/empty" > $$tmp/overlay.json && \
	$(GO) vet -tags airlock_init,airlock_lean -overlay $$tmp/overlay.json ./cmd/airlock; rc=$$?; rm -rf $$tmp; exit $$rc

bench: build
	$(GO) run ./cmd/airlock-bench -n 100

# The service: latencies through the SDK, throughput, memory per idle sandbox.
# The idle sandboxes get 64 MiB disks: the daemon reserves each sandbox's disk
# size on its volume store, and 200 of the default 1 GiB need 200 GiB free.
bench-serve: build
	$(GO) run ./cmd/airlock-bench serve -n 100 -idle 200 -idle-disk 64M

# airlock run, warm create -> first exec, exec round trip and memory per
# idle sandbox with 1, 10, 100 and 500 idle sandboxes in one daemon (root).
bench-scale: build
	$(GO) run ./cmd/airlock-bench scale -n 40 -levels 1,10,100,500

# Only the E2B compatibility rows of bench-serve (needs node and npm).
bench-e2b: build
	$(GO) run ./cmd/airlock-bench serve -e2b-only -e2b-n 30

# The egress gateway on loopback: throughput, added latency, new connections/s,
# direct vs through the gateway (no root, no airlock binary needed).
bench-egress:
	$(GO) run ./cmd/airlock-bench egress

# A go build in a fresh sandbox, without and with --cache go (median times).
bench-cache: build
	$(GO) run ./cmd/airlock-bench cache -n 5

# airlock run --review overhead, and review/apply of 10 changes in a
# 100k-file workspace (see cmd/airlock-bench/review.go).
bench-review: build
	$(GO) run ./cmd/airlock-bench review -n 30

# One more process inside a sandbox (a shell's fork+exec of /bin/true, timed
# inside): host, bwrap, native, gVisor with and without the filter, runsc do.
bench-procs: build
	$(GO) run ./cmd/airlock-bench procs -n 10

# airlock run without and with --record (as root): 500 execs, a warm go
# build, `true`.
bench-record: build
	$(GO) run ./cmd/airlock-bench record -n 10

# Run the daemon from the checkout (as root: /run/airlock/airlock.sock).
serve: build
	./bin/airlock serve

clean:
	rm -rf bin
