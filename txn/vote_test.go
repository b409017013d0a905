package txn

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

var testVotes = []Vote{
	{Group: 0, Holds: true},
	{Group: 2},
	{Group: 63, If: Abort{Index: 3, Reason: `txn: if[3]: "w/1" > 0: stored value "x": not an integer`}},
	{Group: 1, Holds: true, Then: Abort{Index: 0, Reason: "then reason"}, Else: Abort{Index: 63, Reason: "é"}},
	{Group: 5, Else: Abort{Index: 1, Reason: strings.Repeat("r", ReasonMax)}},
	{Group: 4, Used: true, Digest: 0x0123456789abcdef},
	{Group: 63, Used: true, Other: true, Digest: 1<<64 - 1},
}

func TestVoteRoundTrip(t *testing.T) {
	for i, v := range testVotes {
		id := multicast.MsgID{Client: uint64(i) << 40, Seq: 1<<64 - 1}
		b := AppendVote(nil, id, v)
		gotID, got, err := DecodeVote(b)
		if err != nil {
			t.Fatalf("vote %d: %v", i, err)
		}
		if gotID != id || got != v {
			t.Errorf("vote %d: decoded %s %+v, want %s %+v", i, gotID, got, id, v)
		}
		if !bytes.Equal(AppendVote(nil, gotID, got), b) {
			t.Errorf("vote %d: encoding not stable", i)
		}
	}
	// A reason over ReasonMax is cut, at a rune boundary.
	long := Vote{Group: 1, Then: Abort{Index: 2, Reason: strings.Repeat("é", ReasonMax)}}
	_, got, err := DecodeVote(AppendVote(nil, multicast.MsgID{}, long))
	if err != nil || len(got.Then.Reason) != ReasonMax || got.Then.Reason != strings.Repeat("é", ReasonMax/2) {
		t.Errorf("long reason: %d bytes, %v", len(got.Then.Reason), err)
	}
}

func TestDecodeVoteRejects(t *testing.T) {
	valid := AppendVote(nil, multicast.MsgID{Client: 3, Seq: 17}, testVotes[3])
	for n := range len(valid) {
		if _, _, err := DecodeVote(valid[:n]); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("truncated to %d bytes: %v", n, err)
		}
	}
	// version, id (2 bytes), group, flags: the flags are at index 4.
	set := func(i int, c byte) []byte { b := bytes.Clone(valid); b[i] = c; return b }
	enc := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	abort := func(index uint64, reason string) []byte {
		return wire.AppendBytes(wire.AppendUvarint(nil, index), []byte(reason))
	}
	head := []byte{voteVersion, 3, 17, 1}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"version", set(0, 2), "vote version 2"},
		{"unknown flag", set(4, voteFlagsAll+1), "vote flags"},
		{"trailing byte", append(bytes.Clone(valid), 0), "trailing"},
		{"holds with an aborted compare", enc(head, []byte{voteHolds | voteIfAbort}, abort(0, "r")), "holds with an aborted compare"},
		{"index not below OpsMax", enc(head, []byte{voteThenAbort}, abort(OpsMax, "r")), "abort index 64"},
		{"empty reason", enc(head, []byte{voteElseAbort}, abort(0, "")), "empty abort reason"},
		{"long reason", enc(head, []byte{voteElseAbort}, abort(0, strings.Repeat("r", ReasonMax+1))), "more than ReasonMax"},
		{"group out of range", enc([]byte{voteVersion, 3, 17, partition.GroupsMax, 0}), "group 64 out of range"},
		{"too long", make([]byte, VoteBytesMax+1), "more than VoteBytesMax"},
		{"used and holds", enc(head, []byte{voteUsed | voteHolds}, make([]byte, 8)), "used vote with flags"},
		{"used with an abort", enc(head, []byte{voteUsed | voteThenAbort}, make([]byte, 8), abort(0, "r")), "used vote with flags"},
		{"other without used", enc(head, []byte{voteOther}), "other without used"},
		{"used, short digest", enc(head, []byte{voteUsed}, make([]byte, 7)), "unexpected end"},
		{"used, trailing byte", enc(head, []byte{voteUsed}, make([]byte, 9)), "trailing"},
	} {
		_, _, err := DecodeVote(tc.b)
		if !errors.Is(err, wire.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCorrupt with %q", tc.name, err, tc.want)
		}
	}
}

// FuzzDecodeVote: DecodeVote never panics, and what it accepts encodes to
// a vote it decodes alike.
func FuzzDecodeVote(f *testing.F) {
	for i, v := range testVotes {
		f.Add(AppendVote(nil, multicast.MsgID{Client: uint64(i), Seq: 9}, v))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, v, err := DecodeVote(b)
		if err != nil {
			if !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("error %v does not wrap wire.ErrCorrupt", err)
			}
			return
		}
		enc := AppendVote(nil, id, v)
		id2, v2, err := DecodeVote(enc)
		if err != nil || id2 != id || v2 != v {
			t.Fatalf("%s %+v encodes to %x, which decodes to %s %+v, %v", id, v, enc, id2, v2, err)
		}
	})
}

var testPieceResults = []PieceResult{
	{},
	{Succeeded: true},
	{Aborted: true, Reason: `txn: then[0]: add to "w/0001/x": stored value "abc": not an integer`},
	{Succeeded: true, Truncated: true},
	{Succeeded: true, Results: []OpResult{
		{Index: 0, Kind: OpGet, Key: []byte("k"), Found: true, Value: []byte("v")},
		{Index: 1, Kind: OpGet, Key: []byte("missing")},
		{Index: 2, Kind: OpGet, Key: []byte("empty"), Found: true, Value: []byte{}},
		{Index: 3, Kind: OpPut, Key: []byte("p")},
		{Index: 4, Kind: OpDelete, Key: []byte("d")},
		{Index: 5, Kind: OpAdd, Key: []byte("n"), Int: -1 << 63},
		{Index: 6, Kind: OpScan, Key: []byte("s"), KVs: []KV{{Key: []byte("s1"), Value: []byte("1")}, {Key: []byte("s2"), Value: []byte{}}}},
		{Index: 900, Kind: OpScan, Key: []byte("e"), KVs: []KV{}},
	}},
}

// describePieceResult formats r with every field, for comparisons.
func describePieceResult(r PieceResult) string {
	return fmt.Sprintf("%v %v %q %v %s", r.Succeeded, r.Aborted, r.Reason, r.Truncated, describeResults(r.Results))
}

func TestPieceResultRoundTrip(t *testing.T) {
	for i, r := range testPieceResults {
		b := AppendPieceResult(nil, &r)
		got, err := DecodePieceResult(b)
		if err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
		if describePieceResult(got) != describePieceResult(r) {
			t.Errorf("result %d: decoded %s, want %s", i, describePieceResult(got), describePieceResult(r))
		}
		if !bytes.Equal(AppendPieceResult(nil, &got), b) {
			t.Errorf("result %d: encoding not stable", i)
		}
	}
}

func TestDecodePieceResultRejects(t *testing.T) {
	valid := AppendPieceResult(nil, &testPieceResults[4])
	for n := range len(valid) {
		if _, err := DecodePieceResult(valid[:n]); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("truncated to %d bytes: %v", n, err)
		}
	}
	enc := func(r PieceResult) []byte { return AppendPieceResult(nil, &r) }
	ops := func(o ...OpResult) []OpResult { return o }
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"version", append([]byte{2}, valid[1:]...), "piece result version 2"},
		{"unknown flag", []byte{resultVersion, resultFlagsAll + 1, 0}, "flags"},
		{"trailing byte", append(bytes.Clone(valid), 0), "trailing"},
		{"unknown op", []byte{resultVersion, 0, 1, 0, 9, 0}, "op kind 9"},
		{"found byte", []byte{resultVersion, 0, 1, 0, byte(OpGet), 0, 2}, "found byte 2"},
		{"aborted and succeeded", enc(PieceResult{Aborted: true, Succeeded: true, Reason: "r"}), "aborted piece result with an outcome"},
		{"aborted without reason", []byte{resultVersion, resultAborted, 0, 0}, "abort reason of 0 bytes"},
		{"aborted with results", enc(PieceResult{Aborted: true, Reason: "r", Results: ops(OpResult{Kind: OpPut})}), "with an outcome or results"},
		{"truncated with results", enc(PieceResult{Truncated: true, Results: ops(OpResult{Kind: OpPut})}), "truncated piece result with results"},
		{"indices not ascending", enc(PieceResult{Results: ops(OpResult{Index: 1, Kind: OpPut}, OpResult{Index: 1, Kind: OpPut})}), "want ascending"},
		{"count beyond input", []byte{resultVersion, 0, 100, 0, byte(OpPut), 0}, "count 100 exceeds input"},
	} {
		_, err := DecodePieceResult(tc.b)
		if !errors.Is(err, wire.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCorrupt with %q", tc.name, err, tc.want)
		}
	}
}

// FuzzDecodePieceResult: DecodePieceResult never panics, and what it
// accepts encodes to a result it decodes alike.
func FuzzDecodePieceResult(f *testing.F) {
	for _, r := range testPieceResults {
		f.Add(AppendPieceResult(nil, &r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodePieceResult(b)
		if err != nil {
			if !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("error %v does not wrap wire.ErrCorrupt", err)
			}
			return
		}
		enc := AppendPieceResult(nil, &r)
		r2, err := DecodePieceResult(enc)
		if err != nil || describePieceResult(r2) != describePieceResult(r) || !bytes.Equal(AppendPieceResult(nil, &r2), enc) {
			t.Fatalf("%s encodes to %x, which decodes to %s, %v", describePieceResult(r), enc, describePieceResult(r2), err)
		}
	})
}

func TestMergeResults(t *testing.T) {
	put := func(i int, k string) OpResult { return OpResult{Index: i, Kind: OpPut, Key: []byte(k)} }
	abort := PieceResult{Aborted: true, Reason: "txn: then[2]: the reason"}
	for _, tc := range []struct {
		name   string
		pieces []PieceResult
		want   string // "succeeded results" or "error: ..."
	}{
		{"sorted by index, replicated write once", []PieceResult{
			{Succeeded: true, Results: []OpResult{put(0, "a"), put(3, "item/1")}},
			{Succeeded: true, Results: []OpResult{put(1, "b"), put(3, "item/1")}},
			{Succeeded: true, Results: []OpResult{put(2, "c"), put(3, "item/1")}},
		}, "true 0:put a; 1:put b; 2:put c; 3:put item/1"},
		{"else", []PieceResult{{}, {Results: []OpResult{put(0, "e")}}}, "false 0:put e"},
		{"abort anywhere", []PieceResult{{Succeeded: true}, abort}, "error: txn: then[2]: the reason"},
		{"disagreement", []PieceResult{{Succeeded: true}, {}}, "error: txn: result of c1.2: destinations disagree on the outcome"},
		{"two ops at one index", []PieceResult{{Results: []OpResult{put(0, "a")}}, {Results: []OpResult{put(0, "b")}}}, `error: txn: result of c1.2: txn: two destinations report index 0 as put "a" and put "b"`},
		{"none", nil, "error: txn: result of c1.2: no piece results"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := MergeResults("c1.2", tc.pieces)
			got := fmt.Sprintf("%v %s", res.Succeeded, describeResults(res.Results))
			if err != nil {
				got = "error: " + err.Error()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if tc.name == "abort anywhere" && !errors.Is(err, ErrAborted) {
				t.Errorf("abort: %v does not match ErrAborted", err)
			}
			if err == nil && res.ID != "c1.2" {
				t.Errorf("ID %q", res.ID)
			}
		})
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	tx := mustParse(t, designTransfer)
	p, err := DecodePayload(AppendTxnPayload(nil, tx))
	if err != nil || p.Call != nil || !equalTxn(p.Txn, tx) {
		t.Errorf("txn payload: %+v, %v", p, err)
	}
	if p, err := DecodePayload(AppendBackupPayload(nil)); err != nil || !p.Backup || p.Txn != nil || p.Call != nil {
		t.Errorf("backup marker: %+v, %v", p, err)
	}
	for _, c := range []Call{{Name: "new-order", Args: []byte{0, 1, 2}}, {Name: "payment.v2_x"}} {
		b := AppendCallPayload(nil, c)
		p, err := DecodePayload(b)
		if err != nil || p.Txn != nil || p.Call.Name != c.Name || !bytes.Equal(p.Call.Args, c.Args) {
			t.Errorf("call %q: %+v, %v", c.Name, p, err)
		}
		b[len(b)-1] ^= 0xff // the decoded call does not alias b
		if len(c.Args) > 0 && !bytes.Equal(p.Call.Args, c.Args) {
			t.Error("decoded args alias the payload")
		}
	}
	for _, tc := range []struct {
		name  string
		b     []byte
		class error
	}{
		{"empty", nil, wire.ErrCorrupt},
		{"unknown kind", []byte{4}, wire.ErrCorrupt},
		{"backup marker with a body", []byte{payloadBackup, 0}, wire.ErrCorrupt},
		{"corrupt txn", []byte{payloadTxn, 9}, wire.ErrCorrupt},
		{"call trailing", append(AppendCallPayload(nil, Call{Name: "p"}), 0), wire.ErrCorrupt},
		{"call truncated", AppendCallPayload(nil, Call{Name: "p", Args: []byte("abc")})[:5], wire.ErrCorrupt},
		{"call name", AppendCallPayload(nil, Call{Name: "P"}), ErrInvalid},
		{"call args", AppendCallPayload(nil, Call{Name: "p", Args: make([]byte, ProcArgsMax+1)}), ErrInvalid},
		{"too long", make([]byte, PayloadMax+1), wire.ErrCorrupt},
	} {
		if _, err := DecodePayload(tc.b); !errors.Is(err, tc.class) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.class)
		}
	}
}
