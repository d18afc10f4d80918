# The few commands people need. Everything builds static (CGO_ENABLED=0).
export CGO_ENABLED := 0
GO ?= go

.PHONY: build test unit e2e bench bench-serve bench-egress serve fmt vet lint clean

build:
	$(GO) build -trimpath -o bin/airlock ./cmd/airlock

# The test command README.md and .ci/run use: vet, unit tests, then the
# end-to-end probes against the real binary (as root they also re-run as the
# unprivileged user nobody).
test: vet
	$(GO) test -count=1 -p 1 -timeout 20m ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: files above need formatting'; exit 1; }
	$(GO) vet ./...

bench: build
	$(GO) run ./cmd/airlock-bench -n 100

# The service: latencies through the SDK, throughput, memory per idle sandbox.
bench-serve: build
	$(GO) run ./cmd/airlock-bench serve -n 100 -idle 200

# The egress gateway on loopback: throughput, added latency, new connections/s,
# direct vs through the gateway (no root, no airlock binary needed).
bench-egress:
	$(GO) run ./cmd/airlock-bench egress

# Run the daemon from the checkout (as root: /run/airlock/airlock.sock).
serve: build
	./bin/airlock serve

clean:
	rm -rf bin
