package server

// The process state machine. Every change goes through setState, which
// refuses transitions that are not in this table.
//
//	            start               done line matched
//	offline ──────────► starting ─────────────────────► running
//	   ▲  ▲                │  │                            │
//	   │  │ start failed   │  │ stop/kill                  │ stop/kill
//	   │  └────────────────┘  ▼                            ▼
//	   │   process exited  stopping ◄──────────────────────┘
//	   └───────────────────────┘   (and starting/running ──exit──► offline: a crash)
//
// offline → running is the re-attach of a container found running at boot.
var transitions = map[State][]State{
	Offline:  {Starting, Running},
	Starting: {Running, Stopping, Offline},
	Running:  {Stopping, Offline},
	Stopping: {Offline},
}

// CanTransition reports whether from → to is allowed. Staying in the same
// state is always allowed (and does nothing).
func CanTransition(from, to State) bool {
	if from == to {
		return true
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// IsRunning reports whether the state counts as running (running or starting).
func (s State) IsRunning() bool { return s == Running || s == Starting }
