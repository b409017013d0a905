#!/usr/bin/env bash
# Regenerates replication/transport/transportpb (transport.pb.go, transport_grpc.pb.go) from
# replication/transport/proto/flexkv/transport/v1/transport.proto. The file registers under its path below
# replication/transport/proto, flexkv/transport/v1/transport.proto, so that no
# other proto file of the same base name clashes with it at init.
# Needs protoc on PATH (apt-get install protobuf-compiler) and the pinned
# plugins, installed with:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# (into $(go env GOPATH)/bin, which this script puts on PATH).
set -euo pipefail

cd "$(dirname "$0")/../.."
PATH="$(go env GOPATH)/bin:$PATH"

for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
	command -v "$tool" >/dev/null || { echo "gen.sh: $tool not found on PATH" >&2; exit 1; }
done

protoc \
	--proto_path=replication/transport/proto \
	--go_out=. --go_opt=module=github.com/flexkv/flexkv \
	--go-grpc_out=. --go-grpc_opt=module=github.com/flexkv/flexkv \
	flexkv/transport/v1/transport.proto
