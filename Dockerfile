# syntax=docker/dockerfile:1
# deletion-cost-operator image: a release build of `deletion-cost` on a
# distroless runtime (no shell, no package manager, non-root).
#
#   docker build -t deletion-cost-operator:0.1.0 .
#
# The build stage runs the project's release build exactly:
#   cargo build --release --locked --bin deletion-cost
# (tests/deploy.rs checks this file against it.)

# Bookworm, to match the glibc of the distroless cc-debian12 runtime.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# Registry cache between builds; the binary itself stays in the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    cargo build --release --locked --bin deletion-cost

# glibc + libgcc + CA certificates, nothing else; runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/deletion-cost /usr/local/bin/deletion-cost
USER 65532:65532
EXPOSE 8080 8443
ENTRYPOINT ["/usr/local/bin/deletion-cost"]
CMD ["run"]
