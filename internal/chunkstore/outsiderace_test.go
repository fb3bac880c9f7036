package chunkstore

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// outsideRace runs the calling test again in a test binary of this package
// built without the race detector, and fails t when it fails there; it
// returns true when it did so (the caller then returns), false when the
// caller must run the test itself (no race detector here).
//
// The kill -9 tests run a child for every step of a backup, a delete and a
// collection, and read every backup back after each crash: under the race
// detector that took 707 s against 82 s without it on a loaded 2-core CI
// machine (issue 38 §5), while what they check, what a kill leaves in the
// repository, does not depend on it. The concurrency of the same code is
// checked under the race detector by the package's other tests.
func outsideRace(t *testing.T) bool {
	t.Helper()
	if !raceEnabled {
		return false
	}
	bin := filepath.Join(t.TempDir(), "chunkstore.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=") // no -race from the environment
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the test binary without the race detector: %v\n%s", err, out)
	}
	run := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout=20m")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("%s without the race detector: %v\n%s", t.Name(), err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) {
		t.Fatalf("%s did not run without the race detector:\n%s", t.Name(), out)
	}
	t.Logf("%s passed in a test binary without the race detector", t.Name())
	return true
}
