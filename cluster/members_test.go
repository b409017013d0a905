package cluster

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
)

// TestMemberChanges: a change of members (DESIGN 14) with bad input is
// refused, naming the problem, with nothing changed; a good one starts an
// epoch whose Topology, at every group, lists the new member, and the
// group's leader adds it to raft as a learner, removes it again when a
// later epoch drops it, and refuses to promote a voter or a stranger.
func TestMemberChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir()})
	reconfigure := func(mc *apipb.MemberChange) (*apipb.ReconfigureResponse, error) {
		var resp *apipb.ReconfigureResponse
		err := callLeader(t, l, "eu-west-1", func(kv apipb.KVClient) error {
			var err error
			resp, err = kv.Reconfigure(ctxTimeout(t, 10*time.Second), &apipb.ReconfigureRequest{Member: mc})
			return err
		})
		return resp, err
	}
	r1 := cfg.Groups[0].Replicas[0]
	fresh := func(id string) *apipb.Replica {
		return &apipb.Replica{Id: id, Raft: testaddr.Free(t, testaddr.Cluster), Grpc: testaddr.Free(t, testaddr.Cluster)}
	}
	for _, tc := range []struct {
		name string
		mc   *apipb.MemberChange
		text string
	}{
		{"unknown group", &apipb.MemberChange{Op: "add", Group: "mars", Replica: fresh("r10")}, `unknown group "mars"`},
		{"id in use", &apipb.MemberChange{Op: "add", Group: "eu-west-1", Replica: fresh("r4")}, `id "r4" is in use: a member of group eu-west-3`},
		{"address in use", &apipb.MemberChange{Op: "add", Group: "eu-west-1", Replica: &apipb.Replica{Id: "r10", Raft: r1.Raft, Grpc: testaddr.Free(t, testaddr.Cluster)}}, "already used by"},
		{"no raft address", &apipb.MemberChange{Op: "add", Group: "eu-west-1", Replica: &apipb.Replica{Id: "r10", Grpc: testaddr.Free(t, testaddr.Cluster)}}, "a raft and a grpc address are required"},
		{"bad id", &apipb.MemberChange{Op: "add", Group: "eu-west-1", Replica: fresh("R 10")}, "R 10"},
		{"remove a stranger", &apipb.MemberChange{Op: "remove", Group: "eu-west-1", Replica: &apipb.Replica{Id: "r99"}}, `"r99" is not a member of any group`},
		{"remove another group's", &apipb.MemberChange{Op: "remove", Group: "eu-west-1", Replica: &apipb.Replica{Id: "r4"}}, `"r4" is a member of group eu-west-3, not of eu-west-1`},
		{"unknown operation", &apipb.MemberChange{Op: "swap", Group: "eu-west-1", Replica: fresh("r10")}, `operation "swap"`},
	} {
		_, err := reconfigure(tc.mc)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want InvalidArgument naming %q", tc.name, err, tc.text)
		}
	}
	waitEpoch(t, l, 1)

	r10 := fresh("r10")
	resp, err := reconfigure(&apipb.MemberChange{Op: "add", Group: "eu-west-1", Replica: r10})
	if err != nil || resp.GetEpoch() != 2 {
		t.Fatalf("add r10: epoch %d, %v; want epoch 2", resp.GetEpoch(), err)
	}
	waitEpoch(t, l, 2)
	// Every replica serves the new epoch's members.
	for _, addr := range l.Endpoints() {
		top, err := dial(t, l, addr).Topology(ctxTimeout(t, 5*time.Second), &apipb.TopologyRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var west []string
		for _, r := range top.GetGroups()[0].GetReplicas() {
			west = append(west, r.GetId())
		}
		if top.GetEpoch() != 2 || strings.Join(west, ",") != "r1,r2,r3,r10" {
			t.Errorf("Topology of %s: epoch %d, eu-west-1 %v; want epoch 2 with r1, r2, r3, r10", addr, top.GetEpoch(), west)
		}
		boot, err := dial(t, l, addr).Topology(ctxTimeout(t, 5*time.Second), &apipb.TopologyRequest{Bootstrap: true})
		if err != nil || boot.GetEpoch() != 1 || len(boot.GetGroups()[0].GetReplicas()) != 3 {
			t.Errorf("bootstrap Topology of %s: %v, %v; want epoch 1 with 3 replicas", addr, boot, err)
		}
	}
	waitRaftMembers(t, l, "eu-west-1", "r1:voter r2:voter r3:voter r10:learner")
	promote := func(id string) error {
		return callLeader(t, l, "eu-west-1", func(kv apipb.KVClient) error {
			_, err := kv.PromoteMember(ctxTimeout(t, 10*time.Second), &apipb.PromoteMemberRequest{Group: "eu-west-1", Id: id})
			return err
		})
	}
	if err := promote("r1"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not a learner") {
		t.Errorf("promote r1: %v, want FailedPrecondition not a learner", err)
	}
	if err := promote("r99"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not a member") {
		t.Errorf("promote r99: %v, want FailedPrecondition not a member", err)
	}
	if resp, err := reconfigure(&apipb.MemberChange{Op: "remove", Group: "eu-west-1", Replica: &apipb.Replica{Id: "r10"}}); err != nil || resp.GetEpoch() != 3 {
		t.Fatalf("remove r10: epoch %d, %v; want epoch 3", resp.GetEpoch(), err)
	}
	waitEpoch(t, l, 3)
	waitRaftMembers(t, l, "eu-west-1", "r1:voter r2:voter r3:voter")
}

// waitRaftMembers waits until group's leader reports the raft
// configuration want ("id:suffrage ...", sorted by id as raft keeps them
// in the order added).
func waitRaftMembers(t *testing.T, l *Local, group, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		_ = callLeader(t, l, group, func(kv apipb.KVClient) error {
			resp, err := kv.Members(ctxTimeout(t, 5*time.Second), &apipb.MembersRequest{})
			var ms []string
			for _, m := range resp.GetMembers() {
				ms = append(ms, m.GetId()+":"+m.GetSuffrage())
			}
			got = strings.Join(ms, " ")
			return err
		})
		if got == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("group %s's raft configuration %q, want %q", group, got, want)
}
