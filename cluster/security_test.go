package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/transport/transportpb"
	"github.com/flexkv/flexkv/txn"
)

// TestRefusals tries the links of a secure cluster as a host on the same
// network would (DESIGN 13), with the wrong credentials or none: each
// attempt is refused, and afterwards the cluster still holds what it held
// and serves a transaction across groups, so the links between the groups
// kept delivering.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocal(t, cfg, dir)
	ctx := ctxTimeout(t, time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, []byte("w/0001/acct"), []byte("10")); err != nil {
		t.Fatal(err)
	}

	g1, g2 := cfg.Groups[0], cfg.Groups[1]
	cr := makeRefusalCreds(t, dir, cfg)

	api, peer, raftAddr := g1.Replicas[0].GRPC, g2.Replicas[0].PeerAddr(), g1.Replicas[1].Raft
	tlsCreds := func(cfg *tls.Config) grpc.DialOption { return grpc.WithTransportCredentials(credentials.NewTLS(cfg)) }
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())

	for _, tc := range []struct {
		name string
		try  func() error
	}{
		{"client API without a client certificate", func() error { return getVia(api, tlsCreds(cr.noCert)) }},
		{"client API with a certificate of another CA", func() error { return getVia(api, tlsCreds(cr.otherCA)) }},
		{"client API with an expired certificate", func() error { return getVia(api, tlsCreds(cr.expired)) }},
		{"client API with a node certificate", func() error { return getVia(api, tlsCreds(cr.nodeAsClient)) }},
		{"client API over TLS 1.2", func() error { return getVia(api, tlsCreds(cr.tls12)) }},
		{"client API in plaintext", func() error { return getVia(api, plain) }},
		{"peer port with a client certificate", func() error { return deliverVia(peer, tlsCreds(cr.root), 0) }},
		{"peer port with a node certificate of another CA", func() error { return deliverVia(peer, tlsCreds(cr.otherNode), 1) }},
		{"peer port in plaintext", func() error { return deliverVia(peer, plain, 0) }},
		{"frames claiming a group the node is not of (forged acks)", func() error {
			// A node of group 0 sends frames as group 2.
			err := deliverVia(peer, tlsCreds(cr.g1Node), 2)
			if status.Code(err) != codes.PermissionDenied {
				return errors.Join(errors.New("want PermissionDenied"), err)
			}
			return err
		}},
		{"raft from a node of another group", func() error { return raftVia(raftAddr, cr.g2NodeOnRaft) }},
		{"raft in plaintext", func() error { return raftPlain(raftAddr) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.try()
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.HasPrefix(err.Error(), "want ") {
				t.Fatal(err)
			}
			if strings.Contains(err.Error(), "not the leader") {
				// Past the handshake: refused for where it went, not for
				// who it is.
				t.Fatalf("refused only as a follower's: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}

	checkAfterRefusals(ctx, t, c, l, g2.Replicas[0].ID)
}

// refusalCreds are the TLS configurations TestRefusals tries, each of
// which a link of the cluster must refuse, and the root client's.
type refusalCreds struct {
	noCert       *tls.Config // the root client's, without its certificate
	otherCA      *tls.Config // a client of another CA
	expired      *tls.Config // a client whose certificate expired
	tls12        *tls.Config // the root client's, over TLS 1.2
	nodeAsClient *tls.Config // a node's, as a client
	root         *tls.Config // the root client's
	otherNode    *tls.Config // a node of group 1 certified by another CA
	g1Node       *tls.Config // a node of group 0
	g2NodeOnRaft *tls.Config // a node of group 1 at raft, taking any server
}

// makeRefusalCreds makes the certificates TestRefusals tries: with the
// cluster's CA in dir, as a legitimate admin would issue them, and with
// another CA, whose certificates mean nothing here.
func makeRefusalCreds(t *testing.T, dir string, cfg *partition.ClusterConfig) refusalCreds {
	t.Helper()
	g1, g2 := cfg.Groups[0], cfg.Groups[1]
	// The cluster's CA, for certificates a legitimate admin would issue,
	// and another CA, whose certificates mean nothing here.
	ca, err := certs.LoadCA(CertsDir(dir), filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(t.TempDir(), "certs")
	past := certs.Options{Now: time.Now().Add(-certs.ValidityClient - 48*time.Hour)}
	if _, err := ca.CreateClient(mine, "old", past); err != nil {
		t.Fatal(err)
	}
	// The certificates directory needs ca.crt beside the client's.
	if _, err := ca.CreateClient(mine, "alice", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(CertsDir(dir), certs.CAFile), filepath.Join(mine, certs.CAFile))
	other := filepath.Join(t.TempDir(), "certs")
	otherCA, err := certs.CreateCA(other, filepath.Join(filepath.Dir(other), "ca.key"), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherCA.CreateClient(other, "mallory", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := otherCA.CreateNode(other, certs.NodeID{Group: g2.Name, Replica: g2.Replicas[0].ID}, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}

	loadClient := func(dir, user string) *tls.Config {
		cl, err := certs.LoadClient(dir, user)
		if err != nil {
			t.Fatal(err)
		}
		return certs.ClientConfig(cl)
	}
	node := func(dir, id string) *certs.Node {
		n, err := certs.LoadNode(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// A client configuration follows its certificate files
	// (GetClientCertificate): these two present what they are given.
	noCert := loadClient(CertsDir(dir), RootUser)
	noCert.Certificates, noCert.GetClientCertificate = nil, nil
	expired := func() *tls.Config {
		// LoadClient refuses an expired certificate; a client that sends
		// one anyway is refused by the server.
		c := loadClient(mine, "alice")
		old, err := tls.LoadX509KeyPair(filepath.Join(mine, certs.ClientCertFile("old")), filepath.Join(mine, certs.ClientKeyFile("old")))
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates, c.GetClientCertificate = []tls.Certificate{old}, nil
		return c
	}()
	tls12 := loadClient(CertsDir(dir), RootUser)
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	// A node of group 1 at group 0's raft port, taking any server: the
	// refusal must come from the server.
	g2NodeOnRaft := certs.GroupConfig(node(CertsDir(dir), g2.Replicas[0].ID))
	g2NodeOnRaft.InsecureSkipVerify, g2NodeOnRaft.VerifyConnection = true, nil
	return refusalCreds{
		noCert: noCert, otherCA: loadClient(other, "mallory"), expired: expired, tls12: tls12,
		nodeAsClient: certs.NodeConfig(node(CertsDir(dir), g1.Replicas[0].ID)),
		root:         loadClient(CertsDir(dir), RootUser),
		otherNode:    certs.NodeConfig(node(other, g2.Replicas[0].ID)),
		g1Node:       certs.NodeConfig(node(CertsDir(dir), g1.Replicas[0].ID)),
		g2NodeOnRaft: g2NodeOnRaft,
	}
}

// checkAfterRefusals checks that the refusals changed nothing and that the
// links between groups still deliver: a transfer across groups 0 and 1
// commits at both, and peer counted the forged frames as refused.
func checkAfterRefusals(ctx context.Context, t *testing.T, c *client.Client, l *Local, peer string) {
	t.Helper()
	// Nothing changed, and the links between groups still deliver: a
	// transfer across groups 0 and 1 commits at both.
	if v, _, err := c.Get(ctx, []byte("w/0001/acct")); err != nil || string(v) != "10" {
		t.Fatalf("after the refusals w/0001/acct = %q, %v; want 10", v, err)
	}
	res, err := c.Txn(ctx, mustTxn(t, `{"if":[{"key":"w/0001/acct","cmp":">=","int":4}],"then":[{"op":"add","key":"w/0001/acct","int":-4},{"op":"add","key":"w/0003/acct","int":4}],"else":[]}`))
	if err != nil || !res.Succeeded {
		t.Fatalf("transfer after the refusals: %+v, %v", res, err)
	}
	for key, want := range map[string]string{"w/0001/acct": "6", "w/0003/acct": "4"} { //flexkv:unordered independent checks
		if v, _, err := c.Get(ctx, []byte(key)); err != nil || string(v) != want {
			t.Errorf("%s = %q, %v; want %s", key, v, err, want)
		}
	}
	if n := refusals(l, peer); n == 0 {
		t.Error("the forged frames were not counted as refused")
	}
}

// getVia makes one Get on the client API at addr with opts.
func getVia(addr string, opts ...grpc.DialOption) error {
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = apipb.NewKVClient(cc).Get(ctx, &apipb.GetRequest{Key: []byte("w/0001/acct")})
	return err
}

// deliverVia sends group 1's peer service at addr, with opt, a frame from
// group from that acknowledges what group 1 sent it: were it taken, the
// sender would drop those envelopes from its outbox.
func deliverVia(addr string, opt grpc.DialOption, from uint32) error {
	cc, err := grpc.NewClient(addr, opt)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ack := channel.AppendFrame(nil, channel.Frame{From: partition.GroupID(from), To: 1, Ack: 1})
	_, err = transportpb.NewGroupChannelClient(cc).Deliver(ctx, &transportpb.DeliverRequest{FromGroup: from, ToGroup: 1, Frames: [][]byte{ack}})
	return err
}

// raftVia opens a TLS connection to a raft address with cfg and reads: the
// server refuses the handshake, which the client sees on its first read.
func raftVia(addr string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.ServerName = "127.0.0.1"
	conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte{0}); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return notTimeout(err)
}

var netDialer = net.Dialer{Timeout: 3 * time.Second}

// raftPlain writes a plaintext raft request header to a raft address and
// reads: a TLS listener answers with an alert and closes.
func raftPlain(addr string) error {
	conn, err := netDialer.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return err
	}
	// rpcAppendEntries and a msgpack map as raft's plaintext transport
	// would send them: more than a TLS record header, which a TLS server
	// reads before it answers.
	req := append([]byte{0, 0x81, 0xa4}, "Term"...)
	if _, err := conn.Write(append(req, 0x01)); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return notTimeout(err)
}

// notTimeout returns err, or nil if it is a timeout: a server that waits
// for more of a request accepted what came so far.
func notTimeout(err error) error {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return nil
	}
	return err
}

// refusals returns how many peer calls node id refused for their group.
func refusals(l *Local, id string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if srv := l.nodes[id].srv; srv != nil {
		return srv.PeerRefusals()
	}
	return 0
}

func mustTxn(t testing.TB, s string) *txn.Txn {
	t.Helper()
	tx, err := txn.ParseJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInsecure: --insecure, the exception, runs every link in plaintext: no
// certificates are made, a plaintext client works across groups, and a TLS
// client is refused.
func TestInsecure(t *testing.T) {
	dir := t.TempDir()
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: dir, Insecure: true})
	if l.ClientTLS() != nil || l.CertsDir() != "" {
		t.Fatalf("an insecure cluster has client TLS %v, certificates in %q", l.ClientTLS() != nil, l.CertsDir())
	}
	if _, err := os.Stat(CertsDir(dir)); err == nil {
		t.Error("an insecure cluster made certificates")
	}
	ctx := ctxTimeout(t, time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Txn(ctx, mustTxn(t, `{"then":[{"op":"add","key":"w/0001/n","int":1},{"op":"add","key":"w/0005/n","int":1}]}`))
	if err != nil || !res.Succeeded {
		t.Fatalf("a transaction across groups in plaintext: %+v, %v", res, err)
	}
	other := t.TempDir()
	otherCA, err := certs.CreateCA(filepath.Join(other, "certs"), filepath.Join(other, "ca.key"), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherCA.CreateClient(filepath.Join(other, "certs"), "root", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	cl, err := certs.LoadClient(filepath.Join(other, "certs"), "root")
	if err != nil {
		t.Fatal(err)
	}
	if err := getVia(cfg.Groups[0].Replicas[0].GRPC, grpc.WithTransportCredentials(credentials.NewTLS(certs.ClientConfig(cl)))); err == nil {
		t.Error("a TLS client was answered by a plaintext server")
	}
}
