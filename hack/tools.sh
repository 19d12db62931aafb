#!/usr/bin/env bash
# Builds every binary the project needs into ./bin, pinned, from the Go module
# proxy. A tool already built at the pinned version is skipped, so a warm run
# takes seconds. Nothing is downloaded except Go modules.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FLOTILLA_BIN:-$ROOT/bin}"
STAMPS="$BIN/.versions"
mkdir -p "$BIN" "$STAMPS"

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
KWOK_VERSION=v0.7.0
HELM_VERSION=v3.19.0
CONTROLLER_GEN_VERSION=v0.19.0
STATICCHECK_VERSION=v0.8.2
# Prometheus 3.9.1: its Go module is tagged v0.<major*100+minor>.<patch>.
PROMETHEUS_VERSION=v0.309.1

log() { echo "tools: $*" >&2; }

# fresh NAME VERSION: true when bin/NAME exists and was built at VERSION.
fresh() {
  [[ -x "$BIN/$1" && -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$2" ]]
}

stamp() { echo "$2" > "$STAMPS/$1"; }

k8s_ldflags() {
  local v="${K8S_VERSION#v}" major minor
  major="${v%%.*}"; minor="${v#*.}"; minor="${minor%%.*}"
  local flags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$K8S_VERSION"
    flags+=" -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean"
    flags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w$flags"
}

# Control-plane binaries come from hack/tools/go.mod, which pins k8s.io/kubernetes
# and maps its staging modules to the matching k8s.io/* releases.
build_pinned() {
  local name="$1" pkg="$2" version="$3" ldflags="$4"
  if fresh "$name" "$version"; then return; fi
  log "building $name $version"
  (cd "$ROOT/hack/tools" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/$name" "$pkg")
  stamp "$name" "$version"
}

# Standalone tools install from their own module at an exact version.
install_at() {
  local name="$1" pkg="$2" version="$3" ldflags="${4:-}"
  if fresh "$name" "$version"; then return; fi
  log "installing $name $version"
  GOBIN="$BIN" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w $ldflags" "$pkg@$version"
  stamp "$name" "$version"
}

# Tools whose go.mod has exclude or replace directives cannot be installed
# with "go install pkg@version": they build inside their own module, as
# downloaded into the module cache (read-only; nothing is written there).
build_in_module() {
  local name="$1" module="$2" pkg="$3" version="$4" ldflags="${5:-}" dir
  if fresh "$name" "$version"; then return; fi
  log "building $name $version"
  dir="$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$dir" ]] || { echo "tools: downloading $module@$version gave no directory" >&2; exit 1; }
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$BIN/$name" "$pkg")
  stamp "$name" "$version"
}

# The older minors a fleet may mix with the current one (make
# test-versions): their control planes build from hack/tools/v<minor>.mod
# into bin/<minor>/, and Flotilla's scheduler for each from
# hack/k8s/v<minor>.mod (make build-schedulers).
OLDER_K8S_VERSIONS="v1.35.4 v1.36.3"

# build_older VERSION: kube-apiserver and kube-controller-manager of an
# older minor into bin/<minor>/.
build_older() {
  local version="$1" minor dir name
  minor="${version#v}"; minor="${minor%.*}"
  dir="$BIN/$minor"
  mkdir -p "$dir/.versions"
  for name in kube-apiserver kube-controller-manager; do
    if [[ -x "$dir/$name" && "$(cat "$dir/.versions/$name" 2>/dev/null)" == "$version" ]]; then continue; fi
    log "building $name $version"
    (cd "$ROOT/hack/tools" && CGO_ENABLED=0 go build -modfile="v$minor.mod" -trimpath \
      -ldflags "$(K8S_VERSION=$version k8s_ldflags)" -o "$dir/$name" "k8s.io/kubernetes/cmd/$name")
    echo "$version" > "$dir/.versions/$name"
  done
}

# prometheus_release is PROMETHEUS_VERSION as Prometheus names it (v0.309.1: 3.9.1).
prometheus_release() {
  local v="${PROMETHEUS_VERSION#v0.}"
  local mm="${v%%.*}"
  echo "$((mm / 100)).$((mm % 100)).${v#*.}"
}

# Groups: "demo" is what `make demo` runs (the control planes, kwok and
# helm); "all", the default, adds what the tests and `make verify` use.
DEMO_TOOLS="etcd kube-apiserver kube-controller-manager kubectl kwok helm"
want="${*:-all}"
want="${want//all/$DEMO_TOOLS controller-gen promtool staticcheck}"
want="${want//demo/$DEMO_TOOLS}"
for tool in $want; do
  case "$tool" in
    etcd) build_pinned etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "-s -w" ;;
    kube-apiserver) build_pinned kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$K8S_VERSION" "$(k8s_ldflags)" ;;
    kube-controller-manager) build_pinned kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$K8S_VERSION" "$(k8s_ldflags)" ;;
    kubectl) build_pinned kubectl k8s.io/kubernetes/cmd/kubectl "$K8S_VERSION" "$(k8s_ldflags)" ;;
    kwok) install_at kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" ;;
    helm) install_at helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" ;;
    controller-gen) install_at controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "$CONTROLLER_GEN_VERSION" ;;
    staticcheck) install_at staticcheck honnef.co/go/tools/cmd/staticcheck "$STATICCHECK_VERSION" ;;
    versions) for v in $OLDER_K8S_VERSIONS; do build_older "$v"; done ;;
    promtool) build_in_module promtool github.com/prometheus/prometheus ./cmd/promtool "$PROMETHEUS_VERSION" "-X github.com/prometheus/common/version.Version=$(prometheus_release)" ;;
    *) echo "tools: unknown tool $tool" >&2; exit 2 ;;
  esac
done
