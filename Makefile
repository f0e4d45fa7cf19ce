# siding — the two commands are `make demo` and `make test`; both run `make setup` first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: setup setup-steps checks jars dist image image-tools demo test test-builds test-unit test-integration test-sdk-python test-sdk-go test-sdk-node test-sdk-java test-deploy lint proto bench clean

GO ?= go
GO_TOOLS := $(CURDIR)/.tools/go/bin
# Go compiles one at a time (the downloads do not wait): the SDK's, the collector's and the
# manifests' check share the standard library and their common modules (grpc, protobuf, x/net,
# x/text at the same versions, built with the same flags) through Go's build cache, and a
# package two `go` commands compile at the same moment is compiled twice. On an empty cache
# that is most of the set-up's CPU (docs/platform.md, "A fresh machine's set-up").
GO_ONE = mkdir -p $(CURDIR)/$(STAMPS) && flock $(CURDIR)/$(STAMPS)/.go-build.lock
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

# `make setup` runs its steps in parallel (SETUP_JOBS at a time; downloads, compilers and pip
# wait on different things), each step's output kept together. Two steps that share a tool's
# state run one after the other: apt (one lock; one update for both lists) and Maven (one local
# repository).
SETUP_JOBS ?= 6
SETUP_STAMPS := $(STAMPS)/venv $(STAMPS)/jars $(STAMPS)/tools $(STAMPS)/image-tools $(STAMPS)/go \
  $(STAMPS)/go-deploy $(STAMPS)/s3proxy $(STAMPS)/otelcol $(STAMPS)/sdk-node $(STAMPS)/sdk-java \
  $(STAMPS)/jvm-archive

setup:
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) --output-sync=target setup-steps

setup-steps: $(SETUP_STAMPS)

# requirements/runtime.txt installs the thin consumer SDK from ./sdk/python; for development both
# it and siding itself are then installed editable. The pinned packages come from a venv kept in
# the user's cache, one per lock and Python, hard-linked into .venv (requirements/venv.sh).
$(STAMPS)/venv: requirements/runtime.txt requirements/dev.txt requirements/venv.sh pyproject.toml sdk/python/pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11 or 3.12 (or run make PYTHON=/path/to/python3.12)"; exit 1; }
	requirements/venv.sh $(PYTHON) $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e ./sdk/python -e .
	@mkdir -p $(STAMPS) && touch $@

# The jars in the lock (src/siding/jars.lock.json) into .jars/, from Maven Central, verified by
# sha256. After editing a pom: `$(PY) -m siding.jvm lock` (mvn) rewrites the lock.
$(STAMPS)/jars: $(STAMPS)/venv src/siding/jars.lock.json src/siding/jarcache.py src/siding/jvm.py
	$(PY) -m siding.jvm fetch
	@mkdir -p $(STAMPS) && touch $@

jars: $(STAMPS)/jars

# The driver JVM's class-data archive (`siding jars archive`): every later Spark start maps
# Spark's classes instead of loading them, about 40 % of a start (docs/operations.md, "Faster
# starts"). It lives in the user's cache, keyed by Java and pyspark, so a fresh clone finds it.
$(STAMPS)/jvm-archive: $(STAMPS)/venv $(STAMPS)/jars src/siding/jvmarchive.py src/siding/pipeline/driver/archive.py
	$(VENV)/bin/siding jars archive
	@mkdir -p $(STAMPS) && touch $@

# The wheels and sdists of siding and of the thin Python SDK, into dist/ (ignored).
dist: $(STAMPS)/venv
	rm -rf dist
	$(PY) -m build --outdir dist sdk/python
	$(PY) -m build --outdir dist .

# The container image's tools, from Debian: podman and buildah (with runc: crun is refused on
# these machines) and debootstrap, which makes the image's base from this machine's Debian
# mirror. Their settings are the project's (deploy/image/containers.conf, through
# CONTAINERS_CONF), not /etc's. Where apt is not available the image test skips, except under
# CI=true. (Installed with the test tools, below: one apt-get update, one install.)
$(STAMPS)/image-tools: $(STAMPS)/apt
	@mkdir -p $(STAMPS) && touch $@

image-tools: $(STAMPS)/image-tools

# siding's image, localhost/siding:<version> (and :latest), from Debian packages only
# (deploy/image/; docs/deploy.md, "The image").
image: $(STAMPS)/venv $(STAMPS)/jars $(STAMPS)/image-tools
	PYTHON=$(CURDIR)/$(PY) deploy/image/build.sh

# Test tools from Debian: promtool checks the alert rules, headless Chromium renders the page.
# Where apt is not available the tests that need them skip, except under CI=true.
$(STAMPS)/tools: $(STAMPS)/apt
	@mkdir -p $(STAMPS) && touch $@

# What of both lists is missing, in one apt-get update and one install (as root).
APT_TEST_TOOLS := prometheus chromium
APT_IMAGE_TOOLS := podman buildah runc debootstrap uidmap
$(STAMPS)/apt:
	@need=""; \
	command -v promtool >/dev/null && command -v chromium >/dev/null || need="$(APT_TEST_TOOLS)"; \
	command -v podman >/dev/null && command -v buildah >/dev/null && command -v runc >/dev/null \
	  && command -v debootstrap >/dev/null || need="$$need $(APT_IMAGE_TOOLS)"; \
	if [ -z "$$need" ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$need >/dev/null; \
	else echo "note: install$$need (as root) for the full test suite and the image"; fi
	@mkdir -p $(STAMPS) && touch $@

# The Go SDK (sdk/go): its modules from the Go module proxy, and the protoc plugins that
# `make proto` runs (pinned; into .tools/go/bin, ignored).
$(STAMPS)/go: sdk/go/go.mod sdk/go/go.sum
	@command -v $(GO) >/dev/null || { echo "error: $(GO) not found: install Go 1.26+"; exit 1; }
	cd sdk/go && $(GO) mod download
	$(GO_ONE) sh -c 'GOBIN=$(GO_TOOLS) $(GO) install $(PROTOC_GEN_GO) && GOBIN=$(GO_TOOLS) $(GO) install $(PROTOC_GEN_GO_GRPC)'
	@mkdir -p $(STAMPS) && touch $@

# The Kubernetes manifests' check (deploy/kubernetes/check): k8s.io/api, kustomize's Go API and
# their modules, from the Go module proxy.
DEPLOY_CHECK := deploy/kubernetes/check
$(STAMPS)/go-deploy: $(DEPLOY_CHECK)/go.mod $(DEPLOY_CHECK)/go.sum
	@command -v $(GO) >/dev/null || { echo "error: $(GO) not found: install Go 1.26+"; exit 1; }
	cd $(DEPLOY_CHECK) && $(GO) mod download
	@mkdir -p $(STAMPS) && touch $@

# S3Proxy (Apache-2.0): the S3 server the object-storage tests start on loopback, its jars from
# Maven Central into .tools/s3proxy (docs/operations.md, "Checkpoints on object storage").
$(STAMPS)/s3proxy: jvm/s3proxy/pom.xml
	rm -rf .tools/s3proxy
	mvn -q -B -Dstyle.color=never -f jvm/s3proxy/pom.xml dependency:copy-dependencies \
	  -DoutputDirectory=$(CURDIR)/.tools/s3proxy
	@mkdir -p $(STAMPS) && touch $@

# The OpenTelemetry Collector the tracing tests export to (Apache-2.0): built from the
# collector's core Go modules only (the OTLP receiver and the OTLP/HTTP exporter; tests/otelcol)
# into .tools/otelcol, without debug information (docs/operations.md, "Tracing"). Not
# -trimpath: that flag is part of every package's cache key, the standard library's too, so the
# collector would share nothing with the other Go builds.
$(STAMPS)/otelcol: tests/otelcol/go.mod tests/otelcol/go.sum tests/otelcol/main.go
	@command -v $(GO) >/dev/null || { echo "error: $(GO) not found: install Go 1.26+"; exit 1; }
	cd tests/otelcol && $(GO) mod download
	cd tests/otelcol && $(GO_ONE) $(GO) build -ldflags='-s -w' -o $(CURDIR)/.tools/otelcol/siding-otelcol .
	@mkdir -p $(STAMPS) && touch $@

# The Node/TypeScript consumer SDK: its npm packages (package-lock.json) and its build (dist/,
# with the .d.ts files, and test/types.ts type-checked against them).
SDK_NODE_SOURCES := $(wildcard sdk/node/src/*.ts) sdk/node/test/types.ts sdk/node/tsconfig.json
$(STAMPS)/sdk-node: sdk/node/package.json sdk/node/package-lock.json $(SDK_NODE_SOURCES)
	cd sdk/node && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build
	@mkdir -p $(STAMPS) && touch $@

# The Java consumer SDK: Maven resolves everything once (plugins, protoc and its grpc plugin,
# the test provider), generates the contract's code, builds the jar and its runtime closure
# (target/lib). Only one pure test class runs here (-Dtest=ReplyTest, under a second): with no
# test at all, Maven would leave the test provider to be fetched by the first `make test`.
SDK_JAVA_SOURCES := $(wildcard sdk/java/src/main/java/dev/siding/consumer/*.java)
$(STAMPS)/sdk-java: sdk/java/pom.xml proto/siding/v1/consumer.proto $(SDK_JAVA_SOURCES) | $(STAMPS)/s3proxy
	mvn -q -B -Dstyle.color=never -f sdk/java/pom.xml package -Dtest=ReplyTest
	@mkdir -p $(STAMPS) && touch $@

test-sdk-node: $(STAMPS)/sdk-node
	cd sdk/node && node --test test/*.test.mjs

test-sdk-java: $(STAMPS)/sdk-java
	mvn -q -B -Dstyle.color=never -f sdk/java/pom.xml test

demo: setup
	$(VENV)/bin/siding demo

# Two pytest workers, each with its own broker and Spark session, one test file per worker at a
# time, the longest files first (tests/schedule.py; xdist's own order would put the one-test
# scenarios last): most e2e time is spent waiting on consumers, deadlines and JVM starts (README).
PYTEST_WORKERS ?= 2

# Every test's time goes to build/test-results.xml (JUnit XML): where the suite's minutes go.
# Setup, the image's build (started in the background) and the checks (lint, the SDKs' and the
# manifests' own tests) are one parallel make: each check starts once the steps it needs are
# done (the lint right after the venv), beside the other steps; then pytest.
test:
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) --output-sync=target setup-steps test-builds checks
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --junitxml=build/test-results.xml tests

checks: lint test-sdk-python test-sdk-go test-sdk-node test-sdk-java test-deploy

# What only the tests need and takes minutes to build on a fresh machine (the image: a cold build
# is about 9 minutes) starts in the background here, so it overlaps the lint, the SDKs' tests and
# the first e2e tests; a test that needs it runs the same build, which waits on the build's lock
# and then finds everything cached. Its output: build/test-builds.log.
#
# The build is named through BACKGROUND_BUILD, never as $(MAKE) in the recipe: a recipe line
# that names $(MAKE) is a recursive make to GNU make, which hands it the jobserver's pipe, and
# a make run with -j then waits at its end until every holder of that pipe has exited, so
# pytest would start only once the image was built (a bare machine's 4-minute cold build).
BACKGROUND_BUILD = $(MAKE) -s image
TEST_BUILDS_LOG = build/test-builds.log
test-builds: $(STAMPS)/venv $(STAMPS)/jars $(STAMPS)/image-tools
	@mkdir -p $(dir $(TEST_BUILDS_LOG))
	@(MAKEFLAGS= nohup $(BACKGROUND_BUILD) > $(TEST_BUILDS_LOG) 2>&1 &)

# The thin Python SDK's own tests (sdk/python/tests; its pyproject holds their settings).
test-sdk-python: $(STAMPS)/venv
	$(PY) -m pytest sdk/python/tests

# The Go SDK's own tests: vet, gofmt, and go test (real gRPC and HTTP on loopback).
test-sdk-go: $(STAMPS)/go
	cd sdk/go && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "error: gofmt"; exit 1; }
	cd sdk/go && $(GO_ONE) sh -c '$(GO) vet ./... && $(GO) test ./...'

# The Kubernetes manifests: kustomize renders each overlay and every object is decoded strictly
# into Kubernetes' API types, then checked against siding.toml (docs/deploy.md, "Kubernetes").
test-deploy: $(STAMPS)/go-deploy
	cd $(DEPLOY_CHECK) && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "error: gofmt"; exit 1; }
	cd $(DEPLOY_CHECK) && $(GO_ONE) sh -c '$(GO) vet ./... && $(GO) test ./...'

test-unit: setup
	$(PY) -m pytest tests/unit

test-integration: setup
	$(PY) -m pytest tests/integration tests/e2e

# mypy's cache lives outside the checkout, so a fresh clone finds it warm: one per set of what
# decides mypy's answers (its version and plugins in the dev lock, its settings in
# pyproject.toml, the Python); mypy itself checks every file against it by hash and redoes
# what changed. Caches of other keys unused for a week are removed.
CACHE_HOME := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/siding
MYPY_KEY := $(shell cat requirements/dev.txt pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)-$(notdir $(PYTHON))
MYPY_CACHE := $(CACHE_HOME)/mypy-$(MYPY_KEY)

lint: $(STAMPS)/venv
	$(VENV)/bin/ruff check src tests bench sdk/python deploy/image
	$(VENV)/bin/ruff format --check src tests bench sdk/python deploy/image
	@mkdir -p $(CACHE_HOME) && find $(CACHE_HOME) -maxdepth 1 -name 'mypy-*' \
	  ! -name 'mypy-$(MYPY_KEY)' -mtime +7 -exec rm -rf {} +
	MYPY_CACHE_DIR=$(MYPY_CACHE) $(VENV)/bin/mypy src tests bench sdk/python/src sdk/python/tests \
	  sdk/python/examples deploy/image
	$(VENV)/bin/lint-imports

proto: $(STAMPS)/venv $(STAMPS)/go
	$(PY) -m siding.devkit.protogen

bench: setup
	$(PY) -m bench.run

clean:
	rm -rf $(STAMPS) .jars dist $(VENV) .tools sdk/node/node_modules sdk/node/dist sdk/java/target
