package partition

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Latency is a matrix of round-trip latencies in milliseconds between
// regions, read from a CSV file whose first row and first column name the
// regions (row = from, column = to; the diagonal is the latency inside a
// region), like configs/aws-12-regions-latency-ms.csv.
type Latency struct {
	regions []string
	index   map[string]int
	rttMs   [][]float64
}

// ReadLatencyFile reads a latency matrix from a CSV file.
func ReadLatencyFile(path string) (*Latency, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("partition: latency matrix: %w", err)
	}
	defer f.Close()
	l, err := ReadLatency(f)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return l, nil
}

// ReadLatency reads a latency matrix in CSV form.
func ReadLatency(r io.Reader) (*Latency, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("partition: latency matrix: %w", err)
	}
	if len(rows) < 2 {
		return nil, errors.New("partition: latency matrix: want a header row and at least one region")
	}
	header := rows[0]
	n := len(header) - 1
	if n < 1 || len(rows)-1 != n {
		return nil, fmt.Errorf("partition: latency matrix: %d columns but %d rows, want a square matrix", n, len(rows)-1)
	}
	l := &Latency{regions: make([]string, n), index: make(map[string]int, n), rttMs: make([][]float64, n)}
	for j, name := range header[1:] {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("partition: latency matrix: column %d has no region name", j+1)
		}
		if _, dup := l.index[name]; dup {
			return nil, fmt.Errorf("partition: latency matrix: region %q twice", name)
		}
		l.regions[j] = name
		l.index[name] = j
	}
	for i, row := range rows[1:] {
		if len(row) != n+1 {
			return nil, fmt.Errorf("partition: latency matrix: row %d has %d fields, want %d", i+2, len(row), n+1)
		}
		if name := strings.TrimSpace(row[0]); name != l.regions[i] {
			return nil, fmt.Errorf("partition: latency matrix: row %d is %q, want %q (rows and columns in the same order)", i+2, name, l.regions[i])
		}
		l.rttMs[i] = make([]float64, n)
		for j, cell := range row[1:] {
			v, err := strconv.ParseFloat(strings.TrimSpace(cell), 64)
			if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("partition: latency matrix: row %q column %q: %q is not a latency in ms", l.regions[i], l.regions[j], cell)
			}
			l.rttMs[i][j] = v
		}
	}
	return l, nil
}

// NewLatency builds a matrix from region names and round-trip times in ms.
func NewLatency(regions []string, rttMs [][]float64) (*Latency, error) {
	n := len(regions)
	if n == 0 || len(rttMs) != n {
		return nil, errors.New("partition: latency matrix must be square and not empty")
	}
	l := &Latency{regions: slices.Clone(regions), index: make(map[string]int, n), rttMs: make([][]float64, n)}
	for i, name := range regions {
		if _, dup := l.index[name]; dup {
			return nil, fmt.Errorf("partition: latency matrix: region %q twice", name)
		}
		l.index[name] = i
		if len(rttMs[i]) != n {
			return nil, errors.New("partition: latency matrix must be square")
		}
		for j, v := range rttMs[i] {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("partition: latency matrix: %q to %q: %v is not a latency in ms", name, regions[j], v)
			}
		}
		l.rttMs[i] = slices.Clone(rttMs[i])
	}
	return l, nil
}

// Regions returns the regions in file order.
func (l *Latency) Regions() []string { return slices.Clone(l.regions) }

// Has reports whether region is in the matrix.
func (l *Latency) Has(region string) bool { _, ok := l.index[region]; return ok }

// RTTMs returns the round-trip latency from one region to another, in ms.
// Both regions must be in the matrix.
func (l *Latency) RTTMs(from, to string) float64 {
	i, ok1 := l.index[from]
	j, ok2 := l.index[to]
	if !ok1 || !ok2 {
		panic(fmt.Sprintf("partition: latency between unknown regions %q and %q", from, to))
	}
	return l.rttMs[i][j]
}

// CheckTopology returns an error unless every group's region is in l.
func (l *Latency) CheckTopology(t *Topology) error {
	for _, g := range t.groups {
		if !l.Has(g.Region) {
			return fmt.Errorf("partition: group %q is in region %q, which the latency matrix lacks", g.Name, g.Region)
		}
	}
	return nil
}

// GroupRTTMs returns the round-trip latency between two groups of t.
func (l *Latency) GroupRTTMs(t *Topology, from, to GroupID) float64 {
	return l.RTTMs(t.groups[from].Region, t.groups[to].Region)
}

// Nearest returns the members of candidates ordered by latency from group
// from (nearest first; ties by rank), excluding from itself.
func (l *Latency) Nearest(t *Topology, from GroupID, candidates GroupSet) []GroupID {
	out := candidates.Remove(from).Slice()
	slices.SortStableFunc(out, func(a, b GroupID) int {
		da, db := l.GroupRTTMs(t, from, a), l.GroupRTTMs(t, from, b)
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return 0
	})
	return out
}
