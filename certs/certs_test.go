package certs

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cluster is a certs directory with a CA, nodes n1 and n2 of group g1, m1
// of group g2, and the client root.
type cluster struct {
	dir, caKey string
	ca         *CA
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{dir: filepath.Join(t.TempDir(), "certs"), caKey: filepath.Join(t.TempDir(), "ca.key")}
	var err error
	if c.ca, err = CreateCA(c.dir, c.caKey, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		id    NodeID
		hosts []string
	}{
		{NodeID{"g1", "n1"}, []string{"localhost", "127.0.0.1"}},
		{NodeID{"g1", "n2"}, []string{"localhost", "127.0.0.1"}},
		{NodeID{"g2", "m1"}, []string{"localhost", "::1"}},
	} {
		if _, err := c.ca.CreateNode(c.dir, n.id, n.hosts, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ca.CreateClient(c.dir, "root", Options{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) node(t *testing.T, replica string) *Node {
	t.Helper()
	n, err := LoadNode(c.dir, replica)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *cluster) client(t *testing.T, user string) *Client {
	t.Helper()
	cl, err := LoadClient(c.dir, user)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestCreateLoad(t *testing.T) {
	c := newCluster(t)
	ca, err := LoadCA(c.dir, c.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.Equal(c.ca.Cert) {
		t.Fatal("LoadCA returned another certificate than CreateCA made")
	}
	if _, err := os.Stat(filepath.Join(c.dir, "ca.key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the CA key is in the certs dir (stat: %v)", err)
	}
	n := c.node(t, "n1")
	if want := (NodeID{Group: "g1", Replica: "n1"}); n.ID != want {
		t.Fatalf("node id %v, want %v", n.ID, want)
	}
	leaf := n.Cert.Leaf
	if got := leaf.URIs[0].String(); got != "flexkv://g1/n1" {
		t.Fatalf("URI SAN %q, want flexkv://g1/n1", got)
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "localhost" || len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.1" {
		t.Fatalf("SANs %v %v, want [localhost] [127.0.0.1]", leaf.DNSNames, leaf.IPAddresses)
	}
	cl := c.client(t, "root")
	if cl.User != "root" || cl.Cert.Leaf.Subject.CommonName != "root" {
		t.Fatalf("client user %q CN %q, want root", cl.User, cl.Cert.Leaf.Subject.CommonName)
	}
	for name, want := range map[string]os.FileMode{
		"ca.crt": 0o644, "node.n1.crt": 0o644, "node.n1.key": 0o600, "client.root.crt": 0o644, "client.root.key": 0o600,
	} {
		if got := mode(t, filepath.Join(c.dir, name)); got != want {
			t.Errorf("%s: mode %04o, want %04o", name, got, want)
		}
	}
	if got := mode(t, c.caKey); got != 0o600 {
		t.Errorf("CA key: mode %04o, want 0600", got)
	}
	// Validity: 10 years for the CA, 5 for the rest; random 128-bit serials.
	serials := map[string]bool{}
	for _, tc := range []struct {
		cert     *x509.Certificate
		validity time.Duration
	}{{ca.Cert, ValidityCA}, {leaf, ValidityNode}, {cl.Cert.Leaf, ValidityClient}} {
		if d := tc.cert.NotAfter.Sub(tc.cert.NotBefore) - backdate; d < tc.validity-time.Minute || d > tc.validity+time.Minute {
			t.Errorf("%s: valid %v, want %v", tc.cert.Subject, d, tc.validity)
		}
		if b := tc.cert.SerialNumber.BitLen(); b > 128 || b < 64 {
			t.Errorf("%s: serial of %d bits, want a random 128-bit one", tc.cert.Subject, b)
		}
		serials[tc.cert.SerialNumber.String()] = true
	}
	if len(serials) != 3 {
		t.Errorf("serials repeat: %v", serials)
	}
	if leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("node ext key usage %v, want server and client auth", leaf.ExtKeyUsage)
	}
	if u := cl.Cert.Leaf.ExtKeyUsage; len(u) != 1 || u[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("client ext key usage %v, want client auth only", u)
	}
}

func TestNoOverwrite(t *testing.T) {
	c := newCluster(t)
	before, err := os.ReadFile(filepath.Join(c.dir, "node.n1.key"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func(Options) error
		file string
	}{
		{"ca", func(o Options) error { _, err := CreateCA(c.dir, c.caKey, o); return err }, filepath.Join(c.dir, "ca.crt")},
		{"ca key", func(o Options) error {
			_, err := CreateCA(filepath.Join(t.TempDir(), "other"), c.caKey, o)
			return err
		}, c.caKey},
		{"node", func(o Options) error {
			_, err := c.ca.CreateNode(c.dir, NodeID{"g1", "n1"}, []string{"localhost"}, o)
			return err
		}, filepath.Join(c.dir, "node.n1.crt")},
		{"client", func(o Options) error { _, err := c.ca.CreateClient(c.dir, "root", o); return err }, filepath.Join(c.dir, "client.root.crt")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(Options{})
			if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), tc.file) {
				t.Fatalf("error %v, want ErrExists naming %s", err, tc.file)
			}
		})
	}
	after, err := os.ReadFile(filepath.Join(c.dir, "node.n1.key"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("a refused creation changed node.n1.key")
	}
	// A key alone (its certificate lost) is not replaced either.
	if err := os.Remove(filepath.Join(c.dir, "node.n2.crt")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ca.CreateNode(c.dir, NodeID{"g1", "n2"}, []string{"localhost"}, Options{}); !errors.Is(err, ErrExists) ||
		!strings.Contains(err.Error(), "node.n2.key") {
		t.Fatalf("error %v, want ErrExists naming node.n2.key", err)
	}

	// With Overwrite: new files, with the right modes even where the old
	// ones were wrong.
	keyPath := filepath.Join(c.dir, "node.n1.key")
	if err := os.Chmod(keyPath, 0o644); err != nil {
		t.Fatal(err)
	}
	old := c.ca.Cert
	if _, err := c.ca.CreateNode(c.dir, NodeID{"g1", "n1"}, []string{"localhost"}, Options{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, keyPath); got != 0o600 {
		t.Fatalf("overwritten key: mode %04o, want 0600", got)
	}
	if after, _ := os.ReadFile(keyPath); bytes.Equal(before, after) {
		t.Fatal("Overwrite left the old key")
	}
	c.node(t, "n1")
	ca, err := CreateCA(c.dir, c.caKey, Options{Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cert.Equal(old) {
		t.Fatal("Overwrite left the old CA")
	}
	// The old node certificates no longer chain to the new CA.
	if _, err := LoadNode(c.dir, "n1"); err == nil || !strings.Contains(err.Error(), "node.n1.crt") {
		t.Fatalf("LoadNode under a new CA: error %v, want one naming node.n1.crt", err)
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left in the certs dir", e.Name())
		}
	}
}

func TestLoadErrors(t *testing.T) {
	c := newCluster(t)
	other := newCluster(t)
	chmod := func(path string, m os.FileMode) {
		t.Helper()
		if err := os.Chmod(path, m); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(from, to string) {
		t.Helper()
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The client key of another cluster, beside this one's certificate.
	copyFile(filepath.Join(other.dir, "client.root.key"), filepath.Join(c.dir, "client.root.key"))
	// A node certificate of this CA copied under another replica's name.
	copyFile(filepath.Join(c.dir, "node.n1.crt"), filepath.Join(c.dir, "node.n9.crt"))
	copyFile(filepath.Join(c.dir, "node.n1.key"), filepath.Join(c.dir, "node.n9.key"))
	tests := []struct {
		name string
		load func() error
		want []string
	}{
		{"node key mode", func() error {
			chmod(filepath.Join(c.dir, "node.n2.key"), 0o644)
			_, err := LoadNode(c.dir, "n2")
			return err
		}, []string{filepath.Join(c.dir, "node.n2.key"), "mode 0644, want 0600"}},
		{"ca key mode", func() error {
			chmod(c.caKey, 0o640)
			defer chmod(c.caKey, 0o600)
			_, err := LoadCA(c.dir, c.caKey)
			return err
		}, []string{c.caKey, "mode 0640"}},
		{"ca key of another CA", func() error { _, err := LoadCA(c.dir, other.caKey); return err },
			[]string{other.caKey, "does not match", "ca.crt"}},
		{"key of another cert", func() error { _, err := LoadClient(c.dir, "root"); return err },
			[]string{"client.root.key does not match", "client.root.crt"}},
		{"missing node", func() error { _, err := LoadNode(c.dir, "n7"); return err }, []string{"node.n7.crt", "no such file"}},
		{"renamed node", func() error { _, err := LoadNode(c.dir, "n9"); return err },
			[]string{"node.n9.crt names flexkv://g1/n1, not replica n9"}},
		{"bad name", func() error { _, err := LoadClient(c.dir, "../root"); return err }, []string{`user "../root" is not a valid name`}},
		{"no ca", func() error { _, err := LoadNode(t.TempDir(), "n1"); return err }, []string{"ca.crt", "no such file"}},
		{"not a cert", func() error {
			_, err := LoadCert(filepath.Join(c.dir, "node.n1.key"))
			return err
		}, []string{"node.n1.key holds no PEM CERTIFICATE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.load()
			if err == nil {
				t.Fatalf("no error, want one with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestCreateErrors(t *testing.T) {
	c := newCluster(t)
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"no hosts", func() error { _, err := c.ca.CreateNode(c.dir, NodeID{"g1", "x"}, nil, Options{}); return err }, "node g1/x: no hosts"},
		{"bad host", func() error {
			_, err := c.ca.CreateNode(c.dir, NodeID{"g1", "x"}, []string{"a:7100"}, Options{})
			return err
		}, `host "a:7100" is not a DNS name or an IP address`},
		{"bad group", func() error {
			_, err := c.ca.CreateNode(c.dir, NodeID{"eu.", "x"}, []string{"a"}, Options{})
			return err
		}, `group "eu." is not a valid name`},
		{"bad replica", func() error {
			_, err := c.ca.CreateNode(c.dir, NodeID{"g1", "X"}, []string{"a"}, Options{})
			return err
		}, `replica "X" is not a valid name`},
		{"bad user", func() error { _, err := c.ca.CreateClient(c.dir, "a/b", Options{}); return err }, `user "a/b" is not a valid name`},
		{"no ca key", func() error { _, err := CreateCA(t.TempDir(), "", Options{}); return err }, "no CA key file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
	for _, name := range []string{"node.x.crt", "node.x.key"} {
		if _, err := os.Stat(filepath.Join(c.dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused creation left %s (stat: %v)", name, err)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, s := range []string{"r1", "eu-west-1", "a.b_c", "0", strings.Repeat("a", 64)} {
		if err := CheckName("x", s); err != nil {
			t.Errorf("CheckName(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "R1", "-a", ".a", "a.", "a..b", "a/b", "a b", "é", strings.Repeat("a", 65)} {
		if err := CheckName("x", s); err == nil {
			t.Errorf("CheckName(%q) = nil, want an error", s)
		}
	}
}

func TestExpired(t *testing.T) {
	c := newCluster(t)
	past := Options{Now: time.Now().Add(-ValidityNode - 24*time.Hour)}
	if _, err := c.ca.CreateNode(c.dir, NodeID{"g1", "old"}, []string{"localhost"}, past); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadNode(c.dir, "old"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("LoadNode of an expired certificate: error %v, want one saying expired", err)
	}
}

func TestList(t *testing.T) {
	c := newCluster(t)
	past := Options{Now: time.Now().Add(-ValidityClient - 24*time.Hour)}
	if _, err := c.ca.CreateClient(c.dir, "old", past); err != nil {
		t.Fatal(err)
	}
	other := newCluster(t)
	data, err := os.ReadFile(filepath.Join(other.dir, "client.root.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "client.stranger.crt"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := List(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		file    string
		kind    Kind
		subject string
		chains  bool
		problem string
	}
	want := []row{
		{"ca.crt", KindCA, "FlexKV CA", true, ""},
		{"client.old.crt", KindClient, "old", false, "expired"},
		{"client.root.crt", KindClient, "root", true, ""},
		{"client.stranger.crt", KindClient, "root", false, "names user root, want the file client.root.crt"},
		{"node.m1.crt", KindNode, "g2/m1", true, ""},
		{"node.n1.crt", KindNode, "g1/n1", true, ""},
		{"node.n2.crt", KindNode, "g1/n2", true, ""},
	}
	if len(entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(entries), len(want), entries)
	}
	for i, e := range entries {
		w := want[i]
		if e.File != w.file || e.Kind != w.kind || e.Subject != w.subject || e.Chains != w.chains ||
			(w.problem == "") != (e.Problem == "") || !strings.Contains(e.Problem, w.problem) {
			t.Errorf("entry %d: %s %s %q chains=%v problem %q, want %+v", i, e.File, e.Kind, e.Subject, e.Chains, e.Problem, w)
		}
	}
	if h := entries[4].Hosts; len(h) != 2 || h[0] != "localhost" || h[1] != "::1" {
		t.Errorf("node.m1.crt hosts %v, want [localhost ::1]", h)
	}
}

func TestHostsOf(t *testing.T) {
	got, err := HostsOf("127.0.0.1:7101", "127.0.0.1:7201", "db1.example:7101", "0.0.0.0:9", "[::]:9", "[::1]:9")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "127.0.0.1,db1.example,::1" {
		t.Fatalf("HostsOf: %v, want [127.0.0.1 db1.example ::1]", got)
	}
	if _, err := HostsOf("nohost"); err == nil {
		t.Fatal("HostsOf(nohost): no error")
	}
}

// TestEnsureCluster: a first call creates the CA and every certificate, a
// second one nothing, and a call with one more node and user only those;
// everything loads and chains to the one CA.
func TestEnsureCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	caKey := filepath.Join(t.TempDir(), "ca.key")
	nodes := []NodeSpec{{ID: NodeID{Group: "g1", Replica: "r1"}, Hosts: []string{"127.0.0.1"}}, {ID: NodeID{Group: "g2", Replica: "r2"}, Hosts: []string{"h2"}}}
	created, err := EnsureCluster(dir, caKey, nodes, []string{"root"})
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != 2+2*2+2 {
		t.Errorf("first call created %v, want the CA, its key, 2 nodes and 1 client (8 files)", created)
	}
	if created, err = EnsureCluster(dir, caKey, nodes, []string{"root"}); err != nil || len(created) != 0 {
		t.Errorf("second call created %v, %v; want nothing", created, err)
	}
	nodes = append(nodes, NodeSpec{ID: NodeID{Group: "g2", Replica: "r3"}, Hosts: []string{"h3"}})
	if created, err = EnsureCluster(dir, caKey, nodes, []string{"root", "alice"}); err != nil || len(created) != 4 {
		t.Errorf("third call created %v, %v; want node r3 and client alice", created, err)
	}
	for _, id := range []string{"r1", "r2", "r3"} {
		if _, err := LoadNode(dir, id); err != nil {
			t.Error(err)
		}
	}
	for _, u := range []string{"root", "alice"} {
		if _, err := LoadClient(dir, u); err != nil {
			t.Error(err)
		}
	}
	if _, err := EnsureCluster(dir, filepath.Join(t.TempDir(), "missing.key"), nodes, nil); err == nil {
		t.Error("an existing CA without its key was accepted")
	}
}

// A node loaded from a directory reports when its certificate and the CA
// expire (the metric flexkv_cert_expiry_seconds).
func TestNodeExpiries(t *testing.T) {
	c := newCluster(t)
	got := c.node(t, "n1").Expiries()
	if len(got) != 2 || got[0].File != "node.n1.crt" || got[1].File != "ca.crt" {
		t.Fatalf("Expiries() = %+v, want node.n1.crt then ca.crt", got)
	}
	if !got[0].NotAfter.Equal(c.node(t, "n1").Cert.Leaf.NotAfter) || !got[1].NotAfter.Equal(c.ca.Cert.NotAfter) {
		t.Errorf("Expiries() = %+v, want the certificates' NotAfter", got)
	}
}
