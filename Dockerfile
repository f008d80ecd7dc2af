# deletion-cost-operator image: one static `deletion-cost` binary, its SBOM
# (/deletion-cost.cdx.json, CycloneDX) and a CA bundle on an empty base (no
# libc, shell or package manager), uid 65532.
#
#   docker build -t deletion-cost-operator:0.1.0 .
#
# Plain Dockerfile syntax (no BuildKit frontend), so podman and buildah parse
# it too. scripts/build-image.sh builds the same runtime stage without pulling
# anything: it runs the build stage's commands on the host, stages /rootfs into
# a build context and builds the last stage with `COPY rootfs/ /` in place of
# the COPY --from below. tests/deploy.rs checks this file; tests/image.rs
# checks the image the script builds.

FROM rust:1.95-slim-bookworm AS build
# cargo-auditable embeds the crates the binary is built from in it; python3
# turns that list into the SBOM (scripts/sbom.py)
RUN cargo install --locked cargo-auditable@0.7.7 \
    && apt-get update && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# crt-static links glibc into the binary (a static-pie: no interpreter, no
# shared libraries); it needs an explicit --target so that build scripts and
# proc-macros stay dynamic. The CA bundle comes from the image's ca-certificates.
ENV RUSTFLAGS="-C target-feature=+crt-static"
# the SBOM's date (no .git in the build context): pass the commit's
ARG SOURCE_DATE_EPOCH=0
RUN target="$(rustc -vV | sed -n 's/^host: //p')" \
    && cargo auditable build --release --locked --bin deletion-cost --target "$target" \
    && mkdir -p /rootfs/etc/ssl/certs \
    && cp "target/$target/release/deletion-cost" /rootfs/deletion-cost \
    && python3 scripts/sbom.py "target/$target/release/deletion-cost" /rootfs/deletion-cost.cdx.json \
    && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ca-certificates.crt

FROM scratch
# Cargo.toml's version (tests/deploy.rs keeps them equal); the script passes it.
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="deletion-cost-operator" \
      org.opencontainers.image.description="Kubernetes operator that sets pod-deletion-cost from a per-namespace policy" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /rootfs/ /
USER 65532:65532
EXPOSE 8080 8443
ENTRYPOINT ["/deletion-cost"]
CMD ["run"]
