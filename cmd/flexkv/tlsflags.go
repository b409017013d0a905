package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
)

// localCertsDir is where `flexkv local` keeps its certificates with its
// default data directory: the client commands look there when no
// --certs-dir is given, so that the quick start works unchanged.
var localCertsDir = cluster.CertsDir(filepath.Join("flexkv-data", "local"))

// addClientTLSFlags registers the flags by which a client command finds its
// certificate (DESIGN 13).
func addClientTLSFlags(f *pflag.FlagSet) {
	f.String("certs-dir", "", "directory of ca.crt and client.USER.crt/.key (also FLEXKV_CERTS_DIR; default: "+localCertsDir+" when it exists)")
	f.String("user", cluster.RootUser, "the user whose client certificate to present")
	f.Bool("insecure", false, "connect without TLS, to a cluster started with --insecure")
}

// clientTLS returns the TLS configuration the client flags of v ask for:
// nil with --insecure, else the user's certificate from --certs-dir or, by
// default, from the local cluster's certificates directory.
func clientTLS(v *viper.Viper) (*tls.Config, error) {
	if v.GetBool("insecure") {
		return nil, nil
	}
	dir := v.GetString("certs-dir")
	if dir == "" {
		if _, err := os.Stat(filepath.Join(localCertsDir, certs.CAFile)); err != nil {
			return nil, errors.New("no certificates: give --certs-dir DIR (or FLEXKV_CERTS_DIR) holding ca.crt and client.USER.crt/.key " +
				"(flexkv cert create-client), or --insecure for a cluster that runs without TLS")
		}
		dir = localCertsDir
	}
	// The Go client's loader: the same files as client.Config.CertsDir,
	// and the same errors naming a missing one.
	return client.LoadTLS(dir, v.GetString("user"))
}

// serverNode returns the node certificate a replica runs with: nil with
// --insecure (logged by the caller), an error without --certs-dir (DESIGN 13:
// secure by default).
func serverNode(v *viper.Viper, node string) (*certs.Node, error) {
	dir := v.GetString("certs-dir")
	switch {
	case v.GetBool("insecure") && dir != "":
		return nil, errors.New("server: --insecure and --certs-dir: choose one")
	case v.GetBool("insecure"):
		return nil, nil
	case dir == "":
		return nil, fmt.Errorf("server: no --certs-dir (or FLEXKV_CERTS_DIR): a replica runs mutual TLS with node.%s.crt/.key and ca.crt from it (flexkv cert create-node %s); --insecure runs without TLS", node, node)
	}
	n, err := certs.LoadNode(dir, node)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return n, nil
}
