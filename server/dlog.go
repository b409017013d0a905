package server

import "github.com/flexkv/flexkv/multicast/rawnode"

// observe counts what an applied entry produced, for the metrics, and
// writes it to the delivery log if there is one.
func (s *Server) observe(out rawnode.Output, leader bool) {
	s.counts.observe(out, leader)
	if s.cfg.DeliveryLog != nil {
		s.logOutput(out, leader)
	}
}

// logOutput writes what an applied entry produced to the delivery log
// (DESIGN 10.1): every replica the requests its group accepted (so that a
// multicast is logged even when the leader that accepted it stopped before
// answering; the log allows the same multicast line again) and its
// deliveries; the leader its group's sends, once per group. Flush messages
// are the protocol's own and are left out.
func (s *Server) logOutput(out rawnode.Output, leader bool) {
	w := s.cfg.DeliveryLog
	for _, m := range out.Requests {
		_ = w.Multicast(m.ID.String(), s.names(m.Dst))
	}
	// The control messages that end epochs (DESIGN 14) are logged in
	// their place among the deliveries: the checker sees the cut.
	changes := out.Changes
	all := s.names(s.top.All())
	change := func() {
		_ = w.Deliver(s.group.Name, s.cfg.NodeID, rawnode.ControlID(changes[0].Epoch).String(), all)
		changes = changes[1:]
	}
	for k, m := range out.Deliveries {
		for len(changes) > 0 && changes[0].At == k {
			change()
		}
		if m.ID.IsFlush() {
			continue
		}
		_ = w.Deliver(s.group.Name, s.cfg.NodeID, m.ID.String(), s.names(m.Dst))
	}
	for len(changes) > 0 {
		change()
	}
	if leader {
		for _, snd := range out.Sends {
			if snd.About.IsFlush() {
				continue
			}
			_ = w.Send(s.group.Name, s.top.Name(snd.To), snd.Kind.String(), snd.About.String(), len(snd.Payload))
		}
	}
	// The entry's lines go to the file now, not when the buffer fills: a
	// replica killed after its store flushed this entry does not run it
	// again on restart, and its lines would be lost with the process. (An
	// entry that logged nothing leaves the buffer empty: no write.)
	_ = w.Flush()
}
