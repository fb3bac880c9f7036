//go:build wharf_testruntime

package daemon

import (
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/runtime/runtimetest"
)

// testBuild: this binary accepts the configuration's testing section.
const testBuild = true

// fakeRuntime is the in-memory engine; its processes stop on "stop".
func fakeRuntime() runtime.Runtime {
	return runtimetest.New(runtimetest.Process{StopCommand: "stop", CrashCommand: "crash"})
}
