package server

import (
	"bytes"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func collect(t *testing.T, r io.Reader) []string {
	t.Helper()
	var got []string
	if err := readLines(r, func(l string) { got = append(got, l) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestReadLines(t *testing.T) {
	long := strings.Repeat("a", MaxLineBytes+10)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"one line", "hello\n", []string{"hello"}},
		{"no final newline", "a\nb", []string{"a", "b"}},
		{"crlf", "a\r\nb\r\n", []string{"a", "b"}},
		{"empty lines", "\n\nx\n", []string{"", "", "x"}},
		{"exactly the limit", strings.Repeat("b", MaxLineBytes) + "\nnext\n", []string{strings.Repeat("b", MaxLineBytes), "next"}},
		{"over the limit is cut", long + "\nnext\n", []string{long[:MaxLineBytes], "next"}},
		{"over the limit at the end", long, []string{long[:MaxLineBytes]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, collect(t, strings.NewReader(tt.in))); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			// The same split whatever the read sizes are.
			if diff := cmp.Diff(tt.want, collect(t, iotest.OneByteReader(strings.NewReader(tt.in)))); diff != "" {
				t.Errorf("one byte at a time (-want +got)\n%s", diff)
			}
		})
	}
}

// patternReader yields n bytes of 'x' without holding them in memory.
type patternReader struct{ n int }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.n == 0 {
		return 0, io.EOF
	}
	k := min(len(b), p.n)
	for i := range b[:k] {
		b[i] = 'x'
	}
	p.n -= k
	return k, nil
}

// A 10 MB line without a newline must neither grow memory nor stop the
// console: the line is cut, and the next line comes through.
func TestReadLinesTenMegabyteLineBoundedMemory(t *testing.T) {
	const size = 10 << 20
	r := io.MultiReader(&patternReader{n: size}, strings.NewReader("\nafter\n"))
	var lines []string
	var maxLen int
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := readLines(r, func(l string) {
		maxLen = max(maxLen, len(l))
		if len(lines) < 10 {
			lines = append(lines, l[:min(len(l), 10)])
		}
	})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if maxLen > MaxLineBytes {
		t.Errorf("longest line %d bytes, limit %d", maxLen, MaxLineBytes)
	}
	if diff := cmp.Diff([]string{"xxxxxxxxxx", "after"}, lines); diff != "" {
		t.Errorf("lines (-want +got)\n%s", diff)
	}
	// Everything allocated while reading 10 MB: a few buffers, never the line.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("reading a 10 MB line allocated %d bytes", alloc)
	}
}

func TestReadLinesReportsReadError(t *testing.T) {
	var got []string
	err := readLines(iotest.TimeoutReader(strings.NewReader("partial")), func(l string) { got = append(got, l) })
	if err == nil {
		// TimeoutReader fails the second read; the first gives "partial".
		t.Fatal("want the read error")
	}
	if diff := cmp.Diff([]string{"partial"}, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestThrottle(t *testing.T) {
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	limit, window := 3, 100*time.Millisecond
	th := &throttle{now: func() time.Time { return now }, lines: func() (int, time.Duration) { return limit, window }}
	type res struct{ ok, first bool }
	var got []res
	for range 6 {
		ok, first := th.allow()
		got = append(got, res{ok, first})
	}
	want := []res{{true, false}, {true, false}, {true, false}, {false, true}, {false, false}, {false, false}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(res{})); diff != "" {
		t.Fatalf("first window (-want +got)\n%s", diff)
	}
	// A new window lets lines through again and allows one more notice.
	now = now.Add(window)
	for i := range 3 {
		if ok, _ := th.allow(); !ok {
			t.Fatalf("line %d of the second window refused", i)
		}
	}
	if ok, first := th.allow(); ok || !first {
		t.Fatalf("4th line of the second window: ok=%v first=%v", ok, first)
	}
	// Still inside the window: refused without a new notice.
	now = now.Add(window - time.Millisecond)
	if ok, first := th.allow(); ok || first {
		t.Fatalf("late line of the second window: ok=%v first=%v", ok, first)
	}
	// reset starts a fresh window at once.
	th.reset()
	if ok, _ := th.allow(); !ok {
		t.Fatal("refused after reset")
	}
	// Disabled (no limit): everything passes.
	limit = 0
	for range 100 {
		if ok, _ := th.allow(); !ok {
			t.Fatal("disabled throttle refused a line")
		}
	}
}

func TestRing(t *testing.T) {
	r := newRing(func() int { return 3 })
	if got := r.last(10); len(got) != 0 {
		t.Fatalf("empty ring: %q", got)
	}
	r.add("a")
	r.add("b")
	if diff := cmp.Diff([]string{"a", "b"}, r.last(10)); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"b"}, r.last(1)); diff != "" {
		t.Error(diff)
	}
	r.add("c")
	r.add("d")
	r.add("e")
	if diff := cmp.Diff([]string{"c", "d", "e"}, r.last(10)); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"d", "e"}, r.last(2)); diff != "" {
		t.Error(diff)
	}
	if got := r.last(0); len(got) != 0 {
		t.Errorf("last(0) = %q", got)
	}
	var buf bytes.Buffer
	for i := range 1000 {
		buf.WriteByte(byte('a' + i%26))
		r.add(buf.String()[i:])
	}
	if got := r.last(3); len(got) != 3 || got[2] != string(rune('a'+999%26)) {
		t.Errorf("after wrapping many times: %q", got)
	}
}

// A size change resizes the ring at the next use, keeping the newest lines.
func TestRingResize(t *testing.T) {
	size := 3
	r := newRing(func() int { return size })
	for _, l := range []string{"a", "b", "c", "d"} {
		r.add(l)
	}
	size = 5
	if diff := cmp.Diff([]string{"b", "c", "d"}, r.last(10)); diff != "" {
		t.Fatalf("after growing: %s", diff)
	}
	for _, l := range []string{"e", "f", "g"} {
		r.add(l)
	}
	if diff := cmp.Diff([]string{"c", "d", "e", "f", "g"}, r.last(10)); diff != "" {
		t.Fatalf("grown ring: %s", diff)
	}
	size = 2
	if diff := cmp.Diff([]string{"f", "g"}, r.last(10)); diff != "" {
		t.Fatalf("after shrinking: %s", diff)
	}
	r.add("h")
	if diff := cmp.Diff([]string{"g", "h"}, r.last(10)); diff != "" {
		t.Fatalf("shrunk ring: %s", diff)
	}
	size = 4 // grow from a full ring
	r.add("i")
	if diff := cmp.Diff([]string{"g", "h", "i"}, r.last(10)); diff != "" {
		t.Fatalf("regrown ring: %s", diff)
	}
}
