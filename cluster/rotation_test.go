package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
)

// TestCertRotationUnderLoad rotates, under load, the node certificates of
// a whole group and the client's certificate, in place, and has the
// replicas re-read theirs (as on SIGHUP): no request fails, and new
// connections show the new certificates on both ends (DESIGN 13).
func TestCertRotationUnderLoad(t *testing.T) {
	dir := t.TempDir()
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocal(t, cfg, dir)
	ctx := ctxTimeout(t, 60*time.Second)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), CertsDir: l.CertsDir(), User: RootUser})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	load := startPutLoad(ctx, c)
	load.wait(t, 200)

	certsDir := l.CertsDir()
	ca, err := certs.LoadCA(certsDir, filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[1]
	serials := map[string]string{}
	for _, r := range g.Replicas {
		hosts, err := certs.HostsOf(r.Raft, r.GRPC, r.PeerAddr())
		if err != nil {
			t.Fatal(err)
		}
		cert, err := ca.CreateNode(certsDir, certs.NodeID{Group: g.Name, Replica: r.ID}, hosts, certs.Options{Overwrite: true})
		if err != nil {
			t.Fatal(err)
		}
		serials[r.ID] = cert.SerialNumber.String()
	}
	clientCert, err := ca.CreateClient(certsDir, RootUser, certs.Options{Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReloadCerts(); err != nil {
		t.Fatal(err)
	}
	load.wait(t, 200)
	if failures := load.stop(); len(failures) > 0 {
		t.Fatalf("%d requests failed during the rotation, the first: %v", len(failures), failures[0])
	}

	// New connections: each replica of the group shows its new
	// certificate, and the client presents its new one (a fresh
	// configuration from the files, as a new process would).
	cl, err := certs.LoadClient(certsDir, RootUser)
	if err != nil {
		t.Fatal(err)
	}
	cfgTLS := certs.ClientConfig(cl)
	if got, err := cfgTLS.GetClientCertificate(&tls.CertificateRequestInfo{}); err != nil || got.Leaf.SerialNumber.Cmp(clientCert.SerialNumber) != 0 {
		t.Errorf("the client presents %v (%v), want its rotated certificate", got, err)
	}
	for _, r := range g.Replicas {
		conn, err := tls.Dial("tcp", r.GRPC, cfgTLS.Clone())
		if err != nil {
			t.Fatalf("dial %s with the rotated client certificate: %v", r.ID, err)
		}
		got := conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
		conn.Close()
		if got != serials[r.ID] {
			t.Errorf("replica %s shows certificate %s, want its rotated %s", r.ID, got, serials[r.ID])
		}
	}
	// The client that ran through the rotation still works, and so does a
	// new one with the rotated certificate.
	c2, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), CertsDir: certsDir, User: RootUser})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for _, cc := range []*client.Client{c, c2} {
		if err := cc.Put(context.WithoutCancel(ctx), []byte("w/0003/after"), []byte("1")); err != nil {
			t.Errorf("put after the rotation: %v", err)
		}
	}
	t.Logf("%d requests through the rotation, none failed", load.done.Load())
}

// putLoad is one client's puts to a partition of every group, six at a
// time, until stopped; a put that fails ends its loop and is kept.
type putLoad struct {
	done     atomic.Int64
	mu       sync.Mutex
	failures []error
	quit     chan struct{}
	wg       sync.WaitGroup
}

func startPutLoad(ctx context.Context, c *client.Client) *putLoad {
	p := &putLoad{quit: make(chan struct{})}
	for w := 1; w <= 6; w++ {
		p.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-p.quit:
					return
				default:
				}
				key := fmt.Sprintf("w/%04d/k%d", w, i%16)
				if err := c.Put(ctx, []byte(key), []byte(fmt.Sprint(i))); err != nil {
					p.mu.Lock()
					p.failures = append(p.failures, fmt.Errorf("put %s: %w", key, err))
					p.mu.Unlock()
					return
				}
				p.done.Add(1)
			}
		})
	}
	return p
}

func (p *putLoad) failed() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.failures...)
}

// wait returns once n more puts succeeded; it fails t if one fails first.
func (p *putLoad) wait(t *testing.T, n int64) {
	t.Helper()
	for target := p.done.Load() + n; p.done.Load() < target; {
		if f := p.failed(); len(f) > 0 {
			t.Fatalf("load failed at %d requests: %v", p.done.Load(), f)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop ends the load and returns the puts that failed.
func (p *putLoad) stop() []error {
	close(p.quit)
	p.wg.Wait()
	return p.failed()
}
