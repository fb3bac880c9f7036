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
	// RepositoryLeaseTTLMS, when > 0, replaces the 60 s expiry of a shared
	// backup repository's leases (issue 36), and the clock skew bound of
	// 30 s becomes 0 (the nodes of an end-to-end test share one clock), so
	// that a test sees a killed node's lease expire within seconds.
	RepositoryLeaseTTLMS int `yaml:"repository_lease_ttl_ms,omitempty" json:"repository_lease_ttl_ms,omitempty"`
}

// MinTestLeaseTTLMS is the shortest testing.repository_lease_ttl_ms: a
// renewal every 250 ms still lands in time on a loaded machine.
const MinTestLeaseTTLMS = 1000

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
	if t.RepositoryLeaseTTLMS != 0 && (t.RepositoryLeaseTTLMS < MinTestLeaseTTLMS || t.RepositoryLeaseTTLMS > 60_000) {
		bad("testing.repository_lease_ttl_ms", "must be 0 (the default, 60 s) or 1000-60000: a lease is renewed every quarter of it")
	}
}
