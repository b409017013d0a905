#!/usr/bin/env bash
# Regenerates api/apipb (kv.pb.go, kv_grpc.pb.go, and the HTTP/JSON
# gateway kv.pb.gw.go) from api/proto/flexkv/kv/v1/kv.proto, the gateway's
# routes from kv_gateway.yaml beside it. The file registers under its path below
# api/proto, flexkv/kv/v1/kv.proto, so that a program linking FlexKV's client
# beside another gRPC API whose proto file is also called kv.proto starts.
# Needs protoc on PATH (apt-get install protobuf-compiler) and the pinned
# plugins, installed with:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
#   go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.34.0
# (into $(go env GOPATH)/bin, which this script puts on PATH).
set -euo pipefail

cd "$(dirname "$0")/.."
PATH="$(go env GOPATH)/bin:$PATH"

for tool in protoc protoc-gen-go protoc-gen-go-grpc protoc-gen-grpc-gateway; do
	command -v "$tool" >/dev/null || { echo "gen.sh: $tool not found on PATH" >&2; exit 1; }
done

protoc \
	--proto_path=api/proto \
	--go_out=. --go_opt=module=github.com/flexkv/flexkv \
	--go-grpc_out=. --go-grpc_opt=module=github.com/flexkv/flexkv \
	--grpc-gateway_out=. --grpc-gateway_opt=module=github.com/flexkv/flexkv \
	--grpc-gateway_opt=grpc_api_configuration=api/proto/flexkv/kv/v1/kv_gateway.yaml \
	flexkv/kv/v1/kv.proto
