// Package rawnode composes a protocol core (multicast/flexcast, skeen or
// tree) with the reliable channel layer beneath it (multicast/channel,
// DESIGN 4): the unit of the ordering layer, what etcd's raft calls a
// RawNode. A Node takes a group's inputs (client requests, frames from
// other groups, ticks), steps the channel and the core, and hands out in
// Ready what to transmit and what was delivered, in delivery order. The
// application payloads of the layer above (transaction votes) ride the same
// channels beside the core's envelopes.
//
// Like the cores, a Node reads no clock, draws no random numbers, starts no
// goroutine and does no I/O (internal/lint checks it). The ordering
// simulator (multicast/sim) drives Nodes alone; the group state machine
// (package group) puts one inside every replica.
package rawnode
