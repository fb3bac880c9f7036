package chunkstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when its tests leave a goroutine behind
// (ARCHITECTURE.md rule 2): writers, readers and the store's own
// goroutines are joined by their Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
