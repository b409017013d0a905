package txn

import (
	"bytes"
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
)

// The multicast payload of a request: a kind byte, then its body.
//
//	payload = 0x01 txn            a transaction (AppendTxn)
//	        | 0x02 name:bytes args:bytes   a stored-procedure call
//	        | 0x03                         a backup marker (DESIGN 14)
//
// The kind numbers are part of every destination's raft log: append new
// kinds, never renumber.
const (
	payloadTxn  byte = 1
	payloadCall byte = 2
	// payloadBackup is a backup marker: a control message addressed to
	// every group, whose delivery is a consistent cut (DESIGN 14). It has
	// no body: its message id names the backup.
	payloadBackup byte = 3
)

// Bounds of a payload.
const (
	// ProcNameMax is the length of the longest procedure name, in bytes.
	ProcNameMax = 64
	// ProcArgsMax is the length of the longest procedure arguments, in
	// bytes; the same bound as a transaction's keys and values.
	ProcArgsMax = BytesMax
	// PayloadMax bounds an encoded payload, in bytes: every transaction
	// that Validate accepts (at most BytesMax bytes of keys and values) and
	// every call with a valid name and at most ProcArgsMax bytes of
	// arguments encodes within it. The executor refuses larger payloads
	// without decoding them. It must stay at most the largest payload the
	// replication layer accepts (group.MessagePayloadMax, 512 KiB),
	// or valid requests would be refused there.
	PayloadMax = 512 << 10
)

// Call is a stored-procedure call: the name a procedure was registered
// under, and its arguments, which only the procedure interprets.
type Call struct {
	Name string
	Args []byte
}

// Validate returns an error matching ErrInvalid unless c has a valid
// procedure name and at most ProcArgsMax bytes of arguments: what a server
// refuses, so that a client can refuse it first.
func (c *Call) Validate() error { return c.check() }

// check is Validate.
func (c *Call) check() error {
	if err := checkProcName(c.Name); err != nil {
		return err
	}
	if len(c.Args) > ProcArgsMax {
		return invalidf("txn: call %q: %d bytes of arguments, more than ProcArgsMax (%d)", c.Name, len(c.Args), ProcArgsMax)
	}
	return nil
}

// checkProcName returns an error matching ErrInvalid unless name is a valid
// procedure name: 1..ProcNameMax bytes of lower-case letters, digits, '_',
// '-' and '.', so that a name reads plainly in logs and errors.
func checkProcName(name string) error {
	if name == "" || len(name) > ProcNameMax {
		return invalidf("txn: procedure name of %d bytes, want 1..ProcNameMax (%d)", len(name), ProcNameMax)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' && c != '.' {
			return invalidf("txn: procedure name %q: byte %q not in [a-z0-9_.-]", name, c)
		}
	}
	return nil
}

// Payload is a decoded request payload: exactly one of Txn and Call is
// set, or neither and Backup is true.
type Payload struct {
	Txn  *Txn
	Call *Call
	// Backup: the payload is a backup marker (AppendBackupPayload).
	Backup bool
}

// AppendBackupPayload appends the payload of a backup marker to b: a
// control message that every group executes as a barrier, taking a
// checkpoint of its store holding exactly the deliveries before it
// (DESIGN 14). A marker is addressed to every group of the topology.
func AppendBackupPayload(b []byte) []byte { return append(b, payloadBackup) }

// AppendTxnPayload appends the payload of transaction t (which must pass
// Validate) to b.
func AppendTxnPayload(b []byte, t *Txn) []byte {
	return AppendTxn(append(b, payloadTxn), t)
}

// AppendCallPayload appends the payload of call c to b. It does not check c:
// DecodePayload rejects a call with an invalid name or too many arguments.
func AppendCallPayload(b []byte, c Call) []byte {
	b = append(b, payloadCall)
	b = wire.AppendBytes(b, []byte(c.Name))
	return wire.AppendBytes(b, c.Args)
}

// PayloadSizeError is the error about a payload of n bytes, over PayloadMax.
func PayloadSizeError(n int) error {
	return fmt.Errorf("txn: decode payload: %w: %d bytes, more than PayloadMax (%d)", wire.ErrCorrupt, n, PayloadMax)
}

// DecodePayload reads what AppendTxnPayload or AppendCallPayload wrote. It
// never panics and the result does not alias b. A payload longer than
// PayloadMax, of an unknown kind, or corrupt gives an error wrapping
// wire.ErrCorrupt; a well-formed but invalid transaction or call one
// matching ErrInvalid.
func DecodePayload(b []byte) (Payload, error) {
	if len(b) > PayloadMax {
		return Payload{}, PayloadSizeError(len(b))
	}
	if len(b) == 0 {
		return Payload{}, fmt.Errorf("txn: decode payload: %w: empty", wire.ErrCorrupt)
	}
	switch b[0] {
	case payloadTxn:
		t, err := DecodeTxn(b[1:])
		if err != nil {
			return Payload{}, err
		}
		return Payload{Txn: t}, nil
	case payloadCall:
		d := wire.NewDecoder(b[1:])
		name := d.Bytes()
		args := d.Bytes()
		if err := d.Finish(); err != nil {
			return Payload{}, fmt.Errorf("txn: decode call: %w", err)
		}
		c := &Call{Name: string(name), Args: bytes.Clone(args)}
		if c.Args == nil {
			c.Args = []byte{}
		}
		if err := c.check(); err != nil {
			return Payload{}, err
		}
		return Payload{Call: c}, nil
	case payloadBackup:
		if len(b) != 1 {
			return Payload{}, fmt.Errorf("txn: decode backup marker: %w: %d bytes after the kind, want none", wire.ErrCorrupt, len(b)-1)
		}
		return Payload{Backup: true}, nil
	}
	return Payload{}, fmt.Errorf("txn: decode payload: %w: kind %d", wire.ErrCorrupt, b[0])
}
