//go:build !race

package raftstore

const raceDetector = false
