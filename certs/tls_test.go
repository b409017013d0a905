package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// handshakeTimeout bounds one test handshake over net.Pipe: a side that
// waits for an alert that never comes fails the test instead of hanging.
const handshakeTimeout = 10 * time.Second

type side struct {
	state tls.ConnectionState
	err   error
}

// handshake runs a TLS handshake between srv and cli over net.Pipe, the
// client dialling serverName, and a one-byte exchange after it: in TLS 1.3
// the client finishes its handshake before the server has checked the
// client's certificate, so only the server's first read or the client's
// tells whether the server accepted it.
func handshake(t *testing.T, srv, cli *tls.Config, serverName string) (server, client side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	sc, cc := net.Pipe()
	deadline, _ := ctx.Deadline()
	_ = sc.SetDeadline(deadline)
	_ = cc.SetDeadline(deadline)
	cli = cli.Clone()
	cli.ServerName = serverName
	done := make(chan side, 1)
	go func() {
		// Closing the pipe, not the TLS connection: a close_notify
		// written on a net.Pipe waits for a reader that has left.
		defer sc.Close()
		s := tls.Server(sc, srv)
		err := s.HandshakeContext(ctx)
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		done <- side{s.ConnectionState(), err}
	}()
	c := tls.Client(cc, cli)
	err := c.HandshakeContext(ctx)
	if err == nil {
		buf := make([]byte, 1)
		_, err = c.Read(buf)
	}
	client = side{c.ConnectionState(), err}
	cc.Close()
	server = <-done
	return server, client
}

func TestTLSVersion(t *testing.T) {
	c := newCluster(t)
	n, cl := c.node(t, "n1"), c.client(t, "root")
	for name, cfg := range map[string]*tls.Config{
		"server": ServerConfig(n), "client": ClientConfig(cl), "node": NodeConfig(n), "group": GroupConfig(n),
	} {
		if cfg.MinVersion != tls.VersionTLS13 {
			t.Errorf("%s config: MinVersion %x, want TLS 1.3", name, cfg.MinVersion)
		}
		if cfg.InsecureSkipVerify {
			t.Errorf("%s config skips verification", name)
		}
	}
	old := ClientConfig(cl)
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	srv, _ := handshake(t, ServerConfig(n), old, "localhost")
	if srv.err == nil || !strings.Contains(srv.err.Error(), "unsupported versions") {
		t.Fatalf("TLS 1.2 client: server error %v, want a refusal of the version", srv.err)
	}
}

// TestClientAPI: the client API's server and client configurations accept
// each other and expose the user and the node; everything else is refused.
func TestClientAPI(t *testing.T) {
	c := newCluster(t)
	n1, root := c.node(t, "n1"), c.client(t, "root")

	srv, cli := handshake(t, ServerConfig(n1), ClientConfig(root), "localhost")
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake: server %v, client %v", srv.err, cli.err)
	}
	if srv.state.Version != tls.VersionTLS13 {
		t.Fatalf("version %x, want TLS 1.3", srv.state.Version)
	}
	if user, err := PeerUser(srv.state); err != nil || user != "root" {
		t.Fatalf("PeerUser = %q, %v; want root", user, err)
	}
	if id, err := PeerNode(cli.state); err != nil || id != (NodeID{"g1", "n1"}) {
		t.Fatalf("client's PeerNode = %v, %v; want g1/n1", id, err)
	}
	// The node's IP SAN serves as well as its DNS name.
	if srv, cli := handshake(t, ServerConfig(n1), ClientConfig(root), "127.0.0.1"); srv.err != nil || cli.err != nil {
		t.Fatalf("handshake to 127.0.0.1: server %v, client %v", srv.err, cli.err)
	}

	other := newCluster(t)
	// The other CA's certificates, by peers that trust this cluster's CA:
	// the check under test is the one of the end that refuses them. Built
	// by hand, so that they keep the CA they are given (a loaded one follows
	// its files).
	oc, on := other.client(t, "root"), other.node(t, "n1")
	stranger := &Client{User: oc.User, Cert: oc.Cert, CAs: root.CAs}
	otherNode := &Node{ID: on.ID, Cert: on.Cert, CAs: n1.CAs}
	tests := []struct {
		name       string
		srv, cli   *tls.Config
		serverName string
		serverErr  string // refused by the server: its error has this
		clientErr  string // refused by the client: its error has this
	}{
		{"client of another CA", ServerConfig(n1), ClientConfig(stranger), "localhost", "certificate signed by unknown authority", ""},
		{"server of another CA", ServerConfig(otherNode), ClientConfig(root), "localhost", "", "certificate signed by unknown authority"},
		{"wrong server name", ServerConfig(n1), ClientConfig(root), "db.example", "", "not db.example"},
		{"node as a client", ServerConfig(n1), nodeAsClient(c.node(t, "n2")), "localhost",
			"is a node certificate (flexkv://g1/n2), not a client's", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := handshake(t, tc.srv, tc.cli, tc.serverName)
			checkRefused(t, srv, cli, tc.serverErr, tc.clientErr)
		})
	}
}

// TestAPIServerConfig: the client API of a replica admits a user and a
// node of the cluster, each read as what it is, and nothing of another CA.
func TestAPIServerConfig(t *testing.T) {
	c := newCluster(t)
	n1, n2, root := c.node(t, "n1"), c.node(t, "n2"), c.client(t, "root")
	srv, cli := handshake(t, APIServerConfig(n1), ClientConfig(root), "localhost")
	if srv.err != nil || cli.err != nil {
		t.Fatalf("user handshake: server %v, client %v", srv.err, cli.err)
	}
	if user, err := PeerUser(srv.state); err != nil || user != "root" {
		t.Fatalf("PeerUser = %q, %v; want root", user, err)
	}
	srv, cli = handshake(t, APIServerConfig(n1), NodeConfig(n2), "localhost")
	if srv.err != nil || cli.err != nil {
		t.Fatalf("node handshake: server %v, client %v", srv.err, cli.err)
	}
	if _, err := PeerUser(srv.state); err == nil {
		t.Fatal("PeerUser of a node's connection succeeded: a node passed for a user")
	}
	if id, err := PeerNode(srv.state); err != nil || id != (NodeID{"g1", "n2"}) {
		t.Fatalf("PeerNode = %v, %v; want g1/n2", id, err)
	}
	other := newCluster(t)
	// Another CA's node that trusts this cluster's CA: built by hand, so
	// that it keeps the CA it is given (a loaded one follows its files).
	on := other.node(t, "n1")
	stranger := &Node{ID: on.ID, Cert: on.Cert, CAs: n1.CAs}
	srv, cli = handshake(t, APIServerConfig(n1), NodeConfig(stranger), "localhost")
	checkRefused(t, srv, cli, "certificate signed by unknown authority", "")
}

// nodeAsClient presents a node certificate with the client API's client
// configuration.
func nodeAsClient(n *Node) *tls.Config {
	return ClientConfig(&Client{User: n.ID.Replica, Cert: n.Cert, CAs: n.CAs})
}

// checkRefused checks that the side expected to refuse did, with an error
// that has want; "" expects that side's own check to pass (it may still see
// the other's alert).
func checkRefused(t *testing.T, srv, cli side, serverErr, clientErr string) {
	t.Helper()
	if srv.err == nil && cli.err == nil {
		t.Fatal("handshake succeeded, want a refusal")
	}
	if serverErr != "" && (srv.err == nil || !strings.Contains(srv.err.Error(), serverErr)) {
		t.Fatalf("server error %v, want one with %q (client: %v)", srv.err, serverErr, cli.err)
	}
	if clientErr != "" && (cli.err == nil || !strings.Contains(cli.err.Error(), clientErr)) {
		t.Fatalf("client error %v, want one with %q (server: %v)", cli.err, clientErr, srv.err)
	}
}

// TestNodeLinks: group to group and raft. Both ends learn the other's
// (group, replica); raft refuses another group's node; nothing but a node
// certificate of the cluster CA gets in.
func TestNodeLinks(t *testing.T) {
	c := newCluster(t)
	n1, n2, m1 := c.node(t, "n1"), c.node(t, "n2"), c.node(t, "m1")

	srv, cli := handshake(t, NodeConfig(n1), NodeConfig(m1), "localhost")
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake: server %v, client %v", srv.err, cli.err)
	}
	if id, err := PeerNode(srv.state); err != nil || id != m1.ID {
		t.Fatalf("server's PeerNode = %v, %v; want %v", id, err, m1.ID)
	}
	if id, err := PeerNode(cli.state); err != nil || id != n1.ID {
		t.Fatalf("client's PeerNode = %v, %v; want %v", id, err, n1.ID)
	}
	if id, err := RequireGroup(srv.state, "g2"); err != nil || id != m1.ID {
		t.Fatalf("RequireGroup(g2) = %v, %v; want %v", id, err, m1.ID)
	}
	if _, err := RequireGroup(srv.state, "g1"); err == nil || !strings.Contains(err.Error(), `peer g2/m1 is a node of group "g2", not of group "g1"`) {
		t.Fatalf("RequireGroup(g1): error %v, want the group named", err)
	}
	if err := RequireReplica(srv.state, m1.ID); err != nil {
		t.Fatalf("RequireReplica(%v): %v", m1.ID, err)
	}
	if err := RequireReplica(srv.state, NodeID{"g2", "m2"}); err == nil || !strings.Contains(err.Error(), "peer is node g2/m1, not g2/m2") {
		t.Fatalf("RequireReplica(g2/m2): error %v, want both named", err)
	}

	// Raft inside g1: n2 gets in, m1 (group g2) does not, either way.
	if srv, cli := handshake(t, GroupConfig(n1), GroupConfig(n2), "localhost"); srv.err != nil || cli.err != nil {
		t.Fatalf("raft handshake n1 <- n2: server %v, client %v", srv.err, cli.err)
	}

	other := newCluster(t)
	// Another CA's node that trusts this cluster's CA: built by hand, so
	// that it keeps the CA it is given (a loaded node follows its files).
	on := other.node(t, "n2")
	otherNode := &Node{ID: on.ID, Cert: on.Cert, CAs: n1.CAs}
	expired := expiredNode(t, c)
	tests := []struct {
		name                 string
		srv, cli             *tls.Config
		serverErr, clientErr string
	}{
		{"raft from another group", GroupConfig(n1), NodeConfig(m1), `peer g2/m1 is a node of group "g2", not of group "g1"`, ""},
		{"raft to another group", NodeConfig(m1), GroupConfig(n1), "", `peer g2/m1 is a node of group "g2", not of group "g1"`},
		{"client cert on the node link", NodeConfig(n1), ClientConfig(c.client(t, "root")), "peer certificate names no flexkv:// URI", ""},
		{"node of another CA", NodeConfig(n1), NodeConfig(otherNode), "certificate signed by unknown authority", ""},
		{"expired peer", NodeConfig(n1), NodeConfig(expired), "expired", ""},
		{"expired server", NodeConfig(expired), NodeConfig(n1), "", "expired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := handshake(t, tc.srv, tc.cli, "localhost")
			checkRefused(t, srv, cli, tc.serverErr, tc.clientErr)
		})
	}
}

// expiredNode creates node "old" of g1 with a validity that ended a day
// ago. LoadNode refuses it, so it is put together by hand.
func expiredNode(t *testing.T, c *cluster) *Node {
	t.Helper()
	past := Options{Now: time.Now().Add(-ValidityNode - 24*time.Hour)}
	if _, err := c.ca.CreateNode(c.dir, NodeID{"g1", "old"}, []string{"localhost"}, past); err != nil {
		t.Fatal(err)
	}
	pair, _, err := loadPair(c.dir, NodeCertFile("old"), NodeKeyFile("old"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCAPool(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	return &Node{ID: NodeID{"g1", "old"}, Cert: pair, CAs: pool}
}

func TestIdentityErrors(t *testing.T) {
	if _, err := PeerNode(tls.ConnectionState{}); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("PeerNode of an unverified connection: %v, want ErrNotVerified", err)
	}
	if _, err := PeerUser(tls.ConnectionState{}); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("PeerUser of an unverified connection: %v, want ErrNotVerified", err)
	}
	c := newCluster(t)
	for _, tc := range []struct {
		file, want string
	}{
		{"ca.crt", "is a CA certificate, not a node's"},
		{"client.root.crt", "names no flexkv:// URI"},
	} {
		cert, err := LoadCert(filepath.Join(c.dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NodeIdentity(cert); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NodeIdentity(%s): error %v, want one with %q", tc.file, err, tc.want)
		}
	}
	cert, err := LoadCert(filepath.Join(c.dir, "node.n1.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := UserOf(cert); err == nil || !strings.Contains(err.Error(), "is a node certificate (flexkv://g1/n1), not a client's") {
		t.Errorf("UserOf(node.n1.crt): error %v, want it named a node certificate", err)
	}
	for _, uri := range []string{"flexkv://g1", "flexkv://g1/n1/x", "flexkv://g1:9/n1", "flexkv://G1/n1", "flexkv://g1/n1?x=1"} {
		u := mustURL(t, uri)
		cert.URIs = append(cert.URIs[:0:0], u)
		if _, err := NodeIdentity(cert); err == nil {
			t.Errorf("NodeIdentity(%s) = nil error, want a refusal", uri)
		}
	}
	cert.URIs = append(cert.URIs[:0:0], mustURL(t, "flexkv://g1/n1"), mustURL(t, "flexkv://g1/n2"))
	if _, err := NodeIdentity(cert); err == nil || !strings.Contains(err.Error(), "names 2 flexkv:// URIs, want one") {
		t.Errorf("NodeIdentity of two URIs: error %v", err)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestLoopbackDial: over a real listener, tls.Dial fills ServerName from
// the address, as gRPC's credentials do, and the node's IP SAN matches it.
func TestLoopbackDial(t *testing.T) {
	c := newCluster(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerConfig(c.node(t, "n1")))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	users := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			users <- err.Error()
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
		if err := tc.Handshake(); err != nil {
			users <- err.Error()
			return
		}
		user, err := PeerUser(tc.ConnectionState())
		if err != nil {
			user = err.Error()
		}
		users <- user
		_, _ = tc.Write([]byte{1})
	}()
	d := &net.Dialer{Timeout: handshakeTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), ClientConfig(c.client(t, "root")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if id, err := PeerNode(conn.ConnectionState()); err != nil || id != (NodeID{"g1", "n1"}) {
		t.Fatalf("PeerNode = %v, %v; want g1/n1", id, err)
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if user := <-users; user != "root" {
		t.Fatalf("server saw user %q, want root", user)
	}
}
