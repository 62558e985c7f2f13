# batchq — make help lists the targets.

SHELL := /bin/bash
GO    ?= go
GOBIN ?= $(shell $(GO) env GOPATH)/bin
SQLC_VERSION := v1.31.1
SQLC  := $(GOBIN)/sqlc
# How long each fuzz target runs in `make fuzz`.
FUZZTIME ?= 30s

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## play the fair-queue story (about a minute) against DATABASE_URL (default: postgres on 127.0.0.1:5432)
	$(GO) run ./cmd/batchq demo

.PHONY: test
test: ## run every test with the race detector (needs Postgres; see README)
	$(GO) test -race -count=1 -timeout 30m ./...

.PHONY: test-short
test-short: ## run the tests that need no database
	$(GO) test -short -race -count=1 ./...

.PHONY: build
build: ## build bin/batchq
	$(GO) build -o bin/batchq ./cmd/batchq

.PHONY: bench
bench: ## run the Go micro-benchmarks
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...

.PHONY: bench-system
bench-system: ## run the system benchmarks (batchq bench) against DATABASE_URL; see BENCHMARKS.md
	$(GO) build -o bin/batchq ./cmd/batchq
	@set -e; for s in drain flood scale quota enqueue; do bin/batchq bench $$s $(BENCH_ARGS); done

.PHONY: bench-river
bench-river: build ## build bin/batchq-river, River's side of `batchq bench --systems …,river` (a module of its own under bench/river)
	cd bench/river && $(GO) build -o ../../bin/batchq-river .

.PHONY: bench-cycle
bench-cycle: build ## what one claim of 100 and its completion cost the server, fair beside both baselines (needs pgbench; see BENCHMARKS.md)
	bench/cycle.sh $(CYCLE_ARGS)

.PHONY: generate
generate: $(SQLC) ## regenerate internal/dbsqlc from migrations/ and db/queries/
	$(SQLC) generate

.PHONY: verify
verify: $(SQLC) ## fail if a released migration changed, generated code is stale, code is unformatted, or go vet complains (bench/river too)
	$(GO) test -count=1 -run '^TestReleasedMigrationsAreUnchanged$$' ./migrations/
	$(SQLC) diff
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench/river && $(GO) vet .

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

$(SQLC):
	@echo "installing sqlc $(SQLC_VERSION) (built from source with cgo; takes a few minutes once)"
	CGO_ENABLED=1 $(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
