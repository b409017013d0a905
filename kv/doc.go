// Package kv is the application state of one group replica, kept in Pebble:
// user keys and values, the raft index of the last applied entry, and the
// results of recent transactions (DESIGN 5 and 6). The transaction executor
// (package executor) reads and writes it through a Batch per raft entry and
// commits each batch with the entry's index.
//
// # Durability and restart
//
// The raft log is the write-ahead log. Commit writes a batch's effects, the
// results it set and the new applied index in one Pebble batch, so they
// survive a crash together or not at all; with Options.NoSync it does not
// fsync. After a crash Pebble recovers a prefix of the commits (its WAL
// records are checksummed, and a torn tail is dropped), so AppliedIndex
// names exactly the last entry whose effects survived. With Options.NoWAL
// (replicas) Pebble keeps no WAL at all: a batch goes whole into one
// memtable (or, when large, is queued as one of its own), and memtables are
// flushed whole and in order, so a crash again leaves a prefix, as of the
// last flush. On restart raft replays its log;
// the replica hands the store only the entries above AppliedIndex, which
// the deterministic executor applies again to the same result. Nothing is
// applied twice, and nothing acknowledged is lost, because what raft
// acknowledged is in raft's own (synced) log. Sync is called before raft
// takes a snapshot and truncates its log: from then on the log no longer
// holds the entries below the snapshot, so the store must hold their effects
// durably. Without a WAL, Sync flushes the memtable, and so do Checkpoint,
// the end of RestoreSnapshot and Close. Options.NoSync=false makes every Commit durable by itself, for
// tools and tests that use the store without a raft log.
//
// # Row cache
//
// A Batch reads user keys through the store's row cache (rowcache.go)
// before Pebble: committed rows that batches read or wrote, in a
// direct-mapped table bounded in slots and bytes (Options.RowCacheSlots).
// It serves only what Pebble holds committed, plus a batch's own writes to
// that batch; a commit updates the rows it holds; RestoreSnapshot starts
// an empty one. The executor builds one batch at a time: a batch opened
// while another is open reads Pebble only. A View's point reads go through
// the cache too while its epoch is the view's own (no commit since the
// view was taken: view.go), and a point view (Store.PointView) takes no
// Pebble snapshot at all while the cache or Pebble's unchanged state
// serves it. Store.Get, Scan and Snapshots read Pebble.
//
// # Key layout
//
// Every Pebble key starts with one byte that names its kind, so user keys
// (opaque bytes) cannot collide with internal ones, and a scan of user keys
// is bounded to its prefix:
//
//	'd' user key          -> value
//	'm' "applied"         -> applied index (8 bytes, big endian)
//	'm' "results"         -> oldest and next result sequence (2 x 8 bytes)
//	'r' transaction id    -> result
//	's' sequence (8 B BE) -> transaction id
//	'x' aux key           -> aux value
//
// The aux namespace ('x') holds the transaction executor's own state (its
// queue of deliveries waiting for votes, the votes it stored, the sends of
// recent entries), under keys it chooses (Batch.PutAux, GetAux, ScanAux,
// DeleteAux, DeleteAuxRange). Aux writes commit with the entry's user
// writes and index, so the executor's state always matches the data;
// Store.CommitAux commits a batch of aux writes alone, without an index,
// for bookkeeping that belongs to no entry.
//
// Results are kept by transaction id so that a re-submitted transaction gets
// its first result. (The executor keeps the results of client sessions in
// the aux namespace instead, until each session acknowledges them; these
// are the others.) Each result takes the next sequence number at Commit,
// in the order of SetResult calls; when more than Options.ResultsMax are
// kept, the oldest are deleted in the same Pebble batch. Eviction depends
// only on the sequence of commits and ResultsMax, so replicas that apply
// the same entries with the same ResultsMax keep the same results.
//
// # Snapshots
//
// Snapshot captures the state at the current applied index; its WriteTo
// writes a deterministic stream (sorted user keys, then results by
// sequence, then sorted aux keys, then a CRC-32C), so two replicas at the same index write the
// same bytes. RestoreSnapshot replaces the whole state atomically. The
// store's directory holds one Pebble directory per generation (db-000001,
// db-000002, ...) and a marker file, ACTIVE, that names the live one.
// RestoreSnapshot:
//
//  1. creates an empty Pebble store in the next generation's directory;
//  2. loads the stream into it, checking every record and the checksum, and
//     syncs it;
//  3. writes the new generation's name to ACTIVE.tmp and syncs it;
//  4. renames ACTIVE.tmp over ACTIVE and syncs the directory (the commit
//     point);
//  5. switches to the new Pebble store and removes the old directory once
//     no Batch or Snapshot uses it.
//
// A crash before the rename of step 4 leaves ACTIVE naming the old
// directory: Open uses it and removes the new directory and ACTIVE.tmp. A
// crash after it leaves ACTIVE naming the new, synced directory: Open uses
// it and removes the old one. Either way the store holds the old state or
// the new one, never a mix. A failure before the commit point leaves the
// store as it was, in use; a failure to sync the directory after the rename
// leaves it unknown which marker a crash would keep, so the store refuses
// further use and must be reopened, which settles it.
package kv
