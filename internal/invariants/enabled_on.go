//go:build invariants

package invariants

// Enabled is true in a build with the invariants tag: the expensive
// self-checks run.
const Enabled = true
