package client

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexkv/flexkv/certs"
)

// UserDefault is the user of a Config that gives CertsDir and no User: the
// user whose client certificate `flexkv local` and `flexkv demo` create.
const UserDefault = "root"

// localCertsDir is where `flexkv local` writes its certificates, relative
// to the directory it runs in; errors name it, to point a newcomer at it.
const localCertsDir = "flexkv-data/local/certs"

// transportCredentials returns the credentials cfg asks for (DESIGN 13):
// TLS from cfg.TLS or from the certificates in cfg.CertsDir, or plaintext
// with cfg.Insecure or when cfg sets none of the three. secure reports
// which.
func transportCredentials(cfg Config) (creds credentials.TransportCredentials, secure bool, err error) {
	switch {
	case cfg.Insecure && (cfg.TLS != nil || cfg.CertsDir != ""):
		return nil, false, errors.New("client: Config.Insecure with Config.TLS or Config.CertsDir: choose plaintext or TLS")
	case cfg.TLS != nil && cfg.CertsDir != "":
		return nil, false, errors.New("client: Config.TLS and Config.CertsDir: choose one")
	case cfg.User != "" && cfg.CertsDir == "":
		return nil, false, fmt.Errorf("client: Config.User %q without Config.CertsDir: the user names the certificate client.%s.crt of CertsDir", cfg.User, cfg.User)
	case cfg.TLS != nil:
		return credentials.NewTLS(cfg.TLS), true, nil
	case cfg.CertsDir != "":
		tc, err := LoadTLS(cfg.CertsDir, cmp.Or(cfg.User, UserDefault))
		if err != nil {
			return nil, false, err
		}
		return credentials.NewTLS(tc), true, nil
	}
	return insecure.NewCredentials(), false, nil
}

// LoadTLS returns the TLS configuration of user from the certificates
// directory dir, as `flexkv local` and `flexkv cert` write it: ca.crt and
// client.USER.crt/.key. New loads Config.CertsDir with it; programs that
// dial FlexKV servers themselves (flexkv status does) may too. A missing
// directory or file is named, with what writes it; the rest (a key others
// may read, a certificate of another CA or user) is certs.LoadClient's to
// refuse.
func LoadTLS(dir, user string) (*tls.Config, error) {
	if err := certs.CheckName("user", user); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("client: certificates directory %s does not exist (flexkv local writes its certificates to %s, under the directory it runs in)", dir, localCertsDir)
		}
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("client: certificates directory %s: %w", dir, err)
	}
	for _, f := range []struct{ name, what string }{
		{certs.CAFile, "the cluster CA's certificate (flexkv cert create-ca writes it)"},
		{certs.ClientCertFile(user), "the client certificate of user " + user + " (flexkv cert create-client " + user + " writes it; flexkv local makes root's)"},
		{certs.ClientKeyFile(user), "the key of user " + user + "'s client certificate (flexkv cert create-client " + user + " writes it)"},
	} {
		path := filepath.Join(dir, f.name)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("client: %s does not exist: it is %s", path, f.what)
		}
	}
	c, err := certs.LoadClient(dir, user)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return certs.ClientConfig(c), nil
}

// A TLSMismatchError is the error of New when the cluster and the client
// disagree on TLS, one end speaking it and the other not, so that no request
// can pass: the cluster runs TLS (as it does by default, DESIGN 13) and the
// client connects in plaintext, or the cluster was started with --insecure
// and the client speaks TLS. Its text says which Config field to set.
type TLSMismatchError struct {
	// ClusterTLS is true when the cluster runs TLS and the client does
	// not, false for the reverse.
	ClusterTLS bool
	// Endpoint is the server whose answer showed it, Err the error of the
	// connection as gRPC gave it.
	Endpoint string
	Err      error
	// insecure is set when the client was given Config.Insecure, rather
	// than nothing.
	insecure bool
}

func (e *TLSMismatchError) Error() string {
	var what string
	switch {
	case e.ClusterTLS && e.insecure:
		what = "the cluster runs TLS and this client does not: drop Config.Insecure, and give Config.CertsDir (flexkv local writes " +
			localCertsDir + ") and Config.User, or Config.TLS"
	case e.ClusterTLS:
		what = "the cluster runs TLS and this client does not: give Config.CertsDir (flexkv local writes " +
			localCertsDir + ") and Config.User, or Config.TLS"
	default:
		what = "the cluster runs without TLS (it was started with --insecure) and this client uses TLS: set Config.Insecure instead of Config.CertsDir or Config.TLS"
	}
	return fmt.Sprintf("client: %s (%s: %v)", what, e.Endpoint, e.Err)
}

func (e *TLSMismatchError) Unwrap() error { return e.Err }

// TLSMismatch reports whether err, the error of a gRPC call to a FlexKV
// server over a connection made with TLS (secure) or without, shows that the
// server is the other way: a TLS server that read a plaintext request
// closes the connection before gRPC reads its HTTP/2 preface ("error
// reading server preface", or a reset), and a plaintext server answers a
// TLS handshake with bytes that are not TLS ("first record does not look
// like a TLS handshake"). New's errors say so already (TLSMismatchError);
// TLSMismatch serves programs that make their own connections, as
// `flexkv status` does.
func TLSMismatch(err error, secure bool) bool {
	if err == nil {
		return false
	}
	if te := (*TLSMismatchError)(nil); errors.As(err, &te) {
		return true
	}
	msg := err.Error()
	if secure {
		return strings.Contains(msg, "first record does not look like a TLS handshake")
	}
	return strings.Contains(msg, "server preface") || strings.Contains(msg, "connection reset")
}
