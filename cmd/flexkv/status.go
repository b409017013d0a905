package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/rpcflow"
)

// statusTimeoutDefault bounds each replica's answer: a replica that does
// not answer within it is shown down.
const statusTimeoutDefault = 5 * time.Second

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [--config FILE | --endpoints host:port,...] [--json]",
		Short: "Show the state of every replica of a FlexKV cluster",
		Long: `Ask every replica of the cluster, concurrently, for its state (DESIGN 7) and
print one line per replica, in the order of the configuration:

  GROUP REPLICA ADDRESS ROLE EPOCH TERM COMMIT APPLIED LAG OUTBOX PENDING TLS FINGERPRINT VERSION

ROLE is leader, follower or candidate, or down for a replica that did not
answer within --timeout (its error goes to stderr). EPOCH is the epoch of
the replica's group (DESIGN 14): 1 at bootstrap, one more per change of the
cluster it delivered ("-" from a server too old to say); groups differ for
the moment a change takes to reach them all. COMMIT and APPLIED are
raft's commit index and the last entry applied; LAG is the group leader's
commit index minus this replica's applied index ("-" while no leader
answers). OUTBOX counts the envelopes to other groups not acknowledged yet,
PENDING the messages the protocol core holds, undelivered. TLS is the GROUP/REPLICA
of the replica's node certificate, or insecure; FINGERPRINT that of the
cluster configuration the replica runs (DESIGN 13): replicas that disagree
refuse each other's calls, and a warning names them. VERSION is the build
the replica runs, as "flexkv version" prints it: the module version, then
"@" and the revision's first twelve characters when the version does not
already hold them ("-" from a server too old to say); replicas that differ
show an upgrade under way.

The replicas are those of --config (default: the embedded configs/local.yaml),
or the addresses of --endpoints. Once a group's members changed (flexkv
member, DESIGN 14), they are those of the newest epoch the replicas of
--config answer: a member added since is shown, one removed is not. With --json, one JSON object per replica,
one per line (JSON Lines, like the delivery log), the same fields:
{"group":"eu-west-1","replica":"r1","address":"127.0.0.1:7001","role":"leader",
 "epoch":1,"term":2,"commit_index":40,"applied_index":40,"lag":0,"outbox":0,"pending":0,
 "tls_identity":"eu-west-1/r1","fingerprint":"...","cluster_id":"...",
 "version":"v0.4.0","revision":"19c832a01234"};
a replica that is down has "role":"down" and "error", and no figures.

Exit codes: 0 every replica answered; 1 some are down; 2 bad usage.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(fmt.Errorf("status: want no arguments, got %q", args))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.String("config", "", "cluster configuration YAML whose replicas to ask (default: embedded "+defaultConfigName+")")
	f.String("endpoints", "", "gRPC addresses host:port,... to ask instead of the configuration's replicas")
	f.Duration("timeout", statusTimeoutDefault, "how long each replica may take to answer")
	f.Bool("json", false, "one JSON object per replica per line")
	addClientTLSFlags(f)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("status: %w", err)) })
	cmd.RunE = runStatus
	return cmd
}

// statusRow is one replica's line of `flexkv status`; its JSON is the --json
// output. Figures are absent for a replica that is down, and lag while no
// leader of its group answered.
type statusRow struct {
	Group        string  `json:"group"`
	Replica      string  `json:"replica"`
	Address      string  `json:"address"`
	Role         string  `json:"role"`
	Epoch        *uint64 `json:"epoch,omitempty"`
	Term         *uint64 `json:"term,omitempty"`
	CommitIndex  *uint64 `json:"commit_index,omitempty"`
	AppliedIndex *uint64 `json:"applied_index,omitempty"`
	Lag          *uint64 `json:"lag,omitempty"`
	Outbox       *uint64 `json:"outbox,omitempty"`
	Pending      *uint64 `json:"pending,omitempty"`
	TLSIdentity  string  `json:"tls_identity,omitempty"`
	Fingerprint  string  `json:"fingerprint,omitempty"`
	ClusterID    string  `json:"cluster_id,omitempty"`
	Version      string  `json:"version,omitempty"`
	Revision     string  `json:"revision,omitempty"`
	Error        string  `json:"error,omitempty"`

	resp *apipb.StatusResponse
}

func runStatus(c *cobra.Command, _ []string) error {
	v := settings(c)
	timeout, err := time.ParseDuration(v.GetString("timeout"))
	if err != nil || timeout <= 0 {
		return usageError(fmt.Errorf("status: --timeout %q: want a duration like 5s", v.GetString("timeout")))
	}
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return usageError(fmt.Errorf("status: %w", err))
	}
	var rows []*statusRow
	if e := v.GetString("endpoints"); e != "" {
		if v.GetString("config") != "" {
			return usageError(errors.New("status: --config and --endpoints: choose one"))
		}
		addrs, err := parseEndpoints(e)
		if err != nil {
			return usageError(fmt.Errorf("status: %w", err))
		}
		for _, a := range addrs {
			rows = append(rows, &statusRow{Group: "?", Replica: "?", Address: a})
		}
	} else {
		cfg, _, err := loadCluster(v.GetString("config"))
		if err != nil {
			return usageError(fmt.Errorf("status: %w", err))
		}
		for _, g := range cfg.Groups {
			for _, r := range g.Replicas {
				rows = append(rows, &statusRow{Group: g.Name, Replica: r.ID, Address: r.GRPC})
			}
		}
	}
	ask(c.Context(), rows, tlsCfg, timeout)
	if v.GetString("endpoints") == "" {
		rows = epochRows(c.Context(), rows, tlsCfg, timeout)
	}
	down := fill(rows, c.ErrOrStderr())
	w := c.OutOrStdout()
	if v.GetBool("json") {
		if err := writeJSONLines(w, rows); err != nil {
			return err
		}
	} else if err := printStatus(w, rows); err != nil {
		return err
	}
	if down > 0 {
		return &exitError{code: 1, err: fmt.Errorf("status: %d of %d replicas down", down, len(rows))}
	}
	return nil
}

// epochRows returns the rows of the members of the newest epoch the
// replicas answered, when its members differ from the configuration's
// (DESIGN 14, flexkv member): a replica added since is asked, one removed
// is left out. The answers already in rows are kept.
func epochRows(ctx context.Context, rows []*statusRow, tlsCfg *tls.Config, timeout time.Duration) []*statusRow {
	var newest *statusRow
	for _, r := range rows {
		if r.resp != nil && (newest == nil || r.resp.GetEpoch() > newest.resp.GetEpoch()) {
			newest = r
		}
	}
	if newest == nil || newest.resp.GetEpoch() <= 1 {
		return rows
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	cc, err := grpc.NewClient(newest.Address, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return rows
	}
	defer cc.Close()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	top, err := apipb.NewKVClient(cc).Topology(tctx, &apipb.TopologyRequest{})
	if err != nil {
		return rows
	}
	byAddr := make(map[string]*statusRow, len(rows))
	for _, r := range rows {
		byAddr[r.Address] = r
	}
	var out, fresh []*statusRow
	for _, g := range top.GetGroups() {
		for _, r := range g.GetReplicas() {
			row, ok := byAddr[r.GetGrpc()]
			if !ok || row.Replica != r.GetId() {
				row = &statusRow{Group: g.GetName(), Replica: r.GetId(), Address: r.GetGrpc()}
				fresh = append(fresh, row)
			}
			out = append(out, row)
		}
	}
	ask(ctx, fresh, tlsCfg, timeout)
	return out
}

// ask calls Status on every row's address concurrently, each within
// timeout, and keeps the answer or the error.
func ask(ctx context.Context, rows []*statusRow, tlsCfg *tls.Config, timeout time.Duration) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Go(func() {
			resp, err := askOne(ctx, r.Address, creds, timeout)
			if err != nil {
				r.Error = err.Error() + tlsHint(err, tlsCfg != nil)
				return
			}
			r.resp = resp
		})
	}
	wg.Wait()
}

func askOne(ctx context.Context, addr string, creds credentials.TransportCredentials, timeout time.Duration) (*apipb.StatusResponse, error) {
	cc, err := grpc.NewClient(addr, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return apipb.NewKVClient(cc).Status(ctx, &apipb.StatusRequest{})
}

// fill turns the answers into rows: the figures, the lag behind each
// group's leader (the answering leader of the highest term), and the
// warnings (a down replica, another replica than the configuration's at an
// address, fingerprints that disagree) on stderr. It returns how many
// replicas are down.
func fill(rows []*statusRow, stderr io.Writer) int {
	leaders := make(map[string]*apipb.StatusResponse)
	for _, r := range rows {
		if p := r.resp; p != nil && p.GetRole() == "leader" {
			if l, ok := leaders[p.GetGroup()]; !ok || p.GetTerm() > l.GetTerm() {
				leaders[p.GetGroup()] = p
			}
		}
	}
	down := 0
	fingerprints := make(map[string][]string) // fingerprint -> replicas, in row order
	var order []string
	for _, r := range rows {
		p := r.resp
		if p == nil || p.GetRole() == "shutdown" {
			if p != nil {
				r.Error = "shutting down"
			}
			r.Role = "down"
			down++
			fmt.Fprintf(stderr, "status: %s/%s at %s is down: %s\n", r.Group, r.Replica, r.Address, r.Error)
			continue
		}
		if r.Replica != "?" && (p.GetGroup() != r.Group || p.GetReplica() != r.Replica) {
			fmt.Fprintf(stderr, "status: %s answers as %s/%s, not %s/%s of the configuration\n", r.Address, p.GetGroup(), p.GetReplica(), r.Group, r.Replica)
		}
		r.Group, r.Replica, r.Role = p.GetGroup(), p.GetReplica(), p.GetRole()
		if e := p.GetEpoch(); e > 0 {
			r.Epoch = ptr(e)
		}
		r.Term, r.CommitIndex, r.AppliedIndex = ptr(p.GetTerm()), ptr(p.GetCommitIndex()), ptr(p.GetAppliedIndex())
		r.Outbox, r.Pending = ptr(p.GetOutbox()), ptr(p.GetPending())
		r.TLSIdentity, r.Fingerprint, r.ClusterID = p.GetTlsIdentity(), p.GetFingerprint(), p.GetClusterId()
		r.Version, r.Revision = p.GetVersion(), p.GetRevision()
		if l, ok := leaders[p.GetGroup()]; ok {
			lag := uint64(0)
			if l.GetCommitIndex() > p.GetAppliedIndex() {
				lag = l.GetCommitIndex() - p.GetAppliedIndex()
			}
			r.Lag = ptr(lag)
		}
		if _, ok := fingerprints[r.Fingerprint]; !ok {
			order = append(order, r.Fingerprint)
		}
		fingerprints[r.Fingerprint] = append(fingerprints[r.Fingerprint], r.Group+"/"+r.Replica)
	}
	if len(order) > 1 {
		fmt.Fprintln(stderr, "status: the replicas run different cluster configurations (DESIGN 13):")
		for _, fp := range order {
			fmt.Fprintf(stderr, "  fingerprint %s: %v\n", fp, fingerprints[fp])
		}
	}
	return down
}

func ptr(v uint64) *uint64 { return &v }

// printStatus prints rows as a table.
func printStatus(w io.Writer, rows []*statusRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tREPLICA\tADDRESS\tROLE\tEPOCH\tTERM\tCOMMIT\tAPPLIED\tLAG\tOUTBOX\tPENDING\tTLS\tFINGERPRINT\tVERSION")
	num := func(p *uint64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatUint(*p, 10)
	}
	str := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, r.Replica, r.Address, r.Role,
			num(r.Epoch), num(r.Term), num(r.CommitIndex), num(r.AppliedIndex), num(r.Lag), num(r.Outbox), num(r.Pending), str(r.TLSIdentity), str(r.Fingerprint),
			str(versionLabel(r.Version, r.Revision)))
	}
	return tw.Flush()
}

// versionLabel is the VERSION column of a replica that reports version and
// revision: the version, with "@" and the revision when the revision is
// known and the version does not hold it already (a pseudo-version such as
// v0.0.0-20261206054158-4a41b9acf42c does); "" when the replica reported
// none.
func versionLabel(version, revision string) string {
	if version == "" || revision == "" || revision == "unknown" || strings.Contains(version, revision) {
		return version
	}
	return version + "@" + revision
}
