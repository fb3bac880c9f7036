# Wharf: build, test, lint, benchmark, run in dev mode.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Release targets: static binaries (no cgo), one per architecture.
PLATFORMS ?= linux/amd64 linux/arm64
# Tests share one Docker engine and a 2-core machine: keep package parallelism low.
# -parallel 4: the container-free e2e tests (t.Parallel) mostly wait on their
# own daemon, so four of them at once fit on two cores.
# TESTTIMEOUT is go test's per-package backstop against a hang; .ci/run
# scales it with the machine's load (the e2e package alone needs ~25 min on
# a busy 2-core machine).
TESTTIMEOUT ?= 25m
TESTFLAGS ?= -race -p 2 -parallel 4 -timeout $(TESTTIMEOUT)

.PHONY: build release image test lint bench fuzz dev clean

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/wharf ./cmd/wharf

# dist/wharf-linux-<arch> and dist/SHA256SUMS.
release:
	@set -e; mkdir -p dist; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo "build dist/wharf-$$os-$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/wharf-$$os-$$arch ./cmd/wharf; \
	done; cd dist && sha256sum wharf-* > SHA256SUMS

# The container image (packaging/Dockerfile) from the linux/amd64 release binary.
image: release
	docker build -f packaging/Dockerfile --build-arg BINARY=dist/wharf-linux-amd64 -t wharf:$(VERSION) .

# WHARF_REQUIRE_DOCKER=1: a test that needs Docker fails, never skips, without an engine.
test:
	WHARF_REQUIRE_DOCKER=1 $(GO) test $(TESTFLAGS) ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	staticcheck ./...
	@# go.mod and go.sum must be what "go mod tidy" makes of them.
	$(GO) mod tidy -diff

# Every fuzz target, each for a short bounded time (CI runs this too). Each package's
# instrumented test binary is built once (go test -c -fuzz) and runs its targets one
# after the other, from the package directory (where testdata/fuzz is) and with the
# corpus cache go test itself would use. Targets are found by name in the _test.go
# files: listing them with go test -list would build every package's tests again.
# A run that fails without writing a failing input is not a finding: Go 1.26's
# coordinator can report its own -fuzztime deadline as a failure when a worker is
# slow to stop (golang/go#75804, fixed in Go 1.27). It is run once more with the
# number of executions the first run reported instead of a time (a count has no
# deadline to race), and fails the build if it fails again. A new input is
# minimized for at most a second (the default, a minute, outlasts FUZZTIME and
# stalls a worker past the deadline).
FUZZTIME ?= 5s
FUZZBIN  ?= $(or $(TMPDIR),/tmp)/wharf-fuzz
fuzz:
	@set -e; mkdir -p $(FUZZBIN); cache=$$($(GO) env GOCACHE)/fuzz; \
	$(GO) list -f '{{.Dir}} {{.ImportPath}}' ./internal/... | while read -r dir pkg; do \
	  targets=$$(cat $$dir/*_test.go 2>/dev/null | sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p'); \
	  [ -n "$$targets" ] || continue; \
	  bin=$(FUZZBIN)/$$(basename $$pkg).test; \
	  $(GO) test -c -fuzz . -o $$bin $$pkg; \
	  for f in $$targets; do \
	    echo "fuzz $$pkg $$f"; \
	    run="$$bin -test.run ^$$ -test.fuzz ^$$f$$ -test.fuzzminimizetime 1s -test.parallel 2 -test.timeout 10m -test.fuzzcachedir $$cache/$$pkg"; \
	    out=$$(cd $$dir && $$run -test.fuzztime $(FUZZTIME) 2>&1) || { \
	      echo "$$out"; \
	      case "$$out" in *"Failing input written"*) exit 1 ;; esac; \
	      execs=$$(printf '%s\n' "$$out" | sed -n 's/.*execs: \([0-9]*\).*/\1/p' | tail -n 1); \
	      [ "$${execs:-0}" -ge 100 ] || execs=100; \
	      echo "fuzz $$pkg $$f: the engine failed without a failing input (golang/go#75804); once more, for $$execs executions"; \
	      (cd $$dir && $$run -test.fuzztime $${execs}x) || exit 1; \
	    }; \
	  done; \
	done; rm -rf $(FUZZBIN)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -p 1 -timeout 60m ./...

dev:
	$(GO) run ./cmd/wharf dev

clean:
	rm -rf bin dist .wharf-dev
