// Package replication is the shell that turns each group into a
// fault-tolerant process (DESIGN 5): a hashicorp/raft group of replicas
// whose log holds the group's inputs (client requests, frame batches from
// other groups, ticks). Its raft FSM hands the committed entries, in log
// order, to the group's pure state machine (package group), persists and
// restores its snapshots with the executor's state, and carries out what
// it returns: only the leader transmits, over the transport between group
// leaders; every replica executes the deliveries.
//
// It and its sub-package raftstore, which keeps raft's log and stable store
// in Pebble, are the only packages that import hashicorp/raft (internal/lint
// checks it): the rest of the tree sees raft through Role, ErrShutdown and
// StreamLayer. The executor it drives is the group's contract,
// group.Executor: the shell snapshots and restores it through that alone.
package replication
