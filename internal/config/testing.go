package config

// Testing holds knobs for the end-to-end tests, which run the real binary.
// Only a binary built with the wharf_testruntime tag accepts them (the
// daemon refuses to start otherwise); release builds never set that tag.
// The panel cannot change them: POST /api/update keeps the node's own.
type Testing struct {
	// Runtime "fake" runs the servers on the in-memory runtime of
	// runtime/runtimetest instead of Docker; empty means Docker.
	Runtime string `yaml:"runtime,omitempty" json:"runtime,omitempty"`
	// WebsocketWriteTimeoutMS, when > 0, replaces the 10 s a websocket
	// frame write may take before a non-reading client is dropped.
	WebsocketWriteTimeoutMS int `yaml:"websocket_write_timeout_ms,omitempty" json:"websocket_write_timeout_ms,omitempty"`
	// ActivityMergeWindowS, when > 0, replaces the minute within which
	// SFTP activity records merge, so that a test need not wait for a
	// minute to turn before it records.
	ActivityMergeWindowS int `yaml:"activity_merge_window_s,omitempty" json:"activity_merge_window_s,omitempty"`
}

// TestRuntimeFake is the Testing.Runtime value of the in-memory runtime.
const TestRuntimeFake = "fake"

// IsZero reports whether no test knob is set (a production configuration).
func (t Testing) IsZero() bool { return t == Testing{} }

func validateTesting(t Testing, bad func(key, reason string)) {
	if t.Runtime != "" && t.Runtime != TestRuntimeFake {
		bad("testing.runtime", `must be empty (Docker) or "fake"`)
	}
	if t.WebsocketWriteTimeoutMS < 0 {
		bad("testing.websocket_write_timeout_ms", "must not be negative")
	}
	if t.ActivityMergeWindowS < 0 {
		bad("testing.activity_merge_window_s", "must not be negative")
	}
}
