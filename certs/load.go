package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// fileSizeMax bounds what is read as a certificate or a key: a PEM
// certificate of ours is under 1 KiB, and a wrong path (a log, a device) is
// refused instead of read whole.
const fileSizeMax = 64 << 10

// readFile reads path, at most fileSizeMax bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, fileSizeMax+1))
	if err != nil {
		return nil, fmt.Errorf("certs: read %s: %w", path, err)
	}
	if len(data) > fileSizeMax {
		return nil, fmt.Errorf("certs: %s is larger than %d bytes: not a certificate or key", path, fileSizeMax)
	}
	return data, nil
}

// LoadCert reads the one PEM certificate in path.
func LoadCert(path string) (*x509.Certificate, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: %s holds no PEM CERTIFICATE", path)
	}
	if b, _ := pem.Decode(rest); b != nil {
		return nil, fmt.Errorf("certs: %s holds more than one PEM block, want one certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", path, err)
	}
	return cert, nil
}

// LoadCACert reads dir's ca.crt.
func LoadCACert(dir string) (*x509.Certificate, error) {
	path := filepath.Join(dir, CAFile)
	cert, err := LoadCert(path)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certs: %s is not a CA certificate", path)
	}
	return cert, nil
}

// LoadCAPool returns a pool holding dir's ca.crt alone: every link trusts
// the cluster CA and nothing else (DESIGN 13), never the system roots.
func LoadCAPool(dir string) (*x509.CertPool, error) {
	ca, err := LoadCACert(dir)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, nil
}

// checkKeyMode refuses a key file that its group or others may read or
// write (DESIGN 13: keys mode 0600), as ssh does. Windows has no such mode
// bits: nothing to check there.
func checkKeyMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("certs: key %s is not a regular file", path)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("certs: key %s has mode %04o, want %04o (others must not read it: chmod 600 %s)",
			path, fi.Mode().Perm(), keyMode, path)
	}
	return nil
}

// loadKey reads the ECDSA P-256 PKCS#8 PEM key in path, after checking its
// mode.
func loadKey(path string) (*ecdsa.PrivateKey, error) {
	if err := checkKeyMode(path); err != nil {
		return nil, err
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("certs: %s holds no PEM PRIVATE KEY", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", path, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("certs: %s is not an ECDSA P-256 key", path)
	}
	return key, nil
}

// loadPair loads certName and keyName in dir as a TLS certificate, checking
// the key's mode and that it matches the certificate.
func loadPair(dir, certName, keyName string) (tls.Certificate, *x509.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	cert, err := LoadCert(certPath)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := loadKey(keyPath)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return tls.Certificate{}, nil, fmt.Errorf("certs: key %s does not match %s", keyPath, certPath)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, cert, nil
}

// Node is what a replica needs for TLS: its certificate and key, the
// identity they name, and the cluster CA. A Node from LoadNode follows its
// files (reload.go): its TLS configurations and Expiries use what was read
// last, while Cert and CAs stay what was loaded first.
type Node struct {
	ID   NodeID
	Cert tls.Certificate
	CAs  *x509.CertPool
	// ca is the cluster CA's certificate, when loaded from a directory.
	ca  *x509.Certificate
	src *source // nil: built by hand, fixed
}

// Expiry is when one certificate a node or client presents or trusts stops
// being valid.
type Expiry struct {
	File     string // its file's name in the certificates directory
	NotAfter time.Time
}

// Expiries returns when the node's certificate and the CA it trusts expire
// (the CA only when the node was loaded from a directory), the node's
// first, as loaded last: what the metric flexkv_cert_expiry_seconds reports
// (DESIGN 11).
func (n *Node) Expiries() []Expiry {
	m := n.current()
	var out []Expiry
	if m.cert.Leaf != nil {
		out = append(out, Expiry{File: NodeCertFile(n.ID.Replica), NotAfter: m.cert.Leaf.NotAfter})
	}
	if m.ca != nil {
		out = append(out, Expiry{File: CAFile, NotAfter: m.ca.NotAfter})
	}
	return out
}

// LoadNode loads replica's node.REPLICA.crt and .key and ca.crt from dir.
// The certificate must name replica, and chain to ca.crt now. The Node
// re-reads them when they change, keeping its identity (reload.go).
func LoadNode(dir, replica string) (*Node, error) {
	if err := CheckName("replica", replica); err != nil {
		return nil, err
	}
	m, id, err := loadNodeMaterial(dir, replica, nil)
	if err != nil {
		return nil, err
	}
	src := newSource(dir, []string{CAFile, NodeCertFile(replica), NodeKeyFile(replica)}, m, func() (*material, error) {
		m, _, err := loadNodeMaterial(dir, replica, &id)
		return m, err
	})
	return &Node{ID: id, Cert: m.cert, CAs: m.pool, ca: m.ca, src: src}, nil
}

// Client is what a client needs for TLS: its certificate and key, its user
// name, and the cluster CA. A Client from LoadClient follows its files as
// a Node does.
type Client struct {
	User string
	Cert tls.Certificate
	CAs  *x509.CertPool
	src  *source // nil: built by hand, fixed
}

// LoadClient loads user's client.USER.crt and .key and ca.crt from dir. The
// certificate must name user and chain to ca.crt now. The Client re-reads
// them when they change (reload.go).
func LoadClient(dir, user string) (*Client, error) {
	if err := CheckName("user", user); err != nil {
		return nil, err
	}
	m, err := loadClientMaterial(dir, user)
	if err != nil {
		return nil, err
	}
	src := newSource(dir, []string{CAFile, ClientCertFile(user), ClientKeyFile(user)}, m, func() (*material, error) {
		return loadClientMaterial(dir, user)
	})
	return &Client{User: user, Cert: m.cert, CAs: m.pool, src: src}, nil
}

// verify checks that cert chains to pool now, for every one of usages.
func verify(cert *x509.Certificate, pool *x509.CertPool, usages ...x509.ExtKeyUsage) error {
	for _, u := range usages {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return err
		}
	}
	return nil
}
