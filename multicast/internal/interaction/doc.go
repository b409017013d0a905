// Package interaction is the scripted test environment of the ordering
// layer, in the manner of etcd-io/raft's rafttest interaction environment: a
// cluster of groups, each a protocol core inside a rawnode.Node (the core over
// its reliable channels), joined by a network that a datadriven script
// controls link by link (delays, holds, deliveries, losses, duplicates), with
// every multicast, send and delivery recorded for multicast/check. The
// FlexCast scenarios of DESIGN 3.2, the scripts of Skeen and of the tree
// protocol, and the channel's run on it, one driver and one checker for all.
//
// Run reads the scripts; each command has its handler, in its own file
// (handler_<command>.go), found by name in one table (handlers).
//
// It is not the only rig that drives the cores: the seeded simulator
// (multicast/sim) draws its schedules at random instead of reading them, the
// whole-database simulator (dbsim) steps whole replicas, and the Go tests of
// the cores, the channel and the node run on one simulated network
// (multicast/internal/simnet). The simulator schedules on this package's event queue
// (Queue), so that both order the events of one time the same way.
//
// The environment imports no core: each core package's tests describe their
// protocol (Protocol) with hooks into its unexported parts, and this
// package's own tests build all three through the registry (multicast/protocol).
package interaction
