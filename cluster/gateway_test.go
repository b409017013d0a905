package cluster

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/txn"
)

// gatewayRig is a cluster whose replicas serve the HTTP gateway, and an
// HTTP client of the root user.
type gatewayRig struct {
	l    *Local
	http *http.Client
	base string // https://HOST:PORT of g2's replica, r4
}

func startGateway(t *testing.T) *gatewayRig {
	t.Helper()
	cfg := forwardGroups(t)
	for gi := range cfg.Groups {
		for ri := range cfg.Groups[gi].Replicas {
			cfg.Groups[gi].Replicas[ri].HTTP = testaddr.Free(t, testaddr.Cluster)
		}
	}
	// A small page, so that a scan of a few keys is paged.
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir(), ScanBytesMax: 64})
	tr := &http.Transport{TLSClientConfig: l.ClientTLS(), ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	_, r4, _ := cfg.Replica("r4")
	return &gatewayRig{l: l, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, base: "https://" + r4.HTTP}
}

// do sends one request and returns its status and its JSON body decoded.
func (g *gatewayRig) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	return doHTTP(t, g.http, method, g.base+path, body)
}

func doHTTP(t *testing.T, c *http.Client, method, url, body string) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json (body %s)", method, url, ct, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, body %q is not a JSON object: %v", method, url, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out
}

// ok sends one request that must succeed (200) and returns its JSON.
func (g *gatewayRig) ok(t *testing.T, method, path, body string) map[string]any {
	t.Helper()
	code, out := g.do(t, method, path, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %v, want 200", method, path, code, out)
	}
	return out
}

// get reads key through the gateway: its value, or found false.
func (g *gatewayRig) get(t *testing.T, key string) map[string]any {
	t.Helper()
	return g.ok(t, "GET", "/v1/kv/"+key, "")
}

// jsonString is v as JSON, with no HTML escapes (as the gateway writes).
func jsonString(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// TestGateway drives every route of the HTTP gateway (DESIGN 7) with Go's
// net/http client over mutual TLS, at the replica of g2, which forwards
// what g1 serves: UTF-8 keys and values, base64 for bytes that are not,
// a two-group transaction and its await, a paged scan, sessions, the
// topology and status; and a transaction through HTTP and one through
// gRPC see each other's writes.
func TestGateway(t *testing.T) {
	g := startGateway(t)
	g.ok(t, "PUT", "/v1/kv/w/0001/h%C3%A9/x", `{"value":"héllo <wörld>"}`)
	if got := jsonString(g.get(t, "w/0001/h%C3%A9/x")); got != `{"found":true,"value":"héllo <wörld>"}` {
		t.Errorf("get of a UTF-8 key: %s", got)
	}
	// Bytes that are not UTF-8: base64 both ways.
	g.ok(t, "PUT", "/v1/kv/w/0002/bin", `{"value":"/wA=","encoding":"base64"}`)
	if got := jsonString(g.get(t, "w/0002/bin")); got != `{"encoding":"base64","found":true,"value":"/wA="}` {
		t.Errorf("get of a binary value: %s", got)
	}
	if got := jsonString(g.ok(t, "GET", "/v1/kv/dy8wMDAyL2Jpbg==?encoding=base64", "")); !strings.Contains(got, `"found":true`) {
		t.Errorf("get by a base64 key: %s", got)
	}
	g.ok(t, "DELETE", "/v1/kv/w/0002/bin", "")
	if got := jsonString(g.get(t, "w/0002/bin")); got != `{"found":false,"value":""}` {
		t.Errorf("get after delete: %s", got)
	}

	// A transaction of both groups, and g2's piece awaited.
	out := g.ok(t, "POST", "/v1/txn", `{"txn":{"then":[{"kind":"OP_KIND_PUT","key":"w/0001/x","value":"1"},{"kind":"OP_KIND_PUT","key":"w/0002/x","value":"1"}]}}`)
	piece, _ := out["piece"].(map[string]any)
	if out["executed"] != true || piece["group"] != "g1" || piece["succeeded"] != true {
		t.Fatalf("two-group txn: %s", jsonString(out))
	}
	aw := g.ok(t, "POST", "/v1/await", fmt.Sprintf(`{"client_id":%q,"seq":%q,"group":"g2"}`, piece["client_id"], piece["seq"]))
	if p, _ := aw["piece"].(map[string]any); p["group"] != "g2" || p["succeeded"] != true {
		t.Fatalf("await g2's piece: %s", jsonString(aw))
	}
	checkGatewaySeesGRPC(t, g)
	checkGatewayScan(t, g)

	s := g.ok(t, "POST", "/v1/session", `{"group":"g1"}`)
	if s["client_id"] == "0" || s["client_id"] == nil {
		t.Errorf("open a session: %s", jsonString(s))
	}
	g.ok(t, "PUT", "/v1/kv/w/0001/s", fmt.Sprintf(`{"client_id":%q,"seq":"1","value":"s"}`, s["client_id"]))
	if top := g.ok(t, "GET", "/v1/topology", ""); len(top["groups"].([]any)) != 2 || top["protocol"] != "flexcast" {
		t.Errorf("topology: %s", jsonString(top))
	}
	if st := g.ok(t, "GET", "/v1/status", ""); st["group"] != "g2" || st["replica"] != "r4" {
		t.Errorf("status: %s", jsonString(st))
	}
	// HTTP headers never become gRPC metadata: a caller cannot pose as a
	// forwarding replica (which would cut this forward as a loop).
	req, _ := http.NewRequest("PUT", g.base+"/v1/kv/w/0001/hdr", strings.NewReader(`{"value":"v"}`))
	req.Header.Set("Grpc-Metadata-Flexkv-Forwarded-By", "g1/r1 0123456789abcdef")
	req.Header.Set("Grpc-Metadata-Flexkv-User", "admin")
	resp, err := g.http.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("put with gRPC metadata headers: %v %v, want 200", resp, err)
	}
	resp.Body.Close()
}

// checkGatewaySeesGRPC: a transaction through the gateway and one through
// the Go client's gRPC each see the other's writes.
func checkGatewaySeesGRPC(t *testing.T, g *gatewayRig) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	c, err := client.New(ctx, client.Config{Endpoints: g.l.Endpoints(), TLS: g.l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// gRPC reads what HTTP wrote (w/0001/x = 1) and writes w/0002/y.
	res, err := c.Txn(ctx, &txn.Txn{
		If:   []txn.Compare{{Key: []byte("w/0001/x"), Cmp: txn.CmpEqual, Value: []byte("1")}},
		Then: []txn.Op{{Kind: txn.OpPut, Key: []byte("w/0002/y"), Value: []byte("from grpc")}, {Kind: txn.OpGet, Key: []byte("w/0001/x")}},
	})
	if err != nil || !res.Succeeded {
		t.Fatalf("gRPC txn on HTTP's write: %+v, %v", res, err)
	}
	// HTTP reads what gRPC wrote, in a transaction entered at g2.
	out := g.ok(t, "POST", "/v1/txn", `{"txn":{"if":[{"key":"w/0002/y","cmp":"CMP_EQUAL","value":"from grpc"}],"then":[{"kind":"OP_KIND_GET","key":"w/0002/y"}]}}`)
	if got := jsonString(out["piece"]); !strings.Contains(got, `"succeeded":true`) || !strings.Contains(got, `"value":"from grpc"`) {
		t.Fatalf("HTTP txn on gRPC's write: %s", jsonString(out))
	}
}

// checkGatewayScan pages through a scan of g1's partition at g2's
// gateway: each page is under the cluster's 64-byte bound, and the pages
// hold every key once, in order.
func checkGatewayScan(t *testing.T, g *gatewayRig) {
	t.Helper()
	for i := range 5 {
		g.ok(t, "PUT", fmt.Sprintf("/v1/kv/w/0001/scan/%d", i), `{"value":"0123456789"}`)
	}
	var keys []string
	start, pages := "w/0001/scan/", 0
	for start != "" && pages < 10 {
		out := g.ok(t, "GET", "/v1/scan?start="+start+"&end=w/0001/scan0", "")
		pages++
		for _, kv := range out["kvs"].([]any) {
			keys = append(keys, kv.(map[string]any)["key"].(string))
		}
		start, _ = out["next_start"].(string)
	}
	if want := "w/0001/scan/0 w/0001/scan/1 w/0001/scan/2 w/0001/scan/3 w/0001/scan/4"; strings.Join(keys, " ") != want || pages < 2 {
		t.Fatalf("scan in %d pages: %q, want %s in more than one page", pages, keys, want)
	}
}

// TestGatewayErrors: every refusal of the gateway is a JSON error with the
// gRPC code, its name and a message that names the problem, under the
// right HTTP status, and writes nothing.
func TestGatewayErrors(t *testing.T) {
	g := startGateway(t)
	tests := []struct {
		name, method, path, body string
		status, code             int
		want                     string // in the message
	}{
		{"malformed JSON", "PUT", "/v1/kv/w/0001/e1", `{"value":`, 400, 3, "malformed JSON"},
		{"unknown field", "PUT", "/v1/kv/w/0001/e2", `{"valu":"x"}`, 400, 3, "valu"},
		{"data after the body", "PUT", "/v1/kv/w/0001/e3", `{"value":"x"} {}`, 400, 3, "after"},
		{"bad encoding in the body", "PUT", "/v1/kv/w/0001/e4", `{"value":"x","encoding":"hex"}`, 400, 3, "encoding"},
		{"bad base64 in the body", "PUT", "/v1/kv/w/0001/e5", `{"value":"*","encoding":"base64"}`, 400, 3, "value"},
		{"bad encoding in the query", "GET", "/v1/kv/w/0001/e6?encoding=hex", "", 400, 3, "encoding"},
		{"unknown route", "GET", "/v1/nope", "", 404, 5, "no route GET /v1/nope"},
		{"method of no route", "POST", "/v1/kv/w/0001/e7", `{"value":"x"}`, 405, 12, "no route POST"},
		{"key outside every partition", "PUT", "/v1/kv/zzz", `{"value":"x"}`, 400, 3, "zzz"},
		{"value over the bound", "PUT", "/v1/kv/w/0001/e8", `{"value":"` + strings.Repeat("v", txn.ValueMax+1) + `"}`, 400, 3, "value"},
		{"body over the bound", "PUT", "/v1/kv/w/0001/e9", `{"value":"` + strings.Repeat("v", api.GatewayBodyBytesMax) + `"}`, 413, 3, "larger than"},
		{"transaction without a body", "POST", "/v1/txn", "", 400, 3, "neither"},
		{"transaction at a key in no partition", "POST", "/v1/txn", `{"txn":{"then":[{"kind":"OP_KIND_PUT","key":"nowhere","value":"x"}]}}`, 400, 3, "nowhere"},
		{"await at an unknown group", "POST", "/v1/await", `{"client_id":"1","seq":"1","group":"mars"}`, 400, 3, "mars"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, out := g.do(t, tc.method, tc.path, tc.body)
			checkJSONError(t, status, out, tc.status, tc.code, tc.want)
		})
	}
	// Without a client certificate: 401, and nothing written.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: g.l.ClientTLS().RootCAs, MinVersion: tls.VersionTLS13}}
	defer tr.CloseIdleConnections()
	status, out := doHTTP(t, &http.Client{Transport: tr}, "PUT", g.base+"/v1/kv/w/0001/e10", `{"value":"x"}`)
	checkJSONError(t, status, out, 401, 16, "no client certificate")
	for i := 1; i <= 10; i++ {
		if got := g.get(t, fmt.Sprintf("w/0001/e%d", i)); got["found"] != false {
			t.Errorf("w/0001/e%d written by a refused request: %v", i, got)
		}
	}
}

func checkJSONError(t *testing.T, status int, out map[string]any, wantStatus, wantCode int, want string) {
	t.Helper()
	if status != wantStatus || out["code"] != float64(wantCode) || !strings.Contains(fmt.Sprint(out["message"]), want) {
		t.Fatalf("%d %s, want %d with code %d and a message with %q", status, jsonString(out), wantStatus, wantCode, want)
	}
	if name, _ := out["status"].(string); name == "" || name != strings.ToUpper(name) {
		t.Errorf("status %q, want the code's name", out["status"])
	}
}

// TestGatewayScanAcrossPartitions: GET /v1/scan over the partitions of
// both groups at g2's gateway. Plainly, a page reads one partition and its
// next_start moves to the next partition; with consistent=true the range is
// read whole at one cut, up to the cluster's 64-byte bound, and past it the
// answer is a JSON error naming the bound. Bad input is a JSON error too.
func TestGatewayScanAcrossPartitions(t *testing.T) {
	g := startGateway(t)
	for _, p := range []string{"w/0001", "w/0002"} {
		for i := range 3 {
			g.ok(t, "PUT", fmt.Sprintf("/v1/kv/%s/sa/%d", p, i), `{"value":"x"}`)
		}
	}
	const whole = "w/0001/sa/0 w/0001/sa/1 w/0001/sa/2 w/0002/sa/0 w/0002/sa/1 w/0002/sa/2"
	keys := func(out map[string]any) []string {
		var ks []string
		for _, kv := range out["kvs"].([]any) {
			ks = append(ks, kv.(map[string]any)["key"].(string))
		}
		return ks
	}
	var got, nexts []string
	for start := "w/0001/sa/"; start != "" && len(nexts) < 10; {
		out := g.ok(t, "GET", "/v1/scan?start="+start+"&end=w/0002/sa0", "")
		got = append(got, keys(out)...)
		start, _ = out["next_start"].(string)
		nexts = append(nexts, start)
	}
	if strings.Join(got, " ") != whole || strings.Join(nexts, ",") != "w/0002/," {
		t.Errorf("paged scan across partitions: %q with next_start %q; want %s, next_start w/0002/ then none", got, nexts, whole)
	}
	// Five keys of 12 bytes fit the 64-byte bound; six do not.
	out := g.ok(t, "GET", "/v1/scan?start=w/0001/sa/&end=w/0002/sa0&consistent=true&limit=5", "")
	if ks := strings.Join(keys(out), " "); ks != whole[:strings.LastIndex(whole, " ")] || out["next_start"] != "" {
		t.Errorf("consistent scan of 5 keys: %s", jsonString(out))
	}
	for _, tc := range []struct {
		name, query  string
		status, code int
		want         string
	}{
		{"consistent past the bound", "start=w/0001/sa/&end=w/0002/sa0&consistent=true", 400, 11, "6 keys hold 72 bytes of keys and values, more than the scan byte bound (64"},
		{"end before start", "start=w/0002/&end=w/0001/", 400, 3, `server: scan: partition: range ["w/0002/", "w/0001/"): end is not after start`},
		{"no partition in the range", "start=x&end=y", 400, 3, `server: scan: partition: range ["x", "y"): no partition overlaps it (it starts after the last partition, g2`},
		{"consistent and stale", "start=w/0001/&end=w/0003/&consistent=true&stale=true", 400, 3, "consistent and stale both set"},
	} {
		status, out := g.do(t, "GET", "/v1/scan?"+tc.query, "")
		checkJSONError(t, status, out, tc.status, tc.code, tc.want)
	}
}
