package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/loadgen"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Defaults of `flexkv bench`: the parameters of etcd's own put benchmark
// (`benchmark put --clients 50 --total 20000 --key-size 16 --val-size
// 100`), so that the two tools compare without flags.
const (
	benchClientsDefault = 50
	benchTotalDefault   = 20000
	benchKeySizeDefault = 16
	benchValSizeDefault = 100
	// benchErrorsMax stops a run after that many failed requests: against a
	// cluster that went away each request would wait for its --timeout, and
	// a run of 20000 would take hours to report what the first few showed.
	benchErrorsMax = 100
)

// benchOps are the subcommands of `flexkv bench`, in help order.
var benchOps = []struct{ name, short string }{
	{"put", "Put --total keys of --val-size bytes"},
	{"get", "Get --total keys, those a bench put with the same flags wrote"},
	{"txn", "Run --total transactions, each moving a unit between partitions of two groups"},
}

// newBenchCmd returns `flexkv bench` and its subcommands put, get and txn
// (DESIGN 7).
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "bench put|get|txn [--clients N] [--total N] [--key-size N] [--val-size N] [--prefix P] [--json]",
		SilenceUsage:  true,
		SilenceErrors: true, // main prints the error once
		Short:         "Measure requests/s and latency of puts, gets or transactions on a FlexKV cluster",
		Long: `Measure a FlexKV cluster like etcd's benchmark tool: --clients clients, each
with one request in flight, make --total requests back to back; then the
command prints requests/s (of the requests that succeeded, over the run's
wall time) and the latency percentiles p50, p90, p99, p99.9 and max, from an
HDR histogram (microseconds, 3 significant digits). With --json it prints one
object instead:
  {"op":"put","clients":50,"total":20000,"errors":0,"requests_per_s":9312.4,
   "latency_ms":{"mean":5.36,"p50":5.02,"p90":7.1,"p99":12.8,"p999":20.1,"max":31.5}}
"total" counts the requests made, failed ones included; latencies are those
of the requests that succeeded. bench txn also prints the latency of its 1st
and 2nd destination's answer (FlexCast's lca answers once it delivered and
ran its piece); with --answers the JSON object has them too, as
"answers_ms": a list of two objects like "latency_ms".

Keys: request i uses the key P followed by --key-size bytes, i as a
zero-padded decimal number (its last --key-size digits: the keys repeat every
10^key-size requests, so a small --key-size makes a small, hot key space).
P is --prefix, by default the start key of the first partition, in key
order, that one group owns ("w/0001/" in configs/local.yaml). Every key must
lie in one partition.

  bench put   puts a value of --val-size printable bytes at each key.
  bench get   gets each key, through the leader (linearizable): with the same
              --total, --key-size and --prefix, the keys bench put wrote. A
              missing key is no error; the text output counts those found.
              With --read-txn each get is a read-only transaction of that one
              get (a Txn), which the leader serves like a Get (DESIGN 6.5).
  bench txn   runs, per request, the transaction
                {"then":[{"op":"add","key":"<A>","int":-1,"wrap":true},{"op":"add","key":"<B>","int":1,"wrap":true}]}
              an unconditional transfer whose adds wrap, so that no group votes
              (--wrap=false: checked adds, on which both groups vote, and each
              waits for the other's vote): A is the request's key, B the same
              number after the start key of the first partition, in key order,
              of another group than A's. Its numbers count down from 9...9
              (request i: 10^key-size-1-i), so that it does not add to the
              text values of a bench put run before it. Each transfer keeps
              the sum A+B (a missing key counts as 0). --val-size is unused.

The cluster is reached as by flexkv kv: --endpoints, else the addresses of
--config (default: the embedded configs/local.yaml), with the TLS flags;
--timeout bounds connecting and then each request. --one-endpoint sends every
request to the first endpoint, which forwards those it does not serve to the
right group's leader (one more hop: DESIGN 7). --gateway HOST:PORT makes put
and get through a replica's HTTP/JSON gateway (PUT and GET /v1/kv/KEY, with
the same client certificate) instead of the Go client, which still reads the
topology: run both against one cluster to compare them. After ` + strconv.Itoa(benchErrorsMax) + ` failed
requests the run stops early.

Exit codes: 0 every request succeeded; 1 some failed (counted in the
output; the first error on stderr); 2 bad usage (nothing was sent); 3 the
cluster is unreachable (connecting failed, or every request failed so).`,
	}
	needSubcommand(cmd, "put, get or txn")
	pf := cmd.PersistentFlags()
	addConnFlags(pf, "deadline of connecting, then of each request")
	pf.Int("clients", benchClientsDefault, fmt.Sprintf("concurrent clients, each with one request in flight: 1..%d", loadgen.ClientsMax))
	pf.Int("total", benchTotalDefault, fmt.Sprintf("requests to make: 1..%d", loadgen.TotalMax))
	pf.Int("key-size", benchKeySizeDefault, "bytes of each key after the prefix: a zero-padded request number")
	pf.Int("val-size", benchValSizeDefault, fmt.Sprintf("bytes of each value (put): 0..txn.ValueMax (%d)", txn.ValueMax))
	pf.String("prefix", "", "the keys' prefix (default: the start key of the first partition one group owns)")
	pf.Bool("wrap", true, "txn: adds that wrap, which need no vote (false: checked adds, which vote)")
	pf.Bool("read-txn", false, "get: read each key by a read-only transaction (a Txn of one get) instead of a Get")
	pf.Bool("answers", false, `txn: add "answers_ms", the 1st and 2nd destination's answer, to the --json object`)
	pf.String("gateway", "", "put, get: send each request through the HTTP gateway at host:port (PUT and GET /v1/kv/KEY) instead of the Go client")
	pf.Bool("one-endpoint", false, "send every request to the first endpoint, which forwards what it does not serve to the right group's leader")
	pf.Bool("json", false, `print one JSON object: {"op":...,"clients":...,"total":...,"errors":...,"requests_per_s":...,"latency_ms":{...}}`)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(fmt.Errorf("%s: %w", benchName(c), err))
	})
	for _, op := range benchOps {
		cmd.AddCommand(&cobra.Command{
			Use:   op.name,
			Short: op.short,
			Args: func(c *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageError(fmt.Errorf("%s: want no arguments, got %d (%q)", benchName(c), len(args), args))
				}
				return nil
			},
			RunE: runBench,
		})
	}
	return cmd
}

// benchName names a bench command in errors: "bench put".
func benchName(c *cobra.Command) string {
	if p := c.Parent(); p != nil && p.Name() == "bench" {
		return "bench " + c.Name()
	}
	return c.Name()
}

// benchOptions are the flags of a bench run, checked.
type benchOptions struct {
	op        string // put, get or txn
	clients   int
	total     int
	keySize   int
	valSize   int
	prefix    []byte
	prefixSet bool // --prefix given, even empty
	wrap      bool // txn: adds that wrap
	answers   bool // txn: answers_ms in the JSON
	readTxn   bool // get: by a read-only Txn
	asJSON    bool
	// gateway is the host:port of an HTTP gateway that put and get go
	// through (--gateway), oneEndpoint sends every request to the first
	// endpoint, which forwards (--one-endpoint).
	gateway     string
	oneEndpoint bool
	httpTLS     *tls.Config // the client's TLS, for gateway
}

// benchFlags reads and checks the bench flags of c. They are read from the
// command line only: the environment (FLEXKV_*) gives connection settings,
// never the size of a run.
func benchFlags(c *cobra.Command) (benchOptions, error) {
	f := c.Flags()
	o := benchOptions{op: c.Name(), prefixSet: f.Changed("prefix")}
	var err error
	get := func(name string, p *int) {
		if err == nil {
			*p, err = f.GetInt(name)
		}
	}
	get("clients", &o.clients)
	get("total", &o.total)
	get("key-size", &o.keySize)
	get("val-size", &o.valSize)
	if err != nil {
		return o, err
	}
	prefix, _ := f.GetString("prefix") // registered above: cannot fail
	o.prefix = []byte(prefix)
	o.asJSON, _ = f.GetBool("json")
	o.wrap, _ = f.GetBool("wrap")
	o.answers, _ = f.GetBool("answers")
	o.readTxn, _ = f.GetBool("read-txn")
	o.gateway, _ = f.GetString("gateway")
	o.oneEndpoint, _ = f.GetBool("one-endpoint")
	switch {
	case o.gateway != "" && o.op == "txn":
		return o, fmt.Errorf("--gateway runs put and get (a transaction's other answers are awaited: use the Go client)")
	case o.readTxn && (o.op != "get" || o.gateway != ""):
		return o, fmt.Errorf("--read-txn reads by the Go client: bench get without --gateway")
	case o.gateway != "" && o.oneEndpoint:
		return o, fmt.Errorf("--gateway and --one-endpoint: choose one")
	case o.clients < 1 || o.clients > loadgen.ClientsMax:
		return o, fmt.Errorf("--clients %d, want 1..%d", o.clients, loadgen.ClientsMax)
	case o.total < 1 || o.total > loadgen.TotalMax:
		return o, fmt.Errorf("--total %d, want 1..%d", o.total, loadgen.TotalMax)
	case o.keySize < 1 || o.keySize > partition.KeyMax:
		return o, fmt.Errorf("--key-size %d, want 1..partition.KeyMax (%d)", o.keySize, partition.KeyMax)
	case o.valSize < 0 || o.valSize > txn.ValueMax:
		return o, fmt.Errorf("--val-size %d, want 0..txn.ValueMax (%d)", o.valSize, txn.ValueMax)
	case len(o.prefix)+o.keySize > partition.KeyMax:
		return o, fmt.Errorf("--prefix of %d bytes and --key-size %d make keys of %d bytes, more than partition.KeyMax (%d)",
			len(o.prefix), o.keySize, len(o.prefix)+o.keySize, partition.KeyMax)
	}
	return o, nil
}

// benchPlan is where a run's requests go.
type benchPlan struct {
	keys loadgen.Keys        // the keys of put and get; txn's first account
	part partition.Partition // the partition of keys
	// other and otherPart are txn's second account: the same numbers in a
	// partition of another group.
	other     loadgen.Keys
	otherPart partition.Partition
}

// planBench places the keys of o in pm: every key of a run in one
// partition, and for txn the second account in another group's.
func planBench(o benchOptions, pm *partition.PartitionMap) (benchPlan, error) {
	var plan benchPlan
	prefix := o.prefix
	if !o.prefixSet {
		first, ok := firstOwned(pm, partition.NoGroup)
		if !ok {
			return plan, errors.New("every partition is replicated: give --prefix")
		}
		prefix = first.Start
	}
	// Transfers count their accounts down from 9...9 while puts and gets
	// count up from 0: a bench txn after a bench put with the same flags
	// adds to integers, not to the put's values (which would abort it).
	descending := o.op == "txn"
	plan.keys = loadgen.Keys{Prefix: prefix, Size: o.keySize, Descending: descending}
	var err error
	if plan.part, err = keysIn(plan.keys, pm); err != nil {
		return plan, err
	}
	if o.op != "txn" {
		return plan, nil
	}
	if plan.part.Replicated {
		return plan, fmt.Errorf("the keys lie in the replicated partition %s: a transfer needs a partition one group owns", plan.part)
	}
	other, ok := firstOwned(pm, plan.part.Group)
	if !ok {
		return plan, fmt.Errorf("no partition of another group than %s's (group %d): a transfer needs partitions of two groups", plan.part.Name, plan.part.Group)
	}
	plan.other = loadgen.Keys{Prefix: other.Start, Size: o.keySize, Descending: descending}
	if plan.otherPart, err = keysIn(plan.other, pm); err != nil {
		return plan, fmt.Errorf("second account: %w", err)
	}
	return plan, nil
}

// firstOwned returns the first partition in key order that one group owns,
// other than group not (partition.NoGroup: any group).
func firstOwned(pm *partition.PartitionMap, not partition.GroupID) (partition.Partition, bool) {
	for _, p := range pm.Partitions() {
		if !p.Replicated && p.Group != not {
			return p, true
		}
	}
	return partition.Partition{}, false
}

// keysIn returns the one partition that holds every key of k: since all
// of k's keys sort between its first and its last, and a partition is a
// range, it is the partition of both.
func keysIn(k loadgen.Keys, pm *partition.PartitionMap) (partition.Partition, error) {
	first, last := k.First(), k.Last()
	pf, err := pm.Lookup(first)
	if err != nil {
		return pf, fmt.Errorf("keys %s..%s: %w", strconv.Quote(string(first)), strconv.Quote(string(last)), err)
	}
	pl, err := pm.Lookup(last)
	if err != nil {
		return pl, fmt.Errorf("keys %s..%s: %w", strconv.Quote(string(first)), strconv.Quote(string(last)), err)
	}
	if !bytes.Equal(pf.Start, pl.Start) {
		return pf, fmt.Errorf("keys %s..%s span partitions %s and %s: give a --prefix (or a --key-size) whose keys lie in one partition",
			strconv.Quote(string(first)), strconv.Quote(string(last)), pf.Name, pl.Name)
	}
	return pf, nil
}

// benchOutput is what `bench --json` prints (DESIGN 7).
type benchOutput struct {
	Op           string       `json:"op"`
	Clients      int          `json:"clients"`
	Total        int          `json:"total"`
	Errors       int          `json:"errors"`
	RequestsPerS float64      `json:"requests_per_s"`
	LatencyMs    benchLatency `json:"latency_ms"`
	// AnswersMs (txn with --answers only: DESIGN 7's object has no such
	// field): the latency of the 1st and the 2nd destination's answer,
	// from the call's start, over the transactions that succeeded.
	AnswersMs []benchLatency `json:"answers_ms,omitempty"`
}

type benchLatency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// runBench runs one bench subcommand: checks its flags, connects, places
// the keys in the cluster's partition map, runs the load and reports it.
func runBench(c *cobra.Command, _ []string) error {
	name := benchName(c)
	o, err := benchFlags(c)
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}
	conn, err := kvSettings(c)
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}
	// With the map known before connecting, bad keys are reported without
	// contacting the cluster; the cluster's own map decides below.
	if conn.pm != nil {
		if _, err := planBench(o, conn.pm); err != nil {
			return usageError(fmt.Errorf("%s: %w", name, err))
		}
	}
	ctx := c.Context()
	connectCtx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	cl, err := client.New(connectCtx, client.Config{
		Endpoints:   conn.endpoints,
		TLS:         conn.tls,
		Region:      conn.region,
		Sessions:    o.clients, // one request in flight per bench client
		Logger:      slog.New(slog.DiscardHandler),
		OneEndpoint: o.oneEndpoint,
	})
	if err != nil {
		return kvError(connectCtx, name, conn, err, true)
	}
	defer func() { _ = cl.Close() }() // connections only: nothing to lose
	plan, err := planBench(o, cl.Topology().Partitions)
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}

	var found atomic.Int64
	var answers []*loadgen.Recorder
	if o.op == "txn" {
		answers = []*loadgen.Recorder{loadgen.NewRecorder(), loadgen.NewRecorder()}
	}
	o.httpTLS = conn.tls
	op := benchOp(o, plan, cl, &found, answers)
	res, err := loadgen.Run(ctx, loadgen.Config{Clients: o.clients, Total: o.total, ErrorsMax: benchErrorsMax},
		func(ctx context.Context, _, i int) error {
			ctx, cancel := context.WithTimeout(ctx, conn.timeout)
			defer cancel()
			return op(ctx, i)
		})
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err)) // benchFlags checked the sizes
	}
	s := res.Summary()
	out := c.OutOrStdout()
	if o.asJSON {
		bo := benchOutput{
			Op: o.op, Clients: o.clients, Total: res.Requests, Errors: res.Errors, RequestsPerS: s.RequestsPerS,
			LatencyMs: latencyOf(s),
		}
		if o.answers {
			for _, a := range answers {
				bo.AnswersMs = append(bo.AnswersMs, latencyOf(a.Summary()))
			}
		}
		err = writeJSON(out, bo)
	} else {
		err = writeBenchText(out, o, plan, res, s, found.Load(), answers)
	}
	if err != nil {
		return err
	}
	if res.Errors == 0 && !res.Stopped {
		return nil
	}
	code := kvExitFailed
	if res.FirstError != nil && res.Errors == res.Requests &&
		exitCode(kvError(ctx, name, conn, res.FirstError, false)) == kvExitUnreachable {
		code = kvExitUnreachable
	}
	what := fmt.Sprintf("%d of %d requests failed", res.Errors, res.Requests)
	if res.Stopped {
		what += fmt.Sprintf(", stopped before --total %d", o.total)
	}
	if res.FirstError == nil { // stopped by ctx alone
		return &exitError{code: code, err: fmt.Errorf("%s: %s: %w", name, what, ctx.Err())}
	}
	return &exitError{code: code, err: fmt.Errorf("%s: %s; the first: %w", name, what, oneLine{res.FirstError})}
}

func latencyOf(s loadgen.Summary) benchLatency {
	return benchLatency{Mean: s.MeanMs, P50: s.P50Ms, P90: s.P90Ms, P99: s.P99Ms, P999: s.P999Ms, Max: s.MaxMs}
}

// benchOp returns the request of o's operation: it makes request i. A get
// that finds its key adds one to found; a transaction that succeeds records
// its k-th answer in answers[k].
func benchOp(o benchOptions, plan benchPlan, cl *client.Client, found *atomic.Int64, answers []*loadgen.Recorder) func(context.Context, int) error {
	if o.gateway != "" {
		return gatewayOp(o, plan, o.httpTLS, found)
	}
	switch o.op {
	case "put":
		value := benchValue(o.valSize)
		return func(ctx context.Context, i int) error {
			return cl.Put(ctx, plan.keys.Key(i), value)
		}
	case "get":
		if o.readTxn {
			return readTxnOp(plan, cl, found)
		}
		return func(ctx context.Context, i int) error {
			_, ok, err := cl.Get(ctx, plan.keys.Key(i))
			if ok {
				found.Add(1)
			}
			return err
		}
	}
	return func(ctx context.Context, i int) error {
		res, err := cl.Txn(ctx, &txn.Txn{Then: []txn.Op{
			{Kind: txn.OpAdd, Key: plan.keys.Key(i), Int: -1, Wrap: o.wrap},
			{Kind: txn.OpAdd, Key: plan.other.Key(i), Int: 1, Wrap: o.wrap},
		}})
		if err == nil && !res.Succeeded {
			// Without compares the then branch always runs.
			err = fmt.Errorf("transaction %s ran its else branch, which it does not have", res.ID)
		}
		if err == nil {
			for k, d := range res.Destinations {
				if k < len(answers) {
					answers[k].Record(time.Duration(d.Ms * float64(time.Millisecond)))
				}
			}
		}
		return err
	}
}

// readTxnOp is bench get --read-txn's request: a read-only transaction of
// the one get of key i.
func readTxnOp(plan benchPlan, cl *client.Client, found *atomic.Int64) func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		res, err := cl.Txn(ctx, &txn.Txn{Then: []txn.Op{{Kind: txn.OpGet, Key: plan.keys.Key(i)}}})
		if err == nil && len(res.Results) == 1 && res.Results[0].Found {
			found.Add(1)
		}
		return err
	}
}

// benchValue returns the value of every put: size printable bytes.
func benchValue(size int) []byte {
	v := make([]byte, size)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// writeBenchText prints a run's report for people, etcd's figures first.
func writeBenchText(w io.Writer, o benchOptions, plan benchPlan, res loadgen.Result, s loadgen.Summary, found int64, answers []*loadgen.Recorder) error {
	// The keys of requests 0 and total-1, unless they wrapped around.
	first, last := plan.keys.Key(0), plan.keys.Last()
	if plan.keys.Descending {
		last = plan.keys.First()
	}
	if o.keySize >= 10 || o.total <= int(math.Pow10(o.keySize)) { // TotalMax < 10^10
		last = plan.keys.Key(o.total - 1)
	}
	keys := fmt.Sprintf("keys %s..%s in %s", strconv.Quote(string(first)), strconv.Quote(string(last)), plan.part.Name)
	switch o.op {
	case "put":
		keys += fmt.Sprintf(", values of %d bytes", o.valSize)
	case "get":
		keys += fmt.Sprintf(", %d found", found)
	case "txn":
		keys += fmt.Sprintf(", each -1 there and +1 at %s.. in %s", strconv.Quote(string(plan.other.Key(0))), plan.otherPart.Name)
	}
	_, err := fmt.Fprintf(w, `bench %s: %d requests, %d clients, %d errors, %.3f s
  requests/s  %.1f
  latency ms  mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f
  %s
`, o.op, res.Requests, o.clients, res.Errors, res.Elapsed.Seconds(), s.RequestsPerS,
		s.MeanMs, s.P50Ms, s.P90Ms, s.P99Ms, s.P999Ms, s.MaxMs, keys)
	for k, a := range answers {
		if err != nil || a.Count() == 0 {
			break
		}
		as := a.Summary()
		_, err = fmt.Fprintf(w, "  answer %d ms mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
			k+1, as.MeanMs, as.P50Ms, as.P90Ms, as.P99Ms, as.P999Ms, as.MaxMs)
	}
	return err
}
