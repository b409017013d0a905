package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
)

// TestConfigTLSChoice checks that a Config asks for one way to connect:
// each contradiction is an error of New that names the fields, before
// anything is dialled (the endpoint refuses connections).
func TestConfigTLSChoice(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		cfg  client.Config
		want string
	}{
		{"insecure and TLS", client.Config{Insecure: true, TLS: &tls.Config{}}, "Config.Insecure with Config.TLS or Config.CertsDir"},
		{"insecure and certs", client.Config{Insecure: true, CertsDir: dir}, "Config.Insecure with Config.TLS or Config.CertsDir"},
		{"TLS and certs", client.Config{TLS: &tls.Config{}, CertsDir: dir}, "Config.TLS and Config.CertsDir: choose one"},
		{"user without certs", client.Config{User: "alice"}, `Config.User "alice" without Config.CertsDir`},
		{"user without certs, TLS", client.Config{User: "alice", TLS: &tls.Config{}}, `Config.User "alice" without Config.CertsDir`},
		{"bad user", client.Config{User: "a/b", CertsDir: dir}, `client: certs: user "a/b"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Endpoints = []string{"127.0.0.1:1"}
			c, err := client.New(context.Background(), tt.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("New: no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestCertsDirMissing checks that New names the certificates directory or
// file that is missing, and what writes it, without dialling.
func TestCertsDirMissing(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, filepath.Join(t.TempDir(), "ca.key"), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.CreateClient(dir, "root", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.CreateClient(dir, "bob", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, certs.ClientKeyFile("bob"))); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	absent := filepath.Join(empty, "nothing")
	for _, tt := range []struct {
		name, dir, user string
		want            []string
	}{
		{"no directory", absent, "", []string{absent + " does not exist", "flexkv-data/local/certs"}},
		{"no CA", empty, "", []string{filepath.Join(empty, "ca.crt") + " does not exist", "flexkv cert create-ca"}},
		{"no certificate", dir, "alice", []string{filepath.Join(dir, "client.alice.crt") + " does not exist", "flexkv cert create-client alice"}},
		{"no key", dir, "bob", []string{filepath.Join(dir, "client.bob.key") + " does not exist", "key of user bob"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.New(context.Background(), client.Config{Endpoints: []string{"127.0.0.1:1"}, CertsDir: tt.dir, User: tt.user})
			if err == nil {
				c.Close()
				t.Fatalf("New: no error, want one naming %q", tt.want)
			}
			t.Logf("New: %v", err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
	// With every file there, New gets as far as dialling: the error is the
	// endpoint's, which refuses connections.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{"127.0.0.1:1"}, CertsDir: dir})
	if err == nil {
		c.Close()
		t.Fatal("New with every certificate: no error, want the refused endpoint's")
	}
	if !strings.Contains(err.Error(), "no endpoint answered: 127.0.0.1:1") {
		t.Errorf("New with every certificate: %v, want the refused endpoint's error", err)
	}
}

// TestTLSMismatch starts a secure and an insecure cluster and connects to
// each both ways: the client that agrees with the cluster works, and the
// one that does not gets a TLSMismatchError that says which Config field to
// set, in both directions.
func TestTLSMismatch(t *testing.T) {
	secure := start(t, false)
	plain := start(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tt := range []struct {
		name       string
		cfg        client.Config
		clusterTLS bool
		want       string
	}{
		{"plaintext client, TLS cluster", client.Config{Endpoints: secure.Endpoints()}, true,
			"the cluster runs TLS and this client does not: give Config.CertsDir (flexkv local writes flexkv-data/local/certs)"},
		{"insecure client, TLS cluster", client.Config{Endpoints: secure.Endpoints(), Insecure: true}, true,
			"the cluster runs TLS and this client does not: drop Config.Insecure, and give Config.CertsDir"},
		{"TLS client, plaintext cluster", client.Config{Endpoints: plain.Endpoints(), CertsDir: secure.CertsDir()}, false,
			"the cluster runs without TLS (it was started with --insecure) and this client uses TLS: set Config.Insecure"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.New(ctx, tt.cfg)
			if err == nil {
				c.Close()
				t.Fatal("New: no error, want a TLSMismatchError")
			}
			t.Logf("New: %v", err)
			var te *client.TLSMismatchError
			if !errors.As(err, &te) {
				t.Fatalf("New: %v (%T), want a TLSMismatchError", err, err)
			}
			if te.ClusterTLS != tt.clusterTLS || te.Endpoint != tt.cfg.Endpoints[0] || te.Err == nil {
				t.Errorf("TLSMismatchError{ClusterTLS: %v, Endpoint: %q, Err: %v}, want ClusterTLS %v, Endpoint %q and gRPC's error",
					te.ClusterTLS, te.Endpoint, te.Err, tt.clusterTLS, tt.cfg.Endpoints[0])
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v\nwant it to contain %q", err, tt.want)
			}
			if !client.TLSMismatch(err, !tt.clusterTLS) || !client.TLSMismatch(te.Err, !tt.clusterTLS) {
				t.Errorf("TLSMismatch(%v, %v) = false, want true for New's error and for gRPC's", err, !tt.clusterTLS)
			}
		})
	}

	for _, tt := range []struct {
		name string
		cfg  client.Config
	}{
		{"certificates, TLS cluster", client.Config{Endpoints: secure.Endpoints(), CertsDir: secure.CertsDir(), User: "root"}},
		{"TLS config, TLS cluster", client.Config{Endpoints: secure.Endpoints(), TLS: secure.ClientTLS()}},
		{"insecure, plaintext cluster", client.Config{Endpoints: plain.Endpoints(), Insecure: true}},
		{"nothing, plaintext cluster", client.Config{Endpoints: plain.Endpoints()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.New(ctx, tt.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer c.Close()
			key := []byte("w/0001/" + strings.ReplaceAll(tt.name, " ", "-"))
			if err := c.Put(ctx, key, []byte("x")); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if v, found, err := c.Get(ctx, key); err != nil || !found || string(v) != "x" {
				t.Errorf("Get = %q, %v, %v; want x, true, nil", v, found, err)
			}
		})
	}
}

// TestTLSMismatchText checks what TLSMismatch reads in an error: gRPC's
// messages for each direction, on the side that sees them only.
func TestTLSMismatchText(t *testing.T) {
	preface := status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`)
	record := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`)
	for _, tt := range []struct {
		err    error
		secure bool
		want   bool
	}{
		{nil, false, false},
		{nil, true, false},
		{preface, false, true},
		{preface, true, false},
		{record, true, true},
		{record, false, false},
		{status.Error(codes.Unavailable, "read: connection reset by peer"), false, true},
		{status.Error(codes.Unavailable, "connection refused"), false, false},
		{status.Error(codes.Unavailable, "connection refused"), true, false},
		{&client.TLSMismatchError{ClusterTLS: true, Err: preface}, false, true},
	} {
		if got := client.TLSMismatch(tt.err, tt.secure); got != tt.want {
			t.Errorf("TLSMismatch(%v, secure %v) = %v, want %v", tt.err, tt.secure, got, tt.want)
		}
	}
}

// start starts a cluster for t (startCluster), closed at its end.
func start(t *testing.T, insecure bool) *cluster.Local {
	t.Helper()
	l, stop, err := startCluster(insecure)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return l
}
