package certs

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serial is the serial number of the certificate a handshake with srv
// shows the client.
func serverSerial(t *testing.T, srv, cli *tls.Config) string {
	t.Helper()
	s, c := handshake(t, srv, cli, "localhost")
	if s.err != nil || c.err != nil {
		t.Fatalf("handshake: server %v, client %v", s.err, c.err)
	}
	return c.state.PeerCertificates[0].SerialNumber.String()
}

// A loaded node follows its files: a rotated certificate is shown at the
// next handshake after Reload, or after a check finds the files changed;
// a rotation that does not check out (another identity, a key that does
// not match) keeps the certificate loaded before.
func TestNodeReload(t *testing.T) {
	c := newCluster(t)
	n1, n2 := c.node(t, "n1"), c.node(t, "n2")
	srv, cli := NodeConfig(n1), NodeConfig(n2)
	first := serverSerial(t, srv, cli)
	rotate := func() string {
		t.Helper()
		cert, err := c.ca.CreateNode(c.dir, NodeID{"g1", "n1"}, []string{"localhost", "127.0.0.1"}, Options{Overwrite: true})
		if err != nil {
			t.Fatal(err)
		}
		return cert.SerialNumber.String()
	}
	second := rotate()
	if err := n1.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := serverSerial(t, srv, cli); got != second || got == first {
		t.Fatalf("after rotation and Reload the server shows serial %s, want the new %s (first %s)", got, second, first)
	}
	if got := n1.Expiries()[0].NotAfter; got.Before(time.Now().Add(ValidityNode - time.Hour)) {
		t.Errorf("Expiries after rotation: %v, want the new certificate's", got)
	}
	// Without Reload: the next check after the files changed.
	third := rotate()
	n1.src.mu.Lock()
	n1.src.checked = time.Time{} // as if recheckEvery had passed
	n1.src.mu.Unlock()
	if got := serverSerial(t, srv, cli); got != third {
		t.Fatalf("after a rotation found by the check the server shows %s, want %s", got, third)
	}
	// The client end presents its rotated certificate too.
	cert, err := c.ca.CreateNode(c.dir, NodeID{"g1", "n2"}, []string{"localhost"}, Options{Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Reload(); err != nil {
		t.Fatal(err)
	}
	s, cl := handshake(t, srv, cli, "localhost")
	if s.err != nil || cl.err != nil || s.state.PeerCertificates[0].SerialNumber.Cmp(cert.SerialNumber) != 0 {
		t.Fatalf("the dialling node presents %v (%v, %v), want its rotated certificate", s.state.PeerCertificates, s.err, cl.err)
	}

	// Another node's files under n1's name, then a key of another
	// certificate: refused, n1 keeps its certificate.
	copyFile(t, filepath.Join(c.dir, "node.n2.crt"), filepath.Join(c.dir, "node.n1.crt"))
	copyFile(t, filepath.Join(c.dir, "node.n2.key"), filepath.Join(c.dir, "node.n1.key"))
	if err := n1.Reload(); err == nil || !strings.Contains(err.Error(), "names") {
		t.Errorf("Reload of another node's certificate: %v, want it refused", err)
	}
	rotate()
	copyFile(t, filepath.Join(c.dir, "node.n2.key"), filepath.Join(c.dir, "node.n1.key"))
	if err := n1.Reload(); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Reload with a key of another certificate: %v, want it refused", err)
	}
	if got := serverSerial(t, srv, cli); got != third {
		t.Errorf("after refused reloads the server shows %s, want %s still", got, third)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
