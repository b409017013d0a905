// Command go-ycsb-flexkv is go-ycsb's command line with the FlexKV binding
// (package flexkvdb, database "flexkv") and go-ycsb's own etcd binding
// (database "etcd") linked in, so that one binary runs the same workloads
// against both:
//
//	go-ycsb-flexkv load flexkv -P workloads/workloada -p flexkv.config=cluster.yaml -p flexkv.certs=certs
//	go-ycsb-flexkv run etcd -P workloads/workloada -p etcd.endpoints=127.0.0.1:2379 --threads 50
//
// The commands and flags are go-ycsb's: load and run, -P (a property file,
// repeatable), -p name=value (repeatable), --threads, --target, --interval
// and --table. Property debug.pprof=host:port serves Go's profiles there
// during the run. See contrib/ycsb/README.md.
package main

import (
	"context"
	"fmt"
	"net/http"
	_ "net/http/pprof" // served at debug.pprof when it is set
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/client"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/pingcap/go-ycsb/pkg/ycsb"
	"github.com/spf13/cobra"

	_ "github.com/pingcap/go-ycsb/db/etcd"      // database "etcd"
	_ "github.com/pingcap/go-ycsb/pkg/workload" // workload "core"

	_ "github.com/flexkv/flexkv/contrib/ycsb/flexkvdb" // database "flexkv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "go-ycsb-flexkv",
		Short:         "YCSB workloads against FlexKV (database flexkv) and etcd (database etcd)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newCommand("load", "load the records of a workload", false), newCommand("run", "run the operations of a workload", true))
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "go-ycsb-flexkv:", err)
		os.Exit(1)
	}
}

// flags are a command's flags, go-ycsb's.
type flags struct {
	files    []string
	values   []string
	table    string
	threads  int
	target   int
	interval int
}

func newCommand(name, short string, transactions bool) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   name + " DB",
		Short: short + " (DB: " + strings.Join(databases(), ", ") + ")",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := f.properties(cmd, name, transactions)
			if err != nil {
				return err
			}
			return run(cmd.Context(), args[0], p)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVarP(&f.files, "property_file", "P", nil, "a property file (a workload), repeatable")
	fs.StringArrayVarP(&f.values, "prop", "p", nil, "a property, name=value, repeatable; after the files")
	fs.StringVar(&f.table, "table", "", "the table (property table; default usertable)")
	fs.IntVar(&f.threads, "threads", 1, "concurrent operations (property threadcount)")
	fs.IntVar(&f.target, "target", 0, "operations per second to aim at, 0 for no limit (property target)")
	fs.IntVar(&f.interval, "interval", 10, "seconds between progress reports (property measurement.interval)")
	return cmd
}

// databases returns the names of the databases linked in.
func databases() []string {
	var out []string
	for _, name := range []string{"flexkv", "etcd"} {
		if ycsb.GetDBCreator(name) != nil {
			out = append(out, name)
		}
	}
	return out
}

// properties returns the properties of the files, then of -p, then of the
// flags given, as go-ycsb orders them.
func (f *flags) properties(cmd *cobra.Command, command string, transactions bool) (*properties.Properties, error) {
	p := properties.NewProperties()
	if len(f.files) > 0 {
		var err error
		if p, err = properties.LoadFiles(f.files, properties.UTF8, false); err != nil {
			return nil, err
		}
	}
	for _, kv := range f.values {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("property %q: want name=value", kv)
		}
		if _, _, err := p.Set(name, value); err != nil {
			return nil, fmt.Errorf("property %q: %w", kv, err)
		}
	}
	set := func(name, value string) { _, _, _ = p.Set(name, value) }
	set(prop.DoTransactions, strconv.FormatBool(transactions))
	set(prop.Command, command)
	if f.table != "" {
		set(prop.TableName, f.table)
	}
	for _, fl := range []struct{ flag, prop string }{
		{"threads", prop.ThreadCount}, {"target", prop.Target}, {"interval", prop.LogInterval},
	} {
		if cmd.Flags().Changed(fl.flag) {
			set(fl.prop, cmd.Flags().Lookup(fl.flag).Value.String())
		}
	}
	return p, nil
}

// run creates the workload and the database and runs the workload's
// threads until they finish or ctx ends, then prints go-ycsb's summary.
func run(ctx context.Context, dbName string, p *properties.Properties) error {
	if addr, ok := p.Get(prop.DebugPprof); ok {
		go func() { _ = http.ListenAndServe(addr, nil) }() //nolint:gosec // a debugging aid on the address asked for
	}
	measurement.InitMeasure(p)
	wname := p.GetString(prop.Workload, "core")
	wc := ycsb.GetWorkloadCreator(wname)
	if wc == nil {
		return fmt.Errorf("no workload %q", wname)
	}
	w, err := wc.Create(p)
	if err != nil {
		return fmt.Errorf("workload %s: %w", wname, err)
	}
	defer w.Close()
	dc := ycsb.GetDBCreator(dbName)
	if dc == nil {
		return fmt.Errorf("no database %q: want one of %s", dbName, strings.Join(databases(), ", "))
	}
	db, err := dc.Create(p)
	if err != nil {
		return fmt.Errorf("database %s: %w", dbName, err)
	}
	defer db.Close()
	printProperties(p)
	if w := zipfianInsertWarning(p); w != "" {
		fmt.Fprintln(os.Stderr, "go-ycsb-flexkv: warning:", w)
	}
	start := time.Now()
	client.NewClient(p, w, client.DbWrapper{DB: db}).Run(ctx)
	fmt.Println("**********************************************")
	fmt.Printf("Run finished, takes %s\n", time.Since(start))
	measurement.Output()
	return ctx.Err()
}

// zipfianInsertWarning returns a warning for a run whose zipfian reads
// will fail for want of their key, on any database, else "". Under zipfian,
// go-ycsb chooses keys among the records and twice the inserts the run
// expects, and, unlike YCSB's own core workload, does not choose again when
// the key is past the last insert acknowledged: a read of such a key finds
// nothing (READ_ERROR). Workload D's own distribution, latest, reads only
// acknowledged inserts.
func zipfianInsertWarning(p *properties.Properties) string {
	if !p.GetBool(prop.DoTransactions, true) || p.GetString(prop.RequestDistribution, prop.RequestDistributionDefault) != "zipfian" {
		return ""
	}
	inserts := p.GetFloat64(prop.InsertProportion, prop.InsertProportionDefault)
	if inserts <= 0 {
		return ""
	}
	return fmt.Sprintf("%s=zipfian with %s=%g: go-ycsb reads among keys it has not inserted yet too, and those reads fail (READ_ERROR) on every database; %s=latest (workload D's own) or uniform reads only records that exist",
		prop.RequestDistribution, prop.InsertProportion, inserts, prop.RequestDistribution)
}

// printProperties prints the properties of the run, sorted.
func printProperties(p *properties.Properties) {
	m := p.Map()
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	fmt.Println("***************** properties *****************")
	for _, name := range names {
		fmt.Printf("%q=%q\n", name, m[name])
	}
	fmt.Println("**********************************************")
}
