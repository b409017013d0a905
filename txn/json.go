package txn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The JSON form of DESIGN 7:
//
//	{"if":[{"key":"w/0001/acct","cmp":">=","int":5}],
//	 "then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0002/acct","int":5}],
//	 "else":[]}
//
// Keys, values and scan ends are JSON strings: their bytes are the UTF-8 of
// the string, so the JSON form carries text keys and values only (gTPC-C's
// are). Bytes that are not valid UTF-8 are written as U+FFFD, as
// encoding/json does.
//
// The parser reads tokens itself rather than through encoding/json's
// reflection, so that it is strict where encoding/json is lenient: field
// names match exactly (not case-insensitively), a field given twice is an
// error, integers are exact int64 (no 5.0, no 1e3), null is not an empty
// list, and every error names the position of the offending element.

// ParseJSON parses a transaction in the JSON form of DESIGN 7. It rejects,
// naming the position and field: invalid JSON and trailing data; unknown or
// repeated fields; values of the wrong JSON type; a compare without key or
// cmp, with both or neither of int and value; an op without op or key, with
// an unknown op, without the fields its kind requires (put: value, add:
// int, scan: end and limit) or with fields it does not take (add alone
// takes "wrap", a boolean: Op.Wrap); more than
// OpsMax compares and operations; and everything else Validate checks
// without a partition map (keys, sizes, scan bounds). Errors match
// ErrInvalid. The Txn returned owns its bytes. Validate it against the
// partition map before routing it.
func ParseJSON(data []byte) (*Txn, error) {
	t, err := parseTxn(data)
	if err != nil {
		return nil, err
	}
	if err := t.checkShape(); err != nil {
		return nil, err
	}
	return t, nil
}

// UnmarshalJSON implements json.Unmarshaler with ParseJSON: t is replaced
// when data parses, and left alone otherwise.
func (t *Txn) UnmarshalJSON(data []byte) error {
	p, err := ParseJSON(data)
	if err != nil {
		return err
	}
	*t = *p
	return nil
}

// parser reads a transaction from a stream of JSON tokens.
type parser struct {
	dec   *json.Decoder
	count int // compares and operations read so far, bounded by OpsMax
}

func parseTxn(data []byte) (*Txn, error) {
	p := &parser{dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	t := &Txn{If: []Compare{}, Then: []Op{}, Else: []Op{}}
	err := p.object("", func(name string) error {
		switch name {
		case "if":
			return p.array("if", func(path string) error {
				c, err := p.compare(path)
				t.If = append(t.If, c)
				return err
			})
		case "then", "else":
			return p.array(name, func(path string) error {
				o, err := p.op(path)
				if name == "then" {
					t.Then = append(t.Then, o)
				} else {
					t.Else = append(t.Else, o)
				}
				return err
			})
		}
		return invalidf("txn: unknown field %q (want if, then, else)", name)
	})
	if err != nil {
		return nil, err
	}
	if tok, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, invalidf("txn: after the transaction: invalid JSON: %w", err)
		}
		return nil, invalidf("txn: trailing data after the transaction: %s", describe(tok))
	}
	return t, nil
}

// prefix returns the start of an error message about path.
func prefix(path string) string {
	if path == "" {
		return "txn: "
	}
	return "txn: " + path + ": "
}

// token reads the next token, turning a syntax error into an error about
// path.
func (p *parser) token(path string) (json.Token, error) {
	tok, err := p.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, invalidf("%sinvalid JSON: %w", prefix(path), err)
	}
	return tok, nil
}

// describe names the JSON type of a token for an error message.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "object"
		case '[':
			return "array"
		}
		return "'" + v.String() + "'"
	case string:
		return "string"
	case json.Number:
		return "number " + v.String()
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

func wrongType(path string, tok json.Token, want string) error {
	return invalidf("%sgot %s, want %s", prefix(path), describe(tok), want)
}

// object reads an object, calling field for each member with the decoder
// positioned at the member's value; field must read the whole value.
func (p *parser) object(path string, field func(name string) error) error {
	tok, err := p.token(path)
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return wrongType(path, tok, "object")
	}
	var seen []string // a handful of names: a slice beats a map
	for p.dec.More() {
		tok, err := p.token(path)
		if err != nil {
			return err
		}
		name, _ := tok.(string) // object keys are strings
		for _, s := range seen {
			if s == name {
				return invalidf("%sfield %q given twice", prefix(path), name)
			}
		}
		seen = append(seen, name)
		if err := field(name); err != nil {
			return err
		}
	}
	_, err = p.token(path) // '}': the decoder checks that it matches
	return err
}

// array reads an array of compares or operations, calling elem with the
// path of each element.
func (p *parser) array(path string, elem func(path string) error) error {
	tok, err := p.token(path)
	if err != nil {
		return err
	}
	if tok != json.Delim('[') {
		return wrongType(path, tok, "array")
	}
	for i := 0; p.dec.More(); i++ {
		// Checked before reading the element, so that no input makes the
		// parser hold more than OpsMax elements.
		if p.count++; p.count > OpsMax {
			return invalidf("txn: more than OpsMax (%d) compares and operations", OpsMax)
		}
		if err := elem(fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err = p.token(path)
	return err
}

func (p *parser) str(path string) ([]byte, error) {
	tok, err := p.token(path)
	if err != nil {
		return nil, err
	}
	s, ok := tok.(string)
	if !ok {
		return nil, wrongType(path, tok, "string")
	}
	// Never nil, even when empty: a compare tells "value" from no value.
	b := make([]byte, len(s))
	copy(b, s)
	return b, nil
}

func (p *parser) integer(path string) (int64, error) {
	tok, err := p.token(path)
	if err != nil {
		return 0, err
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, wrongType(path, tok, "integer")
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, invalidf("%s%s is not an integer in the int64 range", prefix(path), n)
	}
	return v, nil
}

func (p *parser) boolean(path string) (bool, error) {
	tok, err := p.token(path)
	if err != nil {
		return false, err
	}
	v, ok := tok.(bool)
	if !ok {
		return false, wrongType(path, tok, "boolean")
	}
	return v, nil
}

func (p *parser) compare(path string) (Compare, error) {
	var c Compare
	var hasKey, hasCmp bool
	err := p.object(path, func(name string) error {
		var err error
		switch name {
		case "key":
			hasKey = true
			c.Key, err = p.str(path + ".key")
		case "cmp":
			hasCmp = true
			var s []byte
			if s, err = p.str(path + ".cmp"); err == nil {
				var ok bool
				if c.Cmp, ok = parseCmp(string(s)); !ok {
					err = invalidf("txn: %s: unknown cmp %q (want one of %s)", path, s, strings.Join(cmpNames[1:], " "))
				}
			}
		case "int":
			var v int64
			v, err = p.integer(path + ".int")
			c.Int = &v
		case "value":
			c.Value, err = p.str(path + ".value")
		default:
			err = invalidf("txn: %s: unknown field %q (want key, cmp, int or value)", path, name)
		}
		return err
	})
	switch {
	case err != nil:
		return c, err
	case !hasKey:
		return c, invalidf("txn: %s: missing key", path)
	case !hasCmp:
		return c, invalidf("txn: %s: missing cmp", path)
	}
	// Both or neither of int and value: checkShape reports it.
	return c, nil
}

// opFields are the fields of an op object, in the order errors report
// them.
var opFields = []string{"op", "key", "value", "int", "end", "limit", "wrap"}

// kindFields are the fields each kind requires besides op and key, and
// kindOptional those it may have; it takes no other.
var (
	kindFields = [...][]string{
		OpGet: nil, OpPut: {"value"}, OpDelete: nil, OpAdd: {"int"}, OpScan: {"end", "limit"},
	}
	kindOptional = [...][]string{OpAdd: {"wrap"}, OpScan: nil}
)

func (p *parser) op(path string) (Op, error) {
	var o Op
	var kind []byte
	has := make(map[string]bool, len(opFields))
	err := p.object(path, func(name string) error {
		var err error
		fpath := path + "." + name
		switch name {
		case "op":
			kind, err = p.str(fpath)
		case "key":
			o.Key, err = p.str(fpath)
		case "value":
			o.Value, err = p.str(fpath)
		case "int":
			o.Int, err = p.integer(fpath)
		case "end":
			o.End, err = p.str(fpath)
		case "limit":
			var v int64
			v, err = p.integer(fpath)
			if err == nil && (v < 1 || v > ScanLimitMax) {
				err = invalidf("txn: %s: %d, want 1..ScanLimitMax (%d)", fpath, v, ScanLimitMax)
			}
			o.Limit = int(v)
		case "wrap":
			o.Wrap, err = p.boolean(fpath)
		default:
			return invalidf("txn: %s: unknown field %q (want %s)", path, name, strings.Join(opFields, ", "))
		}
		has[name] = true
		return err
	})
	if err != nil {
		return o, err
	}
	if !has["op"] {
		return o, invalidf("txn: %s: missing op", path)
	}
	var ok bool
	if o.Kind, ok = parseOpKind(string(kind)); !ok {
		return o, invalidf("txn: %s: unknown op %q (want one of %s)", path, kind, strings.Join(opNames[1:], ", "))
	}
	if !has["key"] {
		return o, invalidf("txn: %s: missing key", path)
	}
	for _, f := range opFields[2:] {
		required := slices.Contains(kindFields[o.Kind], f)
		optional := slices.Contains(kindOptional[o.Kind], f)
		switch {
		case required && !has[f]:
			return o, invalidf("txn: %s: op %s without %s", path, o.Kind, f)
		case !required && !optional && has[f]:
			return o, invalidf("txn: %s: field %s does not apply to op %s", path, f, o.Kind)
		}
	}
	return o, nil
}

// The shapes the JSON forms are written with.
type (
	jsonCompare struct {
		Key   string  `json:"key"`
		Cmp   string  `json:"cmp"`
		Int   *int64  `json:"int,omitempty"`
		Value *string `json:"value,omitempty"`
	}
	jsonOp struct {
		Op    string  `json:"op"`
		Key   string  `json:"key"`
		Value *string `json:"value,omitempty"`
		Int   *int64  `json:"int,omitempty"`
		End   *string `json:"end,omitempty"`
		Limit *int    `json:"limit,omitempty"`
		Wrap  bool    `json:"wrap,omitempty"`
	}
	jsonTxn struct {
		If   []jsonCompare `json:"if"`
		Then []jsonOp      `json:"then"`
		Else []jsonOp      `json:"else"`
	}
)

func ptr[T any](v T) *T { return &v }

// marshal writes v without escaping <, > and & (a ">=" stays readable on a
// terminal) and without encoding/json's trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MarshalJSON writes t in the JSON form of DESIGN 7: the three lists always
// (empty ones as []), each compare with its one operand, each op with the
// fields of its kind only. ParseJSON reads back an equal transaction. A
// relation or kind that is not valid is an error. (json.Marshal(t) escapes
// '<' and '>' as \u003c and \u003e; calling MarshalJSON does not.) The
// receiver is a value so that json.Marshal uses it for a Txn as well as a
// *Txn.
func (t Txn) MarshalJSON() ([]byte, error) {
	out := jsonTxn{If: make([]jsonCompare, len(t.If)), Then: []jsonOp{}, Else: []jsonOp{}}
	for i, c := range t.If {
		if !c.Cmp.Valid() {
			return nil, invalidf("txn: if[%d]: unknown cmp %s", i, c.Cmp)
		}
		jc := jsonCompare{Key: string(c.Key), Cmp: c.Cmp.String(), Int: c.Int}
		if c.Int == nil {
			jc.Value = ptr(string(c.Value))
		}
		out.If[i] = jc
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		list := make([]jsonOp, len(t.ops(b)))
		for i, o := range t.ops(b) {
			jo := jsonOp{Op: o.Kind.String(), Key: string(o.Key)}
			switch o.Kind {
			case OpPut:
				jo.Value = ptr(string(o.Value))
			case OpAdd:
				jo.Int, jo.Wrap = ptr(o.Int), o.Wrap
			case OpScan:
				jo.End, jo.Limit = ptr(string(o.End)), ptr(o.Limit)
			case OpGet, OpDelete:
			default:
				return nil, invalidf("txn: %s[%d]: unknown op %s", b, i, o.Kind)
			}
			list[i] = jo
		}
		if b == thenBranch {
			out.Then = list
		} else {
			out.Else = list
		}
	}
	return marshal(out)
}

// KV is a key and its value, as a scan returns them. Its JSON form is
// {"key":"...","value":"..."}.
type KV struct {
	Key   []byte
	Value []byte
}

// MarshalJSON writes kv as {"key":"...","value":"..."}.
func (kv KV) MarshalJSON() ([]byte, error) {
	return marshal(struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}{string(kv.Key), string(kv.Value)})
}

// OpResult is the result of one executed operation. Index is its position
// in the branch that ran (Then or Else), which Result.Succeeded names; the
// other fields depend on the kind:
//
//	get     Key, Found, Value (when Found)   {"op":"get","key":"k","found":true,"value":"v"}
//	put     Key                              {"op":"put","key":"k"}
//	delete  Key                              {"op":"delete","key":"k"}
//	add     Key, Int: the new value          {"op":"add","key":"k","int":5}
//	scan    Key, KVs in key order            {"op":"scan","key":"a","kvs":[{"key":"a1","value":"v"}]}
//
// Index is not written in JSON: Result.Results holds one OpResult per
// operation of the branch, in order.
type OpResult struct {
	Index int
	Kind  OpKind
	Key   []byte
	Found bool
	Value []byte
	Int   int64
	KVs   []KV
}

// MarshalJSON writes r in the form its kind's row above shows.
func (r OpResult) MarshalJSON() ([]byte, error) {
	out := struct {
		Op    string  `json:"op"`
		Key   string  `json:"key"`
		Found *bool   `json:"found,omitempty"`
		Value *string `json:"value,omitempty"`
		Int   *int64  `json:"int,omitempty"`
	}{Op: r.Kind.String(), Key: string(r.Key)}
	switch r.Kind {
	case OpGet:
		out.Found = ptr(r.Found)
		if r.Found {
			out.Value = ptr(string(r.Value))
		}
	case OpAdd:
		out.Int = ptr(r.Int)
	case OpScan:
		kvs := r.KVs
		if kvs == nil {
			kvs = []KV{} // a scan always shows its kvs, [] when none
		}
		return marshal(struct {
			Op  string `json:"op"`
			Key string `json:"key"`
			KVs []KV   `json:"kvs"`
		}{out.Op, out.Key, kvs})
	case OpPut, OpDelete:
	default:
		return nil, fmt.Errorf("txn: result of unknown op %s", r.Kind)
	}
	return marshal(out)
}

// DestLatency is the latency of one destination group's answer, as the
// client measured it. Its JSON form is {"group":"eu-west-1","ms":12.3}.
type DestLatency struct {
	Group string  `json:"group"`
	Ms    float64 `json:"ms"`
}

// Result is the outcome of a transaction as a client reports it (DESIGN
// 7): {"id":"c3.17","succeeded":true,"results":[...],"destinations":[...]}.
// Succeeded tells whether every compare held (Then ran) or not (Else ran);
// Results holds one OpResult per operation of that branch, in order;
// Destinations lists the groups in the order their answers arrived. An
// aborted transaction (ErrAborted) has no Result: the client reports the
// error.
type Result struct {
	ID           string
	Succeeded    bool
	Results      []OpResult
	Destinations []DestLatency
}

// MarshalJSON writes r with lower-case names and empty lists as [].
func (r Result) MarshalJSON() ([]byte, error) {
	out := struct {
		ID           string        `json:"id"`
		Succeeded    bool          `json:"succeeded"`
		Results      []OpResult    `json:"results"`
		Destinations []DestLatency `json:"destinations"`
	}{r.ID, r.Succeeded, r.Results, r.Destinations}
	if out.Results == nil {
		out.Results = []OpResult{}
	}
	if out.Destinations == nil {
		out.Destinations = []DestLatency{}
	}
	return marshal(out)
}
