package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/certs"
)

// The HTTP/JSON gateway (DESIGN 7): grpc-gateway's handlers (package api)
// on the replica's HTTP address, each request a call of this replica's
// own client API, in process (inproc.go), for the user of the request's
// client certificate: the request is then served, or forwarded to the
// right group's leader, as any other (forward.go). The listener runs the client API's TLS, but takes a
// connection without a client certificate, so that such a request is
// answered with a JSON error (401) rather than a failed handshake that
// curl reports obscurely.
const (
	// httpConnsMax bounds the gateway's open connections; httpHeaderBytesMax
	// a request's header, and the timeouts how long a connection may hold
	// the server's memory without sending.
	httpConnsMax          = 1024
	httpHeaderBytesMax    = 64 << 10
	httpReadHeaderTimeout = 10 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpRequestBytes      = 4 << 10
)

// HTTPAddr returns the address of the replica's HTTP gateway: Config.HTTPAddr,
// else its configuration's http address; "" when it serves none.
func (s *Server) HTTPAddr() string {
	if s.cfg.HTTPAddr != "" {
		return s.cfg.HTTPAddr
	}
	return s.me.HTTP
}

// gateway is a running HTTP gateway.
type gateway struct {
	srv  *http.Server
	done chan struct{} // closed when Serve returned
}

// serveHTTP starts the gateway on HTTPAddr, when there is one.
func (s *Server) serveHTTP() error {
	addr := s.HTTPAddr()
	if addr == "" {
		return nil
	}
	var tlsCfg *tls.Config
	if n := s.cfg.Node; n != nil {
		tlsCfg = certs.HTTPServerConfig(n)
	}
	gc := api.GatewayConfig{Conn: inproc{s: s, svc: &service{s: s}}}
	if tlsCfg != nil {
		gc.User = httpUser
	}
	h, err := api.Gateway(gc)
	if err != nil {
		return err
	}
	h = budgeted(h, &budget{max: apiBytesMax})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: http gateway: %w", err)
	}
	lis = netutil.LimitListener(lis, httpConnsMax)
	srv := &http.Server{
		Handler: h, TLSConfig: tlsCfg, MaxHeaderBytes: httpHeaderBytesMax,
		ReadHeaderTimeout: httpReadHeaderTimeout, IdleTimeout: httpIdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug), // failed handshakes, each
	}
	g := &gateway{srv: srv, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		if tlsCfg != nil {
			_ = srv.ServeTLS(lis, "", "")
		} else {
			_ = srv.Serve(lis)
		}
	}()
	s.http = g
	return nil
}

// httpUser returns the user of an HTTP request: the CN of its verified
// client certificate.
func httpUser(r *http.Request) (string, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", errors.New("server: no client certificate: the gateway serves the users of the cluster's client certificates (curl --cacert ca.crt --cert client.USER.crt --key client.USER.key)")
	}
	user, err := certs.PeerUser(*r.TLS)
	if err != nil {
		return "", fmt.Errorf("server: client certificate: %w", err)
	}
	return user, nil
}

// close stops the gateway: requests in flight get a moment to finish.
func (g *gateway) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := g.srv.Shutdown(ctx)
	if err != nil {
		err = g.srv.Close()
	}
	<-g.done
	return err
}

// budgeted runs h for a request only while the gateway's budget of
// request bytes in flight has room for its body (its Content-Length, or
// the bound of a body when it sends none); else it answers 429
// (ResourceExhausted) at once. A request also takes httpRequestBytes for
// its header and the call it makes.
func budgeted(h http.Handler, b *budget) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.ContentLength
		if n < 0 || n > api.GatewayBodyBytesMax {
			n = api.GatewayBodyBytesMax // a larger one is refused as it is read
		}
		n += httpRequestBytes
		if err := b.take(n); err != nil {
			api.WriteGatewayError(w, status.Error(codes.ResourceExhausted, err.Error()))
			return
		}
		defer b.give(n)
		h.ServeHTTP(w, r)
	})
}
