package gtpcc

import (
	"context"
	"fmt"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/gtpcc/procs"
)

// ReadScale returns the scale warehouses were loaded with: every one must
// have been loaded whole, with the same scale. The error names the first
// warehouse that was not, and the scale it found otherwise.
func ReadScale(ctx context.Context, c *client.Client, warehouses []int) (procs.Scale, error) {
	var first procs.Scale
	for i, w := range warehouses {
		v, found, err := c.Get(ctx, procs.ScaleKey(w))
		switch {
		case err != nil:
			return procs.Scale{}, fmt.Errorf("gtpcc: warehouse %d: scale: %w", w, err)
		case !found:
			return procs.Scale{}, fmt.Errorf("gtpcc: warehouse %d is not loaded (no %s): run flexkv gtpcc load first", w, procs.ScaleKey(w))
		}
		var s procs.Scale
		if err := procs.Decode(procs.ScaleKey(w), v, &s); err != nil {
			return procs.Scale{}, err
		}
		if err := s.Validate(); err != nil {
			return procs.Scale{}, fmt.Errorf("gtpcc: warehouse %d: %w", w, err)
		}
		if i == 0 {
			first = s
		} else if s != first {
			return procs.Scale{}, fmt.Errorf("gtpcc: warehouse %d was loaded at scale %+v, warehouse %d at %+v: load them again at one scale", w, s, warehouses[0], first)
		}
	}
	return first, nil
}

// warehouseSet checks a list of warehouses for op ("load", "check", ...):
// not empty, each in 1..WarehouseMax, none twice. It returns them as a
// set.
func warehouseSet(op string, warehouses []int) (map[int]bool, error) {
	if len(warehouses) == 0 {
		return nil, fmt.Errorf("gtpcc: %s: no warehouses", op)
	}
	set := make(map[int]bool, len(warehouses))
	for _, w := range warehouses {
		switch {
		case w < 1 || w > procs.WarehouseMax:
			return nil, fmt.Errorf("gtpcc: %s: warehouse %d, want 1..%d", op, w, procs.WarehouseMax)
		case set[w]:
			return nil, fmt.Errorf("gtpcc: %s: warehouse %d listed twice", op, w)
		}
		set[w] = true
	}
	return set, nil
}
