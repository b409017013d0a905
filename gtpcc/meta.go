package gtpcc

import (
	"context"
	"fmt"

	"github.com/flexkv/flexkv/client"
)

// ScaleKey is the key of warehouse w's population scale, which Load writes
// once the warehouse is loaded whole: a warehouse without it was never
// loaded, or its load did not finish.
func ScaleKey(w int) []byte { return fmt.Appendf(nil, "w/%04d/scale", w) }

// ReadScale returns the scale warehouses were loaded with: every one must
// have been loaded whole, with the same scale. The error names the first
// warehouse that was not, and the scale it found otherwise.
func ReadScale(ctx context.Context, c *client.Client, warehouses []int) (Scale, error) {
	var first Scale
	for i, w := range warehouses {
		v, found, err := c.Get(ctx, ScaleKey(w))
		switch {
		case err != nil:
			return Scale{}, fmt.Errorf("gtpcc: warehouse %d: scale: %w", w, err)
		case !found:
			return Scale{}, fmt.Errorf("gtpcc: warehouse %d is not loaded (no %s): run flexkv gtpcc load first", w, ScaleKey(w))
		}
		var s Scale
		if err := Decode(ScaleKey(w), v, &s); err != nil {
			return Scale{}, err
		}
		if err := s.Validate(); err != nil {
			return Scale{}, fmt.Errorf("gtpcc: warehouse %d: %w", w, err)
		}
		if i == 0 {
			first = s
		} else if s != first {
			return Scale{}, fmt.Errorf("gtpcc: warehouse %d was loaded at scale %+v, warehouse %d at %+v: load them again at one scale", w, s, warehouses[0], first)
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
		case w < 1 || w > WarehouseMax:
			return nil, fmt.Errorf("gtpcc: %s: warehouse %d, want 1..%d", op, w, WarehouseMax)
		case set[w]:
			return nil, fmt.Errorf("gtpcc: %s: warehouse %d listed twice", op, w)
		}
		set[w] = true
	}
	return set, nil
}
