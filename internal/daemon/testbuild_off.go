//go:build !wharf_testruntime

package daemon

import "github.com/wharf/wharf/internal/runtime"

// testBuild: a release binary refuses the configuration's testing section,
// and does not even link the fake runtime.
const testBuild = false

func fakeRuntime() runtime.Runtime { panic("unreachable: newRuntime refuses testing.runtime") }
