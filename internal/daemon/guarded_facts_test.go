package daemon

import (
	"testing"

	"github.com/wharf/wharf/internal/runtime"
)

type factsOnly struct {
	runtime.Runtime
	f runtime.EngineFacts
}

func (e factsOnly) Facts() runtime.EngineFacts { return e.f }

// TestGuardedRuntimeKeepsEngineFacts: the servers' runtime behind Wharf's
// firewall still tells the engine's facts (a rootless engine's install
// script directory depends on them, issue 37); a runtime without facts
// gives none.
func TestGuardedRuntimeKeepsEngineFacts(t *testing.T) {
	want := runtime.EngineFacts{Name: "Podman", Version: "4.3.1", Rootless: true, CgroupVersion: "1"}
	var rt runtime.Runtime = &guardedRuntime{Runtime: factsOnly{f: want}}
	f, ok := rt.(runtime.EngineFactser)
	if !ok || f.Facts() != want {
		t.Fatalf("facts through the guard: %v %+v", ok, f)
	}
	if got := (&guardedRuntime{Runtime: struct{ runtime.Runtime }{}}).Facts(); got != (runtime.EngineFacts{}) {
		t.Errorf("facts of a runtime without any: %+v", got)
	}
}
