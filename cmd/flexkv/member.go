package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// The members of a group (DESIGN 14): `flexkv member list|add|promote|remove`.

// memberMaxLagDefault is how far, in raft entries, a learner may be behind
// its leader (the leader's commit index minus its applied index) to be
// promoted, unless --max-lag says otherwise.
const memberMaxLagDefault = 1000

func newMemberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member list|add|promote|remove",
		Short: "List, add, promote and remove the members (replicas) of a running cluster's groups",
		Long: `Change the members of a group while the cluster runs (DESIGN 14). Replacing a
dead replica is add, promote, remove, with no pause in service:

  flexkv cert create-node r10 127.0.0.1 --group eu-west-1 --certs-dir DIR --ca-key KEY
  flexkv member add eu-west-1 r10 --raft 127.0.0.1:7110 --grpc 127.0.0.1:7210
  flexkv server --join 127.0.0.1:7201 --node r10 --data-dir D --initial-cluster-state existing --certs-dir DIR
  flexkv member promote eu-west-1 r10 --wait
  flexkv member remove eu-west-1 r2

A change of members is a control message multicast to every group: it ends
the epoch, and every group's transmitter and every client learns the new
addresses at one cut; the group's leader then changes raft (a new member
joins as a learner, a nonvoter). Every command reaches the cluster at the
replicas of --config (default: the embedded configs/local.yaml) or of
--endpoints, with the client TLS flags of flexkv kv and the user root, and
works on the members of the current epoch.

Exit codes: 0 done, 1 refused or failed (the error names why; nothing
changed), 2 bad usage.`,
	}
	needSubcommand(cmd, "list, add, promote or remove")
	setUsageErrors(cmd)
	cmd.AddCommand(newMemberListCmd(), newMemberAddCmd(), newMemberPromoteCmd(), newMemberRemoveCmd())
	return cmd
}

// addMemberFlags adds the connection flags of every member command.
func addMemberFlags(f *pflag.FlagSet, timeout time.Duration) {
	f.String("config", "", "cluster configuration YAML whose replicas to reach (default: embedded "+defaultConfigName+")")
	f.String("endpoints", "", "gRPC addresses host:port,... to reach instead of the configuration's replicas")
	f.Duration("timeout", timeout, "how long the command may take")
	f.Bool("json", false, "print JSON")
	addClientTLSFlags(f)
}

// memberConn is what a member command reaches the cluster with.
type memberConn struct {
	creds     credentials.TransportCredentials
	endpoints []string
	certsDir  string // "" without TLS

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func memberConnOf(v *viper.Viper) (*memberConn, error) {
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return nil, err
	}
	m := &memberConn{creds: insecure.NewCredentials(), conns: map[string]*grpc.ClientConn{}}
	if tlsCfg != nil {
		m.creds = credentials.NewTLS(tlsCfg)
		m.certsDir = v.GetString("certs-dir")
		if m.certsDir == "" {
			m.certsDir = localCertsDir
		}
	}
	if e := v.GetString("endpoints"); e != "" {
		if v.GetString("config") != "" {
			return nil, errors.New("--config and --endpoints: choose one")
		}
		m.endpoints, err = parseEndpoints(e)
		return m, err
	}
	cfg, _, err := loadCluster(v.GetString("config"))
	if err != nil {
		return nil, err
	}
	m.endpoints = cfg.Endpoints()
	return m, nil
}

func (m *memberConn) kv(addr string) (apipb.KVClient, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cc, ok := m.conns[addr]; ok {
		return apipb.NewKVClient(cc), nil
	}
	cc, err := grpc.NewClient(addr, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(m.creds))...)
	if err != nil {
		return nil, err
	}
	m.conns[addr] = cc
	return apipb.NewKVClient(cc), nil
}

func (m *memberConn) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, cc := range m.conns {
		_ = cc.Close()
	}
}

// memberCallTimeout bounds one call to one replica.
const memberCallTimeout = 3 * time.Second

// topology asks every endpoint, and the replicas of the answers, for the
// configuration of its epoch, and returns the newest: a replica that
// missed a change (down, cut off) answers an older one.
func (m *memberConn) topology(ctx context.Context) (*partition.ClusterConfig, uint64, error) {
	best, err := m.topologyResp(ctx)
	if err != nil {
		return nil, 0, err
	}
	cfg, _, err := api.ConfigFromProto(best)
	if err != nil {
		return nil, 0, err
	}
	return cfg, best.GetEpoch(), nil
}

// topologyResp is topology's newest answer, as it came.
func (m *memberConn) topologyResp(ctx context.Context) (*apipb.TopologyResponse, error) {
	var best *apipb.TopologyResponse
	var errs []error
	asked := map[string]bool{}
	addrs := slices.Clone(m.endpoints)
	for round := 0; round < 2 && len(addrs) > 0; round++ {
		type answer struct {
			resp *apipb.TopologyResponse
			err  error
		}
		answers := make([]answer, len(addrs))
		var wg sync.WaitGroup
		for i, a := range addrs {
			asked[a] = true
			wg.Go(func() {
				kv, err := m.kv(a)
				if err == nil {
					cctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
					answers[i].resp, err = kv.Topology(cctx, &apipb.TopologyRequest{})
					cancel()
				}
				if err != nil {
					answers[i].err = fmt.Errorf("%s: %w", a, err)
				}
			})
		}
		wg.Wait()
		for _, an := range answers {
			if an.err != nil {
				errs = append(errs, an.err)
			} else if best == nil || an.resp.GetEpoch() > best.GetEpoch() {
				best = an.resp
			}
		}
		// The members of the newest epoch may not be among the endpoints.
		addrs = nil
		if best != nil {
			for _, g := range best.GetGroups() {
				for _, r := range g.GetReplicas() {
					if !asked[r.GetGrpc()] {
						addrs = append(addrs, r.GetGrpc())
					}
				}
			}
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no replica answered: %w", errors.Join(errs...))
	}
	return best, nil
}

// memberRow is one member's line of `flexkv member list`; its JSON is the
// --json output.
type memberRow struct {
	Group    string  `json:"group"`
	Member   string  `json:"member"`
	GRPC     string  `json:"grpc"`
	Raft     string  `json:"raft"`
	Peer     string  `json:"peer"`
	Role     string  `json:"role"`     // leader, follower, learner, candidate, down, or leaving
	Suffrage string  `json:"suffrage"` // voter, learner, or none (not in raft's configuration yet)
	Applied  *uint64 `json:"applied_index,omitempty"`
	Lag      *uint64 `json:"lag,omitempty"`
	Epoch    uint64  `json:"epoch"`
	Error    string  `json:"error,omitempty"`
}

// groupState is what the members of one group answer.
type groupState struct {
	name     string
	replicas []partition.ReplicaConfig
	status   map[string]*apipb.StatusResponse // by member id; absent: did not answer
	errs     map[string]error
	leader   string                       // id of the member that answers as leader
	raft     map[string]*apipb.RaftMember // the leader's raft configuration, by id
	raftList []*apipb.RaftMember
}

// groupStateOf asks every member of group g of cfg for its status, and its
// leader for the raft configuration.
func (m *memberConn) groupStateOf(ctx context.Context, g partition.GroupConfig) *groupState {
	st := &groupState{name: g.Name, replicas: g.Replicas, status: map[string]*apipb.StatusResponse{}, errs: map[string]error{}, raft: map[string]*apipb.RaftMember{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range g.Replicas {
		wg.Go(func() {
			kv, err := m.kv(r.GRPC)
			var resp *apipb.StatusResponse
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
				resp, err = kv.Status(cctx, &apipb.StatusRequest{})
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				st.errs[r.ID] = err
				return
			}
			st.status[r.ID] = resp
			if resp.GetRole() == "leader" {
				st.leader = r.ID
			}
		})
	}
	wg.Wait()
	if st.leader == "" {
		return st
	}
	i := slices.IndexFunc(g.Replicas, func(r partition.ReplicaConfig) bool { return r.ID == st.leader })
	kv, err := m.kv(g.Replicas[i].GRPC)
	if err != nil {
		return st
	}
	cctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
	defer cancel()
	resp, err := kv.Members(cctx, &apipb.MembersRequest{})
	if err != nil {
		st.errs[st.leader] = fmt.Errorf("members: %w", err)
		return st
	}
	st.raftList = resp.GetMembers()
	for _, rm := range resp.GetMembers() {
		st.raft[rm.GetId()] = rm
	}
	return st
}

// lag returns how far member id is behind its leader: the leader's commit
// index minus its applied index; false while either does not answer.
func (st *groupState) lag(id string) (uint64, bool) {
	l, ok := st.status[st.leader]
	s, ok2 := st.status[id]
	if !ok || !ok2 {
		return 0, false
	}
	if s.GetAppliedIndex() >= l.GetCommitIndex() {
		return 0, true
	}
	return l.GetCommitIndex() - s.GetAppliedIndex(), true
}

// suffrage names id's place in the leader's raft configuration.
func (st *groupState) suffrage(id string) string {
	if rm, ok := st.raft[id]; ok {
		return rm.GetSuffrage()
	}
	if st.leader == "" {
		return "unknown"
	}
	return "none"
}

// rows returns the lines of member list for the group: its members in the
// epoch's order, then the servers raft still has that the epoch dropped.
func (st *groupState) rows(epoch uint64) []memberRow {
	var out []memberRow
	for _, r := range st.replicas {
		row := memberRow{Group: st.name, Member: r.ID, GRPC: r.GRPC, Raft: r.Raft, Peer: r.PeerAddr(), Suffrage: st.suffrage(r.ID), Epoch: epoch}
		if s, ok := st.status[r.ID]; ok {
			row.Role = s.GetRole()
			if row.Suffrage == "learner" && row.Role == "follower" {
				row.Role = "learner" // it follows, and never votes
			}
			a := s.GetAppliedIndex()
			row.Applied = &a
			if lag, ok := st.lag(r.ID); ok {
				row.Lag = &lag
			}
		} else {
			row.Role = "down"
			if err := st.errs[r.ID]; err != nil {
				row.Error = grpcMessage(err)
			}
		}
		out = append(out, row)
	}
	for _, rm := range st.raftList {
		if slices.ContainsFunc(st.replicas, func(r partition.ReplicaConfig) bool { return r.ID == rm.GetId() }) {
			continue
		}
		out = append(out, memberRow{Group: st.name, Member: rm.GetId(), Raft: rm.GetRaft(), Role: "leaving", Suffrage: rm.GetSuffrage(), Epoch: epoch})
	}
	return out
}

func newMemberListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [--config FILE | --endpoints host:port,...] [--json]",
		Short: "Show every group's members, their roles and lag",
		Long: `Print one line per member of every group, in the current epoch (DESIGN 14):

  GROUP MEMBER GRPC RAFT ROLE SUFFRAGE APPLIED LAG

ROLE is the member's raft role, leader, follower (a voter), learner (a
nonvoter that follows) or candidate, or down when it does not answer;
leaving marks a server that the epoch removed and the group's raft
configuration still holds (its leader removes it). SUFFRAGE is
its place in the leader's raft configuration: voter, learner (a nonvoter:
it receives the log, votes in no election and counts in no quorum), or none
(not added to raft yet). LAG is the leader's commit index minus the
member's applied index, "-" while either does not answer.

With --json, one JSON object per member, one per line:
{"group":"eu-west-1","member":"r10","grpc":"127.0.0.1:7210","raft":"127.0.0.1:7110",
 "peer":"127.0.0.1:7310","role":"learner","suffrage":"learner","applied_index":812,
 "lag":3,"epoch":2}; a member that is down has "role":"down" and "error".

Exit codes: 0 every member answered; 1 some are down, or no replica answered; 2 bad usage.`,
		Args: noArgs,
	}
	addMemberFlags(cmd.Flags(), 10*time.Second)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("member list: %w", err)) })
	cmd.RunE = runMemberList
	return cmd
}

// withClusterView connects to the cluster as the flags of c say, takes the
// configuration of the newest epoch a replica reports, and runs fn with
// them within --timeout; name prefixes the errors.
func withClusterView(c *cobra.Command, name string, fn func(context.Context, *memberConn, *partition.ClusterConfig, uint64) error) error {
	v := settings(c)
	m, err := memberConnOf(v)
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}
	defer m.close()
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	cfg, epoch, err := m.topology(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return fn(ctx, m, cfg, epoch)
}

func runMemberList(c *cobra.Command, _ []string) error {
	return withClusterView(c, "member list", func(ctx context.Context, m *memberConn, cfg *partition.ClusterConfig, epoch uint64) error {
		return listMembers(ctx, c, m, cfg, epoch)
	})
}

// listMembers prints the members of cfg, at epoch.
func listMembers(ctx context.Context, c *cobra.Command, m *memberConn, cfg *partition.ClusterConfig, epoch uint64) error {
	v := settings(c)
	var rows []memberRow
	for _, g := range cfg.Groups {
		rows = append(rows, m.groupStateOf(ctx, g).rows(epoch)...)
	}
	down := 0
	for _, r := range rows {
		if r.Role == "down" {
			down++
			fmt.Fprintf(c.ErrOrStderr(), "member list: %s/%s at %s: down: %s\n", r.Group, r.Member, r.GRPC, r.Error)
		}
	}
	if err := printMemberRows(c.OutOrStdout(), rows, v.GetBool("json")); err != nil {
		return err
	}
	if down > 0 {
		return &exitError{code: 1, err: fmt.Errorf("member list: %d of %d members down", down, len(rows))}
	}
	return nil
}

func printMemberRows(w io.Writer, rows []memberRow, asJSON bool) error {
	if asJSON {
		return writeJSONLines(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tMEMBER\tGRPC\tRAFT\tROLE\tSUFFRAGE\tAPPLIED\tLAG")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, r.Member, dash(r.GRPC), r.Raft, r.Role, r.Suffrage, optUint(r.Applied), optUint(r.Lag))
	}
	return tw.Flush()
}

// optUint prints a figure that may be absent.
func optUint(p *uint64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func newMemberAddCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add GROUP ID --raft HOST:PORT --grpc HOST:PORT [--peer HOST:PORT] [--http HOST:PORT]",
		Short: "Add a member to a group, as a learner",
		Long: `Add the replica ID to GROUP as a learner (DESIGN 14): a control message, multicast
to every group, ends the epoch and starts the next with the new member, so
that every group's transmitter and every client learns its addresses at one
cut; the group's leader then adds it to raft as a nonvoter. Start it next
with flexkv server --join ENDPOINT --node ID --initial-cluster-state existing:
it takes the configuration of the current epoch from the cluster and catches
up by snapshot; then promote it (flexkv member promote).

--peer defaults to the grpc port + 100. With TLS, the node certificate
DIR/node.ID.crt, when --certs-dir holds it, must name GROUP
(flexkv cert create-node ID HOST --group GROUP).

Refused, naming the problem, with nothing changed: an unknown group, an id
or an address already in use, a certificate of another group (exit 2); a
change the cluster refuses, or while another is under way (exit 1).

With --json, one object: {"epoch":2,"op":"add","group":"eu-west-1","member":"r10"}.`,
		Args: memberArgs("add"),
	}
	f := cmd.Flags()
	f.String("raft", "", "the member's raft address host:port (required)")
	f.String("grpc", "", "the member's client API address host:port (required)")
	f.String("peer", "", "the member's address for the other groups (default: the grpc port + 100)")
	f.String("http", "", "the member's HTTP/JSON gateway address (default: none)")
	addMemberFlags(f, 30*time.Second)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("member add: %w", err)) })
	cmd.RunE = runMemberAdd
	return cmd
}

// memberArgs wants GROUP and ID.
func memberArgs(op string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 2 {
			return usageError(fmt.Errorf("member %s: want GROUP ID, got %q", op, args))
		}
		return nil
	}
}

// memberGroup returns the group named of cfg, or a usage error naming the
// groups.
func memberGroup(cfg *partition.ClusterConfig, op, name string) (partition.GroupConfig, error) {
	i := slices.IndexFunc(cfg.Groups, func(g partition.GroupConfig) bool { return g.Name == name })
	if i < 0 {
		return partition.GroupConfig{}, usageError(fmt.Errorf("member %s: unknown group %q (the groups: %s)", op, name, strings.Join(configGroupNames(cfg), ", ")))
	}
	return cfg.Groups[i], nil
}

func runMemberAdd(c *cobra.Command, args []string) error {
	v := settings(c)
	m, err := memberConnOf(v)
	if err != nil {
		return usageError(fmt.Errorf("member add: %w", err))
	}
	defer m.close()
	name, id := args[0], args[1]
	r := &apipb.Replica{Id: id, Raft: v.GetString("raft"), Grpc: v.GetString("grpc"), Peer: v.GetString("peer"), Http: v.GetString("http")}
	if r.Raft == "" || r.Grpc == "" {
		return usageError(errors.New("member add: --raft and --grpc are required"))
	}
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	cfg, epoch, err := m.topology(ctx)
	if err != nil {
		return fmt.Errorf("member add: %w", err)
	}
	if _, err := memberGroup(cfg, "add", name); err != nil {
		return err
	}
	// The checks the cluster makes, here first, so that bad input is told
	// apart from a refusal: the id and every address unused.
	next := *cfg
	next.Groups = slices.Clone(cfg.Groups)
	next.EpochMembers = true
	for i, g := range next.Groups {
		if g.Name == name {
			next.Groups[i].Replicas = append(slices.Clone(g.Replicas), partition.ReplicaConfig{ID: id, Raft: r.Raft, GRPC: r.Grpc, Peer: r.Peer, HTTP: r.Http})
		}
	}
	if gc, _, ok := cfg.Replica(id); ok {
		return usageError(fmt.Errorf("member add: id %q is in use: a member of group %s", id, gc.Name))
	}
	if err := protocol.Validate(&next); err != nil {
		return usageError(fmt.Errorf("member add: %s: %w", id, err))
	}
	if err := checkNodeCert(m.certsDir, id, name); err != nil {
		return usageError(fmt.Errorf("member add: %w", err))
	}
	resp, err := m.reconfigure(ctx, cfg, &apipb.ReconfigureRequest{Epoch: epoch, Member: &apipb.MemberChange{Op: "add", Group: name, Replica: r}})
	if err != nil {
		return fmt.Errorf("member add: %w", err)
	}
	if v.GetBool("json") {
		return writeJSON(c.OutOrStdout(), map[string]any{"epoch": resp.GetEpoch(), "op": "add", "group": name, "member": id})
	}
	_, err = fmt.Fprintf(c.OutOrStdout(), "epoch %d: %s added to group %s as a learner (raft %s, grpc %s); start it with flexkv server --join %s --node %s --initial-cluster-state existing, then promote it\n",
		resp.GetEpoch(), id, name, r.Raft, r.Grpc, cfg.Groups[0].Replicas[0].GRPC, id)
	return err
}

// checkNodeCert checks, when dir holds the node certificate of id, that it
// names group: a replica started with another group's certificate would be
// refused by its group's raft and by the other groups.
func checkNodeCert(dir, id, group string) error {
	if dir == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dir, certs.NodeCertFile(id)))
	if err != nil {
		return nil // made later, or elsewhere: the server checks it at start
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return fmt.Errorf("%s: not a PEM certificate", filepath.Join(dir, certs.NodeCertFile(id)))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, certs.NodeCertFile(id)), err)
	}
	for _, u := range cert.URIs {
		if u.Scheme == "flexkv" && strings.TrimPrefix(u.Path, "/") == id && u.Host != group {
			return fmt.Errorf("the certificate %s names group %s, not %s: make one for %s with flexkv cert create-node %s HOST --group %s",
				filepath.Join(dir, certs.NodeCertFile(id)), u.Host, group, group, id, group)
		}
	}
	return nil
}

// reconfigure sends req to the group that takes the changes of cfg.
func (m *memberConn) reconfigure(ctx context.Context, cfg *partition.ClusterConfig, req *apipb.ReconfigureRequest) (*apipb.ReconfigureResponse, error) {
	resp, err := applyChange(ctx, cfg, m.creds, req)
	if st, ok := status.FromError(err); ok && err != nil {
		return nil, errors.New(st.Message())
	}
	return resp, err
}

func newMemberPromoteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "promote GROUP ID [--wait] [--max-lag N]",
		Short: "Make a learner a voter, once it has caught up",
		Long: fmt.Sprintf(`Make the learner ID of GROUP a voter (DESIGN 14), once its log is within
--max-lag entries of its leader's (the leader's commit index minus its
applied index, as flexkv member list shows; default %d). Further behind, it
is refused with the lag, or, with --wait, waited for (the lag on stderr
every second, up to --timeout).

Refused, naming the problem, with nothing changed: an unknown group or a
member of another group (exit 2); a member that is not a learner (a voter,
or not yet in raft's configuration), that lags, or that does not answer
(exit 1).

With --json, one object: {"group":"eu-west-1","member":"r10","lag":3,"waited_s":4.2}.`, memberMaxLagDefault),
		Args: memberArgs("promote"),
	}
	f := cmd.Flags()
	f.Bool("wait", false, "wait until the learner has caught up, rather than refuse")
	f.Uint64("max-lag", memberMaxLagDefault, "how many entries behind its leader the learner may be")
	addMemberFlags(f, 10*time.Minute)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("member promote: %w", err)) })
	cmd.RunE = runMemberPromote
	return cmd
}

func runMemberPromote(c *cobra.Command, args []string) error {
	v := settings(c)
	m, err := memberConnOf(v)
	if err != nil {
		return usageError(fmt.Errorf("member promote: %w", err))
	}
	defer m.close()
	name, id := args[0], args[1]
	maxLag := v.GetUint64("max-lag")
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	start := time.Now()
	lastShown := time.Time{}
	for {
		var refused error // the leader's refusal this round, under --wait
		cfg, _, err := m.topology(ctx)
		if err != nil {
			return fmt.Errorf("member promote: %w", err)
		}
		g, err := memberGroup(cfg, "promote", name)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(g.Replicas, func(r partition.ReplicaConfig) bool { return r.ID == id }) {
			if other, _, ok := cfg.Replica(id); ok {
				return usageError(fmt.Errorf("member promote: %s is a member of group %s, not of %s", id, other.Name, name))
			}
			return &exitError{code: 1, err: fmt.Errorf("member promote: %s is not a member of group %s (add it first: flexkv member add)", id, name)}
		}
		st := m.groupStateOf(ctx, g)
		lag, known := st.lag(id)
		switch suffrage := st.suffrage(id); {
		case st.leader == "":
			if !v.GetBool("wait") {
				return &exitError{code: 1, err: fmt.Errorf("member promote: group %s has no leader that answers", name)}
			}
		case suffrage == "voter":
			return &exitError{code: 1, err: fmt.Errorf("member promote: %s of group %s is not a learner: it votes already", id, name)}
		case suffrage == "none" && !v.GetBool("wait"):
			return &exitError{code: 1, err: fmt.Errorf("member promote: %s of group %s is not a learner yet: its leader has not added it to raft", id, name)}
		case !known && !v.GetBool("wait"):
			return &exitError{code: 1, err: fmt.Errorf("member promote: %s of group %s does not answer (%w): its lag is unknown; not promoted", id, name, st.errs[id])}
		case known && lag > maxLag && !v.GetBool("wait"):
			return &exitError{code: 1, err: fmt.Errorf("member promote: %s of group %s lags %d entries behind its leader (at most %d, --max-lag): not promoted; wait with --wait",
				id, name, lag, maxLag)}
		case suffrage == "learner" && known && lag <= maxLag:
			err := m.promoteAt(ctx, st, id)
			if err == nil {
				waited := time.Since(start).Seconds()
				if v.GetBool("json") {
					return writeJSON(c.OutOrStdout(), map[string]any{"group": name, "member": id, "lag": lag, "waited_s": waited})
				}
				_, err = fmt.Fprintf(c.OutOrStdout(), "%s of group %s promoted to voter (lag %d, after %.1fs)\n", id, name, lag, waited)
				return err
			}
			// The leader's refusal: final, or (Unavailable: the learner
			// is behind) waited through under --wait.
			why, isStatus := status.FromError(err)
			if isStatus && (why.Code() == codes.FailedPrecondition || !v.GetBool("wait")) {
				return &exitError{code: 1, err: fmt.Errorf("member promote: %s", why.Message())}
			}
			if !v.GetBool("wait") {
				return fmt.Errorf("member promote: %w", err)
			}
			refused = err
		}
		if time.Since(lastShown) >= time.Second {
			lastShown = time.Now()
			what := "lag unknown"
			if known {
				what = fmt.Sprintf("lag %d (at most %d)", lag, maxLag)
			}
			if refused != nil {
				what += " (" + grpcMessage(refused) + ")"
			}
			fmt.Fprintf(c.ErrOrStderr(), "member promote: waiting for %s of group %s: %s, %s\n", id, name, st.suffrage(id), what)
		}
		select {
		case <-ctx.Done():
			what := "its lag is unknown"
			if known {
				what = fmt.Sprintf("it lags %d entries behind its leader (at most %d)", lag, maxLag)
			}
			if refused != nil {
				what += "; the leader's last answer: " + grpcMessage(refused)
			}
			return &exitError{code: 1, err: fmt.Errorf("member promote: %s of group %s not promoted within --timeout: %s", id, name, what)}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// grpcMessage is err's text without gRPC's "rpc error: code = ..." frame.
func grpcMessage(err error) string {
	return status.Convert(err).Message()
}

// promoteAt asks the leader of st's group to promote id.
func (m *memberConn) promoteAt(ctx context.Context, st *groupState, id string) error {
	i := slices.IndexFunc(st.replicas, func(r partition.ReplicaConfig) bool { return r.ID == st.leader })
	kv, err := m.kv(st.replicas[i].GRPC)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*memberCallTimeout)
	defer cancel()
	_, err = kv.PromoteMember(cctx, &apipb.PromoteMemberRequest{Group: st.name, Id: id})
	return err
}

func newMemberRemoveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove GROUP ID",
		Short: "Remove a member from a group",
		Long: `Remove the member ID from GROUP (DESIGN 14): a control message, multicast to
every group, ends the epoch and starts the next without it; the group's
leader then removes it from raft, handing its leadership over first when it
is the one removed. The command returns once the group's raft configuration
no longer holds it.

Refused, naming the problem, with nothing changed: an unknown group or a
member of another group (exit 2); the last member or the last voter of the
group, or a voter whose removal loses the group's quorum (the voters left
that answer are not a majority of the voters left) (exit 1).

With --json, one object: {"epoch":3,"op":"remove","group":"eu-west-1","member":"r2"}.`,
		Args: memberArgs("remove"),
	}
	addMemberFlags(cmd.Flags(), 30*time.Second)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("member remove: %w", err)) })
	cmd.RunE = runMemberRemove
	return cmd
}

func runMemberRemove(c *cobra.Command, args []string) error {
	v := settings(c)
	m, err := memberConnOf(v)
	if err != nil {
		return usageError(fmt.Errorf("member remove: %w", err))
	}
	defer m.close()
	name, id := args[0], args[1]
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	cfg, epoch, err := m.topology(ctx)
	if err != nil {
		return fmt.Errorf("member remove: %w", err)
	}
	g, err := memberGroup(cfg, "remove", name)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(g.Replicas, func(r partition.ReplicaConfig) bool { return r.ID == id }) {
		if other, _, ok := cfg.Replica(id); ok {
			return usageError(fmt.Errorf("member remove: %s is a member of group %s, not of %s", id, other.Name, name))
		}
		return usageError(fmt.Errorf("member remove: %s is not a member of group %s (its members: %s)", id, name, strings.Join(replicaIDs(g), ", ")))
	}
	if len(g.Replicas) == 1 {
		return &exitError{code: 1, err: fmt.Errorf("member remove: %s is the last member of group %s", id, name)}
	}
	st := m.groupStateOf(ctx, g)
	if err := st.checkRemove(id); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("member remove: %w", err)}
	}
	resp, err := m.reconfigure(ctx, cfg, &apipb.ReconfigureRequest{Epoch: epoch, Member: &apipb.MemberChange{Op: "remove", Group: name, Replica: &apipb.Replica{Id: id}}})
	if err != nil {
		return fmt.Errorf("member remove: %w", err)
	}
	// Done once the group's raft configuration lacks it.
	g.Replicas = slices.DeleteFunc(slices.Clone(g.Replicas), func(r partition.ReplicaConfig) bool { return r.ID == id })
	shown := time.Now()
	for {
		st := m.groupStateOf(ctx, g)
		if _, in := st.raft[id]; st.leader != "" && len(st.raftList) > 0 && !in {
			break
		}
		if time.Since(shown) >= time.Second {
			shown = time.Now()
			fmt.Fprintf(c.ErrOrStderr(), "member remove: epoch %d drops %s; waiting for group %s's leader to remove it from raft\n", resp.GetEpoch(), id, name)
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 1, err: fmt.Errorf("member remove: epoch %d drops %s, but group %s's raft configuration still holds it after --timeout: its leader removes it once elected", resp.GetEpoch(), id, name)}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if v.GetBool("json") {
		return writeJSON(c.OutOrStdout(), map[string]any{"epoch": resp.GetEpoch(), "op": "remove", "group": name, "member": id})
	}
	_, err = fmt.Fprintf(c.OutOrStdout(), "epoch %d: %s removed from group %s\n", resp.GetEpoch(), id, name)
	return err
}

// checkRemove refuses to remove a voter when it is the group's last, or
// when the voters left that answer are not a majority of the voters left:
// the group would lose its quorum.
func (st *groupState) checkRemove(id string) error {
	if st.leader == "" {
		return fmt.Errorf("group %s has no leader that answers: its raft configuration is unknown", st.name)
	}
	rm, ok := st.raft[id]
	if !ok || rm.GetSuffrage() != "voter" {
		return nil // a learner, or not in raft yet: no vote lost
	}
	var left, live []string
	for _, r := range st.raftList {
		if r.GetSuffrage() != "voter" || r.GetId() == id {
			continue
		}
		left = append(left, r.GetId())
		if _, up := st.status[r.GetId()]; up {
			live = append(live, r.GetId())
		}
	}
	switch {
	case len(left) == 0:
		return fmt.Errorf("%s is the last voter of group %s: promote another member first", id, st.name)
	case len(live) < len(left)/2+1:
		return fmt.Errorf("removing %s from group %s loses its quorum: of the voters left (%s), %d answer (%s), a quorum is %d",
			id, st.name, strings.Join(left, ", "), len(live), strings.Join(live, ", "), len(left)/2+1)
	}
	return nil
}

// replicaIDs returns the ids of g's replicas.
func replicaIDs(g partition.GroupConfig) []string {
	out := make([]string, len(g.Replicas))
	for i, r := range g.Replicas {
		out[i] = r.ID
	}
	return out
}
