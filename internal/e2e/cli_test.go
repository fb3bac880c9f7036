package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// Asking a command for its usage is not an error: exit 0, the usage on
// stderr, and no "flag: help requested" line.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"dev", "--help"}, {"configure", "--help"}, {"diagnostics", "-h"}} {
		var stderr bytes.Buffer
		cmd := exec.Command(wharfBinary, args...)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("wharf %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if strings.Contains(stderr.String(), "help requested") || !strings.Contains(stderr.String(), "-") {
			t.Errorf("wharf %s: stderr %q, want the usage without an error line", strings.Join(args, " "), stderr.String())
		}
	}
	// A wrong flag still fails.
	if err := exec.Command(wharfBinary, "--no-such-flag").Run(); err == nil {
		t.Error("wharf --no-such-flag exited 0")
	}
}
