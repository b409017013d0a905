#!/usr/bin/env bash
# Regenerates kv.pb.go and kv_grpc.pb.go from kv.proto.
# Needs protoc on PATH and the pinned plugins, installed with:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# (into $(go env GOPATH)/bin, which this script puts on PATH).
set -euo pipefail

cd "$(dirname "$0")"
PATH="$(go env GOPATH)/bin:$PATH"

for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
	command -v "$tool" >/dev/null || { echo "gen.sh: $tool not found on PATH" >&2; exit 1; }
done

protoc \
	--proto_path=. \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	kv.proto
