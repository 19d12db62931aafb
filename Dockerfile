# One image per binary, both from this file (no container engine runs on the
# development machines; this is for CI and users):
#   docker build --target agent -t ghcr.io/flotilla-dev/flotilla-agent:0.1.0 .
#   docker build --target scheduler -t ghcr.io/flotilla-dev/flotilla-scheduler:0.1.0-k8s1.37 .
#   docker build --target scheduler --build-arg K8S_MINOR=1.35 -t ghcr.io/flotilla-dev/flotilla-scheduler:0.1.0-k8s1.35 .
# The scheduler is built per Kubernetes minor (the chart runs the tag
# -k8s<minor> of the cluster's): K8S_MINOR empty builds it against go.mod's
# (the current minor), an older one against hack/k8s/v<minor>.mod.
# Static binaries on distroless, as a non-root user; the chart runs them with
# a read-only root filesystem and every capability dropped.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY hack/k8s/ hack/k8s/
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY pkg/ pkg/
ARG VERSION=0.1.0
ARG K8S_MINOR=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/flotilla-agent ./cmd/agent && \
    CGO_ENABLED=0 go build ${K8S_MINOR:+-modfile=hack/k8s/v${K8S_MINOR}.mod} -trimpath -ldflags "-s -w" -o /out/flotilla-scheduler ./cmd/scheduler

FROM gcr.io/distroless/static-debian12:nonroot AS agent
COPY --from=build /out/flotilla-agent /flotilla-agent
USER 65532:65532
ENTRYPOINT ["/flotilla-agent"]

FROM gcr.io/distroless/static-debian12:nonroot AS scheduler
COPY --from=build /out/flotilla-scheduler /flotilla-scheduler
USER 65532:65532
ENTRYPOINT ["/flotilla-scheduler"]
