//go:build invariants

package flexcast

// invariants turns on expensive self-checks (go test -tags invariants).
const invariants = true
