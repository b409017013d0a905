package skeen

import "github.com/flexkv/flexkv/partition"

// Entry returns the group a client in group client sends a message to dst to
// (DESIGN 2): the client's own group if it is a destination, else the
// destination with the smallest round-trip time from it, ties going to the
// lower rank. Without a latency matrix (lat == nil), or for a client outside
// the topology, it is dst.Min(). It returns partition.NoGroup for an empty
// dst. Every group's region must be in lat (Latency.CheckTopology).
func Entry(lat *partition.Latency, top *partition.Topology, client partition.GroupID, dst partition.GroupSet) partition.GroupID {
	if lat == nil || !top.Valid(client) || dst.Empty() {
		return dst.Min()
	}
	if dst.Has(client) {
		return client
	}
	return EntryFromRegion(lat, top, top.Group(client).Region, dst)
}

// EntryFromRegion is Entry for a client in region, a row of lat, that has
// no group of its own: the destination with the smallest round-trip time
// from region, ties going to the lower rank. Without a matrix, or for a
// region the matrix lacks, it is dst.Min().
func EntryFromRegion(lat *partition.Latency, top *partition.Topology, region string, dst partition.GroupSet) partition.GroupID {
	if lat == nil || !lat.Has(region) || dst.Empty() {
		return dst.Min()
	}
	best := partition.NoGroup
	bestMs := 0.0
	for _, g := range dst.Slice() { // rank order: a tie keeps the lower rank
		if ms := lat.RTTMs(region, top.Group(g).Region); best == partition.NoGroup || ms < bestMs {
			best, bestMs = g, ms
		}
	}
	return best
}
