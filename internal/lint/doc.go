// Package lint enforces repository rules that the compiler does not: the
// purity of the protocol cores (DESIGN 3.1: no clock, randomness, goroutines,
// I/O or map order reaching their state) and the import arrows between
// packages (DESIGN 1). The rules are Go tests, so `go test ./...` runs them
// with no tool to install. The package has no non-test code.
package lint
