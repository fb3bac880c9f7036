package docker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (an
// attach or stats stream that was not closed, an idle connection of a
// client that was not closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
