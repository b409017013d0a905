// Package certs creates and loads the certificates of a FlexKV cluster and
// builds the TLS 1.3 configurations of its three links (DESIGN 13): the
// client API (client certificates, user = CN), group to group and raft
// inside a group (node certificates, identity = URI SAN
// flexkv://GROUP/REPLICA). Everything is Go's crypto/tls, crypto/x509 and
// crypto/ecdsa: no hand-written cryptography.
//
// A certs directory holds (DESIGN 13):
//
//	ca.crt                         the cluster CA (its key is elsewhere: --ca-key FILE)
//	node.ID.crt, node.ID.key       replica ID, for server and client auth
//	client.NAME.crt, client.NAME.key  user NAME, for client auth
//
// Keys are PKCS#8 PEM files of mode 0600 (checked when loading);
// certificates are PEM files of mode 0644. No file is ever replaced unless
// the caller asks for it (Options.Overwrite).
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names in a certs directory (DESIGN 13). Tools outside the code (the
// docker-compose files, operators' scripts) depend on them.
const (
	CAFile = "ca.crt"

	nodePrefix   = "node."
	clientPrefix = "client."
	certSuffix   = ".crt"
	keySuffix    = ".key"
)

// NodeCertFile names the certificate file of replica id: node.ID.crt.
func NodeCertFile(id string) string { return nodePrefix + id + certSuffix }

// NodeKeyFile names the key file of replica id: node.ID.key.
func NodeKeyFile(id string) string { return nodePrefix + id + keySuffix }

// ClientCertFile names the certificate file of user: client.NAME.crt.
func ClientCertFile(user string) string { return clientPrefix + user + certSuffix }

// ClientKeyFile names the key file of user: client.NAME.key.
func ClientKeyFile(user string) string { return clientPrefix + user + keySuffix }

// Validity periods. The CA outlives what it signs, so that every node and
// client certificate can be renewed under the same CA several times; five
// years for leaf certificates follows the usual lifetime of an operator-run
// cluster's internal PKI (CockroachDB uses the same split). A leaf's
// NotAfter is also capped at its CA's: a certificate that outlives its
// issuer would only fail verification later, and less clearly.
const (
	ValidityCA     = 10 * 365 * 24 * time.Hour
	ValidityNode   = 5 * 365 * 24 * time.Hour
	ValidityClient = 5 * 365 * 24 * time.Hour

	// backdate starts every certificate an hour in the past, so that a
	// peer whose clock is a little behind accepts a fresh certificate.
	backdate = time.Hour
)

// File modes (DESIGN 13). A key may be stricter than keyMode (0400), never
// readable by group or others.
const (
	keyMode  os.FileMode = 0o600
	certMode os.FileMode = 0o644
	dirMode  os.FileMode = 0o700 // a certs directory holds keys
)

// URIScheme is the scheme of a node certificate's identity,
// flexkv://GROUP/REPLICA (DESIGN 13).
const URIScheme = "flexkv"

// Kind tells the three kinds of certificate apart.
type Kind int

// The kinds of certificate, as `flexkv cert list` names them.
const (
	KindCA Kind = iota + 1
	KindNode
	KindClient
)

// String returns ca, node or client.
func (k Kind) String() string {
	switch k {
	case KindCA:
		return "ca"
	case KindNode:
		return "node"
	case KindClient:
		return "client"
	default:
		return fmt.Sprintf("Kind(%d)", int(k))
	}
}

// ErrExists is returned (wrapped, naming the file) when a file to create
// exists and Options.Overwrite is not set.
var ErrExists = errors.New("exists")

// Options modify the creation of a certificate.
type Options struct {
	// Overwrite replaces existing files; without it, an existing file is
	// an error that names it (DESIGN 13: never overwritten without
	// --overwrite).
	Overwrite bool

	// Now, when set, is the time a certificate's validity starts from in
	// place of the clock: a certificate issued with a Now far enough in the
	// past has expired (tests of the refusals).
	Now time.Time
}

func (o Options) clock() time.Time {
	if o.Now.IsZero() {
		return time.Now()
	}
	return o.Now
}

// NodeID is the identity a node certificate names: its group and replica
// (DESIGN 13). Replica ids are unique in a cluster, so Replica alone names a
// node; Group lets a peer check what the node may speak for without reading
// the configuration.
type NodeID struct {
	Group   string
	Replica string
}

// String returns GROUP/REPLICA.
func (n NodeID) String() string { return n.Group + "/" + n.Replica }

// URI returns flexkv://GROUP/REPLICA.
func (n NodeID) URI() *url.URL {
	return &url.URL{Scheme: URIScheme, Host: n.Group, Path: "/" + n.Replica}
}

// CheckName returns an error unless s can name a group, a replica or a user
// in a certificate and a file name: the names of partition.NameMax (1 to 64
// lower-case letters, digits, '.', '_' and '-', starting with a letter or a
// digit), and, since a group is the host of a URI that crypto/x509 parses
// as a domain, no empty label ("a..b", "a."). what says what s names.
func CheckName(what, s string) error {
	if err := checkName(what, s); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func checkName(what, s string) error {
	const nameMax = 64 // partition.NameMax
	valid := s != "" && len(s) <= nameMax
	for i := 0; valid && i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '.' && i > 0:
			valid = s[i-1] != '.' && i < len(s)-1
		case (c == '_' || c == '-') && i > 0:
		default:
			valid = false
		}
	}
	if !valid {
		return fmt.Errorf("%s %q is not a valid name "+
			"(1 to %d lower-case letters, digits, '.', '_' or '-', starting with a letter or digit, no empty '.' label)",
			what, s, nameMax)
	}
	return nil
}

// CheckHost returns an error unless h can be a host of a node certificate:
// an IP address or a DNS name (not host:port, not a URL).
func CheckHost(h string) error {
	if net.ParseIP(h) != nil {
		return nil
	}
	if h == "" || strings.ContainsAny(h, " /:[]@?#") || strings.HasPrefix(h, ".") || strings.Contains(h, "..") {
		return fmt.Errorf("host %q is not a DNS name or an IP address", h)
	}
	return nil
}

// CA is the cluster CA with its private key: what signs node and client
// certificates. Servers and clients never hold it; they load ca.crt alone.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// CreateCA creates a new cluster CA: ca.crt in dir (created if needed) and
// its private key in keyFile, which should not be in dir (dir is copied to
// every node; the CA key stays with the operator).
func CreateCA(dir, keyFile string, opt Options) (*CA, error) {
	if keyFile == "" {
		return nil, errors.New("certs: no CA key file given")
	}
	certPath := filepath.Join(dir, CAFile)
	if err := checkAbsent(opt, certPath, keyFile); err != nil {
		return nil, err
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	now := opt.clock()
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "FlexKV CA", Organization: []string{"FlexKV"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(ValidityCA),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA: %w", err)
	}
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	if err := mkdir(filepath.Dir(keyFile)); err != nil {
		return nil, err
	}
	// The key first: a certificate on disk always has its key.
	if err := writeKey(keyFile, key, opt); err != nil {
		return nil, err
	}
	if err := writeCert(certPath, der, opt); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCA loads dir's ca.crt and the CA key in keyFile, to sign with. The key
// must have mode 0600 and match the certificate.
func LoadCA(dir, keyFile string) (*CA, error) {
	cert, err := LoadCACert(dir)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certs: %s is not a CA certificate", filepath.Join(dir, CAFile))
	}
	key, err := loadKey(keyFile)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("certs: CA key %s does not match %s", keyFile, filepath.Join(dir, CAFile))
	}
	return &CA{Cert: cert, key: key}, nil
}

// CreateNode creates node.REPLICA.crt and node.REPLICA.key in dir for the
// replica id.Replica of group id.Group, with its identity in the URI SAN
// flexkv://GROUP/REPLICA and hosts (DNS names or IP addresses, at least one)
// as DNS and IP SANs, so that a client or a peer dialling any of them
// verifies the server's name. The certificate serves both server and
// client authentication: nodes dial each other (DESIGN 13).
func (ca *CA) CreateNode(dir string, id NodeID, hosts []string, opt Options) (*x509.Certificate, error) {
	if err := CheckName("group", id.Group); err != nil {
		return nil, err
	}
	if err := CheckName("replica", id.Replica); err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("certs: node %s: no hosts (want the names or addresses it is dialled at)", id)
	}
	var dns []string
	var ips []net.IP
	seen := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		if err := CheckHost(h); err != nil {
			return nil, fmt.Errorf("certs: node %s: %w", id, err)
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "node " + id.String(), Organization: []string{"FlexKV"}},
		URIs:        []*url.URL{id.URI()},
		DNSNames:    dns,
		IPAddresses: ips,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	return ca.createLeaf(dir, NodeCertFile(id.Replica), NodeKeyFile(id.Replica), tmpl, ValidityNode, opt)
}

// CreateClient creates client.USER.crt and client.USER.key in dir: a client
// certificate whose CN is user, the name the client API knows it by
// (DESIGN 13). It authenticates clients only: it cannot serve.
func (ca *CA) CreateClient(dir, user string, opt Options) (*x509.Certificate, error) {
	if err := CheckName("user", user); err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: []string{"FlexKV"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.createLeaf(dir, ClientCertFile(user), ClientKeyFile(user), tmpl, ValidityClient, opt)
}

// createLeaf completes tmpl (serial, validity, basic constraints), signs it
// with ca and writes it and a new key as certName and keyName in dir.
func (ca *CA) createLeaf(dir, certName, keyName string, tmpl *x509.Certificate, validity time.Duration, opt Options) (*x509.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if err := checkAbsent(opt, certPath, keyPath); err != nil {
		return nil, err
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := opt.clock()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("certs: create %s: %w", certName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: create %s: %w", certName, err)
	}
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	if err := writeKey(keyPath, key, opt); err != nil {
		return nil, err
	}
	if err := writeCert(certPath, der, opt); err != nil {
		return nil, err
	}
	return cert, nil
}

// newKey returns a new ECDSA P-256 key (DESIGN 13).
func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate key: %w", err)
	}
	return key, nil
}

// newSerial returns a random positive 128-bit serial number: unique without
// a counter to keep, as RFC 5280 4.1.2.2 asks (positive, at most 20 octets).
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("certs: serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// checkAbsent returns an error naming the first of paths that exists,
// unless opt.Overwrite: checked for every file before any is written, so
// that a refused creation leaves nothing half-made.
func checkAbsent(opt Options, paths ...string) error {
	if opt.Overwrite {
		return nil
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("certs: %s %w (give --overwrite to replace it)", p, ErrExists)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("certs: %w", err)
		}
	}
	return nil
}

func mkdir(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func writeKey(path string, key *ecdsa.PrivateKey, opt Options) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", path, err)
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), keyMode, opt)
}

func writeCert(path string, der []byte, opt Options) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), certMode, opt)
}

// writeFile writes data to path with exactly mode (whatever the umask).
// Without opt.Overwrite it creates path exclusively, so that a file that
// appeared since checkAbsent is not replaced either; with it, it writes a
// temporary file beside path and renames it over path, so that a reader
// never sees half a key, and the old file's mode does not carry over.
func writeFile(path string, data []byte, mode os.FileMode, opt Options) error {
	if !opt.Overwrite {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("certs: %s %w (give --overwrite to replace it)", path, ErrExists)
		}
		if err != nil {
			return fmt.Errorf("certs: %w", err)
		}
		return finish(f, path, data, mode)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	tmp := f.Name()
	if err := finish(f, tmp, data, mode); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

// finish sets f's mode, writes data, syncs and closes f; on failure it
// removes path, the file f was opened as.
func finish(f *os.File, path string, data []byte, mode os.FileMode) error {
	err := f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	return nil
}
