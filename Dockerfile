# syntax=docker/dockerfile:1
# Heddle's container image: the `heddle` server and the `heddlectl` operator CLI on a distroless, non-root base.
# The chart's ingester preStop hook runs `/usr/local/bin/heddlectl prepare-shutdown` (the base has no shell and
# no curl). Build from the repository root:
#
#   docker build -t heddle:0.1.0 .
#
# The binaries link only glibc and libgcc (protoc is vendored; S3 over HTTPS uses rustls, which reads the CA
# roots the distroless base ships in /etc/ssl/certs), so the distroless `cc` base is enough; the image runs as uid/gid 65532 and needs no writable root filesystem (the chart mounts the
# data volume at /data and an emptyDir at /tmp).

ARG RUST_VERSION=1.95.0

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eux; \
    cargo build --release --locked -p heddle -p heddlectl; \
    install -D -m 0755 target/release/heddle /out/heddle; \
    install -D -m 0755 target/release/heddlectl /out/heddlectl; \
    /out/heddle --help >/dev/null; \
    /out/heddlectl --help >/dev/null

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
WORKDIR /data
# HTTP (remote write/read, /ready, /metrics), gRPC (ingesters, admin), gossip.
EXPOSE 8080 9095 7946/udp
ENTRYPOINT ["/usr/local/bin/heddle"]
