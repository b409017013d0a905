// Package flexkvdb is a go-ycsb binding for FlexKV: it registers the
// database "flexkv" with go-ycsb (ycsb.RegisterDBCreator), so that a go-ycsb
// command line that links it in runs YCSB's workloads against a FlexKV
// cluster through the Go client (package client).
//
// # Keys and values
//
// One YCSB record is one FlexKV key: PREFIX TABLE "/" KEY, where PREFIX is
// the property flexkv.prefix (by default the start of the cluster's first
// partition that one group owns), so that every key of a table lands in one
// partition (DESIGN 6: partitions are key ranges). Its value holds the
// record's fields in a compact, versioned encoding (record.go). A read asks
// for one key; a scan reads the keys of [PREFIX TABLE "/" START, PREFIX
// TABLE "0"), the rest of the table in key order.
//
// An insert puts the whole record. An update that gives every field of the
// workload (fieldcount fields) puts the whole record too; one that gives
// fewer merges them into the stored record: a read, then a transaction that
// puts the merged record if the stored value is still the one read, both
// again when another update came between (at most updateAttemptsMax
// times). FlexKV's transactions are one-shot (package txn): the compare
// stands in for the read of an interactive transaction.
//
// # Missing records
//
// A read, or a partial update, of a record that does not exist is an error
// (ErrNotFound), as in go-ycsb's etcd binding, and go-ycsb counts it as a
// failed operation. go-ycsb v1.0.3's zipfian key chooser picks among
// recordcount+1 keys, one past the loaded ones (README.md, "The zipfian
// off-by-one"): load recordcount+1 records to keep every read valid.
package flexkvdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/txn"
)

// Name is the database name the binding registers with go-ycsb.
const Name = "flexkv"

// updateAttemptsMax bounds the read and compare-and-put rounds of one
// partial update: past it, the update fails (STYLE 4). Under a zipfian
// workload of 50 threads a hot record sees a handful of conflicts at most.
const updateAttemptsMax = 64

// ErrNotFound is matched by the error of a read, or a partial update, of a
// record that does not exist.
var ErrNotFound = errors.New("flexkvdb: record not found")

func init() {
	ycsb.RegisterDBCreator(Name, Creator{})
}

// Creator creates the binding's DB from go-ycsb's properties.
type Creator struct{}

// Create connects to the cluster the properties name.
func (Creator) Create(p *properties.Properties) (ycsb.DB, error) {
	o, err := ParseOptions(p)
	if err != nil {
		return nil, err
	}
	return Open(context.Background(), o)
}

// DB is a ycsb.DB over one FlexKV client, shared by go-ycsb's threads.
type DB struct {
	c    *client.Client
	opts Options
}

// Open connects to the cluster of o and checks that the keys of o.Table
// under o.Prefix lie in one partition.
func Open(ctx context.Context, o Options) (*DB, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c, err := client.New(ctx, o.Client)
	if err != nil {
		return nil, fmt.Errorf("flexkvdb: connecting to %v: %w", o.Client.Endpoints, err)
	}
	db := &DB{c: c, opts: o}
	if err := db.choosePrefix(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return db, nil
}

// choosePrefix sets the default prefix, and checks that the range of the
// table's keys lies in one partition.
func (db *DB) choosePrefix() error {
	parts := db.c.Topology().Partitions
	if db.opts.Prefix == nil {
		for _, p := range parts.Partitions() {
			if !p.Replicated {
				db.opts.Prefix = p.Start
				break
			}
		}
		if db.opts.Prefix == nil {
			return fmt.Errorf("flexkvdb: the cluster has no partition of one group: give property %s", PropPrefix)
		}
	}
	start, end := db.tableRange(db.opts.Table)
	p, err := parts.Lookup(start)
	if err != nil {
		return fmt.Errorf("flexkvdb: property %s=%q: table %s: %w", PropPrefix, db.opts.Prefix, db.opts.Table, err)
	}
	if len(p.End) > 0 && bytes.Compare(end, p.End) > 0 {
		return fmt.Errorf("flexkvdb: property %s=%q: the keys of table %s, [%q, %q), pass the end of partition %s",
			PropPrefix, db.opts.Prefix, db.opts.Table, start, end, p)
	}
	return nil
}

// Prefix returns the key prefix in use.
func (db *DB) Prefix() []byte { return db.opts.Prefix }

// Client returns the FlexKV client of db.
func (db *DB) Client() *client.Client { return db.c }

// recordKey returns the FlexKV key of a record.
func (db *DB) recordKey(table, key string) ([]byte, error) {
	if table != db.opts.Table {
		if err := checkTable(table); err != nil {
			return nil, fmt.Errorf("flexkvdb: %w", err)
		}
	}
	k := make([]byte, 0, len(db.opts.Prefix)+len(table)+1+len(key))
	k = append(k, db.opts.Prefix...)
	k = append(k, table...)
	k = append(k, '/')
	return append(k, key...), nil
}

// tableRange returns the range of the keys of table: [PREFIX TABLE "/",
// PREFIX TABLE "0"), '0' being the byte after '/'.
func (db *DB) tableRange(table string) (start, end []byte) {
	start = append(append(bytes.Clone(db.opts.Prefix), table...), '/')
	end = append(append(bytes.Clone(db.opts.Prefix), table...), '/'+1)
	return start, end
}

// Close closes the client.
func (db *DB) Close() error { return db.c.Close() }

// InitThread keeps no state per thread: the client is shared.
func (db *DB) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }

// CleanupThread does nothing (InitThread).
func (db *DB) CleanupThread(context.Context) {}

// get reads the value at k with the configured consistency.
func (db *DB) get(ctx context.Context, k []byte) ([]byte, bool, error) {
	if db.opts.Stale {
		return db.c.GetStale(ctx, k)
	}
	return db.c.Get(ctx, k)
}

// Read returns the fields of a record, only those of fields when it is not
// empty.
func (db *DB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	k, err := db.recordKey(table, key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, db.opts.Timeout)
	defer cancel()
	v, found, err := db.get(ctx, k)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, k)
	}
	return decodeRecord(v, fields)
}

// Scan returns up to count records from startKey on, in key order, within
// the table. It reads at the leader whatever flexkv.consistency says
// (client.Client.Scan: each page linearizable).
func (db *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	start, err := db.recordKey(table, startKey)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > txn.ScanLimitMax {
		return nil, fmt.Errorf("flexkvdb: scan of %d records: want 1..%d", count, txn.ScanLimitMax)
	}
	_, end := db.tableRange(table)
	ctx, cancel := context.WithTimeout(ctx, db.opts.Timeout)
	defer cancel()
	kvs, err := db.c.Scan(ctx, start, end, count)
	if err != nil {
		return nil, err
	}
	out := make([]map[string][]byte, 0, len(kvs))
	for _, kv := range kvs {
		r, err := decodeRecord(kv.Value, fields)
		if err != nil {
			return nil, fmt.Errorf("%w (key %q)", err, kv.Key)
		}
		out = append(out, r)
	}
	return out, nil
}

// Insert puts the whole record.
func (db *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	k, err := db.recordKey(table, key)
	if err != nil {
		return err
	}
	v, err := encodeRecord(values)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, db.opts.Timeout)
	defer cancel()
	return db.c.Put(ctx, k, v)
}

// Update writes the fields of values into the record: a put of the whole
// record when values has every field of the workload, else a merge into the
// stored record (see the package comment).
func (db *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	if len(values) >= db.opts.FieldCount {
		return db.Insert(ctx, table, key, values)
	}
	k, err := db.recordKey(table, key)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, db.opts.Timeout)
	defer cancel()
	for range updateAttemptsMax {
		old, found, err := db.c.Get(ctx, k)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: %q", ErrNotFound, k)
		}
		merged, err := mergeRecord(old, values)
		if err != nil {
			return fmt.Errorf("%w (key %q)", err, k)
		}
		res, err := db.c.Txn(ctx, &txn.Txn{
			If:   []txn.Compare{{Key: k, Cmp: txn.CmpEqual, Value: old}},
			Then: []txn.Op{{Kind: txn.OpPut, Key: k, Value: merged}},
		})
		if err != nil {
			return err
		}
		if res.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("flexkvdb: update of %q: the record changed under each of %d attempts", k, updateAttemptsMax)
}

// Delete removes the record.
func (db *DB) Delete(ctx context.Context, table, key string) error {
	k, err := db.recordKey(table, key)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, db.opts.Timeout)
	defer cancel()
	return db.c.Delete(ctx, k)
}

// The binding implements go-ycsb's DB; Creator its DBCreator.
var (
	_ ycsb.DB        = (*DB)(nil)
	_ ycsb.DBCreator = Creator{}
)
