package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Certificates rotate without a restart (DESIGN 13): a Node or Client
// loaded from a directory re-reads its certificate, key and ca.crt when the
// files change, checked at a handshake at most once a second (as etcd
// reloads per handshake), and at once on Reload (a server calls it on
// SIGHUP, as CockroachDB does). New handshakes use what was read; a
// connection already open keeps the certificates it was made with. A
// reload that fails (a key that does not match the certificate yet,
// another identity, a certificate that does not chain) keeps what was
// loaded before, and the next check tries again.

// material is what a handshake uses: the certificate presented and the CA
// trusted.
type material struct {
	cert tls.Certificate
	ca   *x509.Certificate // nil for a Node built by hand
	pool *x509.CertPool
}

// recheckEvery is the least time between two checks of the files at
// handshakes.
const recheckEvery = time.Second

// fileStamp is what tells a file changed: its size and modification time
// (a Kubernetes Secret volume swaps a symlink: Stat follows it).
type fileStamp struct {
	size int64
	mod  time.Time
}

// source re-reads a Node's or Client's files.
type source struct {
	files []string                  // the paths to watch
	load  func() (*material, error) // reads and checks them
	cur   atomic.Pointer[material]

	mu      sync.Mutex // held while checking or loading
	stamps  []fileStamp
	checked time.Time
	err     error // of the last reload; nil when it took
}

// newSource follows the files names of dir, from first, read just now.
func newSource(dir string, names []string, first *material, load func() (*material, error)) *source {
	s := &source{load: load}
	for _, n := range names {
		s.files = append(s.files, filepath.Join(dir, n))
	}
	s.stamps = s.stamp()
	s.cur.Store(first)
	s.checked = time.Now()
	return s
}

func (s *source) stamp() []fileStamp {
	out := make([]fileStamp, len(s.files))
	for i, f := range s.files {
		if fi, err := os.Stat(f); err == nil {
			out[i] = fileStamp{size: fi.Size(), mod: fi.ModTime()}
		}
	}
	return out
}

// current returns the material to handshake with, reloaded first if the
// files changed since the last check, which is at least recheckEvery ago.
func (s *source) current() *material {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) >= recheckEvery {
		s.checked = time.Now()
		if st := s.stamp(); !equalStamps(st, s.stamps) {
			s.reloadLocked(st)
		}
	}
	return s.cur.Load()
}

// reload re-reads the files now.
func (s *source) reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checked = time.Now()
	s.reloadLocked(s.stamp())
	return s.err
}

func (s *source) reloadLocked(st []fileStamp) {
	m, err := s.load()
	s.err = err
	if err != nil {
		return // keep what was loaded; the stamps stay, so the next check tries again
	}
	s.stamps = st
	s.cur.Store(m)
}

func equalStamps(a, b []fileStamp) bool {
	for i := range a {
		if a[i].size != b[i].size || !a[i].mod.Equal(b[i].mod) {
			return false
		}
	}
	return len(a) == len(b)
}

// loadNodeMaterial reads replica's certificate and key and ca.crt from dir
// and checks them as LoadNode does; the certificate must name want.
func loadNodeMaterial(dir, replica string, want *NodeID) (*material, NodeID, error) {
	ca, err := LoadCACert(dir)
	if err != nil {
		return nil, NodeID{}, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	certPath := filepath.Join(dir, NodeCertFile(replica))
	pair, cert, err := loadPair(dir, NodeCertFile(replica), NodeKeyFile(replica))
	if err != nil {
		return nil, NodeID{}, err
	}
	id, err := NodeIdentity(cert)
	if err != nil {
		return nil, NodeID{}, fmt.Errorf("%w (in %s)", err, certPath)
	}
	if id.Replica != replica {
		return nil, NodeID{}, fmt.Errorf("certs: %s names %s, not replica %s", certPath, id.URI(), replica)
	}
	if want != nil && id != *want {
		return nil, NodeID{}, fmt.Errorf("certs: %s now names %s, not %s: a rotated certificate keeps its node's identity", certPath, id, *want)
	}
	if err := verify(cert, pool, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, NodeID{}, fmt.Errorf("certs: %s: %w", certPath, err)
	}
	return &material{cert: pair, ca: ca, pool: pool}, id, nil
}

// loadClientMaterial reads user's certificate and key and ca.crt from dir
// and checks them as LoadClient does.
func loadClientMaterial(dir, user string) (*material, error) {
	pool, err := LoadCAPool(dir)
	if err != nil {
		return nil, err
	}
	certPath := filepath.Join(dir, ClientCertFile(user))
	pair, cert, err := loadPair(dir, ClientCertFile(user), ClientKeyFile(user))
	if err != nil {
		return nil, err
	}
	got, err := UserOf(cert)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, certPath)
	}
	if got != user {
		return nil, fmt.Errorf("certs: %s names user %q, not %q", certPath, got, user)
	}
	if err := verify(cert, pool, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, fmt.Errorf("certs: %s: %w", certPath, err)
	}
	return &material{cert: pair, pool: pool}, nil
}

// Reload re-reads the node's certificate, key and ca.crt now (on SIGHUP).
// On an error the node keeps what it had. A Node not loaded from a
// directory has nothing to re-read.
func (n *Node) Reload() error {
	if n.src == nil {
		return nil
	}
	return n.src.reload()
}

// Reload re-reads the client's certificate, key and ca.crt now. On an error
// the client keeps what it had.
func (c *Client) Reload() error {
	if c.src == nil {
		return nil
	}
	return c.src.reload()
}

// current returns the node's material: its source's, or its fields'.
func (n *Node) current() *material {
	if n.src != nil {
		return n.src.current()
	}
	return &material{cert: n.Cert, ca: n.ca, pool: n.CAs}
}

func (c *Client) current() *material {
	if c.src != nil {
		return c.src.current()
	}
	return &material{cert: c.Cert, pool: c.CAs}
}
