package server

// The disk monitor's arithmetic (diskmon.go), kept free of I/O so that it
// is tested alone.

// entryCharge is the least an entry costs against the disk limit (the
// sandbox's rule: one 4 KiB block).
const entryCharge = 4096

// ioTally follows the write_bytes counters of a container's processes
// between two full walks.
type ioTally struct {
	last map[int]uint64 // pid → write_bytes at the previous read
}

// add takes the counters read now (pid → write_bytes) and returns the
// bytes written since the previous read. A process seen for the first
// time counts whole (it started after the previous read, or the tally is
// new: its writes are not in the last walk's figure, or are counted twice,
// which only makes the estimate higher). A counter that went down is a
// new process under a reused id: it counts whole. A parent's counter
// jumps when it reaps a child already counted: counted twice again, an
// overestimate. Processes gone are forgotten.
func (t *ioTally) add(now map[int]uint64) uint64 {
	var delta uint64
	for pid, v := range now {
		prev, seen := t.last[pid]
		switch {
		case !seen || v < prev:
			delta += v
		default:
			delta += v - prev
		}
	}
	t.last = now
	return delta
}

// diskFigures is what the monitor knows of one running server at a check.
type diskFigures struct {
	limit      int64 // disk limit in bytes; 0 unlimited
	entryLimit int64 // most entries; 0 unbounded
	usage      int64 // the sandbox's usage: last walk + the daemon's own writes since
	written    int64 // bytes the container's processes wrote since the last walk
	// entries is the entry count now and walkEntries the count at the
	// last walk; entries is -1 when not counted at this check.
	entries, walkEntries int64
}

// estimate is an upper bound of what the server occupies now, as far as
// the counters see: the usage, every byte written since, and one block
// for every entry made since.
func (f diskFigures) estimate() int64 {
	e := f.usage + f.written
	if f.entries > f.walkEntries {
		e += (f.entries - f.walkEntries) * entryCharge
	}
	return e
}

// needsWalk reports whether the estimate passed the disk limit: the exact
// figure must be read (a full walk) to decide.
func (f diskFigures) needsWalk() bool {
	return f.limit > 0 && f.estimate() > f.limit
}

// tooManyEntries reports whether the entry count passed the entry limit
// (the count is exact: no walk needed).
func (f diskFigures) tooManyEntries() bool {
	return f.entryLimit > 0 && f.entries > f.entryLimit
}

// overLimit reports whether an exact usage passed the disk limit.
func overLimit(used, limit int64) bool { return limit > 0 && used > limit }
