package server

import "testing"

func TestIOTallyCountsGrowthAndNewProcesses(t *testing.T) {
	var tl ioTally
	steps := []struct {
		now  map[int]uint64
		want uint64
	}{
		{map[int]uint64{10: 100}, 100},           // first read: whole
		{map[int]uint64{10: 150}, 50},            // growth
		{map[int]uint64{10: 150, 11: 30}, 30},    // a new process: whole
		{map[int]uint64{10: 400}, 250},           // 11 gone (reaped by 10: its 30 counted again in 10's jump)
		{map[int]uint64{10: 20}, 20},             // 10 reused by a new process: whole
		{map[int]uint64{}, 0},                    // nothing runs
		{map[int]uint64{10: 20, 12: 0}, 20},      // 10 again after it was gone: whole
		{map[int]uint64{10: 20, 12: 4096}, 4096}, // only 12 grew
	}
	for i, st := range steps {
		if got := tl.add(st.now); got != st.want {
			t.Fatalf("step %d: add = %d, want %d", i, got, st.want)
		}
	}
}

func TestDiskFiguresEstimate(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name          string
		f             diskFigures
		walk, entries bool
	}{
		{"under", diskFigures{limit: 16 * mib, usage: 8 * mib, written: 7 * mib, entries: -1}, false, false},
		{"writes cross", diskFigures{limit: 16 * mib, usage: 8 * mib, written: 9 * mib, entries: -1}, true, false},
		{"the daemon's own writes cross", diskFigures{limit: 16 * mib, usage: 17 * mib, entries: -1}, true, false},
		{"new entries cross", diskFigures{limit: 16 * mib, usage: 8 * mib, entries: 3000, walkEntries: 900}, true, false},
		{"fewer entries count nothing", diskFigures{limit: 16 * mib, usage: 15 * mib, entries: 10, walkEntries: 900}, false, false},
		{"unlimited bytes", diskFigures{usage: 1 << 40, written: 1 << 40, entries: 5}, false, false},
		{"entry limit", diskFigures{entryLimit: 100, entries: 101, walkEntries: 0}, false, true},
		{"entry limit reached, not passed", diskFigures{entryLimit: 100, entries: 100}, false, false},
		{"no entry limit", diskFigures{entries: 1 << 30}, false, false},
	}
	for _, tt := range tests {
		if got := tt.f.needsWalk(); got != tt.walk {
			t.Errorf("%s: needsWalk = %v, want %v (estimate %d)", tt.name, got, tt.walk, tt.f.estimate())
		}
		if got := tt.f.tooManyEntries(); got != tt.entries {
			t.Errorf("%s: tooManyEntries = %v, want %v", tt.name, got, tt.entries)
		}
	}
	f := diskFigures{usage: 100, written: 50, entries: 12, walkEntries: 10}
	if got := f.estimate(); got != 150+2*entryCharge {
		t.Errorf("estimate = %d, want %d", got, 150+2*entryCharge)
	}
	if overLimit(10, 0) || overLimit(10, 10) || !overLimit(11, 10) {
		t.Error("overLimit")
	}
}
