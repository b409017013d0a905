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
//     delivers a commit after the last of: the MSG from d0 and the ACK of
//     every destination ranked between d0 and dj (strategy b); and, with
//     FlushMs, not before the last flush that d0 delivered before the
//     message. The rank-0 group multicasts a flush every FlushMs, and the
//     flush is acknowledged along the ranks, each group to the next (package
//     flexcast), a hop and a commit each: it reaches dj after d0 by the walk
//     d0, d0+1, ..., dj through every group ranked between them, destination
//     or not. A message that follows the flush in d0's order waits for it at
//     dj (strategy a: the flush is addressed to dj and precedes it), so when
//     that walk is longer than the direct way the message is held back. d0
//     delivered the flush u before the message, u uniform over the period:
//     the model averages each destination's answer over flushPhases values
//     of u (only for the sets where the walk can exceed the direct way), and
//     orders the averages into 1st, 2nd and 3rd answer. This is what
//     the groups between two destinations cost, and why the rank order
//     matters beyond the lca: an order that ranks distant groups next to
//     each other makes the walk long. The walk's length is a sum over the
//     set's rank span, so a set's answers depend on its span only (the
//     annealing's incremental scores rely on it).
//     With Notifications the model also counts each group ranked between d0
//     and dj as notified by every group below it, answering a commit after
//     the last of them, and dj waits for its ACK (strategy c): an upper
//     bound, kept for comparison. The protocol sends one notification per
//     acting group, only to a group it knows an earlier message of since
//     the last flush, and the runs send almost none (0 bytes a transaction
//     on aws-12 at 0.99 locality).
//     Measured on aws-12 (0.99 locality, global-only, 60 s runs, one
//     replica a group): with a 2 ms commit and the servers' 400 ms flush the
//     model puts O1 at 21.1 / 36.3 / 82.4 ms (1st / 2nd / 3rd answer) and its
//     suggestion at 10.5 / 36.2 / 82.6; with the step the clients measured
//     (5-6 ms on a loaded hour, gtpcc.Report.EntryStepMs) every 1st and 2nd
//     answer within 4% of the run's. With notifications instead of the
//     flush the 2nd answers came out 17-21% high on a fast hour; with
//     neither, the 2nd answer of a two-group set does not depend on the
//     order, and the order such a search found measured a mean 2nd answer
//     of 114 ms against O1's 40, stalls that follow the flush period.
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
// weighs less (on aws-12, with notifications instead of the flush, the
// lowest first answer that keeps only the mean made two regions' clients
// wait 6.3 times longer; with the flush, 1.41 times). The search minimises
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
