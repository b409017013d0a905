package kv

import (
	"bytes"
	"hash/maphash"
	"math"
	"sync"
	"unsafe"
)

// Row cache bounds: RowCacheSlotsDefault slots of rowSlotBytes each, which
// hold a row of up to rowInlineMax bytes of key and value in place; a longer
// row, up to rowCacheEntryMax (a longer one is read from Pebble every time),
// takes a buffer of its own, rowCacheBigBytes a slot on average at most. The
// default cache takes 6 MiB for its slots and at most 8 MiB more for longer
// rows.
const (
	RowCacheSlotsDefault = 1 << 15
	rowCacheEntryMax     = 1024
	rowCacheBigBytes     = 256
	rowSlotBytes         = 192
	rowInlineMax         = rowSlotBytes - rowSlotHeader
)

// rowCache holds committed values of data keys that batches read, so that
// a row read by entry after entry (a district, a stock row, an item) costs
// a hash and a copy instead of a seek through the memtable and every level
// of the LSM: point reads were the largest part of a gTPC-C replica's CPU.
//
// It is direct-mapped, a slot per hash of the key. A slot keeps its state
// and its row side by side, in three cache lines: a lookup reads the slot's
// first line for its state and its key (up to 47 bytes of key), and a hit
// the lines after it for the value, where a slot that pointed to its row's
// buffer made every lookup read two places in memory (under the whole mix,
// neither in the processor's caches); the slots hold no pointer for the
// garbage collector. Only a row too long for a slot takes a buffer of its
// own (in a map by slot), reused in place, and only those buffers count
// against the cache's bound of bytes: a row that fits a slot is never
// refused. It holds only what Pebble holds committed:
//   - a batch's read of a key fills its slot from the committed state, unless
//     the batch wrote a key of that slot (its read may then see its own
//     write) or a data commit came after the batch's iterator was made (its
//     read may predate that commit: the epoch tells); a batch that deleted
//     a range neither reads the cache nor fills it (its slots are not
//     marked for the range's keys);
//   - the epoch advances when a commit that changes rows begins and when
//     it ends, so that a fill from an iterator made while Pebble commits
//     counts for no one's epoch before; a batch's iterator reads the cache
//     only at its own epoch (a View may fill a slot at a later one);
//   - a batch's write of a key marks the slot pending for the batch and, if
//     the slot holds that key, is kept by the batch (Batch.wrote). While
//     pending, the slot takes no fill, and serves only its batch: the
//     batch's last kept write of the key if it has one, else the committed
//     row (a key the batch wrote while its slot held another row cannot
//     be the slot's row: nothing fills a pending slot);
//   - the batch's commit stores its kept writes in their slots (rows the
//     cache held stay cached, written rows it did not hold do not push them
//     out), and every pending mark of the batch is dropped at commit or
//     close (closed without a commit, the slots keep the committed rows
//     they held).
//
// A View (the reads a leader serves, DESIGN 6.5) reads through the cache
// too, and fills it, while the cache's epoch is the one of its snapshot:
// Store.View takes the epoch and the snapshot where no commit runs, and a
// commit changes the cache before it ends.
//
// The executor builds one batch at a time. A batch opened while another
// uses the cache goes without it: it reads Pebble, and its commit empties
// the slots that hold a key it wrote; a slot so emptied while pending for
// the batch that uses the cache is lost to it, which then keeps every write
// to it (a key written before the other commit and again after must end,
// at its own commit, with its last write).
type rowCache struct {
	mu    sync.Mutex
	seed  maphash.Seed
	slots []rowSlot
	// big holds the rows too long for their slot, by slot index.
	big    map[uint32][]byte
	bytes  int // big's buffers, all told
	max    int // the bound of bytes
	epoch  uint64
	batch  uint64     // the last batch token handed out
	active uint64     // the token of the open batch that uses the cache, 0: none
	spare  rowScratch // the last batch's scratch, for the next one

	hits, misses         int64 // batches' reads
	viewHits, viewMisses int64 // views' reads (viewGet)
}

// rowSlot is one slot, rowSlotBytes long: its state, then its row's key and
// value in place when they fit (rowBig unset), else in rowCache.big.
type rowSlot struct {
	// pending is the token of the batch that wrote a key of this slot, 0:
	// none. While it is set, mine is 1 + the index of the batch's last kept
	// write of the key the slot holds (0: none), and rowLost tells that a
	// commit of another batch emptied the slot.
	pending    uint64
	mine       int32
	klen, vlen uint16
	flags      uint8
	row        [rowInlineMax]byte
}

// rowSlotHeader is the bytes of a slot before its row.
const rowSlotHeader = 8 + 4 + 2 + 2 + 1

// A row's key and value lengths fit klen and vlen: every row set is at most
// rowCacheEntryMax long (fill checks it, and a batch keeps a write for the
// cache only if it fits: Batch.wrote).
var _ [math.MaxUint16 - rowCacheEntryMax]struct{}

// Slot flags.
const (
	rowFull  = 1 << iota // holds a row: the key, with its value or none (rowFound unset)
	rowFound             // the row has a value
	rowLost              // see pending
	rowBig               // the row is in rowCache.big
)

// The slots are exactly rowSlotBytes long, so that each takes three whole
// cache lines of the slots' array (a large array, as the default one, is
// allocated page-aligned).
var _ [rowSlotBytes - unsafe.Sizeof(rowSlot{})]struct{}
var _ [unsafe.Sizeof(rowSlot{}) - rowSlotBytes]struct{}

// newRowCache returns a cache of n slots, nil if n is negative (no cache).
func newRowCache(n int) *rowCache {
	switch {
	case n < 0:
		return nil
	case n == 0:
		n = RowCacheSlotsDefault
	}
	return &rowCache{seed: maphash.MakeSeed(), slots: make([]rowSlot, n), big: map[uint32][]byte{}, max: n * rowCacheBigBytes}
}

// slotIndex returns the index of key's slot.
func (c *rowCache) slotIndex(key []byte) uint32 {
	return uint32(maphash.Bytes(c.seed, key) % uint64(len(c.slots)))
}

// held returns slot i's row, its key then its value, if it is a row of
// key.
func (c *rowCache) held(i uint32, key []byte) (row []byte, ok bool) {
	s := &c.slots[i]
	if s.flags&rowFull == 0 || int(s.klen) != len(key) {
		return nil, false
	}
	n := int(s.klen) + int(s.vlen)
	if s.flags&rowBig != 0 {
		row = c.big[i][:n]
	} else {
		row = s.row[:n]
	}
	return row, bytes.Equal(row[:s.klen], key)
}

// holds reports whether slot i holds a row of key.
func (c *rowCache) holds(i uint32, key []byte) bool {
	_, ok := c.held(i, key)
	return ok
}

// rowScratch is what a batch keeps for the row cache: the slots its writes
// made pending, and its kept writes, copied into buf (the caller may reuse
// what it passed to Put). The batch that uses the cache hands it back at
// its commit or close, for the next one.
type rowScratch struct {
	slots  []uint32
	writes []rowWrite
	buf    []byte
}

// wroteRows reports whether the batch of sc wrote a user key: every write
// of a batch marks a slot (with the cache) or is kept (without it).
func (sc *rowScratch) wroteRows() bool { return len(sc.writes) > 0 || len(sc.slots) > 0 }

// Bounds of the scratch the cache keeps for the next batch.
const (
	rowScratchSlotsMax  = 4096
	rowScratchWritesMax = 1024
	rowScratchBufMax    = 64 << 10
)

// begin returns a token for a new batch, and scratch, empty; the token is
// 0 if another batch uses the cache (the new one then goes without).
func (c *rowCache) begin() (token uint64, sc rowScratch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active != 0 {
		return 0, rowScratch{}
	}
	c.batch++
	c.active = c.batch
	sc, c.spare = c.spare, rowScratch{}
	return c.batch, sc
}

// advance advances the epoch: a commit is about to change rows.
func (c *rowCache) advance() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
}

// currentEpoch returns the epoch a read through an iterator made now sees.
func (c *rowCache) currentEpoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// get returns a copy of the cached row of key for the batch of token; ok
// is false if the cache does not serve key. When the slot is pending for
// the batch, the batch wrote key only if it kept a write of key
// (Batch.wrote keeps every write of a key its slot holds, and a pending
// slot takes no other row): mine is then 1 + the index of its last such
// write, what it reads, and get returns no row; else (mine 0) the
// committed row is what it reads, served only if the cache is still at the
// epoch of the batch's iterator when pinned tells it has one (a View may
// have filled the slot with a row of a later commit).
func (c *rowCache) get(token uint64, key []byte, pinned bool, epoch uint64) (value []byte, found, ok bool, mine int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.slotIndex(key)
	s := &c.slots[i]
	row, ok := c.held(i, key)
	if !ok || s.pending != 0 && s.pending != token {
		c.misses++
		return nil, false, false, 0
	}
	switch {
	case s.pending != 0 && s.mine > 0:
		c.hits++
		return nil, false, true, s.mine
	case pinned && epoch != c.epoch:
		// The batch reads through an iterator of an earlier epoch: a
		// commit came since (another batch's, which went without the
		// cache), and the row may be of it.
		c.misses++
		return nil, false, false, 0
	}
	c.hits++
	value, found = slotValue(s, row)
	return value, found, true, 0
}

// slotValue returns a copy of the value of slot s's row, if it has one.
func slotValue(s *rowSlot, row []byte) (value []byte, found bool) {
	if s.flags&rowFound == 0 {
		return nil, false
	}
	return append(make([]byte, 0, s.vlen), row[s.klen:]...), true
}

// viewGet returns a copy of the cached row of key for a View whose
// snapshot is the committed state of epoch (Store.View); ok is false if the
// cache does not serve it: a commit came since (the slots hold a later
// state), or the slot does not hold key, or it is pending for a batch
// being built (it still holds the committed row, but a miss costs little
// and keeps the rule simple).
func (c *rowCache) viewGet(epoch uint64, key []byte) (value []byte, found, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		c.viewMisses++
		return nil, false, false
	}
	i := c.slotIndex(key)
	s := &c.slots[i]
	row, ok := c.held(i, key)
	if !ok || s.pending != 0 {
		c.viewMisses++
		return nil, false, false
	}
	c.viewHits++
	value, found = slotValue(s, row)
	return value, found, true
}

// fill caches key's committed value, read through an iterator (or a
// View's snapshot) made at epoch.
func (c *rowCache) fill(epoch uint64, key, value []byte, found bool) {
	if len(key)+len(value) > rowCacheEntryMax {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.slotIndex(key)
	if epoch != c.epoch || c.slots[i].pending != 0 {
		return
	}
	c.set(i, key, value, found)
}

// set stores a row of at most rowCacheEntryMax bytes in slot i, in place
// if it fits, else in the slot's buffer, reused if it is large enough; a
// row that would take the buffers past their bound leaves the slot empty.
func (c *rowCache) set(i uint32, key, value []byte, found bool) {
	s := &c.slots[i]
	n := len(key) + len(value)
	flags := s.flags &^ (rowFull | rowFound | rowBig)
	var row []byte
	if n <= rowInlineMax {
		row = s.row[:0]
	} else {
		b := c.big[i]
		if cap(b) < n {
			c.bytes -= cap(b)
			delete(c.big, i)
			if c.bytes+n > c.max {
				s.flags = flags
				return
			}
			b = make([]byte, 0, n)
			c.bytes += n
		}
		row, flags = b[:0], flags|rowBig
	}
	row = append(append(row, key...), value...)
	if flags&rowBig != 0 {
		c.big[i] = row
	}
	s.klen, s.vlen = uint16(len(key)), uint16(len(value))
	s.flags = flags | rowFull
	if found {
		s.flags |= rowFound
	}
}

// wrote marks key's slot pending for the batch of token (not 0), whose
// next kept write would be at index next. keep tells the batch to keep the
// write, for its commit to store in the slot: when the slot holds key, or
// when another batch's commit emptied it since the batch's first write in
// it (a key written before that and again after must end with its last
// write). It returns the slot's index, which the batch releases later.
func (c *rowCache) wrote(token uint64, key []byte, next int) (slot uint32, keep bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.slotIndex(key)
	s := &c.slots[i]
	if s.pending != token {
		s.pending, s.mine, s.flags = token, 0, s.flags&^rowLost
	}
	switch {
	case c.holds(i, key):
		s.mine = int32(next + 1)
		keep = true
	case s.flags&rowLost != 0:
		keep = true
	}
	return i, keep
}

// rowWrite is a write a batch keeps for the row cache: a put of value
// (found) or a delete; fits tells that key and value together are at most
// rowCacheEntryMax, what the cache may hold.
type rowWrite struct {
	key, value  []byte
	found, fits bool
}

// committed stores, in the slots the batch of token wrote keys they held,
// the batch's writes of those keys (writes, in the batch's order: a key
// written twice ends with its last write), releases the batch's slots and
// advances the epoch. For a batch that went without the cache (token 0),
// writes are all its writes, and it empties the slots that hold their keys.
func (c *rowCache) committed(token uint64, sc rowScratch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for j := range sc.writes {
		w := &sc.writes[j]
		i := c.slotIndex(w.key)
		s := &c.slots[i]
		switch {
		case token == 0:
			if c.holds(i, w.key) {
				s.flags &^= rowFull
				if s.pending != 0 {
					s.flags |= rowLost
				}
			}
		case s.pending != token:
		case w.fits:
			c.set(i, w.key, w.value, w.found)
		default:
			s.flags &^= rowFull
		}
	}
	c.releaseLocked(token, sc)
}

// release drops the pending marks of the batch of token, which was closed
// without a commit.
func (c *rowCache) release(token uint64, sc rowScratch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(token, sc)
}

func (c *rowCache) releaseLocked(token uint64, sc rowScratch) {
	if token == 0 {
		return
	}
	for _, i := range sc.slots {
		if s := &c.slots[i]; s.pending == token {
			s.pending, s.mine, s.flags = 0, 0, s.flags&^rowLost
		}
	}
	if c.active != token {
		return
	}
	c.active = 0
	if cap(sc.slots) <= rowScratchSlotsMax && cap(sc.writes) <= rowScratchWritesMax && cap(sc.buf) <= rowScratchBufMax {
		clear(sc.writes) // no hold on the rows' bytes
		c.spare = rowScratch{slots: sc.slots[:0], writes: sc.writes[:0], buf: sc.buf[:0]}
	}
}

// purge empties every slot and advances the epoch: after a commit that
// failed, what Pebble holds is not known here.
func (c *rowCache) purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for i := range c.slots {
		// rowBig may stay set: nothing reads a row not rowFull, and set
		// clears it.
		c.slots[i].flags &^= rowFull
	}
}

// stats returns the cache's hits and misses, the batches' (a read of a
// row the batch wrote, served from its own write, counts as a hit) and the
// views'.
func (c *rowCache) stats() (hits, misses, viewHits, viewMisses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses, c.viewHits, c.viewMisses
}
