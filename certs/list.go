package certs

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Entry describes one certificate file of a certs directory, for
// `flexkv cert list` (DESIGN 13).
type Entry struct {
	File string // the file's name in the directory
	Kind Kind   // from the certificate itself; 0 when it cannot be read
	// Subject is what the certificate names: the CA's CN, a node's
	// GROUP/REPLICA, a client's user.
	Subject  string
	Hosts    []string // a node's DNS and IP SANs
	NotAfter time.Time
	// Chains says whether the certificate verifies against the directory's
	// ca.crt now (for ca.crt, against itself).
	Chains bool
	// Problem is the first thing wrong with the file: unreadable, not
	// chaining to ca.crt (why), expired, or naming another replica or user
	// than its file name says. Empty when nothing is.
	Problem string
	Cert    *x509.Certificate // nil when the file cannot be read
}

// List describes every *.crt file of dir, in the order of their names.
// A file that cannot be read is an Entry with a Problem, not an error: the
// error is for a directory that cannot be read.
func List(dir string) ([]Entry, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	var pool *x509.CertPool
	poolErr := ""
	if ca, err := LoadCACert(dir); err == nil {
		pool = x509.NewCertPool()
		pool.AddCert(ca)
	} else {
		poolErr = err.Error()
	}
	var entries []Entry
	for _, f := range files {
		if f.IsDir() || !strings.HasSuffix(f.Name(), certSuffix) {
			continue
		}
		entries = append(entries, describeFile(dir, f.Name(), pool, poolErr))
	}
	return entries, nil
}

func describeFile(dir, name string, pool *x509.CertPool, poolErr string) Entry {
	e := Entry{File: name}
	cert, err := LoadCert(filepath.Join(dir, name))
	if err != nil {
		e.Problem = err.Error()
		return e
	}
	e.Cert, e.NotAfter = cert, cert.NotAfter
	problem := func(format string, args ...any) {
		if e.Problem == "" {
			e.Problem = fmt.Sprintf(format, args...)
		}
	}
	e.Hosts = append(e.Hosts, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		e.Hosts = append(e.Hosts, ip.String())
	}
	switch {
	case cert.IsCA:
		e.Kind, e.Subject = KindCA, cert.Subject.CommonName
		if name != CAFile {
			problem("a CA certificate in a file not named %s", CAFile)
		}
	case hasNodeURI(cert):
		e.Kind = KindNode
		id, err := NodeIdentity(cert)
		if err != nil {
			problem("%v", err)
			break
		}
		e.Subject = id.String()
		if name != NodeCertFile(id.Replica) {
			problem("names replica %s, want the file %s", id.Replica, NodeCertFile(id.Replica))
		}
	default:
		e.Kind = KindClient
		user, err := UserOf(cert)
		if err != nil {
			problem("%v", err)
			break
		}
		e.Subject = user
		if name != ClientCertFile(user) {
			problem("names user %s, want the file %s", user, ClientCertFile(user))
		}
	}
	if pool == nil {
		problem("cannot check the chain: %s", poolErr)
		return e
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		problem("%s", chainProblem(cert, err))
		return e
	}
	e.Chains = true
	return e
}

// chainProblem says, shortly, why cert does not verify against ca.crt.
func chainProblem(cert *x509.Certificate, err error) string {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return "not signed by " + CAFile + " (another CA)"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired && time.Now().After(cert.NotAfter):
		return "expired on " + cert.NotAfter.UTC().Format(time.RFC3339)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired && time.Now().Before(cert.NotBefore):
		return "not valid before " + cert.NotBefore.UTC().Format(time.RFC3339)
	default: // the CA itself expired, a wrong key usage, ...
		return fmt.Sprintf("does not chain to %s: %v", CAFile, err)
	}
}

func hasNodeURI(cert *x509.Certificate) bool {
	for _, u := range cert.URIs {
		if u.Scheme == URIScheme {
			return true
		}
	}
	return false
}

// HostsOf splits host:port addresses into their hosts, in order and
// without repeats, leaving out unspecified addresses (0.0.0.0, ::), which
// are where a server listens, not a name it is dialled at.
func HostsOf(addrs ...string) ([]string, error) {
	var hosts []string
	seen := make(map[string]bool)
	for _, a := range addrs {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("certs: address %q: %w", a, err)
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() || h == "" || seen[h] {
			continue
		}
		seen[h] = true
		hosts = append(hosts, h)
	}
	return hosts, nil
}
