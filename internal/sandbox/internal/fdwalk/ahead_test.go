package fdwalk

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The lister lists the first subdirectories of a directory with it, as
// jobs listed already: at most AheadPerDir, none after one it could not
// use (changed too recently), and none past tune.kidEntries entries.
func TestListKids(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p")
	for _, d := range []string{"a", "b", "c", "d", "e", "q/x", "q/y", "q/z", "r/big", "r/small"} {
		if err := os.MkdirAll(filepath.Join(p, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range 2 {
			os.WriteFile(filepath.Join(p, d, fmt.Sprintf("f%d", k)), nil, 0o644)
		}
	}
	for k := range 10 {
		os.WriteFile(filepath.Join(p, "r", "big", fmt.Sprintf("g%d", k)), nil, 0o644)
	}
	tune := Tuning{Settled: 30 * time.Millisecond, KidEntries: 8}
	// The point of the wait: the directories must be older than settled
	// (their ctime moves only once a clock tick).
	time.Sleep(2 * tune.Settled)
	os.WriteFile(filepath.Join(p, "q", "y", "recent"), nil, 0o644)
	// The listings happen half a Settled after y changed, however long
	// the machine takes to get there: y is recent, the others are not.
	var yst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(p, "q", "y"), &yst); err != nil {
		t.Fatal(err)
	}
	tune.Now = func() time.Time { return time.Unix(yst.Ctim.Unix()).Add(tune.Settled / 2) }
	kidsOf := func(dir string) []string {
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		buf := make([]byte, BufSize)
		entries, _, err := listFD(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, k := range listKids(fd, entries, buf, &tune) {
			select {
			case <-k.done:
			default:
				t.Fatalf("%s: not done", k.name)
			}
			if !k.ok || k.state.Load() != jobListing || k.dirfd != -1 || len(k.entries) < 2 {
				t.Fatalf("%s: ok %v, state %d, dirfd %d, %d entries", k.name, k.ok, k.state.Load(), k.dirfd, len(k.entries))
			}
			names = append(names, k.name)
		}
		return names
	}
	if got := fmt.Sprint(kidsOf(p)); got != fmt.Sprint([]string{"a", "b", "c", "d"}) {
		t.Fatalf("kids of p: %s", got)
	}
	if got := fmt.Sprint(kidsOf(filepath.Join(p, "q"))); got != "[x]" {
		t.Fatalf("kids of q (y changed just now): %s", got)
	}
	if got := fmt.Sprint(kidsOf(filepath.Join(p, "r"))); got != "[]" {
		t.Fatalf("kids of r (big has more entries than the budget): %s", got)
	}
}

// The walk queues the subdirectories listed with a directory at their
// entries, as submitted jobs.
func TestAheadQueueAdopt(t *testing.T) {
	dir := func(name string) *Entry { return &Entry{Base: name, St: syscall.Stat_t{Mode: syscall.S_IFDIR}} }
	file := func(name string) *Entry { return &Entry{Base: name, St: syscall.Stat_t{Mode: syscall.S_IFREG}} }
	ls := &lister{}
	a := &aheadQueue{ls: ls, entries: []*Entry{file("a"), dir("b"), file("c"), dir("d"), dir("e")}}
	a.adopt([]*aheadJob{{name: "b"}, {name: "d"}})
	if len(a.q) != 2 || a.q[0].i != 1 || a.q[1].i != 3 || a.next != 4 || ls.pending != 2 || a.q[0].j.q != a {
		t.Fatalf("queue %+v, next %d, pending %d", a.q, a.next, ls.pending)
	}
	b := &aheadQueue{ls: ls, entries: []*Entry{dir("x")}}
	b.adopt([]*aheadJob{{name: "gone"}})
	if len(b.q) != 0 || ls.pending != 2 {
		t.Fatalf("a subdirectory not among the entries was queued: %+v", b.q)
	}
}
