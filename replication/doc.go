// Package replication is the shell that turns each group into a
// fault-tolerant process (DESIGN 5): a hashicorp/raft group of replicas
// whose log holds the group's inputs (client requests, frame batches from
// other groups, ticks). Its raft FSM hands the committed entries, in log
// order, to the group's pure state machine (package group), persists and
// restores its snapshots with the executor's state, and carries out what
// it returns: only the leader transmits, over the transport between group
// leaders; every replica executes the deliveries.
//
// It is the only package that imports hashicorp/raft (internal/lint checks
// it): the rest of the tree sees raft through Role, ErrShutdown and
// StreamLayer.
package replication
