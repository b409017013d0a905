// Package overlay predicts the latency of FlexCast, Skeen and the tree
// protocol for a latency matrix and a gTPC-C workload, and searches for the
// FlexCast overlay (the rank order of the C-DAG) and the tree that minimise
// it. It backs `flexkv overlay suggest` (DESIGN 7).
//
// # Workload
//
// Destinations derives, analytically, the distribution of destination sets
// of the gTPC-C generator (package gtpcc, workload.go; DESIGN 9), one client
// per group, whose home warehouse is that group's, with the generator's
// rules restated here so that this package stays below the client code:
//
//   - mix: new-order 45, payment 43, order-status, delivery, stock-level 4
//     each (the last three local); under GlobalOnly only new-order and
//     payment are drawn;
//   - payment: a remote customer with probability RemotePayment (always
//     under GlobalOnly), destinations {home, r};
//   - new-order: 5..15 lines, uniformly; each line remote with probability
//     RemoteItem (under GlobalOnly conditioned on at least one remote line:
//     the count k weighted by 1-(1-p)^k); destinations home plus the
//     distinct remote warehouses of its lines; under GlobalOnly those of
//     more than three groups are left out (drawn again);
//   - a remote warehouse is the k-th nearest other group (by round trip,
//     ties by configuration order) with probability proportional to
//     Locality*(1-Locality)^k; uniform for Locality 0.
//
// Sets of four or more groups (three remote warehouses), rare at the
// paper's remote-item probabilities, are left out everywhere, and so is
// any set whose probability for its client is below SetProbMin: the rest
// is renormalised. That bounds the sets per client by 1/SetProbMin.
//
// # Latency model
//
// Contention-free: one message at a time, every group a single reliable
// process. A hop between groups costs the one-way latency, half the round
// trip of the matrix (the diagonal inside a region), and every step a group
// takes (ordering, proposing, delivering, answering a notification) adds a
// commit, CommitMs. The answer of destination d reaches the client at d's
// delivery time plus the hop from d to the client's group.
//
//   - FlexCast (DESIGN 3.2), destinations by rank d0 < d1 < ...: the client
//     sends to the lca d0, which delivers after a commit. A destination dj
//     delivers a commit after the last of: the MSG from d0, the ACK of every
//     destination ranked between d0 and dj (strategy b) and, with
//     Notifications, the ACK of every group ranked between them that is not a
//     destination (strategy c), each counted as if notified by every group
//     below it and answering a commit after the last of them. The protocol
//     sends fewer notifications (one per acting group, to a group it knows
//     an earlier message of, which answers once it delivered the messages it
//     knows addressed to it), but what the groups between two destinations
//     cost is about this: on aws-12, over four overlays (the paper's O1 and
//     three suggestions), the model with a 2 ms commit put every mean 1st
//     and 2nd answer within 11% of a 30 s run's. Without Notifications the
//     2nd answer of a two-group set does not depend on the order at all,
//     and the search spreads neighbours apart, which the runs punish: an
//     order suggested so measured a mean 2nd answer of 114 ms against O1's
//     40 (stalls that follow the flush period: 50 ms with flushes 2.5 times
//     rarer, while O1 did not move). The groups
//     between d0 and dj thus form a longest-path problem over the rank
//     order, as in the paper's prototype's overlay tool, but timed hop by
//     hop.
//   - Skeen (3.3): the client sends to the destination nearest to it, which
//     relays to the others; each destination proposes a commit after it
//     receives the message, and delivers a commit after it holds every
//     proposal.
//   - Tree (3.4): the client sends to the tree-lca, and each group on the
//     tree path to a destination commits and forwards.
//
// Closed loop: a client waits for its transaction's last answer and then
// submits the next one, so a client in a fast region completes more
// transactions. Every mean is per transaction over all clients: client h
// weighs 1/E[last answer of h].
//
// # Search
//
// The objective is the mean first, last, or mean destination answer
// (Objective). With KeepLast the suggestion's mean last answer is also no
// worse than the first start's (the configured overlay's), and each
// client's no worse than its own under that start by more than HomeSlack:
// the closed-loop mean alone lets a search trade a few regions' clients
// for the others, since a slow client completes fewer transactions and
// weighs less (on aws-12 the lowest first answer that keeps only the mean
// makes two regions' clients wait 6.3 times longer). The search minimises
// the objective plus w times the last answer for w in LastWeights,
// lightest first, up to the first result within the bounds; then the
// objective plus LastPenalty times the excess over the bounds, from that
// result and the starts (the weighted searches find only the orders on
// the convex hull of first against last answer), and keeps the better.
// The closed-loop weights depend on the overlay itself. The branch and
// bound, exact up to ExactMax groups, fixes them (from the best order so
// far), finds the best order for them (over rank prefixes, with a lower
// bound that is the model itself for the destinations already ranked and
// the cheapest lca for the others), and repeats until the order stops
// changing. Beyond ExactMax a seeded simulated annealing over swaps and
// moves scores each order with its own weights, from per-home sums that a
// move updates for the sets it touches. Every order the search returns or
// compares is scored with its own weights (Model.FlexCast). Everything
// is a function of its arguments and of the *rand.Rand passed in.
package overlay
