// Package transportpb holds the protobuf messages and the gRPC service of
// the link between group leaders (DESIGN 4.1), generated from
// transport.proto by gen.sh. Package transport is its only user: it
// validates requests and speaks for the service.
package transportpb
