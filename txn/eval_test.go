package txn

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// localPiece returns the piece of a transaction whose keys all belong to
// one group (or are replicated).
func localPiece(t *testing.T, tx *Txn) *Piece {
	t.Helper()
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	dst, err := tx.Destinations(pm, top, 0)
	if err != nil {
		t.Fatal(err)
	}
	pieces, err := tx.Pieces(pm, top, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != 1 {
		t.Fatalf("%d pieces, want 1", len(pieces))
	}
	return &pieces[0]
}

// describeResults formats results compactly: "0:get k=v", "1:get k missing",
// "2:put k", "3:add k=5", "4:scan [a=1 b=2]".
func describeResults(rs []OpResult) string {
	var out []string
	for _, r := range rs {
		s := fmt.Sprintf("%d:%s %s", r.Index, r.Kind, r.Key)
		switch r.Kind {
		case OpGet:
			if r.Found {
				s += "=" + string(r.Value)
			} else {
				s += " missing"
			}
		case OpAdd:
			s += fmt.Sprintf("=%d", r.Int)
		case OpScan:
			var kvs []string
			for _, kv := range r.KVs {
				kvs = append(kvs, string(kv.Key)+"="+string(kv.Value))
			}
			s = fmt.Sprintf("%d:scan [%s]", r.Index, strings.Join(kvs, " "))
		case OpPut, OpDelete:
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// evalCase is a transaction evaluated on a store: the store before and after,
// the outcome, the results and the Writer's calls.
type evalCase struct {
	name      string
	store     map[string]string
	json      string
	succeeded bool
	results   string
	after     string // the store afterwards
	writes    string // the Writer's calls
}

// evalCases are TestEval's transactions.
var evalCases = []evalCase{
	{
		name:      "design transfer, enough funds",
		store:     map[string]string{"w/0001/acct": "10", "w/0002/acct": "1"},
		json:      designTransfer,
		succeeded: true,
		results:   "0:add w/0001/acct=5; 1:add w/0002/acct=6",
		after:     "w/0001/acct=5 w/0002/acct=6",
		writes:    "put w/0001/acct=5, put w/0002/acct=6",
	},
	{
		name:      "design transfer, not enough funds: else, nothing moves",
		store:     map[string]string{"w/0001/acct": "3", "w/0002/acct": "1"},
		json:      designTransfer,
		succeeded: false,
		after:     "w/0001/acct=3 w/0002/acct=1",
	},
	{
		name:      "design transfer from a missing account: 0 < 5",
		store:     map[string]string{},
		json:      designTransfer,
		succeeded: false,
	},
	{
		name:      "add on a missing key starts from 0",
		json:      `{"then":[{"op":"add","key":"w/0001/n","int":-4},{"op":"add","key":"w/0001/n","int":7},{"op":"get","key":"w/0001/n"}]}`,
		succeeded: true,
		results:   "0:add w/0001/n=-4; 1:add w/0001/n=3; 2:get w/0001/n=3",
		after:     "w/0001/n=3",
		writes:    "put w/0001/n=3",
	},
	{
		name:      "add reads signs and leading zeros, writes canonical",
		store:     map[string]string{"w/0001/n": "+007"},
		json:      `{"then":[{"op":"add","key":"w/0001/n","int":0}]}`,
		succeeded: true,
		results:   "0:add w/0001/n=7",
		after:     "w/0001/n=7",
		writes:    "put w/0001/n=7",
	},
	{
		name:      "an add that wraps wraps around int64",
		store:     map[string]string{"w/0001/big": "9223372036854775807", "w/0001/low": "-9223372036854775808"},
		json:      `{"then":[{"op":"add","key":"w/0001/big","int":2,"wrap":true},{"op":"add","key":"w/0001/low","int":-1,"wrap":true}]}`,
		succeeded: true,
		results:   "0:add w/0001/big=-9223372036854775807; 1:add w/0001/low=9223372036854775807",
		after:     "w/0001/big=-9223372036854775807 w/0001/low=9223372036854775807",
		writes:    "put w/0001/big=-9223372036854775807, put w/0001/low=9223372036854775807",
	},
	{
		name:      "an add that wraps counts a value that is not an integer as 0",
		store:     map[string]string{"w/0001/s": "ten", "w/0001/e": ""},
		json:      `{"then":[{"op":"add","key":"w/0001/s","int":3,"wrap":true},{"op":"add","key":"w/0001/e","int":-2,"wrap":true},{"op":"add","key":"w/0001/m","int":5,"wrap":true}]}`,
		succeeded: true,
		results:   "0:add w/0001/s=3; 1:add w/0001/e=-2; 2:add w/0001/m=5",
		after:     "w/0001/e=-2 w/0001/m=5 w/0001/s=3",
		writes:    "put w/0001/e=-2, put w/0001/m=5, put w/0001/s=3",
	},
	{
		name:      "get, put, delete, read your writes",
		store:     map[string]string{"w/0001/a": "old", "w/0001/b": "gone"},
		json:      `{"then":[{"op":"get","key":"w/0001/a"},{"op":"put","key":"w/0001/a","value":"new"},{"op":"get","key":"w/0001/a"},{"op":"delete","key":"w/0001/b"},{"op":"get","key":"w/0001/b"},{"op":"get","key":"w/0001/c"},{"op":"delete","key":"w/0001/c"}]}`,
		succeeded: true,
		results:   "0:get w/0001/a=old; 1:put w/0001/a; 2:get w/0001/a=new; 3:delete w/0001/b; 4:get w/0001/b missing; 5:get w/0001/c missing; 6:delete w/0001/c",
		after:     "w/0001/a=new",
		writes:    "put w/0001/a=new, delete w/0001/b, delete w/0001/c",
	},
	{
		name:      "put then delete writes one delete",
		json:      `{"then":[{"op":"put","key":"w/0001/a","value":"x"},{"op":"delete","key":"w/0001/a"}]}`,
		succeeded: true,
		results:   "0:put w/0001/a; 1:delete w/0001/a",
		writes:    "delete w/0001/a",
	},
	{
		name:      "scan merges pending writes and honours the limit",
		store:     map[string]string{"w/0001/a": "1", "w/0001/b": "2", "w/0001/c": "3", "w/0001/d": "4", "w/0001/e": "5", "w/0002/a": "other"},
		json:      `{"then":[{"op":"scan","key":"w/0001/","end":"w/0002/","limit":10},{"op":"delete","key":"w/0001/a"},{"op":"delete","key":"w/0001/b"},{"op":"put","key":"w/0001/bb","value":"new"},{"op":"put","key":"w/0001/c","value":"33"},{"op":"scan","key":"w/0001/","end":"w/0002/","limit":3},{"op":"scan","key":"w/0001/d","end":"w/0001/z","limit":5}]}`,
		succeeded: true,
		results:   "0:scan [w/0001/a=1 w/0001/b=2 w/0001/c=3 w/0001/d=4 w/0001/e=5]; 1:delete w/0001/a; 2:delete w/0001/b; 3:put w/0001/bb; 4:put w/0001/c; 5:scan [w/0001/bb=new w/0001/c=33 w/0001/d=4]; 6:scan [w/0001/d=4 w/0001/e=5]",
		after:     "w/0001/bb=new w/0001/c=33 w/0001/d=4 w/0001/e=5 w/0002/a=other",
		writes:    "delete w/0001/a, delete w/0001/b, put w/0001/bb=new, put w/0001/c=33",
	},
	{
		name:      "scan of an empty range",
		store:     map[string]string{"w/0002/a": "x"},
		json:      `{"then":[{"op":"scan","key":"w/0001/","end":"w/0002/","limit":1}]}`,
		succeeded: true,
		results:   "0:scan []",
		after:     "w/0002/a=x",
	},
	{
		name:      "else branch runs its own ops",
		store:     map[string]string{"w/0001/a": "x"},
		json:      `{"if":[{"key":"w/0001/a","cmp":"=","value":"y"}],"then":[{"op":"put","key":"w/0001/t","value":"1"}],"else":[{"op":"get","key":"w/0001/a"},{"op":"put","key":"w/0001/e","value":"1"}]}`,
		succeeded: false,
		results:   "0:get w/0001/a=x; 1:put w/0001/e",
		after:     "w/0001/a=x w/0001/e=1",
		writes:    "put w/0001/e=1",
	},
	{
		name:      "replicated keys are local",
		store:     map[string]string{"item/1": "pen"},
		json:      `{"if":[{"key":"item/1","cmp":"=","value":"pen"}],"then":[{"op":"get","key":"item/1"},{"op":"add","key":"w/0001/n","int":1}]}`,
		succeeded: true,
		results:   "0:get item/1=pen; 1:add w/0001/n=1",
		after:     "item/1=pen w/0001/n=1",
		writes:    "put w/0001/n=1",
	},
}

// TestEval evaluates each of evalCases on its store and compares the
// outcome, the results, the store afterwards and the writes.
func TestEval(t *testing.T) {
	for _, tt := range evalCases {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore(tt.store)
			before := s.String()
			ok, results, err := Eval(s, s, localPiece(t, mustParse(t, tt.json)))
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.succeeded {
				t.Errorf("succeeded %v, want %v", ok, tt.succeeded)
			}
			if got := describeResults(results); got != tt.results {
				t.Errorf("results\n got %s\nwant %s", got, tt.results)
			}
			after := tt.after
			if tt.writes == "" && after == "" {
				after = before
			}
			if got := s.String(); got != after {
				t.Errorf("store afterwards\n got %s\nwant %s", got, after)
			}
			if got := strings.Join(s.Writes(), ", "); got != tt.writes {
				t.Errorf("writes\n got %s\nwant %s", got, tt.writes)
			}
		})
	}
}

// TestEvalCompares evaluates every relation against a stored integer, a
// stored text, and a missing key (0 for int operands, the empty value for
// value operands).
func TestEvalCompares(t *testing.T) {
	store := map[string]string{"w/0001/n": "10", "w/0001/s": "m", "w/0001/neg": "-2"}
	tests := []struct {
		key     string
		operand string // an int, or "value:" and a value
		holds   map[string]bool
	}{
		// relation -> holds
		{"w/0001/n", "10", map[string]bool{"=": true, "!=": false, "<": false, "<=": true, ">": false, ">=": true}},
		{"w/0001/n", "9", map[string]bool{"=": false, "!=": true, "<": false, "<=": false, ">": true, ">=": true}},
		{"w/0001/n", "11", map[string]bool{"=": false, "!=": true, "<": true, "<=": true, ">": false, ">=": false}},
		// Integers compare as numbers, not text: "10" > 9 but "10" < "9".
		{"w/0001/n", "value:9", map[string]bool{"=": false, "!=": true, "<": true, "<=": true, ">": false, ">=": false}},
		{"w/0001/neg", "-3", map[string]bool{"=": false, "!=": true, "<": false, "<=": false, ">": true, ">=": true}},
		{"w/0001/s", "value:m", map[string]bool{"=": true, "!=": false, "<": false, "<=": true, ">": false, ">=": true}},
		{"w/0001/s", "value:a", map[string]bool{"=": false, "!=": true, "<": false, "<=": false, ">": true, ">=": true}},
		{"w/0001/s", "value:mm", map[string]bool{"=": false, "!=": true, "<": true, "<=": true, ">": false, ">=": false}},
		{"w/0001/missing", "0", map[string]bool{"=": true, "!=": false, "<": false, "<=": true, ">": false, ">=": true}},
		{"w/0001/missing", "-1", map[string]bool{"=": false, "!=": true, "<": false, "<=": false, ">": true, ">=": true}},
		{"w/0001/missing", "value:", map[string]bool{"=": true, "!=": false, "<": false, "<=": true, ">": false, ">=": true}},
		{"w/0001/missing", "value:a", map[string]bool{"=": false, "!=": true, "<": true, "<=": true, ">": false, ">=": false}},
	}
	for _, tt := range tests {
		for _, rel := range []string{"=", "!=", "<", "<=", ">", ">="} {
			operand := `"int":` + tt.operand
			if v, ok := strings.CutPrefix(tt.operand, "value:"); ok {
				operand = `"value":"` + v + `"`
			}
			js := fmt.Sprintf(`{"if":[{"key":%q,"cmp":%q,%s}],"then":[{"op":"get","key":"w/0001/n"}]}`, tt.key, rel, operand)
			t.Run(fmt.Sprintf("%s %s %s", tt.key, rel, tt.operand), func(t *testing.T) {
				s := NewMemStore(store)
				ok, _, err := Eval(s, s, localPiece(t, mustParse(t, js)))
				if err != nil {
					t.Fatal(err)
				}
				if want := tt.holds[rel]; ok != want {
					t.Errorf("holds %v, want %v", ok, want)
				}
			})
		}
	}
}

// TestEvalAborts: a non-integer under add or an Int compare, and an add that
// overflows, abort the transaction: an error matching ErrAborted, no write.
func TestEvalAborts(t *testing.T) {
	store := map[string]string{"w/0001/s": "ten", "w/0001/e": "", "w/0001/sp": " 1", "w/0001/big": "9223372036854775807", "w/0001/huge": "9223372036854775808"}
	tests := []struct {
		name, json, want string
		cause            error
	}{
		{"add on text", `{"then":[{"op":"put","key":"w/0001/x","value":"1"},{"op":"add","key":"w/0001/s","int":1}]}`,
			`txn: then[1]: add to "w/0001/s": stored value "ten": not an integer`, ErrNotInteger},
		{"add on an empty value", `{"then":[{"op":"add","key":"w/0001/e","int":1}]}`, `stored value "": not an integer`, ErrNotInteger},
		{"add on a spaced number", `{"then":[{"op":"add","key":"w/0001/sp","int":1}]}`, `stored value " 1": not an integer`, ErrNotInteger},
		{"add on a value beyond int64", `{"then":[{"op":"add","key":"w/0001/huge","int":1}]}`, `not an integer`, ErrNotInteger},
		{"add after a put of text", `{"then":[{"op":"put","key":"w/0001/n","value":"x"},{"op":"add","key":"w/0001/n","int":1}]}`, `stored value "x"`, ErrNotInteger},
		{"add overflows", `{"then":[{"op":"add","key":"w/0001/big","int":1}]}`,
			`txn: then[0]: add 1 to "w/0001/big": 9223372036854775807: integer overflow`, ErrOverflow},
		{"add underflows", `{"then":[{"op":"add","key":"w/0001/m","int":-9223372036854775808},{"op":"add","key":"w/0001/m","int":-1}]}`,
			`integer overflow`, ErrOverflow},
		{"int compare on text", `{"if":[{"key":"w/0001/x","cmp":"=","value":""},{"key":"w/0001/s","cmp":">","int":0}],"then":[{"op":"put","key":"w/0001/x","value":"1"}]}`,
			`txn: if[1]: "w/0001/s" > 0: stored value "ten": not an integer`, ErrNotInteger},
		{"abort in else", `{"if":[{"key":"w/0001/x","cmp":"=","int":1}],"else":[{"op":"put","key":"w/0001/y","value":"1"},{"op":"add","key":"w/0001/s","int":1}]}`,
			`txn: else[1]: add to "w/0001/s"`, ErrNotInteger},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore(store)
			before := s.String()
			_, results, err := Eval(s, s, localPiece(t, mustParse(t, tt.json)))
			if err == nil {
				t.Fatalf("no error; results %s", describeResults(results))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			if !errors.Is(err, ErrAborted) || !errors.Is(err, tt.cause) {
				t.Errorf("error %q: want it to match ErrAborted and %v", err, tt.cause)
			}
			if len(s.Writes()) != 0 || s.String() != before {
				t.Errorf("aborted piece wrote %v", s.Writes())
			}
		})
	}
}

// TestEvalAcrossGroups runs the plan of a transfer between groups 0 and 1
// with a compare owned by group 2: each owner votes, each destination
// evaluates its piece with the votes of the others.
func TestEvalAcrossGroups(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	tx := mustParse(t, mixedTxn)
	dst, err := tx.Destinations(pm, top, 0)
	if err != nil {
		t.Fatal(err)
	}
	pieces, err := tx.Pieces(pm, top, dst)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		stores  [3]map[string]string // each group's own keys, plus the item copies
		holds   bool
		results [3]string
		after   [3]string
	}{
		{
			name: "every compare holds",
			stores: [3]map[string]string{
				{"w/0001/a": "10", "item/1": "x", "item/2": "pen"},
				{"w/0003/a": "1", "item/1": "x", "item/2": "pen"},
				{"w/0004/b": "1", "item/1": "x", "item/2": "pen"},
			},
			holds:   true,
			results: [3]string{"0:get item/2=pen; 1:add w/0001/a=5; 3:put item/3", "2:add w/0003/a=6; 3:put item/3", "3:put item/3"},
			after: [3]string{
				"item/1=x item/2=pen item/3=y w/0001/a=5",
				"item/1=x item/2=pen item/3=y w/0003/a=6",
				"item/1=x item/2=pen item/3=y w/0004/b=1",
			},
		},
		{
			name: "group 2's compare fails",
			stores: [3]map[string]string{
				{"w/0001/a": "10", "item/1": "x"},
				{"w/0003/a": "1", "item/1": "x"},
				{"w/0004/b": "2", "item/1": "x"},
			},
			holds:   false,
			results: [3]string{"", "0:get w/0003/a=1", ""},
			after: [3]string{
				"item/1=x w/0001/a=10",
				"item/1=x w/0003/a=1",
				"item/1=x w/0004/b=2",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stores [3]*MemStore
			votes := map[partition.GroupID]Vote{}
			for g := range stores {
				stores[g] = NewMemStore(tt.stores[g])
				v, err := EvalVote(stores[g], &pieces[g])
				if err != nil {
					t.Fatal(err)
				}
				if v.Group != partition.GroupID(g) || v.If.Aborted() || v.Then.Aborted() || v.Else.Aborted() {
					t.Fatalf("vote of group %d: %+v", g, v)
				}
				votes[partition.GroupID(g)] = v
			}
			for g := range stores {
				p := &pieces[g]
				var vs []Vote
				for _, voter := range p.Voters.Slice() {
					vs = append(vs, votes[voter])
				}
				ok, results, err := Eval(stores[g], stores[g], p, vs...)
				if err != nil {
					t.Fatalf("group %d: %v", g, err)
				}
				if ok != tt.holds {
					t.Errorf("group %d: succeeded %v, want %v", g, ok, tt.holds)
				}
				if got := describeResults(results); got != tt.results[g] {
					t.Errorf("group %d: results\n got %s\nwant %s", g, got, tt.results[g])
				}
				if got := stores[g].String(); got != tt.after[g] {
					t.Errorf("group %d: store\n got %s\nwant %s", g, got, tt.after[g])
				}
			}
		})
	}
}

func TestEvalVotes(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	tx := mustParse(t, mixedTxn)
	pieces, err := tx.Pieces(pm, top, top.All())
	if err != nil {
		t.Fatal(err)
	}
	g1 := &pieces[1] // waits for groups 0 and 2
	s := NewMemStore(map[string]string{"item/1": "x"})
	yes0, yes2 := Vote{Group: 0, Holds: true}, Vote{Group: 2, Holds: true}
	tests := []struct {
		name  string
		votes []Vote
		want  string
	}{
		{"none", nil, "txn: piece of group 1: missing votes of groups {0,2}"},
		{"one missing", []Vote{yes2}, "missing votes of groups {0}"},
		{"twice", []Vote{yes0, yes0, yes2}, "two votes of group 0"},
		{"not a voter", []Vote{yes0, yes2, {Group: 1, Holds: true}}, "unexpected vote of group 1 (voters {0,2})"},
		{"abort", []Vote{yes0, {Group: 2, If: Abort{Index: 2, Reason: "txn: if[2]: the voter's text"}}}, "txn: if[2]: the voter's text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Eval(s, s, g1, tt.votes...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if got := errors.Is(err, ErrAborted); got != (tt.name == "abort") {
				t.Errorf("errors.Is(ErrAborted) = %v", got)
			}
			if len(s.Writes()) != 0 {
				t.Errorf("wrote %v", s.Writes())
			}
		})
	}

	// A vote on a non-integer is an abort vote, not an error.
	s0 := NewMemStore(map[string]string{"w/0001/a": "lots"})
	v, err := EvalVote(s0, &pieces[0])
	if err != nil || v.If != (Abort{Index: 0, Reason: `txn: if[0]: "w/0001/a" >= 5: stored value "lots": not an integer`}) || v.Holds || v.Group != 0 {
		t.Errorf("EvalVote on a non-integer: %+v, %v; want an abort vote of group 0", v, err)
	}
}

// failingStore fails every read or write.
type failingStore struct{}

var errDisk = errors.New("disk on fire")

func (failingStore) Get([]byte) ([]byte, bool, error)       { return nil, false, errDisk }
func (failingStore) Scan([]byte, []byte, int) ([]KV, error) { return nil, errDisk }
func (failingStore) Put([]byte, []byte) error               { return errDisk }
func (failingStore) Delete([]byte) error                    { return errDisk }

func TestEvalIOErrors(t *testing.T) {
	f := failingStore{}
	for _, js := range []string{
		`{"if":[{"key":"w/0001/a","cmp":"=","int":1}]}`,
		`{"then":[{"op":"get","key":"w/0001/a"}]}`,
		`{"then":[{"op":"add","key":"w/0001/a","int":1}]}`,
		`{"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/b","limit":1}]}`,
	} {
		_, _, err := Eval(f, NewMemStore(nil), localPiece(t, mustParse(t, js)))
		if !errors.Is(err, errDisk) || errors.Is(err, ErrAborted) {
			t.Errorf("%s: error %v, want one wrapping the read error, not an abort", js, err)
		}
	}
	_, _, err := Eval(NewMemStore(nil), f, localPiece(t, mustParse(t, `{"then":[{"op":"put","key":"w/0001/a","value":"v"}]}`)))
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), `txn: write "w/0001/a"`) {
		t.Errorf("write error: %v", err)
	}
}

func TestEvalRejectsBadPiece(t *testing.T) {
	tx := mustParse(t, designTransfer)
	s := NewMemStore(nil)
	good := localPiece(t, tx)
	tests := []struct {
		name  string
		piece *Piece
		want  string
	}{
		{"nil", nil, "without a transaction"},
		{"compares", &Piece{Txn: tx}, "has 0 compares, its transaction 1"},
		{"positions", &Piece{Txn: tx, If: good.If, Then: []int{1, 0}}, "then positions not ascending in 0..1"},
		{"out of range", &Piece{Txn: tx, If: good.If, Then: []int{2}}, "then positions not ascending"},
		{"invalid transaction", &Piece{Txn: &Txn{Then: []Op{{Kind: 42, Key: []byte("k")}}}}, "unknown op OpKind(42)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Eval(s, s, tt.piece); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// A vote reports which of its group's branches cannot run; the other
// destinations abort a branch that cannot run with the voter's own text,
// and ignore an abort in the branch that does not run.
func TestEvalBranchVotes(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	// Group 0 adds in both branches; group 1 decides the branch.
	tx := mustParse(t, `{"if":[{"key":"w/0003/c","cmp":"=","int":1}],`+
		`"then":[{"op":"put","key":"w/0003/t","value":"1"},{"op":"add","key":"w/0001/n","int":1}],`+
		`"else":[{"op":"add","key":"w/0001/m","int":1},{"op":"put","key":"w/0003/e","value":"1"}]}`)
	pieces, err := tx.Pieces(pm, top, partition.SetOf(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	g0, g1 := &pieces[0], &pieces[1]
	if g0.Voters != partition.SetOf(1) || g1.Voters != partition.SetOf(0) {
		t.Fatalf("voters %s and %s, want each other", g0.Voters, g1.Voters)
	}
	const thenAbort = `txn: then[1]: add to "w/0001/n": stored value "x": not an integer`
	for _, tc := range []struct {
		name   string
		s0, s1 map[string]string
		vote0  Vote
		want1  string // group 1's outcome
		writes string // group 1's writes
	}{
		{"then cannot run and runs", map[string]string{"w/0001/n": "x"}, map[string]string{"w/0003/c": "1"},
			Vote{Group: 0, Holds: true, Then: Abort{Index: 1, Reason: thenAbort}}, "abort: " + thenAbort, ""},
		{"then cannot run, else runs", map[string]string{"w/0001/n": "x"}, map[string]string{"w/0003/c": "2"},
			Vote{Group: 0, Holds: true, Then: Abort{Index: 1, Reason: thenAbort}}, "else", "put w/0003/e=1"},
		{"both can run", nil, map[string]string{"w/0003/c": "1"}, Vote{Group: 0, Holds: true}, "then", "put w/0003/t=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v0, err := EvalVote(NewMemStore(tc.s0), g0)
			if err != nil {
				t.Fatal(err)
			}
			if v0 != tc.vote0 {
				t.Fatalf("group 0 votes %+v, want %+v", v0, tc.vote0)
			}
			s1 := NewMemStore(tc.s1)
			v1, err := EvalVote(s1, g1)
			if err != nil {
				t.Fatal(err)
			}
			got := func(ok bool, err error) string {
				switch {
				case err != nil:
					return "abort: " + err.Error()
				case ok:
					return "then"
				}
				return "else"
			}
			ok, _, err := Eval(s1, s1, g1, v0)
			if o := got(ok, err); o != tc.want1 {
				t.Errorf("group 1: %s, want %s", o, tc.want1)
			}
			if w := strings.Join(s1.Writes(), ", "); w != tc.writes {
				t.Errorf("group 1 wrote %q, want %q", w, tc.writes)
			}
			// Group 0 reaches the same outcome on its own state.
			s0 := NewMemStore(tc.s0)
			ok, _, err = Eval(s0, s0, g0, v1)
			if o := got(ok, err); o != tc.want1 {
				t.Errorf("group 0: %s, want %s", o, tc.want1)
			}
			if err != nil && !errors.Is(err, ErrNotInteger) {
				t.Errorf("group 0's own abort %v does not wrap its cause", err)
			}
		})
	}
}

// TestOverlayReadsAreCopies: what an Overlay's Get and Scan return is the
// caller's to change: changing a held key or value through what a read
// returned changes neither later reads nor what Flush writes.
func TestOverlayReadsAreCopies(t *testing.T) {
	s := NewMemStore(map[string]string{"a": "1", "c": "3"})
	o := NewOverlay(s)
	o.Put([]byte("b"), []byte("2"))
	v, found, err := o.Get([]byte("b"))
	if err != nil || !found {
		t.Fatalf("Get(b) = %q, %v, %v", v, found, err)
	}
	v[0] = 'x'
	kvs, err := o.Scan([]byte("a"), []byte("d"), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		kv.Key[0], kv.Value[0] = 'z', 'z'
	}
	if v, _, _ := o.Get([]byte("b")); string(v) != "2" {
		t.Errorf("Get(b) after changing what reads returned = %q, want 2", v)
	}
	if err := o.Flush(s); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(s.Writes(), ", "), "put b=2"; got != want {
		t.Errorf("Flush wrote %q, want %q", got, want)
	}
}

func TestOverlayResetDropsWritesKeepsNothingShared(t *testing.T) {
	old := NewMemStore(map[string]string{"a": "1"})
	o := NewOverlay(old)
	o.Put([]byte("b"), []byte("2"))
	o.Delete([]byte("a"))
	s := NewMemStore(map[string]string{"a": "9", "c": "3"})
	o.Reset(s)
	if o.Len() != 0 {
		t.Fatalf("Len after Reset = %d, want 0", o.Len())
	}
	if v, found, err := o.Get([]byte("a")); err != nil || !found || string(v) != "9" {
		t.Errorf("Get(a) after Reset = %q, %v, %v; want the new reader's 9", v, found, err)
	}
	if _, found, _ := o.Get([]byte("b")); found {
		t.Error("Get(b) after Reset found the write made before it")
	}
	o.Put([]byte("c"), []byte("4"))
	if err := o.Flush(s); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(s.Writes(), ", "), "put c=4"; got != want {
		t.Errorf("Flush after Reset wrote %q, want %q", got, want)
	}
	if len(old.Writes()) != 0 {
		t.Errorf("the old reader got writes %q", old.Writes())
	}
}
