# syntax=docker/dockerfile:1
# One image with both binaries: autonomy (the service, the default entry
# point) and toolruntime (the example tool runtime). docker-compose.yml and
# envoy/k8s/pod.yaml run it once as each.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a code change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries: the runtime image has no libc.
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/autonomy ./cmd/autonomy && \
    go build -trimpath -ldflags="-s -w" -o /out/toolruntime ./cmd/toolruntime && \
    mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
# The GC settings envoy/k8s/pod.yaml runs with: collections a quarter as
# often (a fifth less CPU per call, docs/PERFORMANCE.md), the heap held
# softly under 230 MiB, a tenth under a 256 MiB container limit. Set
# GOMEMLIMIT to about 90 % of your container's limit.
ENV GOGC=400 GOMEMLIMIT=230MiB
COPY --from=build /out/autonomy /out/toolruntime /usr/local/bin/
# A named volume mounted at /data starts as a copy of this directory, owner
# included, so the non-root user can create the WAL in it.
COPY --from=build --chown=65532:65532 /out/data /data
EXPOSE 8181 9191 8080
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/autonomy"]
# Loopback defaults would be unreachable from outside the container.
CMD ["serve", "--http-addr", "0.0.0.0:8181", "--grpc-addr", "0.0.0.0:9191", "--data-dir", "/data"]
