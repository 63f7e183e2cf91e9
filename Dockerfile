# One image for every bigtables process: docker run IMAGE scheduler|poller|worker|migrate|...
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /bigtables ./cmd/bigtables

FROM alpine:3.20
# ca-certificates for HTTPS input URLs; sh for `worker --exec`.
RUN apk add --no-cache ca-certificates && adduser -D -H bigtables
COPY --from=build /bigtables /usr/local/bin/bigtables
USER bigtables
ENTRYPOINT ["bigtables"]
CMD ["help"]
