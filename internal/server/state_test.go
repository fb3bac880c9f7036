package server

import "testing"

func TestTransitionTable(t *testing.T) {
	all := []State{Offline, Starting, Running, Stopping}
	allowed := map[[2]State]bool{
		{Offline, Starting}:  true,
		{Offline, Running}:   true, // re-attach at boot
		{Starting, Running}:  true,
		{Starting, Stopping}: true,
		{Starting, Offline}:  true, // failed start, or the process exited while starting
		{Running, Stopping}:  true,
		{Running, Offline}:   true, // crash
		{Stopping, Offline}:  true,
	}
	for _, from := range all {
		for _, to := range all {
			want := from == to || allowed[[2]State{from, to}]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	for _, s := range all {
		if got, want := s.IsRunning(), s == Running || s == Starting; got != want {
			t.Errorf("%s.IsRunning() = %v", s, got)
		}
	}
}
