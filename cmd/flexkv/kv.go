package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Exit codes of `flexkv kv` (DESIGN 7): scripts tell a missing key or an
// aborted transaction from a typo and from a cluster that does not answer.
const (
	kvExitFailed      = 1 // not found, aborted, or the cluster refused the request
	kvExitUsage       = 2 // bad arguments or input: nothing was sent
	kvExitUnreachable = 3 // no endpoint answered, or no answer before --timeout
)

const (
	// kvTimeoutDefault bounds a whole command: connecting, fetching the
	// topology and the call.
	kvTimeoutDefault = 10 * time.Second
	// kvScanLimitDefault is the --limit of a scan when none is given.
	kvScanLimitDefault = 100
	// kvTxnInputMax bounds the JSON read by `kv txn --file`: the largest
	// transaction (txn.BytesMax of keys and values) fits many times over,
	// even with every byte escaped, and a wrong file (a log, a device) is
	// refused instead of read whole.
	kvTxnInputMax = 8 << 20
)

// newKVCmd returns `flexkv kv` and its subcommands get, put, del, scan and
// txn (DESIGN 7).
func newKVCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "kv get|put|del|scan|txn ...",
		SilenceUsage:  true,
		SilenceErrors: true, // main prints the error once
		Short:         "Read and write keys, and run transactions, on a FlexKV cluster",
		Long: `Read and write keys, and run one-shot transactions, on a FlexKV cluster.

  flexkv kv get KEY                 prints the value alone on one line (a gTPC-C
                                    row as JSON; --raw: as stored)
  flexkv kv put KEY VALUE           prints nothing
  flexkv kv del KEY                 prints nothing
  flexkv kv scan START END          prints one KEY<TAB>VALUE line per key of [START, END)
  flexkv kv txn --json '<txn>'      prints the result JSON
  flexkv kv txn --file F            the same, the transaction read from F (- for stdin)

The cluster is reached at --endpoints (default: the gRPC addresses of --config,
itself by default the embedded configs/local.yaml). When the partition map is
known before connecting (no --endpoints, or an explicit --config), keys are
checked against it first, so that a key in no partition is reported without
contacting the cluster. The connection flags may also come from the
environment: FLEXKV_ENDPOINTS, FLEXKV_CONFIG, FLEXKV_TIMEOUT, FLEXKV_REGION.

Exit codes: 0 ok; 1 key not found, transaction aborted or request refused;
2 bad usage or input (nothing was sent); 3 cluster unreachable or --timeout
reached.`,
	}
	needSubcommand(cmd, "get, put, del, scan or txn")
	addConnFlags(cmd.PersistentFlags(), "deadline of the whole command: connecting, fetching the topology and the call")
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(fmt.Errorf("%s: %w", kvName(c), err))
	})
	cmd.AddCommand(newKVGetCmd(), newKVPutCmd(), newKVDelCmd(), newKVScanCmd(), newKVTxnCmd())
	return cmd
}

// kvName names a kv command in errors: "kv get".
func kvName(c *cobra.Command) string {
	if p := c.Parent(); p != nil && p.Name() == "kv" {
		return "kv " + c.Name()
	}
	return c.Name()
}

// kvArgs checks the number of positional arguments against names, which
// the error lists.
func kvArgs(names ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) == len(names):
		case len(names) == 0:
			return usageError(fmt.Errorf("%s: want no arguments, got %d (%q)", kvName(c), len(args), args))
		default:
			return usageError(fmt.Errorf("%s: want %s, got %d arguments", kvName(c), strings.Join(names, " "), len(args)))
		}
		return nil
	}
}

// rowFlagHelp is the help of --raw.
const rowFlagHelp = "print values as stored: without it, a gTPC-C row (stored in binary) prints as JSON"

// shownValue returns value as kv get and kv scan print it: a gTPC-C row
// or procedure arguments (procs.RowJSON) as JSON unless raw, any other
// value, or one that does not decode, as it is.
func shownValue(value []byte, raw bool) []byte {
	if raw {
		return value
	}
	if js, ok, err := procs.RowJSON(value); ok && err == nil {
		return js
	}
	return value
}

func newKVGetCmd() *cobra.Command {
	var asJSON, stale, raw bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value of KEY (exit 1 when it is missing)",
		Args:  kvArgs("KEY"),
		RunE: func(c *cobra.Command, args []string) error {
			name, key := kvName(c), []byte(args[0])
			if err := partition.CheckKey(key); err != nil {
				return usageError(fmt.Errorf("%s: %w", name, err))
			}
			return execKV(c, keyInMap(key), func(ctx context.Context, cl *client.Client) error {
				get := cl.Get
				if stale {
					get = cl.GetStale
				}
				value, found, err := get(ctx, key)
				if err != nil {
					return err
				}
				value = shownValue(value, raw)
				out := c.OutOrStdout()
				switch {
				case asJSON:
					res := kvGetOutput{Key: string(key), Found: found, Stale: stale}
					if found {
						res.Value = new(string(value))
					}
					if err := writeJSON(out, res); err != nil {
						return err
					}
				case found:
					if _, err := fmt.Fprintf(out, "%s\n", value); err != nil {
						return err
					}
				}
				if !found {
					return &exitError{code: kvExitFailed, err: fmt.Errorf("%s: key %s not found", name, strconv.Quote(string(key)))}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"key":...,"found":...,"value":...}`)
	cmd.Flags().BoolVar(&stale, "stale", false, `read a replica's state without asking the leader: faster, possibly stale (with --json, marked "stale":true)`)
	cmd.Flags().BoolVar(&raw, "raw", false, rowFlagHelp)
	return cmd
}

// kvGetOutput is what `kv get --json` prints.
type kvGetOutput struct {
	Key   string  `json:"key"`
	Found bool    `json:"found"`
	Value *string `json:"value,omitempty"`
	Stale bool    `json:"stale,omitempty"`
}

// kvWriteOutput is what `kv put --json` and `kv del --json` print.
type kvWriteOutput struct {
	Key string `json:"key"`
	OK  bool   `json:"ok"`
}

func newKVPutCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Set KEY to VALUE",
		Args:  kvArgs("KEY", "VALUE"),
		RunE: func(c *cobra.Command, args []string) error {
			name, key, value := kvName(c), []byte(args[0]), []byte(args[1])
			if err := partition.CheckKey(key); err != nil {
				return usageError(fmt.Errorf("%s: %w", name, err))
			}
			if len(value) > txn.ValueMax {
				return usageError(fmt.Errorf("%s: value of %d bytes, more than txn.ValueMax (%d)", name, len(value), txn.ValueMax))
			}
			return execKV(c, keyInMap(key), func(ctx context.Context, cl *client.Client) error {
				if err := cl.Put(ctx, key, value); err != nil {
					return err
				}
				return writeDone(c, key, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"key":...,"ok":true}`)
	return cmd
}

// keyInMap returns the check that key lies in a partition of the map.
func keyInMap(key []byte) func(*partition.PartitionMap) error {
	return func(pm *partition.PartitionMap) error {
		_, err := pm.Lookup(key)
		return err
	}
}

// writeDone prints what put and del print once done: nothing, or with
// --json {"key":...,"ok":true}.
func writeDone(c *cobra.Command, key []byte, asJSON bool) error {
	if !asJSON {
		return nil
	}
	return writeJSON(c.OutOrStdout(), kvWriteOutput{Key: string(key), OK: true})
}

func newKVDelCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "del KEY",
		Short: "Delete KEY (deleting a missing key is not an error)",
		Args:  kvArgs("KEY"),
		RunE: func(c *cobra.Command, args []string) error {
			name, key := kvName(c), []byte(args[0])
			if err := partition.CheckKey(key); err != nil {
				return usageError(fmt.Errorf("%s: %w", name, err))
			}
			return execKV(c, keyInMap(key), func(ctx context.Context, cl *client.Client) error {
				if err := cl.Delete(ctx, key); err != nil {
					return err
				}
				return writeDone(c, key, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"key":...,"ok":true}`)
	return cmd
}

func newKVScanCmd() *cobra.Command {
	var (
		asJSON, raw, consistent bool
		limit                   int
	)
	cmd := &cobra.Command{
		Use:   "scan START END",
		Short: "Print up to --limit keys of [START, END), across partitions",
		Long: `Print up to --limit keys of [START, END) and their values in key order, one
KEY<TAB>VALUE line each (with --json: {"kvs":[{"key":...,"value":...}]}).
The range may span partitions of several groups, and must overlap at least
one partition.

Without --consistent, the keys are read a partition at a time, each at its
group's leader, and a partition's keys are read in pages of at most the
servers' scan byte bound (1 MiB): each page is linearizable, but the whole
scan is not one snapshot (a transfer between two partitions may show half
done). With --consistent, the range is read in one read-only transaction
multicast to every group that owns a part of it, ordered like any other:
one cut of the whole range. It is answered whole or not at all: when the
first --limit keys hold more bytes of keys and values than the servers'
scan byte bound, it fails (exit 1) naming the bound; a narrower range or a
lower --limit fits.`,
		Args: kvArgs("START", "END"),
		RunE: func(c *cobra.Command, args []string) error {
			name, start, end := kvName(c), []byte(args[0]), []byte(args[1])
			if err := partition.CheckKey(start); err != nil {
				return usageError(fmt.Errorf("%s: start: %w", name, err))
			}
			if err := partition.CheckKey(end); err != nil {
				return usageError(fmt.Errorf("%s: end: %w", name, err))
			}
			if bytes.Compare(start, end) >= 0 {
				return usageError(fmt.Errorf("%s: end %s is not after start %s", name, strconv.Quote(args[1]), strconv.Quote(args[0])))
			}
			if limit < 1 || limit > txn.ScanLimitMax {
				return usageError(fmt.Errorf("%s: --limit %d, want 1..txn.ScanLimitMax (%d)", name, limit, txn.ScanLimitMax))
			}
			return execKV(c, func(pm *partition.PartitionMap) error {
				_, err := pm.Spans(start, end)
				return err
			}, func(ctx context.Context, cl *client.Client) error {
				scan := cl.Scan
				if consistent {
					scan = cl.ScanConsistent
				}
				kvs, err := scan(ctx, start, end, limit)
				if err != nil {
					return err
				}
				for i := range kvs {
					kvs[i].Value = shownValue(kvs[i].Value, raw)
				}
				out := c.OutOrStdout()
				if asJSON {
					if kvs == nil {
						kvs = []txn.KV{} // {"kvs":[]}, never null
					}
					return writeJSON(out, struct {
						KVs []txn.KV `json:"kvs"`
					}{kvs})
				}
				for _, kv := range kvs {
					if _, err := fmt.Fprintf(out, "%s\t%s\n", kv.Key, kv.Value); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"kvs":[{"key":...,"value":...}]}`)
	cmd.Flags().BoolVar(&raw, "raw", false, rowFlagHelp)
	cmd.Flags().IntVar(&limit, "limit", kvScanLimitDefault, fmt.Sprintf("most keys to print, 1..%d", txn.ScanLimitMax))
	cmd.Flags().BoolVar(&consistent, "consistent", false, "read the whole range at one cut, in one read-only transaction (answered whole, up to the scan byte bound)")
	return cmd
}

func newKVTxnCmd() *cobra.Command {
	var text, file string
	cmd := &cobra.Command{
		Use:   "txn --json '<txn>' | --file F",
		Short: "Run a one-shot transaction and print its result JSON",
		Long: `Run a one-shot transaction (DESIGN 7) and print its result, always as JSON:
  {"id":"...","succeeded":true,"results":[...],"destinations":[{"group":"...","ms":12.3}]}
The transaction is given as JSON with --json, or read from the file --file
(- for stdin):
  {"if":[{"key":"w/0001/acct","cmp":">=","int":5}],
   "then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0002/acct","int":5}],
   "else":[]}
"succeeded" tells whether every compare held (then ran) or not (else ran);
both exit 0. An aborted transaction exits 1 with the reason on stderr.`,
		Args: kvArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			name := kvName(c)
			data, err := readTxnInput(c, text, file)
			if err != nil {
				return usageError(fmt.Errorf("%s: %w", name, err))
			}
			t, err := txn.ParseJSON(data)
			if err != nil {
				return usageError(fmt.Errorf("%s: %w", name, err))
			}
			return execKV(c, t.Validate, func(ctx context.Context, cl *client.Client) error {
				res, err := cl.Txn(ctx, t)
				// A result may come with an error (txn.ErrTruncated: the
				// transaction ran, some reads were lost): show what came.
				if res != nil {
					if werr := writeJSON(c.OutOrStdout(), res); werr != nil && err == nil {
						err = werr
					}
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&text, "json", "", "the transaction, as JSON")
	cmd.Flags().StringVar(&file, "file", "", "read the transaction JSON from this file (- for stdin)")
	return cmd
}

// readTxnInput returns the transaction JSON of exactly one of --json and
// --file.
func readTxnInput(c *cobra.Command, text, file string) ([]byte, error) {
	hasText, hasFile := c.Flags().Changed("json"), c.Flags().Changed("file")
	switch {
	case hasText && hasFile:
		return nil, errors.New("both --json and --file given, want one")
	case hasText:
		return []byte(text), nil
	case !hasFile:
		return nil, errors.New("no transaction: give --json '<txn>' or --file F")
	case file == "":
		return nil, errors.New("--file: empty file name (- for stdin)")
	}
	var r io.Reader
	if file == "-" {
		r = c.InOrStdin()
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		defer func() { _ = f.Close() }() // read-only: closing cannot lose data
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, kvTxnInputMax+1))
	if err != nil {
		return nil, fmt.Errorf("--file %s: %w", file, err)
	}
	if len(data) > kvTxnInputMax {
		return nil, fmt.Errorf("--file %s: more than %d bytes", file, kvTxnInputMax)
	}
	return data, nil
}

// kvConn is where and how a kv command reaches the cluster.
type kvConn struct {
	endpoints []string
	tls       *tls.Config // nil: --insecure
	timeout   time.Duration
	region    string
	// pm is the cluster's partition map when it is known before
	// connecting, nil otherwise (explicit --endpoints without --config: the
	// client learns the map from the cluster).
	pm *partition.PartitionMap
}

// kvSettings reads the connection flags of c (or their FLEXKV_*
// variables).
func kvSettings(c *cobra.Command) (kvConn, error) {
	v := settings(c)
	var conn kvConn
	timeout := v.GetString("timeout")
	d, err := time.ParseDuration(timeout)
	if err != nil {
		return conn, fmt.Errorf("--timeout %q: want a duration like 10s", timeout)
	}
	if d <= 0 {
		return conn, fmt.Errorf("--timeout %s: want more than 0", timeout)
	}
	conn.timeout = d
	conn.region = v.GetString("region")
	if conn.tls, err = clientTLS(v); err != nil {
		return conn, err
	}
	endpoints, configPath := v.GetString("endpoints"), v.GetString("config")
	if endpoints != "" {
		if conn.endpoints, err = parseEndpoints(endpoints); err != nil {
			return conn, err
		}
	}
	if endpoints != "" && configPath == "" {
		return conn, nil
	}
	cfg, _, err := loadCluster(configPath)
	if err != nil {
		return conn, err
	}
	_, _, pm, err := protocol.Build(cfg)
	if err != nil {
		return conn, fmt.Errorf("config: %w", err)
	}
	conn.pm = pm
	if conn.endpoints == nil {
		conn.endpoints = cfg.Endpoints()
	}
	return conn, nil
}

// parseEndpoints reads a comma-separated list of host:port addresses.
func parseEndpoints(s string) ([]string, error) {
	var out []string
	for e := range strings.SplitSeq(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, fmt.Errorf("--endpoints %q: empty address, want host:port[,host:port]", s)
		}
		host, port, err := net.SplitHostPort(e)
		if err != nil {
			return nil, fmt.Errorf("--endpoints: %q is not host:port: %w", e, err)
		}
		if host == "" {
			return nil, fmt.Errorf("--endpoints: %q has no host", e)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return nil, fmt.Errorf("--endpoints: %q: port %q, want 1..65535", e, port)
		}
		out = append(out, e)
	}
	return out, nil
}

// addConnFlags registers the flags by which a client command reaches a
// cluster (kv, bench): endpoints, TLS, configuration, timeout, region.
func addConnFlags(pf *pflag.FlagSet, timeoutHelp string) {
	pf.String("endpoints", "", "gRPC addresses host:port,... of cluster servers (default: those of --config)")
	addClientTLSFlags(pf)
	pf.String("config", "", "cluster configuration YAML, for the default endpoints and the partition map (default: embedded "+defaultConfigName+")")
	pf.Duration("timeout", kvTimeoutDefault, timeoutHelp)
	pf.String("region", "", "the client's region, for choosing the nearest servers (default: none)")
}

// execKV runs one kv command whose arguments c has checked: it reads the
// connection settings, checks the keys against the partition map with
// check when the map is known before connecting, then connects and calls
// do, all within --timeout. Errors come back with their exit code.
func execKV(c *cobra.Command, check func(*partition.PartitionMap) error, do func(context.Context, *client.Client) error) error {
	name := kvName(c)
	conn, err := kvSettings(c)
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}
	if conn.pm != nil {
		if err := check(conn.pm); err != nil {
			return usageError(fmt.Errorf("%s: %w", name, err))
		}
	}
	ctx, cancel := context.WithTimeout(c.Context(), conn.timeout)
	defer cancel()
	cl, err := client.New(ctx, client.Config{
		Endpoints: conn.endpoints,
		TLS:       conn.tls,
		Region:    conn.region,
		// The command's output is for scripts: the client's retries and
		// failovers stay quiet, and its final error is reported below.
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return kvError(ctx, name, conn, err, true)
	}
	// The client holds connections only: closing it cannot undo or lose
	// what the call did, so its error is not the command's.
	defer func() { _ = cl.Close() }()
	if err := do(ctx, cl); err != nil {
		return kvError(ctx, name, conn, err, false)
	}
	return nil
}

// kvError gives err, from connecting (connecting) or from the call, its
// exit code and a message that names the problem: bad input, an abort, or
// the endpoints that did not answer.
func kvError(ctx context.Context, name string, conn kvConn, err error, connecting bool) error {
	if e := (*exitError)(nil); errors.As(err, &e) {
		return err
	}
	err = oneLine{err}
	endpoints := strings.Join(conn.endpoints, ",")
	code := status.Code(err)
	switch {
	case errors.Is(err, txn.ErrInvalid), errors.Is(err, partition.ErrNoPartition),
		errors.Is(err, partition.ErrInvalidKey), code == codes.InvalidArgument:
		return usageError(fmt.Errorf("%s: %w", name, err))
	case errors.Is(err, txn.ErrAborted):
		// The client's message says "aborted" and gives the reason; the
		// word is added only if it is missing.
		if strings.Contains(err.Error(), "aborted") {
			return &exitError{code: kvExitFailed, err: fmt.Errorf("%s: %w", name, err)}
		}
		return &exitError{code: kvExitFailed, err: fmt.Errorf("%s: transaction aborted: %w", name, err)}
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), code == codes.DeadlineExceeded:
		return &exitError{code: kvExitUnreachable, err: fmt.Errorf("%s: no answer from the cluster at %s within --timeout %s: %w",
			name, endpoints, conn.timeout, err)}
	case connecting, code == codes.Unavailable:
		// New only fetches the topology: failing that, for any reason other
		// than bad input, is failing to reach the cluster. A TLS mismatch
		// is told in the flags' terms, not in the client's Config fields.
		cause := error(err)
		if te := (*client.TLSMismatchError)(nil); errors.As(err, &te) {
			cause = oneLine{fmt.Errorf("%s: %w", te.Endpoint, te.Err)}
		}
		return &exitError{code: kvExitUnreachable, err: fmt.Errorf("%s: cannot reach the cluster at %s%s: %w", name, endpoints, tlsHint(err, conn.tls != nil), cause)}
	}
	return &exitError{code: kvExitFailed, err: fmt.Errorf("%s: %w", name, err)}
}

// tlsHint says why a connection failed when the error shows the two ends
// disagree on TLS (the Go client tells, client.TLSMismatch), or that the
// cluster refused the certificate.
func tlsHint(err error, secure bool) string {
	msg := err.Error()
	switch {
	case client.TLSMismatch(err, secure) && !secure:
		return " (it runs TLS and this client does not: drop --insecure, and give --certs-dir if the certificates are not in " + localCertsDir + ")"
	case client.TLSMismatch(err, secure):
		return " (it runs without TLS: give --insecure)"
	case secure && (strings.Contains(msg, "certificate") || strings.Contains(msg, "tls:")):
		return " (TLS failed: is --certs-dir the cluster's, and is its CA the one that signed the servers' certificates?)"
	}
	return ""
}

// oneLine keeps an error on one line of stderr: errors joined from several
// endpoints (errors.Join) are separated by "; " instead of newlines.
type oneLine struct{ err error }

func (e oneLine) Error() string { return strings.ReplaceAll(e.err.Error(), "\n", "; ") }
func (e oneLine) Unwrap() error { return e.err }

// writeJSON prints v as one line of JSON, without escaping <, > and & (a
// ">=" stays readable), as txn's own encodings do.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeJSONLines prints each of rows as one line of JSON (writeJSON).
func writeJSONLines[T any](w io.Writer, rows []T) error {
	for _, r := range rows {
		if err := writeJSON(w, r); err != nil {
			return err
		}
	}
	return nil
}
