package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// The three links of DESIGN 13 and their configurations:
//
//	client API       ServerConfig (replica) <- ClientConfig (client): user = CN
//	                 APIServerConfig (replica) <- also NodeConfig (replica): a node calling for a user
//	group to group   NodeConfig   (replica) <-> NodeConfig  (replica): NodeID from the URI SAN
//	raft in a group  GroupConfig  (replica) <-> GroupConfig (replica): NodeID of the same group
//
// Every one is TLS 1.3 only, mutually authenticated, and trusts the cluster
// CA alone. A config used to dial verifies the server's name as usual: the
// dialer sets ServerName from the address it dials (tls.Dial and gRPC's
// credentials do), which a node certificate lists among its hosts. On top of
// the chain, each config checks the kind of its peer in VerifyConnection,
// so that a client certificate cannot pass for a node nor a node's for a
// user: the handshake fails instead.

// ErrNotVerified is returned for a connection whose peer certificate was
// not verified against the cluster CA: there is no identity to read.
var ErrNotVerified = errors.New("certs: peer certificate not verified against the cluster CA")

// ServerConfig is a replica's configuration for the client API: it presents
// the node certificate and requires a client certificate that chains to the
// cluster CA; PeerUser reads the user from the connection.
func ServerConfig(n *Node) *tls.Config {
	return listenConfig(n, tls.RequireAndVerifyClientCert, func(cs tls.ConnectionState) error {
		_, err := PeerUser(cs)
		return err
	}, nil)
}

// APIServerConfig is ServerConfig that also admits the cluster's nodes,
// which call the client API for a user: a replica that forwards a request
// to another group's leader, a replica's HTTP gateway (DESIGN 7). A node
// certificate does not pass for a user: the server reads its peer with
// PeerUser, and only when that fails with PeerNode, and takes the user a
// node names only from a node (DESIGN 13).
func APIServerConfig(n *Node) *tls.Config {
	return listenConfig(n, tls.RequireAndVerifyClientCert, func(cs tls.ConnectionState) error {
		_, err := PeerUser(cs)
		if err == nil {
			return nil
		}
		if _, nerr := PeerNode(cs); nerr == nil {
			return nil
		}
		return err
	}, nil)
}

// HTTPServerConfig is a replica's configuration for its HTTP gateway
// (DESIGN 7): ServerConfig, but a connection without a client certificate
// is let through, for the gateway to answer 401 in JSON rather than a
// handshake failure a browser or curl shows badly; one with a certificate
// must present a user's. It speaks HTTP/2 and HTTP/1.1.
func HTTPServerConfig(n *Node) *tls.Config {
	return listenConfig(n, tls.VerifyClientCertIfGiven, func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		_, err := PeerUser(cs)
		return err
	}, []string{"h2", "http/1.1"})
}

// listenConfig is a configuration to listen with n's certificate: auth and
// check decide whom it admits, protos the protocols (ALPN) it offers (nil:
// the client's first). Every connection is made by GetConfigForClient with
// the certificate and CA read last (reload.go), so the fields of the
// configuration itself only describe it.
func listenConfig(n *Node, auth tls.ClientAuthType, check func(tls.ConnectionState) error, protos []string) *tls.Config {
	m := n.current()
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{m.cert},
		ClientAuth:         auth,
		ClientCAs:          m.pool,
		VerifyConnection:   check,
		NextProtos:         protos,
		GetConfigForClient: listening(n, auth, check, protos),
	}
}

// listening returns the GetConfigForClient of n's configurations: each
// connection a replica accepts is made with the certificate and the CA
// read last (reload.go). Without protos, the protocol (ALPN) is the
// client's first: gRPC offers h2, raft's stream layer none.
func listening(n *Node, auth tls.ClientAuthType, check func(tls.ConnectionState) error, protos []string) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	return func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		m := n.current()
		next := protos
		if next == nil {
			next = hello.SupportedProtos
		}
		return &tls.Config{
			MinVersion:       tls.VersionTLS13,
			Certificates:     []tls.Certificate{m.cert},
			ClientAuth:       auth,
			ClientCAs:        m.pool,
			VerifyConnection: check,
			NextProtos:       next,
		}, nil
	}
}

// ClientConfig is a client's configuration for the client API: it presents
// client.USER.crt and accepts a server whose node certificate chains to the
// cluster CA and names the host dialled.
func ClientConfig(c *Client) *tls.Config {
	m := c.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    m.pool,
		// The certificate read last, at each handshake (reload.go).
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &c.current().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := PeerNode(cs)
			return err
		},
	}
}

// NodeConfig is a replica's configuration for the links between groups,
// both to listen and to dial: it presents the node certificate and accepts
// a peer only with a node certificate of the cluster CA. Which group a peer
// may speak for is the caller's to check, frame by frame, with PeerNode
// and RequireGroup (DESIGN 13: a frame only from a node of the group it
// claims to come from).
func NodeConfig(n *Node) *tls.Config {
	return nodeConfig(n, func(cs tls.ConnectionState) error {
		_, err := PeerNode(cs)
		return err
	})
}

// GroupConfig is NodeConfig for raft inside n's group: a peer must be a
// replica of n's own group (DESIGN 13), checked during the handshake.
func GroupConfig(n *Node) *tls.Config {
	group := n.ID.Group
	return nodeConfig(n, func(cs tls.ConnectionState) error {
		_, err := RequireGroup(cs, group)
		return err
	})
}

// nodeConfig is a configuration to listen and to dial with n's
// certificate. Listening, each connection takes the certificate and CA read
// last; dialling, the certificate read last, verified against the CA of
// when the configuration was made (Go's TLS client reads RootCAs from the
// configuration, which gRPC copies per connection): a CA re-issued with the
// same key, the usual renewal, verifies alike.
func nodeConfig(n *Node, check func(tls.ConnectionState) error) *tls.Config {
	m := n.current()
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{m.cert},
		ClientAuth:         tls.RequireAndVerifyClientCert,
		ClientCAs:          m.pool,
		RootCAs:            m.pool,
		VerifyConnection:   check,
		GetConfigForClient: listening(n, tls.RequireAndVerifyClientCert, check, nil),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &n.current().cert, nil
		},
	}
}

// peerLeaf returns the verified leaf certificate of cs.
func peerLeaf(cs tls.ConnectionState) (*x509.Certificate, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, ErrNotVerified
	}
	return cs.VerifiedChains[0][0], nil
}

// PeerNode returns the identity of the node at the other end of a
// connection, from its verified certificate's URI SAN.
func PeerNode(cs tls.ConnectionState) (NodeID, error) {
	cert, err := peerLeaf(cs)
	if err != nil {
		return NodeID{}, err
	}
	return nodeIdentity(cert, "peer certificate")
}

// RequireGroup returns the identity of the peer of cs if it is a node of
// group, and an error naming both groups otherwise.
func RequireGroup(cs tls.ConnectionState, group string) (NodeID, error) {
	id, err := PeerNode(cs)
	if err != nil {
		return NodeID{}, err
	}
	if id.Group != group {
		return NodeID{}, fmt.Errorf("certs: peer %s is a node of group %q, not of group %q", id, id.Group, group)
	}
	return id, nil
}

// RequireReplica returns nil if the peer of cs is replica want.Replica of
// group want.Group, and an error naming both otherwise.
func RequireReplica(cs tls.ConnectionState, want NodeID) error {
	id, err := PeerNode(cs)
	if err != nil {
		return err
	}
	if id != want {
		return fmt.Errorf("certs: peer is node %s, not %s", id, want)
	}
	return nil
}

// PeerUser returns the user at the other end of a client API connection:
// the CN of its verified client certificate (DESIGN 13).
func PeerUser(cs tls.ConnectionState) (string, error) {
	cert, err := peerLeaf(cs)
	if err != nil {
		return "", err
	}
	return userOf(cert, "peer certificate")
}

// NodeIdentity returns the identity a node certificate names in its URI
// SAN flexkv://GROUP/REPLICA. It does not verify the certificate: read a
// peer's identity with PeerNode, from a verified connection.
func NodeIdentity(cert *x509.Certificate) (NodeID, error) {
	return nodeIdentity(cert, describe(cert))
}

// UserOf returns the user a client certificate names, its CN. It refuses a
// CA or a node certificate. Like NodeIdentity it does not verify cert.
func UserOf(cert *x509.Certificate) (string, error) {
	return userOf(cert, describe(cert))
}

// describe names cert in errors by its subject.
func describe(cert *x509.Certificate) string {
	return fmt.Sprintf("certificate %q", cert.Subject.String())
}

func nodeIdentity(cert *x509.Certificate, what string) (NodeID, error) {
	if cert.IsCA {
		return NodeID{}, fmt.Errorf("certs: %s is a CA certificate, not a node's", what)
	}
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == URIScheme {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return NodeID{}, fmt.Errorf("certs: %s names no %s:// URI", what, URIScheme)
	case 1:
	default:
		return NodeID{}, fmt.Errorf("certs: %s names %d %s:// URIs, want one", what, len(found), URIScheme)
	}
	u := found[0]
	replica, ok := strings.CutPrefix(u.Path, "/")
	if !ok || u.Opaque != "" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return NodeID{}, fmt.Errorf("certs: %s names URI %q, want %s://GROUP/REPLICA", what, u, URIScheme)
	}
	id := NodeID{Group: u.Hostname(), Replica: replica}
	if err := checkName("group", id.Group); err != nil {
		return NodeID{}, fmt.Errorf("certs: %s names URI %q: %w", what, u, err)
	}
	if err := checkName("replica", id.Replica); err != nil {
		return NodeID{}, fmt.Errorf("certs: %s names URI %q: %w", what, u, err)
	}
	return id, nil
}

func userOf(cert *x509.Certificate, what string) (string, error) {
	if cert.IsCA {
		return "", fmt.Errorf("certs: %s is a CA certificate, not a client's", what)
	}
	for _, u := range cert.URIs {
		if u.Scheme == URIScheme {
			return "", fmt.Errorf("certs: %s is a node certificate (%s), not a client's", what, u)
		}
	}
	user := cert.Subject.CommonName
	if err := checkName("user", user); err != nil {
		return "", fmt.Errorf("certs: %s names no valid user in its CN: %w", what, err)
	}
	return user, nil
}
