package executor

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// bankAccounts are two accounts in each warehouse of testPartitionMap:
// warehouses 1 and 2 in group 0, 3 in group 1, 4 in group 2.
var bankAccounts = []string{
	"w/0001/a", "w/0001/b", "w/0002/a", "w/0002/b", "w/0003/a", "w/0003/b", "w/0004/a", "w/0004/b",
}

// bankPoison holds a value that is not an integer in each group: a
// transfer to it aborts, at every destination.
var bankPoison = []string{"w/0001/poison", "w/0003/poison", "w/0004/poison"}

const bankBalance = 100

// TestBankRandomTransfers runs random transfers among accounts of three
// groups, some of them to a poisoned key, delivered in one global order
// that each group follows for its own transactions, with random batching
// and random vote delays, and random restarts. Money is conserved, no
// balance goes negative, every destination reports the same outcome, and a
// twin replica of each group fed the same entries ends with the same bytes.
func TestBankRandomTransfers(t *testing.T) {
	seeds, txns := 6, 150
	if testing.Short() {
		seeds, txns = 2, 60
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			runBank(t, seed, txns)
		})
	}
}

func runBank(t *testing.T, seed uint64, txns int) {
	rng := rand.New(rand.NewPCG(seed, 0x6261_6e6b))
	c := newCluster(t, nil)
	c.addTwins()
	for g := range c.reps {
		init := map[string]string{}
		for _, a := range bankAccounts {
			if owner, _, _ := c.pm.Owner([]byte(a)); owner == partition.GroupID(g) {
				init[a] = strconv.Itoa(bankBalance)
			}
		}
		for _, p := range bankPoison {
			if owner, _, _ := c.pm.Owner([]byte(p)); owner == partition.GroupID(g) {
				init[p] = "poison"
			}
		}
		c.seed(partition.GroupID(g), init)
	}

	// One global order; each group delivers its own transactions in it,
	// so the groups' orders agree (the multicast's guarantee).
	var all []multicast.Message
	queue := make([][]multicast.Message, len(c.reps))
	for i := range txns {
		from := bankAccounts[rng.IntN(len(bankAccounts))]
		to := bankAccounts[rng.IntN(len(bankAccounts))]
		if rng.IntN(10) == 0 {
			to = bankPoison[rng.IntN(len(bankPoison))]
		}
		amt := 1 + rng.IntN(60)
		js := fmt.Sprintf(`{"if":[{"key":%q,"cmp":">=","int":%d}],"then":[{"op":"add","key":%q,"int":%d},{"op":"add","key":%q,"int":%d}]}`,
			from, amt, from, -amt, to, amt)
		if from == to {
			js = fmt.Sprintf(`{"then":[{"op":"get","key":%q}]}`, from)
		}
		m := c.msg(uint64(i+1), js)
		all = append(all, m)
		for _, g := range m.Dst.Slice() {
			queue[g] = append(queue[g], m)
		}
	}

	c.drive(t, seed, rng, queue, 1, 50, nil)

	total := 0
	for _, a := range bankAccounts {
		owner, _, _ := c.pm.Owner([]byte(a))
		v, ok, err := c.reps[owner].store.Get([]byte(a))
		if err != nil || !ok {
			t.Fatalf("account %s: %v, %v", a, ok, err)
		}
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 0 {
			t.Errorf("account %s holds %q", a, v)
		}
		total += n
	}
	if want := bankBalance * len(bankAccounts); total != want {
		t.Errorf("seed %d: total %d, want %d", seed, total, want)
	}
	committed, aborted := 0, 0
	for _, m := range all {
		reasons := map[string]bool{}
		for _, g := range m.Dst.Slice() {
			r := c.result(g, m)
			reasons[r.Reason] = true
		}
		if len(reasons) != 1 {
			t.Errorf("%s: destinations report different aborts %v", m.ID, reasons)
		}
		_, err := c.merged(m)
		switch {
		case errors.Is(err, txn.ErrAborted):
			aborted++
		case err != nil:
			t.Errorf("%s: %v", m.ID, err)
		default:
			committed++
		}
	}
	if aborted == 0 || committed == 0 {
		t.Errorf("seed %d: %d committed, %d aborted: want both", seed, committed, aborted)
	}
	for g := range c.reps {
		st := c.reps[g].ex.Stats()
		if st.Queued != 0 || st.VotesStored != 0 || st.VotesJunk != 0 {
			t.Errorf("group %d stats at the end %+v", g, st)
		}
		if a, b := c.snapshot(partition.GroupID(g)), twinSnapshot(t, c, g); string(a) != string(b) {
			t.Errorf("seed %d: group %d and its twin differ after the same entries", seed, g)
		}
	}
}

func twinSnapshot(t *testing.T, c *cluster, g int) []byte {
	t.Helper()
	saved := c.reps[g]
	c.reps[g] = c.twins[g]
	defer func() { c.reps[g] = saved }()
	return c.snapshot(partition.GroupID(g))
}
