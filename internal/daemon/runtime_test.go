package daemon

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
)

// A release binary (built without the test tag) refuses to boot with a
// testing section rather than quietly running on Docker or a fake.
func TestReleaseBuildRefusesTheTestingSection(t *testing.T) {
	if testBuild {
		t.Skip("built with the " + testBuildTag + " tag")
	}
	cfg := config.Defaults()
	cfg.Testing.Runtime = config.TestRuntimeFake
	rt, err := newRuntime(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), testBuildTag) {
		t.Fatalf("newRuntime = %v, %v; want an error naming the build tag", rt, err)
	}
}
