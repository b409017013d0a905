package interaction

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/partition"
)

// intArg returns the number d gives as key=N, or def when it gives none.
func intArg(d *datadriven.TestData, key string, def int) (int, error) {
	a, ok := d.Arg(key)
	if !ok {
		return def, nil
	}
	return strconv.Atoi(single(a))
}

// splitVals returns a's values, with comma-separated lists split.
func splitVals(a datadriven.CmdArg) []string {
	var out []string
	for _, v := range a.Vals {
		out = append(out, strings.Split(v, ",")...)
	}
	return out
}

// single returns a's value; an argument given as a list keeps its first.
func single(a datadriven.CmdArg) string {
	if len(a.Vals) == 0 {
		return ""
	}
	return a.Vals[0]
}

func (e *Env) groupsArg(d *datadriven.TestData, key string) (partition.GroupSet, error) {
	a, ok := d.Arg(key)
	if !ok {
		return 0, fmt.Errorf("%s: %s= required", d.Cmd, key)
	}
	var s partition.GroupSet
	for _, name := range splitVals(a) {
		g, ok := e.top.Lookup(name)
		if !ok {
			return 0, fmt.Errorf("%s: unknown group %q", d.Cmd, name)
		}
		s = s.Add(g)
	}
	return s, nil
}

func (e *Env) groupArg(d *datadriven.TestData) (partition.GroupID, error) {
	s, err := e.groupsArg(d, "group")
	if err != nil {
		return 0, err
	}
	if s.Len() != 1 {
		return 0, fmt.Errorf("%s: want one group", d.Cmd)
	}
	return s.Min(), nil
}

func (e *Env) linkArgs(d *datadriven.TestData) (from, to partition.GroupID, err error) {
	f, err := e.groupsArg(d, "from")
	if err != nil {
		return 0, 0, err
	}
	t, err := e.groupsArg(d, "to")
	if err != nil {
		return 0, 0, err
	}
	if f.Len() != 1 || t.Len() != 1 {
		return 0, 0, fmt.Errorf("%s: want one link", d.Cmd)
	}
	return f.Min(), t.Min(), nil
}
