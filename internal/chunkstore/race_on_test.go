//go:build race

package chunkstore

// raceEnabled says this test binary was built with the race detector.
const raceEnabled = true
