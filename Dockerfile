# Builds the Switchyard gateway as a small static image.
#
# The image runs the embedded JetStream engine with its files on the /data
# volume; mount a volume there to keep the log across container restarts:
#   docker run -p 127.0.0.1:8080:8080 -v switchyard-data:/data switchyard/gateway
# Every setting can be changed by flag or SWITCHYARD_* environment variable
# (gateway --help); SWITCHYARD_ENGINE=nats with SWITCHYARD_NATS_URL uses an
# external NATS JetStream instead.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION (docker build --build-arg VERSION=v1.2.3) is what --version,
# /healthz and switchyard_build_info report; empty: the build information's.
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/gateway ./cmd/gateway
# The data directory, owned by the image's non-root user (distroless has no
# shell to make it in the final stage).
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /gateway
COPY --from=build --chown=nonroot:nonroot /out/data /data
ENV SWITCHYARD_ENGINE=embedded \
    SWITCHYARD_DATA_DIR=/data \
    SWITCHYARD_ADDR=:8080
VOLUME /data
EXPOSE 8080
USER nonroot:nonroot
# Distroless has no shell or curl: the gateway probes its own /readyz.
HEALTHCHECK --interval=10s --timeout=4s --start-period=20s --retries=3 \
    CMD ["/gateway", "--healthcheck", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/gateway"]
