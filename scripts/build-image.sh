#!/usr/bin/env bash
# Builds the operator's runtime image without pulling anything:
#   1. a static release build of `deletion-cost` on this machine (the
#      Dockerfile's build stage, run on the host), with `cargo auditable`:
#      the binary carries the list of crates it was built from;
#   2. the image's SBOM (CycloneDX JSON) made from that list
#      (scripts/sbom.py), the binary, the SBOM and the host's CA bundle
#      staged into a build context,
#   3. the Dockerfile's last stage (FROM scratch) built by podman from it.
# Installs podman and python3 (Debian/Ubuntu apt-get) and cargo-auditable
# (cargo install) when they are missing. Logs go to stderr; the last line of
# stdout is the image name. The SBOM is /deletion-cost.cdx.json in the image
# and, beside it, IMAGE_STORE/deletion-cost-operator-VERSION.cdx.json (and
# FILE.cdx.json, .tar dropped, with --output-archive FILE).
#
#   scripts/build-image.sh [--output-archive FILE]
#
#   --output-archive FILE  also write a docker-archive of the image, tagged
#                          docker.io/library/deletion-cost-operator:VERSION so
#                          that `docker load`, `podman load` and
#                          `kind load image-archive` all know it as
#                          deletion-cost-operator:VERSION.
#
# Environment: IMAGE_STORE, where podman keeps the image (default: target/image
# as root, ~/.local/share/deletion-cost-operator/image otherwise; made
# absolute before podman records it); use it with
# `podman --root $IMAGE_STORE/storage --runroot $IMAGE_STORE/run
# --storage-driver vfs`, e.g. to push, with IMAGE_STORE the absolute path the
# build logs; CARGO_TARGET_DIR as for cargo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> %s\n' "$*" >&2; }
die() {
    printf 'build-image: FAILED: %s\n' "$*" >&2
    exit 1
}

archive=""
while [ $# -gt 0 ]; do
    case "$1" in
        --output-archive)
            [ $# -ge 2 ] || die "--output-archive needs a file name"
            archive="$2"
            shift 2
            ;;
        --output-archive=*)
            archive="${1#*=}"
            shift
            ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
            exit 0
            ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

# apt_install: Debian packages, quietly and minimally (scripts/apt.sh).
# shellcheck source=scripts/apt.sh
. scripts/apt.sh
install_package() {
    log "installing $* (apt-get)"
    apt_install "$@" || die "apt-get install $* failed"
}

# The package's name and version from Cargo.toml ([package], or the
# workspace's [workspace.package] the crates share the version from).
package_field() {
    awk -F'"' -v key="$1" '/^\[/ { p = ($0 == "[package]" || $0 == "[workspace.package]") } p && $1 ~ "^" key " *= *$" { print $2; exit }' Cargo.toml
}
name="$(package_field name)"
version="$(package_field version)"
[ -n "$name" ] && [ -n "$version" ] || die "cannot read the package name and version from Cargo.toml"
image="$name:$version"

command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust stable (rustup) first"
command -v podman >/dev/null 2>&1 || install_package podman
command -v podman >/dev/null 2>&1 || die "podman is still missing after installing it"
command -v python3 >/dev/null 2>&1 || install_package python3
command -v python3 >/dev/null 2>&1 || die "python3 is still missing after installing it"
# cargo-auditable embeds the dependency list (one pinned version: the
# section it writes is what tests/image.rs reads)
CARGO_AUDITABLE_VERSION=0.7.7
if ! command -v cargo-auditable >/dev/null 2>&1; then
    log "installing cargo-auditable $CARGO_AUDITABLE_VERSION (cargo install)"
    cargo install --locked --quiet "cargo-auditable@$CARGO_AUDITABLE_VERSION" >&2 ||
        die "cargo install cargo-auditable failed"
fi
command -v cargo-auditable >/dev/null 2>&1 ||
    die "cargo-auditable is not on PATH after installing it (is ~/.cargo/bin on PATH?)"
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || install_package ca-certificates
[ -s "$ca_bundle" ] || die "no CA bundle at $ca_bundle"

# 1. The build stage's commands (keep them equal to the Dockerfile's RUN).
target="$(rustc -vV | sed -n 's/^host: //p')"
case "$target" in
    *-linux-gnu | *-linux-musl) ;;
    *) die "host $target: the image needs a Linux build host (x86_64/aarch64 -linux-gnu)" ;;
esac
log "static release build of deletion-cost for $target (cargo auditable)"
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static"
cargo auditable build --release --locked --bin deletion-cost --target "$target" ||
    die "cargo auditable build --release failed"
binary="${CARGO_TARGET_DIR:-target}/$target/release/deletion-cost"
[ -x "$binary" ] || die "no binary at $binary after the build"
# Reproducible: the image's dates (and the SBOM's) are the last commit's.
commit_time="$(git log -1 --format=%ct 2>/dev/null || true)"

# 2. The build context: rootfs/ as the build stage leaves /rootfs, and the
#    Dockerfile's last stage with its one COPY --from=build taken from rootfs/.
if [ -n "${IMAGE_STORE:-}" ]; then
    store="$IMAGE_STORE"
elif [ "$(id -u)" = 0 ]; then
    store="${CARGO_TARGET_DIR:-target}/image"
else
    # rootless podman owns its files through subuids: keep them out of target/
    store="${XDG_DATA_HOME:-$HOME/.local/share}/deletion-cost-operator/image"
fi
# Absolute: podman records the store's path in its database and refuses the
# same store under another spelling ("database configuration mismatch"), so
# `podman --root $IMAGE_STORE/storage ...` with an absolute path (from any
# directory) must name the store exactly as the build did.
mkdir -p "$store"
store="$(cd "$store" && pwd)"
context="$store/context"
rm -rf "$context"
mkdir -p "$context/rootfs/etc/ssl/certs"
install -m 0755 "$binary" "$context/rootfs/deletion-cost"
install -m 0644 "$ca_bundle" "$context/rootfs/etc/ssl/certs/ca-certificates.crt"
python3 scripts/sbom.py "$binary" "$context/rootfs/deletion-cost.cdx.json" \
    ${commit_time:+--timestamp "$commit_time"} || die "scripts/sbom.py failed"
chmod 0644 "$context/rootfs/deletion-cost.cdx.json"

last_from="$(grep -n '^FROM ' Dockerfile | tail -n 1 | cut -d: -f1)"
[ -n "$last_from" ] || die "no FROM in the Dockerfile"
tail -n +"$last_from" Dockerfile |
    sed 's|^COPY --from=build /rootfs/ /$|COPY rootfs/ /|' >"$context/Containerfile"
if [ "$(head -n 1 "$context/Containerfile")" != "FROM scratch" ] ||
    [ "$(grep -c '^COPY rootfs/ /$' "$context/Containerfile")" != 1 ] ||
    grep -q -- '--from=' "$context/Containerfile"; then
    die "the Dockerfile's last stage must be FROM scratch with one COPY --from=build /rootfs/ / (see tests/deploy.rs)"
fi

# 3. podman, its own storage (vfs: no overlay mounts, works in containers).
podman=(podman --root "$store/storage" --runroot "$store/run" --storage-driver vfs)
# A store an earlier version of this script made under a relative path is
# refused under the absolute one; it holds only earlier builds: start afresh.
if ! mismatch="$("${podman[@]}" info 2>&1 >/dev/null)" &&
    [[ "$mismatch" == *"database configuration mismatch"* ]]; then
    log "the image store $store was made under a relative path (older build-image.sh): starting it afresh"
    rm -rf "$store/storage" "$store/run"
fi
build_args=(--pull=never --layers=false --build-arg "VERSION=$version"
    -t "localhost/$image" -t "docker.io/library/$image")
if [ -n "$commit_time" ]; then
    build_args+=(--timestamp "$commit_time")
fi
# org.opencontainers.image.source: the origin remote, when it is a public URL.
if origin="$(git remote get-url origin 2>/dev/null)" && [[ "$origin" == https://* ]]; then
    origin="${origin#https://}"
    origin="https://${origin#*@}"
    build_args+=(--label "org.opencontainers.image.source=${origin%.git}")
fi
log "podman build $image (FROM scratch, nothing pulled)"
"${podman[@]}" build "${build_args[@]}" -f "$context/Containerfile" "$context" >&2 ||
    die "podman build failed"
# the previous build, untagged by this one
"${podman[@]}" image prune -f >/dev/null 2>&1 || true

if [ -n "$archive" ]; then
    mkdir -p "$(dirname "$archive")"
    rm -f "$archive"
    "${podman[@]}" save --format docker-archive -o "$archive" "docker.io/library/$image" >&2 ||
        die "podman save to $archive failed"
    log "wrote $archive ($(du -h "$archive" | cut -f1))"
fi
# the SBOM beside the image: in the store, and beside the archive
sbom="$store/$name-$version.cdx.json"
cp "$context/rootfs/deletion-cost.cdx.json" "$sbom"
if [ -n "$archive" ]; then
    cp "$sbom" "${archive%.tar}.cdx.json"
    log "wrote ${archive%.tar}.cdx.json (the image's SBOM)"
fi
log "the image's SBOM: $sbom (and /deletion-cost.cdx.json in the image)"
size="$("${podman[@]}" image inspect --format '{{.Size}}' "localhost/$image")" ||
    die "the built image $image is not in the store"
log "built $image: $((size / 1000000)) MB, in the store IMAGE_STORE=$store"
echo "$image"
