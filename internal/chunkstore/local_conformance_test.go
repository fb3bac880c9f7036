package chunkstore_test

import (
	"testing"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/chunkstore/backendtest"
)

// The local directory backend keeps the same contract as the S3 one, so a
// repository behaves the same wherever it is stored.
func TestLocalBackendConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) chunkstore.Backend {
		b, err := chunkstore.NewLocalBackend(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
