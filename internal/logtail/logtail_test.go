package logtail

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestTailKeepsTheLastLinesAndWritesThrough(t *testing.T) {
	var out bytes.Buffer
	tail := New(&out)
	for i := range MaxLines + 7 {
		fmt.Fprintf(tail, "line %d\n", i)
	}
	if got := strings.Count(out.String(), "\n"); got != MaxLines+7 {
		t.Fatalf("wrote through %d lines, want %d", got, MaxLines+7)
	}
	last := tail.Last(3)
	want := []string{fmt.Sprintf("line %d", MaxLines+4), fmt.Sprintf("line %d", MaxLines+5), fmt.Sprintf("line %d", MaxLines+6)}
	if strings.Join(last, "|") != strings.Join(want, "|") {
		t.Fatalf("Last(3) = %q, want %q", last, want)
	}
	if all := tail.Last(10 * MaxLines); len(all) != MaxLines || all[0] != "line 7" {
		t.Fatalf("Last(many) gave %d lines starting %q", len(all), all[0])
	}
	if none := tail.Last(-1); len(none) != 0 {
		t.Fatalf("Last(-1) = %q", none)
	}
}

func TestTailJoinsSplitWritesAndCapsLongLines(t *testing.T) {
	tail := New(&bytes.Buffer{})
	fmt.Fprint(tail, "first half, ")
	fmt.Fprint(tail, "second half\nnext\n")
	fmt.Fprint(tail, strings.Repeat("x", 3*MaxLineBytes)+"\n")
	got := tail.Last(3)
	if got[0] != "first half, second half" || got[1] != "next" {
		t.Fatalf("got %q", got[:2])
	}
	if len(got[2]) != MaxLineBytes {
		t.Fatalf("a long line is kept as %d bytes, want %d", len(got[2]), MaxLineBytes)
	}
	if len(tail.Last(1)) != 1 {
		t.Fatal("a partial line must not count")
	}
}

func TestTailConcurrentWriters(t *testing.T) {
	tail := New(&bytes.Buffer{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				fmt.Fprintf(tail, "w%d %d\n", w, i)
				_ = tail.Last(5)
			}
		}()
	}
	wg.Wait()
	if got := tail.Last(MaxLines); len(got) != MaxLines {
		t.Fatalf("held %d lines, want %d", len(got), MaxLines)
	}
}
