package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// gatewayOp returns the request of a bench put or get made through the HTTP
// gateway at o.gateway (host:port; DESIGN 7) instead of the Go client: PUT
// and GET /v1/kv/KEY over one HTTP/2 connection with the client's TLS (a
// plain HTTP/1.1 one without TLS), to compare the two in the same run.
func gatewayOp(o benchOptions, plan benchPlan, tlsCfg *tls.Config, found *atomic.Int64) func(context.Context, int) error {
	base := "http://" + o.gateway + "/v1/kv/"
	tr := &http.Transport{MaxIdleConnsPerHost: o.clients, MaxConnsPerHost: o.clients}
	if tlsCfg != nil {
		base = "https://" + o.gateway + "/v1/kv/"
		tr.TLSClientConfig = tlsCfg.Clone()
		tr.ForceAttemptHTTP2 = true
	}
	hc := &http.Client{Transport: tr}
	body, _ := json.Marshal(map[string]string{"value": string(benchValue(o.valSize))})
	return func(ctx context.Context, i int) error {
		target := base + url.PathEscape(string(plan.keys.Key(i)))
		var req *http.Request
		var err error
		if o.op == "put" {
			req, err = http.NewRequestWithContext(ctx, http.MethodPut, target, strings.NewReader(string(body)))
		} else {
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		}
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %s: %s", req.Method, target, resp.Status, strings.TrimSpace(string(data)))
		}
		if o.op == "get" {
			var got struct {
				Found bool `json:"found"`
			}
			if err := json.Unmarshal(data, &got); err != nil {
				return fmt.Errorf("GET %s: %w", target, err)
			}
			if got.Found {
				found.Add(1)
			}
		}
		return nil
	}
}
