# One image for every bigtables process:
#   docker run IMAGE scheduler|poller|worker|migrate|...
# docker-compose.yml builds it once, as bigtables:local, for all its services.
#
# Base images are pinned by the digest of their multi-platform index, as
# published on 2026-09-01 (golang) and 2026-09-18 (debian): update the tag and
# the digest together (`docker buildx imagetools inspect IMAGE:TAG`).
FROM golang:1.26.8-trixie@sha256:771f3162219f7a66bb6be3fea1ba31f418932946a99ad9eac26ffd555dfcf393 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static binary; the time zone database is embedded (time/tzdata in
# cmd/bigtables), so TZIDs resolve without the runtime image's tzdata.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/bigtables ./cmd/bigtables

# Debian 13 slim: a supported release (security updates to 2028, LTS to
# 2030) that has the /bin/sh `bigtables worker --exec CMD` runs CMD with.
# gcr.io/distroless/static has no shell, and its :debug variants are meant
# for debugging, not for running.
FROM debian:trixie-20260918-slim@sha256:a99cfc517144bc59b1978475ec53b46ecabec7e43635402ee5b77cc54cd1b20a
# CA certificates for https:// input URLs and rediss:// (TLS) Redis.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/bigtables /usr/local/bin/bigtables
# Health: GET /healthz on BIGTABLES_HTTP's port (scheduler, poller and worker
# serve it when BIGTABLES_HTTP is set, as docker-compose.yml does); healthy
# when it is unset (one-off commands).
COPY scripts/docker-healthcheck.sh /usr/local/bin/bigtables-healthcheck
HEALTHCHECK --interval=15s --timeout=10s --start-period=30s --retries=3 CMD ["bigtables-healthcheck"]
# A numeric non-root user (distroless's "nonroot" id): no passwd entry is
# needed, and runAsNonRoot policies can verify it.
USER 65532:65532
ENTRYPOINT ["bigtables"]
CMD ["help"]
