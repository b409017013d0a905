package gtpcc

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/partition"
)

// The workload (DESIGN 9): what one closed-loop client of home warehouse W
// submits, one transaction after another. TPC-C's rules (clause 2.4 to 2.8,
// 5.2.3) with the geo-distribution of gTPC-C: a remote warehouse is one of
// another group (another region), so that a transaction with one is
// atomically multicast to several groups; it is chosen by distance from
// the home warehouse, the nearest with probability Locality.

// The kinds of transaction, as the report names them (DESIGN 10.3).
const (
	KindNewOrder    = "new_order"
	KindPayment     = "payment"
	KindOrderStatus = "order_status"
	KindDelivery    = "delivery"
	KindStockLevel  = "stock_level"
)

// kinds lists the kinds in the order of reports and of the Mix's fields.
var kinds = [...]string{KindNewOrder, KindPayment, KindOrderStatus, KindDelivery, KindStockLevel}

// kindIndex returns the position of kind in kinds, or -1.
func kindIndex(kind string) int { return slices.Index(kinds[:], kind) }

// Workload defaults (DESIGN 9).
const (
	// RemoteItemTPCC is TPC-C's probability that a new-order line is
	// supplied by a remote warehouse (clause 2.4.1.5); the FlexCast paper
	// used RemoteItemPaper.
	RemoteItemTPCC  = 0.01
	RemoteItemPaper = 0.02
	// RemotePaymentDefault is TPC-C's probability that a payment is made
	// by a customer of a remote warehouse (clause 2.5.1.2).
	RemotePaymentDefault = 0.15
	// LocalityDefault is the probability that a remote warehouse is the
	// one nearest to the home warehouse.
	LocalityDefault = 0.9
	// globalGroupsMax bounds the groups of a transaction under
	// GlobalOnly: the paper's latency runs left out larger ones.
	globalGroupsMax = 3
	// globalAttemptsMax bounds the new-orders drawn, under GlobalOnly,
	// to find one of at most globalGroupsMax groups; the last attempt
	// restricts the remote warehouses instead (see newOrder).
	globalAttemptsMax = 64
)

// Bounds of the generated arguments (TPC-C clauses 2.4.1, 2.5.1, 2.7.1, 2.8.1).
const (
	quantityMax       = 10
	amountCentsMin    = 100
	amountCentsMax    = 500000
	carrierMax        = 10
	thresholdMin      = 10
	thresholdMax      = 20
	rollbackPercent   = 1  // new-orders with an unused item (clause 2.4.1.4)
	byLastNamePercent = 60 // payments and order-statuses naming the customer by last name
)

// Mix weighs the kinds of transaction: each is drawn with probability
// weight/total. TPC-C's minimum mix (clause 5.2.3) is MixDefault.
type Mix struct {
	NewOrder    int `json:"new_order"`
	Payment     int `json:"payment"`
	OrderStatus int `json:"order_status"`
	Delivery    int `json:"delivery"`
	StockLevel  int `json:"stock_level"`
}

// MixDefault is the mix of DESIGN 9: new-order 45%, payment 43%,
// order-status, delivery and stock-level 4% each.
var MixDefault = Mix{NewOrder: 45, Payment: 43, OrderStatus: 4, Delivery: 4, StockLevel: 4}

// weights returns the weights in the order of kinds.
func (m Mix) weights() [len(kinds)]int {
	return [len(kinds)]int{m.NewOrder, m.Payment, m.OrderStatus, m.Delivery, m.StockLevel}
}

// NURandC are the run-time constants C of TPC-C's NURand (clause 2.1.6)
// for customer last names, customer ids and item ids. Every client of a
// run should use the same ones; any value is valid.
type NURandC struct {
	Last       int `json:"c_last"`
	CustomerID int `json:"c_id"`
	Item       int `json:"ol_i_id"`
}

// WorkloadConfig configures the transactions of every client of a run.
type WorkloadConfig struct {
	// Warehouses are all the warehouses of the cluster, each in
	// 1..WarehouseMax, once.
	Warehouses []int       `json:"warehouses"`
	Scale      procs.Scale `json:"scale"`
	// Locality is the probability that a remote warehouse is the nearest
	// candidate to the home warehouse; else the next nearest with
	// probability Locality, and so on: the k-th nearest (from 0) with
	// probability proportional to Locality*(1-Locality)^k over the
	// candidates. 0 picks among them uniformly. In 0..1. The candidates
	// are the warehouses of the groups other than the home's (see Group),
	// ranked by Distance, ties by number; in a cluster of one group, the
	// other warehouses of that group.
	Locality float64 `json:"locality"`
	// RemoteItem is the probability that a new-order line is supplied by
	// a remote warehouse (RemoteItemTPCC, RemoteItemPaper). In 0..1.
	RemoteItem float64 `json:"remote_item"`
	// RemotePayment is the probability that a payment is made by a
	// customer of a remote warehouse (RemotePaymentDefault). In 0..1.
	RemotePayment float64 `json:"remote_payment"`
	// GlobalOnly keeps only transactions of two or three groups, as the
	// paper's latency runs did: new-orders with at least one remote line,
	// payments by a remote customer. The other kinds are local and are
	// left out; so are new-orders of more than three groups. It needs
	// warehouses in two or more groups.
	GlobalOnly bool `json:"global_only"`
	// Mix weighs the kinds of transaction; the zero Mix is MixDefault.
	Mix Mix `json:"mix"`
	// C are NURand's run-time constants.
	C NURandC `json:"nurand_c"`
	// Distance is the distance between two warehouses, such as the
	// latency between their groups' regions (ClusterLayout): remote
	// warehouses are ranked by it, ties by warehouse number. Nil: all are
	// equally far, so ranked by number.
	Distance func(a, b int) float64 `json:"-"`
	// Group returns the group (>= 0) that owns a warehouse of Warehouses,
	// such as its partition's raft group (ClusterLayout): remote
	// warehouses are taken from other groups, and GlobalOnly counts
	// groups. Nil: every warehouse is its own group.
	Group func(w int) int `json:"-"`
}

// DefaultWorkload returns the workload of DESIGN 9 on warehouses of
// population scale: TPC-C's mix and remote probabilities, LocalityDefault.
func DefaultWorkload(warehouses []int, scale procs.Scale) WorkloadConfig {
	return WorkloadConfig{
		Warehouses:    slices.Clone(warehouses),
		Scale:         scale,
		Locality:      LocalityDefault,
		RemoteItem:    RemoteItemTPCC,
		RemotePayment: RemotePaymentDefault,
		Mix:           MixDefault,
		// Fixed rather than random, so that a run is a function of its
		// seed; each within TPC-C's range [0, A]. Last differs from the
		// loader's procs.LoadCLastConstant by 66, within clause 2.1.6.1's 65..119
		// (not 96 or 112).
		C: NURandC{Last: procs.LoadCLastConstant + 66, CustomerID: 259, Item: 7911},
	}
}

// validate checks c for a client of warehouse home.
func (c *WorkloadConfig) validate(home int) error {
	seen, err := warehouseSet("workload", c.Warehouses)
	if err != nil {
		return err
	}
	if !seen[home] {
		return fmt.Errorf("gtpcc: workload: home warehouse %d is not one of the warehouses", home)
	}
	for _, w := range c.Warehouses {
		if g := c.groupOf(w); g < 0 {
			return fmt.Errorf("gtpcc: workload: warehouse %d is in group %d, want a group >= 0", w, g)
		}
	}
	if err := c.Scale.Validate(); err != nil {
		return fmt.Errorf("gtpcc: workload: %w", err)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"locality", c.Locality}, {"remote item probability", c.RemoteItem}, {"remote payment probability", c.RemotePayment}} {
		if !(p.v >= 0 && p.v <= 1) { // also rejects NaN
			return fmt.Errorf("gtpcc: workload: %s %v, want 0..1", p.name, p.v)
		}
	}
	total := 0
	for i, w := range c.mix().weights() {
		if w < 0 {
			return fmt.Errorf("gtpcc: workload: mix weight of %s is %d, want >= 0", kinds[i], w)
		}
		total += w
	}
	if total == 0 || total > 1<<30 {
		return fmt.Errorf("gtpcc: workload: mix weights sum to %d, want 1..%d", total, 1<<30)
	}
	if c.GlobalOnly {
		return c.validateGlobal()
	}
	return nil
}

// validateGlobal checks that a GlobalOnly workload can draw a transaction.
func (c *WorkloadConfig) validateGlobal() error {
	m := c.mix()
	switch {
	case len(c.groups(c.Warehouses)) < 2:
		return errors.New("gtpcc: workload: global-only needs warehouses in two or more groups")
	case m.NewOrder == 0 && m.Payment == 0:
		return errors.New("gtpcc: workload: global-only needs new-orders or payments in the mix (the other kinds are local)")
	case m.NewOrder > 0 && c.RemoteItem == 0:
		return errors.New("gtpcc: workload: global-only with new-orders needs a remote item probability above 0")
	case m.Payment > 0 && c.RemotePayment == 0:
		return errors.New("gtpcc: workload: global-only with payments needs a remote payment probability above 0")
	}
	return nil
}

// groupOf returns the group of warehouse w: c.Group's, or w itself when
// c.Group is nil.
func (c *WorkloadConfig) groupOf(w int) int {
	if c.Group == nil {
		return w
	}
	return c.Group(w)
}

// groups returns the distinct groups of warehouses, ascending.
func (c *WorkloadConfig) groups(warehouses []int) []int {
	gs := make([]int, len(warehouses))
	for i, w := range warehouses {
		gs[i] = c.groupOf(w)
	}
	slices.Sort(gs)
	return slices.Compact(gs)
}

// mix returns the mix in effect: MixDefault for the zero Mix.
func (c *WorkloadConfig) mix() Mix {
	if c.Mix == (Mix{}) {
		return MixDefault
	}
	return c.Mix
}

// Op is one transaction of the workload: a call of procedure Proc with
// Args.
type Op struct {
	// Kind is one of KindNewOrder, KindPayment, ...
	Kind string
	// Proc is the procedure to call (procs.ProcNewOrder, ...) and Args its
	// arguments (procs.EncodeArgs of NewOrderArgs, ...).
	Proc string
	Args []byte
	// Warehouses are the distinct warehouses the transaction touches,
	// ascending.
	Warehouses []int
	// Groups are the distinct groups of Warehouses (WorkloadConfig.Group;
	// the warehouse numbers when it is nil), ascending: the transaction
	// is global when there are two or more.
	Groups []int
	// Rollback tells a new-order with an unused item, which TPC-C expects
	// to roll back (clause 2.4.2.3).
	Rollback bool
}

// Generator draws the transactions of one client. It is deterministic:
// the same configuration, home, seed and times give the same Ops. It is
// not safe for concurrent use: each client has its own.
type Generator struct {
	cfg  WorkloadConfig
	home int
	rng  *rand.Rand
	// remotes are the candidate remote warehouses (see rankRemotes),
	// nearest first; remoteCum[k] is the probability of drawing one of
	// remotes[:k+1].
	remotes   []int
	remoteCum []float64
	// kindCum[i] is the sum of the weights of kinds[:i+1] that may be
	// drawn (under GlobalOnly, new-order and payment only).
	kindCum [len(kinds)]int
	// NURand's A for customer ids, item ids and last names, scaled to
	// the population; lastMax is the largest last name number loaded.
	aCustomer, aItem, aLast, lastMax int
}

// NewGenerator returns the generator of the client of warehouse home,
// seeded by seed.
func NewGenerator(cfg WorkloadConfig, home int, seed uint64) (*Generator, error) {
	if err := cfg.validate(home); err != nil {
		return nil, err
	}
	cfg.Warehouses = slices.Clone(cfg.Warehouses)
	cfg.Mix = cfg.mix()
	g := &Generator{
		cfg:  cfg,
		home: home,
		// The home in the stream: clients of one seed differ.
		rng: rand.New(rand.NewPCG(seed, uint64(home)^0x6a09e667f3bcc909)),
	}
	var err error
	if g.remotes, err = rankRemotes(cfg.Warehouses, home, cfg.Distance, cfg.groupOf); err != nil {
		return nil, err
	}
	g.remoteCum = localityCumulative(len(g.remotes), cfg.Locality)
	sum := 0
	for i, w := range cfg.Mix.weights() {
		if cfg.GlobalOnly && kinds[i] != KindNewOrder && kinds[i] != KindPayment {
			w = 0
		}
		sum += w
		g.kindCum[i] = sum
	}
	s := cfg.Scale
	g.lastMax = min(999, s.CustomersPerDistrict-1)
	g.aCustomer = scaledA(1023, s.CustomersPerDistrict, procs.Full.CustomersPerDistrict)
	g.aItem = scaledA(8191, s.Items, procs.Full.Items)
	g.aLast = scaledA(255, g.lastMax+1, 1000)
	return g, nil
}

// rankRemotes returns the candidate remote warehouses of a client of home,
// nearest to home first, ties by number: the warehouses of groups other
// than home's, or, when every warehouse is in home's group, the other
// warehouses of that group.
func rankRemotes(warehouses []int, home int, distance func(a, b int) float64, group func(w int) int) ([]int, error) {
	type ranked struct {
		w int
		d float64
	}
	homeGroup := group(home)
	otherGroups := slices.ContainsFunc(warehouses, func(w int) bool { return group(w) != homeGroup })
	var rs []ranked
	for _, w := range warehouses {
		if w == home || (otherGroups && group(w) == homeGroup) {
			continue
		}
		d := 0.0
		if distance != nil {
			d = distance(home, w)
		}
		if math.IsNaN(d) {
			return nil, fmt.Errorf("gtpcc: workload: distance from warehouse %d to %d is NaN", home, w)
		}
		rs = append(rs, ranked{w, d})
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(a.d, b.d); c != 0 {
			return c
		}
		return cmp.Compare(a.w, b.w)
	})
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.w
	}
	return out, nil
}

// localityCumulative returns the cumulative probabilities of drawing the
// k-th nearest of n remote warehouses: proportional to
// locality*(1-locality)^k, a geometric distribution truncated to n (a
// draw past the farthest starts again from the nearest); uniform for
// locality 0.
func localityCumulative(n int, locality float64) []float64 {
	cum := make([]float64, n)
	total := 0.0
	for k := range n {
		w := 1.0
		if locality > 0 {
			w = locality * math.Pow(1-locality, float64(k))
		}
		total += w
		cum[k] = total
	}
	for k := range cum {
		cum[k] /= total
	}
	return cum
}

// scaledA returns NURand's constant A for a range of n values, TPC-C's a
// being for nFull values: a+1 scaled by n/nFull, rounded down to a power
// of two, minus one. On a small population TPC-C's A would cover the
// whole range several times over and the skew would vanish; this keeps
// about the same share of hot values.
func scaledA(a, n, nFull int) int {
	if n >= nFull {
		return a
	}
	target := n * (a + 1) / nFull
	p := 1
	for p*2 <= target {
		p *= 2
	}
	if target < 1 {
		return 0
	}
	return p - 1
}

// Next returns the client's next transaction; now gives its dates
// (procedures have no clock).
func (g *Generator) Next(now time.Time) Op {
	date := now.UnixMilli()
	switch kinds[g.drawKind()] {
	case KindNewOrder:
		return g.newOrder(date)
	case KindPayment:
		return g.payment(date)
	case KindOrderStatus:
		args := procs.OrderStatusArgs{W: g.home, D: g.district()}
		args.CID, args.CLast = g.customer()
		return g.op(KindOrderStatus, procs.ProcOrderStatus, args, []int{g.home}, false)
	case KindDelivery:
		args := procs.DeliveryArgs{W: g.home, Carrier: g.between(1, carrierMax), Date: date}
		return g.op(KindDelivery, procs.ProcDelivery, args, []int{g.home}, false)
	default: // KindStockLevel
		args := procs.StockLevelArgs{W: g.home, D: g.district(), Threshold: g.between(thresholdMin, thresholdMax)}
		return g.op(KindStockLevel, procs.ProcStockLevel, args, []int{g.home}, false)
	}
}

// op assembles an Op.
func (g *Generator) op(kind, proc string, args any, warehouses []int, rollback bool) Op {
	slices.Sort(warehouses)
	warehouses = slices.Compact(warehouses)
	return Op{
		Kind: kind, Proc: proc, Args: procs.EncodeArgs(args),
		Warehouses: warehouses, Groups: g.cfg.groups(warehouses), Rollback: rollback,
	}
}

// drawKind returns the index in kinds of the next transaction's kind.
func (g *Generator) drawKind() int {
	x := g.rng.IntN(g.kindCum[len(kinds)-1])
	for i, c := range g.kindCum {
		if x < c {
			return i
		}
	}
	panic("gtpcc: workload: kind draw past the mix") // validate made the total positive
}

// between returns a uniform integer in [lo, hi].
func (g *Generator) between(lo, hi int) int { return lo + g.rng.IntN(hi-lo+1) }

// chance returns true with probability p.
func (g *Generator) chance(p float64) bool { return g.rng.Float64() < p }

func (g *Generator) district() int { return g.between(1, procs.DistrictsPerWarehouse) }

// customer returns a customer of a district as TPC-C names it (clause
// 2.5.1.2, 2.6.1.2): by last name 60% of the time (id 0), else by id. The
// last names drawn are those the loader gives to customers 1..1000, so
// that at any scale the name exists.
func (g *Generator) customer() (id int, last string) {
	if g.between(1, 100) <= byLastNamePercent {
		return 0, procs.LastName(procs.NURand(g.rng, g.aLast, 0, g.lastMax, g.cfg.C.Last))
	}
	return procs.NURand(g.rng, g.aCustomer, 1, g.cfg.Scale.CustomersPerDistrict, g.cfg.C.CustomerID), ""
}

// remote returns a candidate remote warehouse (one of another group, if
// any), by locality; there must be one.
func (g *Generator) remote() int {
	x := g.rng.Float64()
	for k, c := range g.remoteCum {
		if x < c {
			return g.remotes[k]
		}
	}
	return g.remotes[len(g.remotes)-1] // rounding: the cumulative sum may end just below 1
}

// payment draws a payment (clause 2.5.1): to district D of the home
// warehouse, by a customer of a remote warehouse with probability
// RemotePayment (always under GlobalOnly).
func (g *Generator) payment(date int64) Op {
	args := procs.PaymentArgs{W: g.home, D: g.district(), Amount: int64(g.between(amountCentsMin, amountCentsMax)), Date: date}
	args.CW, args.CD = args.W, args.D
	if len(g.remotes) > 0 && (g.cfg.GlobalOnly || g.chance(g.cfg.RemotePayment)) {
		args.CW, args.CD = g.remote(), g.district()
	}
	args.CID, args.CLast = g.customer()
	return g.op(KindPayment, procs.ProcPayment, args, []int{args.W, args.CW}, false)
}

// newOrder draws a new-order (clause 2.4.1). Under GlobalOnly, one with
// at least one remote line (drawn from the distribution conditioned on
// that, see remoteLines) and at most globalGroupsMax groups: a larger one
// is left out and drawn again; after globalAttemptsMax attempts, which
// only a very low locality over many groups with a high RemoteItem
// reaches, the last draw reuses an earlier remote warehouse where it
// would add a group too many.
func (g *Generator) newOrder(date int64) Op {
	for attempt := 1; ; attempt++ {
		limit := g.cfg.GlobalOnly && attempt == globalAttemptsMax
		args, rollback := g.drawNewOrder(date, limit)
		ws := []int{args.W}
		for _, l := range args.Lines {
			ws = append(ws, l.SupplyW)
		}
		op := g.op(KindNewOrder, procs.ProcNewOrder, args, ws, rollback)
		if !g.cfg.GlobalOnly || len(op.Groups) <= globalGroupsMax {
			return op
		}
		if limit {
			panic(fmt.Sprintf("gtpcc: workload: limited new-order has %d groups", len(op.Groups)))
		}
	}
}

// drawNewOrder draws a new-order's arguments and whether it is one of the
// 1% with an unused item on its last line. With limit set, a line never
// adds a group past globalGroupsMax: it gets the first remote warehouse
// drawn instead.
func (g *Generator) drawNewOrder(date int64, limit bool) (procs.NewOrderArgs, bool) {
	args := procs.NewOrderArgs{W: g.home, D: g.district(), EntryD: date}
	args.C = procs.NURand(g.rng, g.aCustomer, 1, g.cfg.Scale.CustomersPerDistrict, g.cfg.C.CustomerID)
	remote := g.remoteLines()
	args.Lines = make([]procs.NewOrderLine, len(remote))
	first := 0                             // the first remote warehouse drawn, 0 before
	groups := []int{g.cfg.groupOf(g.home)} // distinct groups so far
	for i := range args.Lines {
		l := &args.Lines[i]
		l.Item = procs.NURand(g.rng, g.aItem, 1, g.cfg.Scale.Items, g.cfg.C.Item)
		l.Quantity = g.between(1, quantityMax)
		l.SupplyW = g.home
		if remote[i] {
			w := g.remote()
			if first == 0 {
				first = w
			}
			if gw := g.cfg.groupOf(w); !slices.Contains(groups, gw) {
				if limit && len(groups) == globalGroupsMax {
					w = first
				} else {
					groups = append(groups, gw)
				}
			}
			l.SupplyW = w
		}
	}
	// Item ids have six digits: with 999999 items no id is unused, and
	// no new-order rolls back.
	rollback := g.between(1, 100) <= rollbackPercent && g.cfg.Scale.Items < 999999
	if rollback {
		args.Lines[len(args.Lines)-1].Item = g.cfg.Scale.Items + 1
	}
	return args, rollback
}

// remoteLines draws a new-order's line count (5..15) and which lines are
// supplied by a remote warehouse: each with probability RemoteItem, none
// when the cluster has one warehouse. Under GlobalOnly the draw is
// conditioned on at least one remote line, exactly rather than by
// drawing again (which a small RemoteItem would make slow): the count k
// with weight 1-(1-p)^k, then the first remote line i with weight
// (1-p)^(i-1), then the lines after it independently.
func (g *Generator) remoteLines() []bool {
	p := g.cfg.RemoteItem
	if len(g.remotes) == 0 {
		p = 0
	}
	if !g.cfg.GlobalOnly {
		remote := make([]bool, g.between(procs.OrderLinesMin, procs.OrderLinesMax))
		for i := range remote {
			remote[i] = g.chance(p)
		}
		return remote
	}
	var counts [procs.OrderLinesMax - procs.OrderLinesMin + 1]float64
	for i := range counts {
		counts[i] = -math.Expm1(float64(procs.OrderLinesMin+i) * math.Log1p(-p)) // 1-(1-p)^k, exact for small p
	}
	remote := make([]bool, procs.OrderLinesMin+g.pick(counts[:]))
	firsts := make([]float64, len(remote))
	for i := range firsts {
		firsts[i] = math.Pow(1-p, float64(i))
	}
	first := g.pick(firsts)
	remote[first] = true
	for i := first + 1; i < len(remote); i++ {
		remote[i] = g.chance(p)
	}
	return remote
}

// pick returns an index of weights (non-negative, not all zero) with
// probability proportional to its weight.
func (g *Generator) pick(weights []float64) int {
	total := 0.0
	for _, w := range weights {
		total += w
	}
	x := g.rng.Float64() * total
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	// Rounding: the last index of positive weight.
	for i := len(weights) - 1; i > 0; i-- {
		if weights[i] > 0 {
			return i
		}
	}
	return 0
}

// ClusterLayout returns a WorkloadConfig's Distance and Group for the
// warehouses of a cluster. A warehouse's group is the group that owns its
// partition (a partition.GroupID); -1 for a warehouse not among
// warehouses. The distance between two warehouses is the round-trip
// latency between their groups' regions: the matrix's diagonal within a
// group, +Inf when one is not among warehouses, and 0 for all without a
// matrix (lat nil: remote warehouses ranked by number). It fails when a
// warehouse is in no partition, or in a replicated one, or when the
// matrix lacks a group's region.
func ClusterLayout(parts *partition.PartitionMap, groups *partition.Topology, lat *partition.Latency, warehouses []int) (distance func(a, b int) float64, group func(w int) int, err error) {
	owner := make(map[int]partition.GroupID, len(warehouses))
	for _, w := range warehouses {
		if w < 1 || w > procs.WarehouseMax {
			return nil, nil, fmt.Errorf("gtpcc: warehouse %d, want 1..%d", w, procs.WarehouseMax)
		}
		g, replicated, err := parts.Owner(procs.WarehouseKey(w))
		if err != nil {
			return nil, nil, fmt.Errorf("gtpcc: warehouse %d: %w", w, err)
		}
		if replicated {
			return nil, nil, fmt.Errorf("gtpcc: warehouse %d is in a replicated partition", w)
		}
		if g < 0 {
			return nil, nil, fmt.Errorf("gtpcc: warehouse %d is owned by group %d", w, g)
		}
		owner[w] = g
	}
	group = func(w int) int {
		if g, ok := owner[w]; ok {
			return int(g)
		}
		return -1
	}
	if lat == nil {
		return func(int, int) float64 { return 0 }, group, nil
	}
	if err := lat.CheckTopology(groups); err != nil {
		return nil, nil, fmt.Errorf("gtpcc: %w", err)
	}
	distance = func(a, b int) float64 {
		ga, okA := owner[a]
		gb, okB := owner[b]
		if !okA || !okB {
			return math.Inf(1) // not a warehouse of the cluster: farthest
		}
		return lat.GroupRTTMs(groups, ga, gb)
	}
	return distance, group, nil
}
