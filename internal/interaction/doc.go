// Package interaction is the one scripted test environment of the ordering
// layer, in the manner of etcd-io/raft's rafttest interaction environment: a
// cluster of groups, each a protocol core inside a rawnode.Node (the core over
// its reliable channels), joined by a network that a datadriven script
// controls link by link (delays, holds, deliveries, losses, duplicates), with
// every multicast, send and delivery recorded for multicast/check. The
// FlexCast scenarios of DESIGN 3.2, Skeen's scripts and the channel's run on
// it, so that one driver and one checker decide them all.
//
// It also holds the event queue (Queue) that the harnesses schedule on.
//
// The environment imports no core: each core package's tests describe their
// protocol (Protocol) with hooks into its unexported parts, and this
// package's own tests build all three through the registry (multicast/protocol).
package interaction
