package kv

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
)

// batchGet reads key in a batch of its own, closed without a commit.
func batchGet(t testing.TB, s *Store, key string) (string, bool) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	v, found, err := b.Get(keyOf(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(v), found
}

func rowStats(s *Store) (hits, misses int64) {
	hits, misses, _, _ = s.h.rows.stats()
	return hits, misses
}

func viewStats(s *Store) (hits, misses int64) {
	_, _, hits, misses = s.h.rows.stats()
	return hits, misses
}

// TestRowCacheServesCommittedRows checks that a second read of a row is
// served from the cache, and that every commit of a cached row (put,
// delete, put again) is what the next batch reads.
func TestRowCacheServesCommittedRows(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("a", "1")))
	for range 2 {
		if v, found := batchGet(t, s, "a"); !found || v != "1" {
			t.Fatalf("a = %q, %v; want 1", v, found)
		}
	}
	if hits, misses := rowStats(s); hits != 1 || misses != 1 {
		t.Fatalf("hits %d, misses %d; want 1 and 1", hits, misses)
	}
	steps := []struct {
		o     []op
		v     string
		found bool
	}{
		{ops(put("a", "2")), "2", true},
		{ops(del("a")), "", false},
		{ops(put("a", "3"), put("a", "4")), "4", true},
		{ops(put("b", "x")), "4", true},
	}
	for i, st := range steps {
		commit(t, s, uint64(i+2), st.o)
		if v, found := batchGet(t, s, "a"); found != st.found || v != st.v {
			t.Fatalf("after %+v: a = %q, %v; want %q, %v", st.o, v, found, st.v, st.found)
		}
	}
	// The commits refilled the row the cache held: every read above but
	// the first was a hit.
	if hits, misses := rowStats(s); hits != 5 || misses != 1 {
		t.Fatalf("hits %d, misses %d; want 5 and 1", hits, misses)
	}
	m, err := s.Metrics()
	if err != nil || m.RowCacheHits != 5 || m.RowCacheMisses != 1 {
		t.Fatalf("Metrics: row cache hits %d, misses %d, %v; want 5 and 1", m.RowCacheHits, m.RowCacheMisses, err)
	}
}

// TestRowCacheBatchReadsOwnWrites checks that a batch reads its own
// writes of cached rows, and that a batch closed without a commit leaves
// the committed row.
func TestRowCacheBatchReadsOwnWrites(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("a", "1"), put("b", "1")))
	batchGet(t, s, "a")
	batchGet(t, s, "b")
	b := s.NewBatch()
	if err := b.Put(keyOf("a"), valueOf("2")); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(keyOf("b")); err != nil {
		t.Fatal(err)
	}
	if v, found, err := b.Get(keyOf("a")); err != nil || !found || string(v) != "2" {
		t.Fatalf("a in the batch = %q, %v, %v; want 2", v, found, err)
	}
	if _, found, err := b.Get(keyOf("b")); err != nil || found {
		t.Fatalf("b in the batch: found %v, %v; want deleted", found, err)
	}
	b.Close()
	for _, k := range []string{"a", "b"} {
		if v, found := batchGet(t, s, k); !found || v != "1" {
			t.Fatalf("%s after the batch closed = %q, %v; want 1", k, v, found)
		}
	}
}

// TestRowCacheSharedSlot checks reads of two keys that share the one slot
// of a cache while a batch writes one of them: the other is still served,
// committed, and the written one is the batch's.
func TestRowCacheSharedSlot(t *testing.T) {
	s := openStore(t, Options{RowCacheSlots: 1})
	commit(t, s, 1, ops(put("a", "1"), put("b", "1")))
	batchGet(t, s, "a") // the slot holds a
	b := s.NewBatch()
	defer b.Close()
	if err := b.Put(keyOf("b"), valueOf("2")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, want string }{{"a", "1"}, {"b", "2"}, {"a", "1"}} {
		if v, found, err := b.Get(keyOf(c.key)); err != nil || !found || string(v) != c.want {
			t.Fatalf("%s in the batch = %q, %v, %v; want %s", c.key, v, found, err, c.want)
		}
	}
	if hits, misses := rowStats(s); hits != 2 || misses != 2 {
		t.Fatalf("hits %d, misses %d; want 2 (a in the batch) and 2 (a's fill, b)", hits, misses)
	}
}

// checkRowCache checks the row cache's bookkeeping of its long rows: their
// buffers' bytes, counted and bounded, and a buffer for every slot whose
// row is in one.
func checkRowCache(t testing.TB, c *rowCache) {
	t.Helper()
	sum := 0
	for _, b := range c.big {
		sum += cap(b)
	}
	if c.bytes != sum || c.bytes > c.max {
		t.Fatalf("the cache counts %d bytes for buffers of %d, bound %d", c.bytes, sum, c.max)
	}
	for i := range c.slots {
		s := &c.slots[i]
		if s.flags&(rowFull|rowBig) != rowFull|rowBig {
			continue
		}
		if b, ok := c.big[uint32(i)]; !ok || len(b) < int(s.klen)+int(s.vlen) {
			t.Fatalf("slot %d holds a row of %d bytes in a buffer of %d (present: %v)", i, int(s.klen)+int(s.vlen), len(b), ok)
		}
	}
}

// TestRowCacheLongRows takes one slot across the line between a row held
// in place and one in a buffer of its own, by fills and by commits: a
// buffer reused, regrown, kept for a row in place, refused past the bound
// of bytes (256 for one slot), and a row lost to a commit without the
// cache.
func TestRowCacheLongRows(t *testing.T) {
	key := []byte("k")
	row := func(n int) []byte { return bytes.Repeat([]byte{'v'}, n-len(key)) } // the value of a row of n bytes
	c := newRowCache(1)
	wantHeld := func(n int, held bool) {
		t.Helper()
		v, found, ok, _ := c.get(0, key, false, 0)
		switch {
		case ok != held:
			t.Fatalf("row of %d bytes: cached %v, want %v", n, ok, held)
		case held && (!found || !bytes.Equal(v, row(n))):
			t.Fatalf("row of %d bytes: got %d bytes, found %v", n, len(v), found)
		}
		checkRowCache(t, c)
	}
	for _, st := range []struct {
		n     int // key and value
		held  bool
		bytes int // of the buffers
	}{
		{rowInlineMax, true, 0},
		{rowInlineMax + 1, true, rowInlineMax + 1},
		{10, true, rowInlineMax + 1}, // in place; the buffer is kept
		{200, true, 200},             // regrown
		{180, true, 200},             // reused
		{300, false, 0},              // past the bound: the slot is emptied
		{rowInlineMax, true, 0},
	} {
		c.fill(c.currentEpoch(), key, row(st.n), true)
		wantHeld(st.n, st.held)
		if c.bytes != st.bytes {
			t.Fatalf("row of %d bytes: the buffers hold %d bytes, want %d", st.n, c.bytes, st.bytes)
		}
	}
	// Commits through a batch that uses the cache store the rows it kept.
	for _, n := range []int{200, 20, 250, rowInlineMax + 1} {
		token, sc := c.begin()
		if _, keep := c.wrote(token, key, 0); !keep {
			t.Fatalf("a write of the row the slot holds is not kept (%d bytes)", n)
		}
		sc.slots = append(sc.slots, c.slotIndex(key))
		sc.writes = append(sc.writes, rowWrite{key: key, value: row(n), found: true, fits: true})
		c.committed(token, sc)
		wantHeld(n, true)
	}
	// A commit without the cache empties the slot, while a batch that
	// uses it has it pending: lost to that batch, which keeps its write.
	token, sc := c.begin()
	c.wrote(token, key, 0)
	sc.slots = append(sc.slots, c.slotIndex(key))
	c.committed(0, rowScratch{writes: []rowWrite{{key: key}}})
	if c.slots[0].flags&rowLost == 0 {
		t.Fatal("a slot emptied by another batch's commit is not lost to the batch that wrote it")
	}
	if _, keep := c.wrote(token, key, 1); !keep {
		t.Fatal("a write to a lost slot is not kept")
	}
	sc.writes = append(sc.writes, rowWrite{key: key, value: row(190), found: true, fits: true})
	c.committed(token, sc)
	wantHeld(190, true)
	c.purge()
	wantHeld(190, false)
}

// TestRowCacheRefusesStaleRows checks the two guards against a stale row
// when batches overlap (the executor builds one at a time; the store must
// stay right if it did not).
func TestRowCacheRefusesStaleRows(t *testing.T) {
	t.Run("commit without the cache empties its rows' slots", func(t *testing.T) {
		s := openStore(t, Options{})
		commit(t, s, 1, ops(put("k", "old")))
		batchGet(t, s, "k") // cached
		a := s.NewBatch()   // uses the cache
		commit(t, s, 2, ops(put("k", "new")))
		a.Close()
		if v, found := batchGet(t, s, "k"); !found || v != "new" {
			t.Fatalf("k = %q, %v; want new", v, found)
		}
	})
	t.Run("a read older than a commit fills nothing", func(t *testing.T) {
		s := openStore(t, Options{})
		commit(t, s, 1, ops(put("k", "old"), put("x", "1")))
		a := s.NewBatch()
		if _, _, err := a.Get(keyOf("x")); err != nil { // makes a's iterator
			t.Fatal(err)
		}
		commit(t, s, 2, ops(put("k", "new")))
		// a reads as of its iterator, made before the commit.
		if v, _, err := a.Get(keyOf("k")); err != nil || string(v) != "old" {
			t.Fatalf("k in a = %q, %v; want old", v, err)
		}
		a.Close()
		if v, found := batchGet(t, s, "k"); !found || v != "new" {
			t.Fatalf("k = %q, %v; want new", v, found)
		}
	})
}

// TestRowCacheRestoreStartsEmpty checks that a restored store does not
// serve a row cached before the restore.
func TestRowCacheRestoreStartsEmpty(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("a", "0")))
	buf := bytes.NewBuffer(stream(t, s))
	commit(t, s, 2, ops(put("a", "1")))
	if v, _ := batchGet(t, s, "a"); v != "1" {
		t.Fatalf("a = %q, want 1", v)
	}
	if err := s.RestoreSnapshot(buf, 1); err != nil {
		t.Fatal(err)
	}
	if v, found := batchGet(t, s, "a"); !found || v != "0" {
		t.Fatalf("a after the restore = %q, %v; want 0", v, found)
	}
}

// TestRowCacheAgreesWithPebble runs random batches (reads, puts, deletes,
// rows in a slot, in a buffer of their own, too long for the cache or for
// its bound of bytes; committed or
// dropped) on a store whose cache has four slots, so that keys share slots
// all the time, and checks every read against a model of the committed
// state and the batch's writes, and the cache's bytes against its bound.
func TestRowCacheAgreesWithPebble(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			s := openStore(t, Options{RowCacheSlots: 4, MemTableBytes: 256 << 10})
			committed := map[string]string{}
			keys := make([]string, 12)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%02d", i)
			}
			index := uint64(0)
			views := &viewModel{t: t, s: s, r: r}
			defer views.releaseAll()
			for range 300 {
				b := s.NewBatch()
				own := map[string]*string{}
				for range 1 + r.IntN(8) {
					k := keys[r.IntN(len(keys))]
					switch r.IntN(5) {
					case 4: // a leader's read, while the batch is built
						views.step(committed, k)
					case 0, 1:
						v, found, err := b.Get(keyOf(k))
						if err != nil {
							t.Fatal(err)
						}
						want, wantFound := committed[k]
						if w, ok := own[k]; ok {
							want, wantFound = "", w != nil
							if w != nil {
								want = *w
							}
						}
						if found != wantFound || string(v) != want {
							t.Fatalf("Get(%s) = %q, %v; want %q, %v", k, v, found, want, wantFound)
						}
					case 2:
						v := fmt.Sprint(r.Uint32())
						switch r.IntN(5) {
						case 0: // too long for the cache
							v = strings.Repeat(v, rowCacheEntryMax/len(v)+1)
						case 1: // three of these pass the cache's bound
							v = strings.Repeat(v, 400/len(v))
						case 2: // about the longest row a slot holds in place, or a buffer's
							v = strings.Repeat("v", rowInlineMax-len(k)-1+r.IntN(3))
						case 3: // in a buffer of its own, reused or regrown
							v = strings.Repeat("w", 160+r.IntN(141))
						}
						if err := b.Put(keyOf(k), valueOf(v)); err != nil {
							t.Fatal(err)
						}
						own[k] = &v
					case 3:
						if err := b.Delete(keyOf(k)); err != nil {
							t.Fatal(err)
						}
						own[k] = nil
					}
				}
				if r.IntN(4) == 0 {
					b.Close()
					continue
				}
				index++
				if err := s.Commit(b, index); err != nil {
					t.Fatal(err)
				}
				b.Close()
				checkRowCache(t, s.h.rows)
				views.commits++
				for k, v := range own {
					if v == nil {
						delete(committed, k)
					} else {
						committed[k] = *v
					}
				}
			}
			if hits, _ := rowStats(s); hits == 0 {
				t.Fatal("the cache served no read")
			}
			if hits, _ := viewStats(s); hits == 0 {
				t.Fatal("the cache served no view's read")
			}
		})
	}
}

// viewModel keeps a few Views and point views open across commits, each
// with the rows committed when it was taken, and checks that every read
// of a view, through the row cache or not, returns the row of its moment;
// a point view's may fail with ErrViewMoved instead, once a commit came.
type viewModel struct {
	t       *testing.T
	s       *Store
	r       *rand.Rand
	commits int // commits so far
	views   []modelView
}

type modelView struct {
	v      *View
	want   map[string]string
	point  bool
	commit int // commits when it was taken
}

// step takes a view of committed (the store's committed rows), reads k
// in an open view, or releases one.
func (m *viewModel) step(committed map[string]string, k string) {
	m.t.Helper()
	switch n := len(m.views); {
	case n < 3 && m.r.IntN(3) == 0:
		point := m.r.IntN(2) == 0
		take := m.s.View
		if point {
			take = m.s.PointView
		}
		v, err := take()
		if err != nil {
			m.t.Fatal(err)
		}
		m.views = append(m.views, modelView{v: v, want: maps.Clone(committed), point: point, commit: m.commits})
		// Read k at once, twice: the first read may fill its slot for
		// the second.
		m.read(n, k)
		m.read(len(m.views)-1, k)
	case n > 0 && m.r.IntN(6) == 0:
		m.release(m.r.IntN(n))
	case n > 0:
		m.read(m.r.IntN(n), k)
	}
}

// read reads k in view i; a point view that moved is released.
func (m *viewModel) read(i int, k string) {
	m.t.Helper()
	if i >= len(m.views) {
		return // released by the read before
	}
	mv := &m.views[i]
	var v []byte
	var found bool
	var err error
	if m.r.IntN(4) == 0 {
		var kvs []KV
		kvs, err = mv.v.Scan(keyOf(k), keyOf(k+"\x00"), 1)
		if found = len(kvs) == 1; found {
			v = kvs[0].Value
		}
	} else {
		v, found, err = mv.v.Get(keyOf(k))
	}
	if errors.Is(err, ErrViewMoved) && mv.point && m.commits > mv.commit {
		m.release(i)
		return
	}
	want, wantFound := mv.want[k]
	if err != nil || found != wantFound || string(v) != want {
		m.t.Fatalf("view %d (point %v): read %s = %q, %v, %v; want %q, %v", i, mv.point, k, v, found, err, want, wantFound)
	}
}

func (m *viewModel) release(i int) {
	m.views[i].v.Release()
	m.views = append(m.views[:i], m.views[i+1:]...)
}

func (m *viewModel) releaseAll() {
	for _, mv := range m.views {
		mv.v.Release()
	}
}

// TestRowCacheLargeBatch checks that the commit of a batch larger than
// half a memtable, which Pebble takes over whole as a table of its own,
// refills the rows it wrote (a first version read the writes back from
// Pebble's batch after the commit, when a large one is empty).
func TestRowCacheLargeBatch(t *testing.T) {
	s := openStore(t, Options{MemTableBytes: 256 << 10})
	commit(t, s, 1, ops(put("k", "old")))
	batchGet(t, s, "k") // cached
	var o []op
	for i := range 200 {
		o = append(o, put(fmt.Sprintf("fill/%03d", i), strings.Repeat("v", 1000)))
	}
	commit(t, s, 2, append(o, put("k", "new")))
	if v, found := batchGet(t, s, "k"); !found || v != "new" {
		t.Fatalf("k = %q, %v; want new", v, found)
	}
	if hits, _ := rowStats(s); hits != 1 {
		t.Fatalf("%d hits, want 1 (k refilled by the commit)", hits)
	}
}

// TestRowCacheOverlappingBatches runs random operations on up to three
// open batches at once (the first opened holds the cache, the others go
// without), on a cache of three slots. A read in a batch sees its own
// write, or the committed row as of its first read or as of now (the
// cache serves the latest committed row); whenever no batch is open, a
// read of every key must give the committed row.
func TestRowCacheOverlappingBatches(t *testing.T) {
	type open struct {
		b    *Batch
		own  map[string]*string
		seen map[string]string // committed rows when the batch first read
		read bool
	}
	for seed := range uint64(100) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 2))
			s := openStore(t, Options{RowCacheSlots: 3})
			committed := map[string]string{}
			keys := []string{"a", "b", "c", "d", "e"}
			var batches []*open
			index := uint64(0)
			views := &viewModel{t: t, s: s, r: r}
			defer views.releaseAll()
			closeAt := func(i int) {
				batches[i].b.Close()
				batches = append(batches[:i], batches[i+1:]...)
			}
			defer func() {
				for len(batches) > 0 {
					closeAt(0)
				}
			}()
			for range 400 {
				if len(batches) == 0 {
					for _, k := range keys {
						want, wantFound := committed[k]
						if v, found := batchGet(t, s, k); found != wantFound || v != want {
							t.Fatalf("no batch open: %s = %q, %v; want %q, %v", k, v, found, want, wantFound)
						}
					}
				}
				switch op := r.IntN(10); {
				case len(batches) == 0 || op == 0 && len(batches) < 3:
					batches = append(batches, &open{b: s.NewBatch(), own: map[string]*string{}})
				case op == 1:
					i := r.IntN(len(batches))
					x := batches[i]
					index++
					if err := s.Commit(x.b, index); err != nil {
						t.Fatal(err)
					}
					for k, v := range x.own {
						if v == nil {
							delete(committed, k)
						} else {
							committed[k] = *v
						}
					}
					views.commits++
					closeAt(i)
				case op == 2:
					closeAt(r.IntN(len(batches)))
				case op == 3: // a leader's read, exact whatever the batches
					views.step(committed, keys[r.IntN(len(keys))])
				default:
					x := batches[r.IntN(len(batches))]
					k := keys[r.IntN(len(keys))]
					switch r.IntN(3) {
					case 0:
						if !x.read {
							x.read, x.seen = true, maps.Clone(committed)
						}
						v, found, err := x.b.Get(keyOf(k))
						if err != nil {
							t.Fatal(err)
						}
						got := fmt.Sprintf("%q %v", v, found)
						var ok bool
						if w, mine := x.own[k]; mine {
							ok = w == nil && !found || w != nil && found && string(v) == *w
						} else {
							old, oldFound := x.seen[k]
							now, nowFound := committed[k]
							ok = got == fmt.Sprintf("%q %v", old, oldFound) || got == fmt.Sprintf("%q %v", now, nowFound)
						}
						if !ok {
							t.Fatalf("Get(%s) = %s in a batch that wrote %v", k, got, x.own[k] != nil)
						}
					case 1:
						v := fmt.Sprint(r.Uint32())
						if err := x.b.Put(keyOf(k), valueOf(v)); err != nil {
							t.Fatal(err)
						}
						x.own[k] = &v
					case 2:
						if err := x.b.Delete(keyOf(k)); err != nil {
							t.Fatal(err)
						}
						x.own[k] = nil
					}
				}
			}
		})
	}
}

// TestRowCacheKeepsCopies checks that what a batch keeps for the cache is
// its own copy: the caller may reuse the key and value it passed to Put.
func TestRowCacheKeepsCopies(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("k", "old")))
	batchGet(t, s, "k") // cached
	b := s.NewBatch()
	key, value := []byte("k"), []byte("new")
	if err := b.Put(key, value); err != nil {
		t.Fatal(err)
	}
	copy(key, "x")
	copy(value, "bad")
	if v, _, err := b.Get([]byte("k")); err != nil || string(v) != "new" {
		t.Fatalf("k in the batch = %q, %v; want new", v, err)
	}
	if err := s.Commit(b, 2); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if v, found := batchGet(t, s, "k"); !found || v != "new" {
		t.Fatalf("k = %q, %v; want new", v, found)
	}
}

// TestRowCacheBatchKeepsItsEpoch: a batch that holds the cache and reads
// through an iterator made before another batch's commit (one that went
// without the cache) reads both keys that commit wrote as its iterator
// sees them, though a View filled one's slot with the new row since.
func TestRowCacheBatchKeepsItsEpoch(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("k0", "x"), put("k1", "0"), put("k2", "0")))
	holder := s.NewBatch()
	defer holder.Close()
	if _, _, err := holder.Get(keyOf("k0")); err != nil { // its iterator, now
		t.Fatal(err)
	}
	commit(t, s, 2, ops(put("k1", "1"), put("k2", "1"))) // without the cache
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := v.Get(keyOf("k1")); err != nil || string(got) != "1" { // fills k1's slot
		t.Fatalf("view: k1 = %q, %v; want 1", got, err)
	}
	v.Release()
	for _, k := range []string{"k1", "k2"} {
		if got, _, err := holder.Get(keyOf(k)); err != nil || string(got) != "0" {
			t.Fatalf("holder: %s = %q, %v; want 0, as its iterator sees it", k, got, err)
		}
	}
}

// TestRowCacheDeleteRange: a batch that deleted a range reads its own
// deletion, fills nothing, and leaves views and the next batch the
// committed rows when it is closed without a commit.
func TestRowCacheDeleteRange(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("k1", "1"), put("k2", "2")))
	batchGet(t, s, "k1") // cached
	b := s.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(keyOf("k"), keyOf("l")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2"} {
		if got, found, err := b.Get(keyOf(k)); err != nil || found {
			t.Fatalf("batch after its DeleteRange: %s = %q, %v, %v; want none", k, got, found, err)
		}
	}
	for _, take := range []func() (*View, error){s.View, s.PointView} {
		v, err := take()
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{"k1": "1", "k2": "2"} {
			if got, found, err := v.Get(keyOf(k)); err != nil || !found || string(got) != want {
				t.Errorf("view while the batch is open: %s = %q, %v, %v; want %s", k, got, found, err, want)
			}
		}
		v.Release()
	}
	b.Close()
	for k, want := range map[string]string{"k1": "1", "k2": "2"} {
		if got, found := batchGet(t, s, k); !found || got != want {
			t.Errorf("next batch: %s = %q, %v; want %s", k, got, found, want)
		}
	}
}
