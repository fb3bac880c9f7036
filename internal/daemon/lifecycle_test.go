package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
)

func TestLifecycleStopsInReverse(t *testing.T) {
	var events []string
	sub := func(name string, fail bool) subsystem {
		return subsystem{
			name: name,
			start: func(context.Context) error {
				if fail {
					return errors.New(name + " failed")
				}
				events = append(events, "start "+name)
				return nil
			},
			stop: func() { events = append(events, "stop "+name) },
		}
	}
	l := lifecycle{log: slog.New(slog.DiscardHandler)}
	if err := l.start(context.Background(), []subsystem{sub("a", false), {name: "no start", stop: func() { events = append(events, "stop no start") }}, sub("b", false)}); err != nil {
		t.Fatal(err)
	}
	l.stop()
	l.stop() // a second stop stops nothing again
	want := []string{"start a", "start b", "stop b", "stop no start", "stop a"}
	if !slices.Equal(events, want) {
		t.Fatalf("events = %q, want %q", events, want)
	}

	events = nil
	err := l.start(context.Background(), []subsystem{sub("a", false), sub("b", true), sub("c", false)})
	if err == nil || err.Error() != "b failed" {
		t.Fatalf("start error = %v, want the failing subsystem's error unchanged", err)
	}
	want = []string{"start a", "stop a"}
	if !slices.Equal(events, want) {
		t.Fatalf("after a failed start: events = %q, want %q", events, want)
	}
}
