//go:build !invariants

package flexcast

const invariants = false
