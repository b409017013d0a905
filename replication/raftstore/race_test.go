//go:build race

package raftstore

// raceDetector: the race detector is on, and slows each crash point
// severalfold.
const raceDetector = true
