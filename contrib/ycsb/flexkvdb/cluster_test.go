package flexkvdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magiconair/properties"
	ycsbclient "github.com/pingcap/go-ycsb/pkg/client"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/ycsb"

	_ "github.com/pingcap/go-ycsb/pkg/workload" // workload "core"

	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/partition"
)

// freeAddrs returns n loopback addresses free at the time of the call.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// startCluster starts one group of three replicas with mutual TLS (the
// default, DESIGN 13), owning partitions "a/".."b/", "ycsb/".."ycsb0" and
// two that split the keys of table usertable under the prefix "c/".
func startCluster(t *testing.T) *cluster.Local {
	t.Helper()
	addrs := freeAddrs(t, 6)
	cfg := &partition.ClusterConfig{Protocol: "flexcast", Overlay: []string{"g1"}}
	g := partition.GroupConfig{Name: "g1"}
	for i := range 3 {
		g.Replicas = append(g.Replicas, partition.ReplicaConfig{ID: fmt.Sprintf("r%d", i+1), Raft: addrs[2*i], GRPC: addrs[2*i+1]})
	}
	cfg.Groups = []partition.GroupConfig{g}
	cfg.Partitions = []partition.PartitionConfig{
		{Name: "pa", Start: "a/", End: "b/", Group: "g1"},
		{Name: "pc", Start: "c/", End: "c/usertable/m", Group: "g1"},
		{Name: "pd", Start: "c/usertable/m", End: "d/", Group: "g1"},
		{Name: "py", Start: "ycsb/", End: "ycsb0", Group: "g1"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := cluster.Start(cluster.Config{Cluster: cfg, Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// checkingDB is a ycsb.DB that checks every read against the writes before
// it: with go-ycsb's dataintegrity, a field of a record is always written
// with the same value, so that the check holds whatever the order of
// concurrent writes.
type checkingDB struct {
	ycsb.DB
	mu      sync.Mutex
	written map[string]map[string][]byte
	reads   int
	errs    []error
}

func (c *checkingDB) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *checkingDB) note(key string, values map[string][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.written[key]
	if rec == nil {
		rec = map[string][]byte{}
		c.written[key] = rec
	}
	for f, v := range values {
		if old, ok := rec[f]; ok && !bytes.Equal(old, v) {
			c.errs = append(c.errs, fmt.Errorf("%s.%s written as %q and %q: the workload is not deterministic", key, f, old, v))
		}
		rec[f] = bytes.Clone(v)
	}
}

func (c *checkingDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	err := c.DB.Insert(ctx, table, key, values)
	if err != nil {
		c.fail(fmt.Errorf("insert %s: %w", key, err))
		return err
	}
	c.note(key, values)
	return nil
}

func (c *checkingDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	err := c.DB.Update(ctx, table, key, values)
	if err != nil {
		c.fail(fmt.Errorf("update %s: %w", key, err))
		return err
	}
	c.note(key, values)
	return nil
}

func (c *checkingDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	got, err := c.DB.Read(ctx, table, key, fields)
	if err != nil {
		c.fail(fmt.Errorf("read %s: %w", key, err))
		return got, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	want := c.written[key]
	if len(fields) > 0 {
		want = maps.Collect(func(yield func(string, []byte) bool) {
			for _, f := range fields {
				if v, ok := c.written[key][f]; ok && !yield(f, v) {
					return
				}
			}
		})
	}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		c.errs = append(c.errs, fmt.Errorf("read %s %v: got %d fields %v, want %d %v", key, fields, len(got), got, len(want), want))
	}
	return got, nil
}

// runWorkload runs go-ycsb's core workload with the properties p against
// db, as go-ycsb-flexkv does.
func runWorkload(t *testing.T, p *properties.Properties, db ycsb.DB) {
	t.Helper()
	measurement.InitMeasure(p)
	w, err := ycsb.GetWorkloadCreator("core").Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ycsbclient.NewClient(p, w, ycsbclient.DbWrapper{DB: db}).Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("workload: %v", ctx.Err())
	}
}

// TestWorkloadA loads records and runs a short workload A (half reads, half
// updates of one field, zipfian) through the binding on a cluster with
// TLS, checking that every read returns what was written.
func TestWorkloadA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	l := startCluster(t)
	const records = 300
	base := []string{
		PropEndpoints, strings.Join(l.Endpoints(), ","), PropCerts, l.CertsDir(), PropPrefix, "ycsb/",
		"workload", "core", "threadcount", "8", "fieldcount", "4", "fieldlength", "16",
		"dataintegrity", "true", "fieldlengthdistribution", "constant",
		"readallfields", "true", "writeallfields", "false",
		"readproportion", "0.5", "updateproportion", "0.5", "scanproportion", "0", "insertproportion", "0",
		"requestdistribution", "zipfian", "measurement.interval", "3600", "silence", "true",
	}
	// Load one record more than the run's recordcount: go-ycsb's zipfian
	// chooser picks among recordcount+1 keys (README.md).
	load := props(append(base, "recordcount", fmt.Sprint(records+1), "dotransactions", "false")...)
	o, err := ParseOptions(load)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	db := &checkingDB{DB: inner, written: map[string]map[string][]byte{}}
	runWorkload(t, load, db)
	if len(db.errs) > 0 || len(db.written) != records+1 {
		t.Fatalf("load: %d records written, want %d; errors %v", len(db.written), records+1, db.errs)
	}
	run := props(append(base, "recordcount", fmt.Sprint(records), "operationcount", "1500", "dotransactions", "true")...)
	runWorkload(t, run, db)
	if len(db.errs) > 0 {
		t.Fatalf("run: %d errors, the first: %v", len(db.errs), db.errs[0])
	}
	if db.reads < 500 {
		t.Fatalf("run: %d reads checked, want most of 750", db.reads)
	}
}

// TestOperations runs each operation of the binding once, through go-ycsb's
// creator, on a cluster with TLS.
func TestOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	l := startCluster(t)
	ctx := context.Background()
	p := props(PropEndpoints, strings.Join(l.Endpoints(), ","), PropCerts, l.CertsDir(), "fieldcount", "3")
	ydb, err := ycsb.GetDBCreator(Name).Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ydb.Close()
	db := ydb.(*DB)
	if string(db.Prefix()) != "a/" {
		t.Fatalf("default prefix %q, want the first partition's a/", db.Prefix())
	}
	rec := map[string][]byte{"field0": []byte("zero"), "field1": []byte("one"), "field2": []byte("two")}
	for i := range 5 {
		if err := db.Insert(ctx, "usertable", fmt.Sprintf("user%d", i), rec); err != nil {
			t.Fatal(err)
		}
	}
	// A partial update merges; a whole one replaces.
	if err := db.Update(ctx, "usertable", "user1", map[string][]byte{"field1": []byte("ONE")}); err != nil {
		t.Fatal(err)
	}
	got, err := db.Read(ctx, "usertable", "user1", nil)
	want := map[string][]byte{"field0": []byte("zero"), "field1": []byte("ONE"), "field2": []byte("two")}
	if err != nil || !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("read after update: %v, %v; want %v", got, err, want)
	}
	if got, err = db.Read(ctx, "usertable", "user1", []string{"field2"}); err != nil || len(got) != 1 || string(got["field2"]) != "two" {
		t.Fatalf("read of field2: %v, %v", got, err)
	}
	// The raw value is the record encoding under PREFIX TABLE "/" KEY.
	raw, found, err := db.Client().Get(ctx, []byte("a/usertable/user1"))
	if err != nil || !found || raw[0] != recordVersion {
		t.Fatalf("raw get: %x %v %v", raw, found, err)
	}
	recs, err := db.Scan(ctx, "usertable", "user2", 10, []string{"field0"})
	if err != nil || len(recs) != 3 {
		t.Fatalf("scan from user2: %d records, %v; want 3", len(recs), err)
	}
	if err := db.Delete(ctx, "usertable", "user3"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Read(ctx, "usertable", "user3", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a deleted record: %v, want ErrNotFound", err)
	}
	if err := db.Update(ctx, "usertable", "user3", map[string][]byte{"field0": nil}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("partial update of a deleted record: %v, want ErrNotFound", err)
	}
	// A prefix whose table lies in no partition is refused at creation.
	p.MustSet(PropPrefix, "zz/")
	if _, err := ycsb.GetDBCreator(Name).Create(p); err == nil || !strings.Contains(err.Error(), PropPrefix) {
		t.Fatalf("prefix outside the partitions: %v, want an error naming %s", err, PropPrefix)
	}
	p.MustSet(PropPrefix, "c/")
	if _, err := ycsb.GetDBCreator(Name).Create(p); err == nil || !strings.Contains(err.Error(), PropPrefix) {
		t.Fatalf("prefix across partitions: %v, want an error naming %s", err, PropPrefix)
	}
}
