package daemon

import (
	"context"
	"log/slog"
)

// A subsystem is one part of the running node with one start/stop shape.
// Start brings it up (nil: it is ready once built); a start that fails
// undoes its own work before returning. Stop ends it and waits for its
// goroutines (nil: nothing to stop).
type subsystem struct {
	name  string
	start func(ctx context.Context) error
	stop  func()
}

// lifecycle starts subsystems in the order given and stops the started ones
// in reverse, so the shutdown order is the list read backwards: what starts
// later depends on what started earlier and ends first. A failed start
// stops what already started.
type lifecycle struct {
	log     *slog.Logger
	started []subsystem
}

// start starts subs in order. It returns the first error unchanged, after
// stopping every subsystem it started.
func (l *lifecycle) start(ctx context.Context, subs []subsystem) error {
	for _, s := range subs {
		if s.start != nil {
			if err := s.start(ctx); err != nil {
				l.stop()
				return err
			}
		}
		l.started = append(l.started, s)
	}
	return nil
}

// stop stops the started subsystems, last started first. It may be called
// again: what is stopped is forgotten.
func (l *lifecycle) stop() {
	for i := len(l.started) - 1; i >= 0; i-- {
		s := l.started[i]
		if s.stop != nil {
			l.log.Debug("stopping", "subsystem", s.name)
			s.stop()
		}
	}
	l.started = nil
}
