// Package gtpcc is the client side of geo TPC-C on FlexKV (DESIGN 9):
// warehouses are partitions, new-order and payment are stored procedures
// (package gtpcc/procs, registered on every server) multicast to the groups
// of the warehouses they touch, and this package loads a cluster, runs
// closed-loop clients, checks the TPC-C consistency conditions and reports
// latency by destination order.
package gtpcc
