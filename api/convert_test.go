package api

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

func i64(v int64) *int64 { return &v }

// sampleTxns cover every relation, operand and kind, and the empty value.
func sampleTxns() map[string]*txn.Txn {
	return map[string]*txn.Txn{
		"transfer": {
			If: []txn.Compare{{Key: []byte("w/0001/acct"), Cmp: txn.CmpGreaterEqual, Int: i64(5)}},
			Then: []txn.Op{
				{Kind: txn.OpAdd, Key: []byte("w/0001/acct"), Int: -5},
				{Kind: txn.OpAdd, Key: []byte("w/0002/acct"), Int: 5},
			},
		},
		"every kind": {
			If: []txn.Compare{
				{Key: []byte("a"), Cmp: txn.CmpEqual, Value: []byte{}},
				{Key: []byte("b"), Cmp: txn.CmpNotEqual, Value: []byte("v")},
				{Key: []byte("c"), Cmp: txn.CmpLess, Int: i64(math.MinInt64)},
				{Key: []byte("d"), Cmp: txn.CmpLessEqual, Int: i64(0)},
				{Key: []byte("e"), Cmp: txn.CmpGreater, Value: []byte("\x00\xff")},
			},
			Then: []txn.Op{
				{Kind: txn.OpGet, Key: []byte("a")},
				{Kind: txn.OpPut, Key: []byte("b"), Value: []byte("x")},
				{Kind: txn.OpPut, Key: []byte("b2")},
				{Kind: txn.OpDelete, Key: []byte("c")},
				{Kind: txn.OpAdd, Key: []byte("d"), Int: math.MaxInt64}, {Kind: txn.OpAdd, Key: []byte("d"), Int: -1, Wrap: true},
				{Kind: txn.OpScan, Key: []byte("e"), End: []byte("f"), Limit: txn.ScanLimitMax},
			},
			Else: []txn.Op{{Kind: txn.OpGet, Key: []byte("z")}},
		},
		"else only": {Else: []txn.Op{{Kind: txn.OpDelete, Key: []byte("k")}}},
	}
}

// wire sends m through its binary encoding, as gRPC does.
func wire[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return out
}

func TestTxnRoundTrip(t *testing.T) {
	for name, want := range sampleTxns() {
		t.Run(name, func(t *testing.T) {
			got, err := TxnFromProto(wire(t, TxnToProto(want)))
			if err != nil {
				t.Fatalf("TxnFromProto: %v", err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			// A compare against the empty value keeps its operand: nil
			// would mean no operand.
			for i, c := range got.If {
				if c.Int == nil && c.Value == nil {
					t.Errorf("if[%d]: operand lost", i)
				}
			}
		})
	}
}

func TestTxnFromProtoErrors(t *testing.T) {
	key := []byte("k")
	get := &apipb.Op{Kind: apipb.OpKind_OP_KIND_GET, Key: key}
	tests := []struct {
		name string
		in   *apipb.Txn
		want string // in the message
	}{
		{"nil", nil, "api: txn: missing"},
		{"empty", &apipb.Txn{}, "empty"},
		{"nil compare", &apipb.Txn{If: []*apipb.Compare{nil}}, "if[0]: missing"},
		{"unknown cmp", &apipb.Txn{If: []*apipb.Compare{{Key: key, Cmp: 7, Operand: &apipb.Compare_Int{Int: 1}}}}, "if[0].cmp: unknown relation 7"},
		{"cmp wraps uint8", &apipb.Txn{If: []*apipb.Compare{{Key: key, Cmp: 257, Operand: &apipb.Compare_Int{Int: 1}}}}, "if[0].cmp: unknown relation 257"},
		{"no cmp", &apipb.Txn{If: []*apipb.Compare{{Key: key, Operand: &apipb.Compare_Int{Int: 1}}}}, "if[0].cmp"},
		{"no operand", &apipb.Txn{If: []*apipb.Compare{{Key: key, Cmp: apipb.Cmp_CMP_EQUAL}}}, "if[0]: neither int nor value"},
		{"compare without key", &apipb.Txn{If: []*apipb.Compare{{Cmp: apipb.Cmp_CMP_EQUAL, Operand: &apipb.Compare_Int{Int: 1}}}}, "if[0].key"},
		{"nil op", &apipb.Txn{Then: []*apipb.Op{get, nil}}, "then[1]: missing"},
		{"unknown kind", &apipb.Txn{Else: []*apipb.Op{{Kind: 9, Key: key}}}, "else[0].kind: unknown op kind 9"},
		{"no kind", &apipb.Txn{Then: []*apipb.Op{{Key: key}}}, "then[0].kind"},
		{"kind wraps uint8", &apipb.Txn{Then: []*apipb.Op{{Kind: 257, Key: key}}}, "then[0].kind: unknown op kind 257"},
		{"op without key", &apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_GET}}}, "then[0].key"},
		{"extra field", &apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_GET, Key: key, Int: 1}}}, "then[0]: field int does not apply"},
		{"limit too large", &apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_SCAN, Key: key, End: []byte("l"), Limit: math.MaxUint32}}},
			"then[0].limit"},
		{"scan without end", &apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_SCAN, Key: key, Limit: 1}}}, "then[0]: scan without end"},
		{"too many", &apipb.Txn{Then: func() []*apipb.Op {
			ops := make([]*apipb.Op, txn.OpsMax+1)
			for i := range ops {
				ops[i] = get
			}
			return ops
		}()}, "OpsMax"},
		{"too long a value", &apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_PUT, Key: key, Value: make([]byte, txn.ValueMax+1)}}},
			"then[0].value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TxnFromProto(tt.in)
			if err == nil {
				t.Fatalf("TxnFromProto = %+v, want an error", got)
			}
			if !errors.Is(err, txn.ErrInvalid) {
				t.Errorf("error %q does not match txn.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "invalid transaction") {
				t.Errorf("error %q repeats the class's text", err)
			}
		})
	}
}

// TestTxnToProtoKeepsInvalid: what makes a transaction invalid survives
// the conversion, so that the receiver rejects it rather than run something
// else.
func TestTxnToProtoKeepsInvalid(t *testing.T) {
	for name, tx := range map[string]*txn.Txn{
		"negative limit": {Then: []txn.Op{{Kind: txn.OpGet, Key: []byte("k"), Limit: -1}}},
		"huge limit":     {Then: []txn.Op{{Kind: txn.OpScan, Key: []byte("k"), End: []byte("l"), Limit: math.MaxInt}}},
		"no operand":     {If: []txn.Compare{{Key: []byte("k"), Cmp: txn.CmpEqual}}},
		"no kind":        {Then: []txn.Op{{Key: []byte("k")}}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tx.Validate(catchAll); err == nil {
				t.Fatal("the sample is valid")
			}
			if _, err := TxnFromProto(wire(t, TxnToProto(tx))); !errors.Is(err, txn.ErrInvalid) {
				t.Errorf("TxnFromProto(TxnToProto(t)) error = %v, want one matching txn.ErrInvalid", err)
			}
		})
	}
	if TxnToProto(nil) != nil {
		t.Error("TxnToProto(nil) != nil")
	}
}

func TestResultRoundTrip(t *testing.T) {
	want := []txn.OpResult{
		{Index: 0, Kind: txn.OpGet, Key: []byte("a"), Found: true, Value: []byte("v")},
		{Index: 1, Kind: txn.OpGet, Key: []byte("b")},
		{Index: 2, Kind: txn.OpPut, Key: []byte("c")},
		{Index: 3, Kind: txn.OpDelete, Key: []byte("d")},
		{Index: 4, Kind: txn.OpAdd, Key: []byte("e"), Int: -7},
		{Index: 5, Kind: txn.OpScan, Key: []byte("f"), KVs: []txn.KV{{Key: []byte("f1"), Value: []byte("1")}, {Key: []byte("f2")}}},
	}
	piece := wire(t, &apipb.PieceResult{Results: ResultsToProto(want)})
	got, err := ResultsFromProto(piece.Results)
	if err != nil {
		t.Fatalf("ResultsFromProto: %v", err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if rs, err := ResultsFromProto(nil); rs != nil || err != nil {
		t.Errorf("ResultsFromProto(nil) = %v, %v, want nil, nil", rs, err)
	}
}

func TestResultFromProtoErrors(t *testing.T) {
	for name, tt := range map[string]struct {
		in   *apipb.OpResult
		want string
	}{
		"nil":          {nil, "missing"},
		"unknown kind": {&apipb.OpResult{Kind: 6}, "unknown op kind 6"},
		"no kind":      {&apipb.OpResult{}, "unknown op kind 0"},
		"kind wraps":   {&apipb.OpResult{Kind: 257}, "unknown op kind 257"},
		"index":        {&apipb.OpResult{Kind: apipb.OpKind_OP_KIND_GET, Index: txn.OpsMax}, "index 64"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ResultFromProto(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ResultFromProto error = %v, want one containing %q", err, tt.want)
			}
			if _, err := ResultsFromProto([]*apipb.OpResult{{Kind: apipb.OpKind_OP_KIND_GET}, tt.in}); err == nil {
				t.Error("ResultsFromProto accepted it")
			}
		})
	}
}

// loadConfig decodes an embedded configuration file strictly.
func loadConfig(t *testing.T, text []byte) *partition.ClusterConfig {
	t.Helper()
	var cfg partition.ClusterConfig
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return &cfg
}

func TestConfigRoundTrip(t *testing.T) {
	aws, err := configs.AWS12Latency()
	if err != nil {
		t.Fatal(err)
	}
	serializable := loadConfig(t, configs.LocalYAML())
	serializable.Consistency = partition.ConsistencySerializable
	for _, tt := range []struct {
		name string
		cfg  *partition.ClusterConfig
		lat  *partition.Latency
	}{
		{"local", loadConfig(t, configs.LocalYAML()), nil},
		{"aws-12", loadConfig(t, configs.AWS12YAML()), aws},
		{"serializable", serializable, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Latency = "" // a path on the server's disk: not sent
			got, lat, err := ConfigFromProto(wire(t, ConfigToProto(tt.cfg, tt.lat)))
			if err != nil {
				t.Fatalf("ConfigFromProto: %v", err)
			}
			if diff := cmp.Diff(tt.cfg, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if (lat == nil) != (tt.lat == nil) {
				t.Fatalf("latency = %v, want %v", lat, tt.lat)
			}
			if lat == nil {
				return
			}
			if diff := cmp.Diff(tt.lat.Regions(), lat.Regions()); diff != "" {
				t.Errorf("regions (-want +got):\n%s", diff)
			}
			for _, from := range tt.lat.Regions() {
				for _, to := range tt.lat.Regions() {
					if g, w := lat.RTTMs(from, to), tt.lat.RTTMs(from, to); g != w {
						t.Errorf("RTTMs(%s, %s) = %v, want %v", from, to, g, w)
					}
				}
			}
		})
	}
}

// TestConfigToProtoOverlay: an empty overlay is sent in full, in the order
// of the groups, which is what it means.
func TestConfigToProtoOverlay(t *testing.T) {
	cfg := loadConfig(t, configs.LocalYAML())
	want := cfg.Overlay
	cfg.Overlay = nil
	cfg.Groups[0], cfg.Groups[1] = cfg.Groups[1], cfg.Groups[0]
	want[0], want[1] = want[1], want[0]
	if got := ConfigToProto(cfg, nil).Overlay; !cmp.Equal(got, want) {
		t.Errorf("overlay = %q, want %q", got, want)
	}
}

func TestConfigFromProtoErrors(t *testing.T) {
	aws, err := configs.AWS12Latency()
	if err != nil {
		t.Fatal(err)
	}
	good := func() *apipb.TopologyResponse { return ConfigToProto(loadConfig(t, configs.AWS12YAML()), aws) }
	for _, tt := range []struct {
		name   string
		mutate func(p *apipb.TopologyResponse)
		want   string
	}{
		{"protocol", func(p *apipb.TopologyResponse) { p.Protocol = "paxos" }, "protocol"},
		{"no groups", func(p *apipb.TopologyResponse) { p.Groups = nil }, "groups"},
		{"overlay", func(p *apipb.TopologyResponse) { p.Overlay = p.Overlay[1:] }, "overlay"},
		{"tree twice", func(p *apipb.TopologyResponse) { p.Tree = append(p.Tree, p.Tree[0]) }, "given twice"},
		{"partition group", func(p *apipb.TopologyResponse) { p.Partitions[0].Group = "nowhere" }, "partitions[0].group"},
		{"rows", func(p *apipb.TopologyResponse) { p.Latency = p.Latency[1:] }, "latency rows"},
		{"row order", func(p *apipb.TopologyResponse) { p.Latency[0], p.Latency[1] = p.Latency[1], p.Latency[0] }, "latency[0]"},
		{"not square", func(p *apipb.TopologyResponse) { p.Latency[2].RttMs = p.Latency[2].RttMs[1:] }, "square"},
		{"negative", func(p *apipb.TopologyResponse) { p.Latency[2].RttMs[3] = -1 }, "not a latency"},
		{"region missing", func(p *apipb.TopologyResponse) {
			p.Regions = p.Regions[:len(p.Regions)-1]
			p.Latency = p.Latency[:len(p.Latency)-1]
			for _, row := range p.Latency {
				row.RttMs = row.RttMs[:len(row.RttMs)-1]
			}
		}, "not in the latency matrix"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := good()
			tt.mutate(p)
			_, _, err := ConfigFromProto(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "api: topology: ") {
				t.Errorf("ConfigFromProto error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, _, err := ConfigFromProto(nil); err == nil {
		t.Error("ConfigFromProto(nil) accepted")
	}
	if _, _, err := ConfigFromProto(good()); err != nil {
		t.Errorf("ConfigFromProto(good) = %v", err)
	}
}

func TestPieceResultRoundTrip(t *testing.T) {
	for name, want := range map[string]txn.PieceResult{
		"succeeded": {Succeeded: true, Results: []txn.OpResult{
			{Index: 0, Kind: txn.OpAdd, Key: []byte("a"), Int: 3},
			{Index: 2, Kind: txn.OpGet, Key: []byte("b"), Found: true, Value: []byte{}},
		}},
		"else":      {Results: []txn.OpResult{{Index: 0, Kind: txn.OpDelete, Key: []byte("c")}}},
		"aborted":   {Aborted: true, Reason: "txn: then[0]: not an integer"},
		"truncated": {Succeeded: true, Truncated: true},
	} {
		t.Run(name, func(t *testing.T) {
			p := wire(t, PieceResultToProto(multicast.MsgID{Client: 1, Seq: 2}, "eu-west-1", &want))
			deprecated := p.GetId() //nolint:staticcheck // still set for older clients
			if p.ClientId != 1 || p.Seq != 2 || deprecated != "c1.2" || p.Group != "eu-west-1" {
				t.Errorf("id (%d, %d), deprecated id %q, group %q", p.ClientId, p.Seq, deprecated, p.Group)
			}
			got, err := PieceResultFromProto(p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
	// An abort without a reason still reads as an abort.
	if p := PieceResultToProto(multicast.MsgID{Client: 1, Seq: 2}, "g", &txn.PieceResult{Aborted: true}); p.Aborted == "" {
		t.Error("an abort without a reason was lost")
	}
	if _, err := PieceResultFromProto(nil); err == nil {
		t.Error("PieceResultFromProto(nil) accepted")
	}
	if _, err := PieceResultFromProto(&apipb.PieceResult{Results: []*apipb.OpResult{{Kind: 0}}}); err == nil {
		t.Error("a result of no kind accepted")
	}
}
