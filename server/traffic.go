package server

// Traffic is what a replica counted since its server opened: the envelopes
// its group sent to other groups while this replica led it (the protocols'
// own flush traffic included: it is part of what a protocol costs), their
// payload bytes, and the messages it delivered (flushes excluded). The
// gTPC-C driver reports it per node (DESIGN 9: messages and bytes per node
// per second).
type Traffic struct {
	Sends      uint64
	SendBytes  uint64
	Deliveries uint64
}

// Traffic returns the server's counts.
func (s *Server) Traffic() Traffic {
	var t Traffic
	for k := range s.counts.sends {
		t.Sends += s.counts.sends[k].Load()
		t.SendBytes += s.counts.sendBytes[k].Load()
	}
	t.Deliveries = s.counts.deliveriesLocal.Load() + s.counts.deliveriesGlobal.Load()
	return t
}

// Traffic returns the counts of every running node, by node id. A node
// restarted since counts from its restart.
func (l *Local) Traffic() map[string]Traffic {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]Traffic)
	for _, id := range l.order {
		if srv := l.nodes[id].srv; srv != nil {
			out[id] = srv.Traffic()
		}
	}
	return out
}
