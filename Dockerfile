# One image per binary, both from this file (no container engine runs on the
# development machines; this is for CI and users):
#   docker build --target agent -t ghcr.io/flotilla-dev/flotilla-agent:0.1.0 .
#   docker build --target scheduler -t ghcr.io/flotilla-dev/flotilla-scheduler:0.1.0 .
# Static binaries on distroless, as a non-root user; the chart runs them with
# a read-only root filesystem and every capability dropped.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY pkg/ pkg/
ARG VERSION=0.1.0
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/flotilla-agent ./cmd/agent && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/flotilla-scheduler ./cmd/scheduler

FROM gcr.io/distroless/static-debian12:nonroot AS agent
COPY --from=build /out/flotilla-agent /flotilla-agent
USER 65532:65532
ENTRYPOINT ["/flotilla-agent"]

FROM gcr.io/distroless/static-debian12:nonroot AS scheduler
COPY --from=build /out/flotilla-scheduler /flotilla-scheduler
USER 65532:65532
ENTRYPOINT ["/flotilla-scheduler"]
