// Package group is the replicated state machine of one group replica (DESIGN
// 1, 4, 5): everything a replica computes from its group's raft log, and
// nothing else. The replication shell (package replication) hands it the
// committed entries in log order and carries out what it returns; the
// whole-database simulator (package dbsim) drives the same code with no raft.
//
// Layers, bottom up:
//   - State: a rawnode.Node (package multicast/rawnode: a protocol core
//     over its reliable channels, and the application payloads, votes, that
//     ride the same channels), the log-entry codec (client request, several client
//     requests, inbound batch, tick, session open: EncodeRequest,
//     EncodeRequests, EncodeInbound, EncodeTick, EncodeSession) and the
//     client sessions that admit each request once and expire by log time
//     (session.go);
//   - Machine: a State and the Executor that runs its deliveries, joined by
//     the replay rule (Machine.Apply): an entry the executor already ran
//     before a restart is not run again, but its sends are queued again;
//     and by the restore rule (Machine.Snapshot, Machine.Restore): a
//     snapshot carries both states, and restores the executor's only if
//     the executor is behind it. Executor (executor.go) is the one contract
//     between a group replica and what executes its deliveries: package
//     executor implements it, and the shell snapshots and restores it
//     through the Machine alone.
//
// Like the protocol cores, the package reads no clock, draws no random
// numbers, starts no goroutine and does no I/O (internal/lint checks it):
// the same entries at the same indexes give the same outputs and the same
// snapshot on every replica. The Executor is the one door to storage, and it
// is the caller's.
package group
