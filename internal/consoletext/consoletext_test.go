package consoletext

import (
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// limit is the bound the tests use: the server's console bound.
const limit = 16 << 10

func collect(t *testing.T, r io.Reader) []string {
	t.Helper()
	var got []string
	if err := ReadLines(r, limit, func(l string) { got = append(got, l) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestReadLines(t *testing.T) {
	long := strings.Repeat("a", limit+10)
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
		{"exactly the limit", strings.Repeat("b", limit) + "\nnext\n", []string{strings.Repeat("b", limit), "next"}},
		{"over the limit is cut", long + "\nnext\n", []string{long[:limit], "next"}},
		{"over the limit at the end", long, []string{long[:limit]}},
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
	err := ReadLines(r, limit, func(l string) {
		maxLen = max(maxLen, len(l))
		if len(lines) < 10 {
			lines = append(lines, l[:min(len(l), 10)])
		}
	})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if maxLen > limit {
		t.Errorf("longest line %d bytes, limit %d", maxLen, limit)
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
	err := ReadLines(iotest.TimeoutReader(strings.NewReader("partial")), limit, func(l string) { got = append(got, l) })
	if err == nil {
		// TimeoutReader fails the second read; the first gives "partial".
		t.Fatal("want the read error")
	}
	if diff := cmp.Diff([]string{"partial"}, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// Cases of the Docker log splitter this replaced: a small bound, and a line
// longer than any read buffer.
func TestReadLinesSmallLimit(t *testing.T) {
	var got []string
	in := "a\r\nbb\n" + strings.Repeat("x", 100) + "\nlast"
	if err := ReadLines(strings.NewReader(in), 10, func(l string) { got = append(got, l) }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "bb", strings.Repeat("x", 10), "last"}, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	got = nil
	if err := ReadLines(strings.NewReader(strings.Repeat("y", 100000)+"\nz\n"), 64, func(l string) { got = append(got, l) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[0]) != 64 || got[1] != "z" {
		t.Errorf("long line: %d lines, first %d bytes", len(got), len(got[0]))
	}
}

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain",
		"\x1b[33m\x1b[1m[Wharf Daemon]:\x1b[39m hi\x1b[0m": "[Wharf Daemon]: hi",
		"\x1b[1;31mred\x1b[m":                              "red",
		"\x1b[2J\x1b[Hcleared":                             "cleared", // erase screen, cursor home
		"\x1b[?25lhidden cursor\x1b[?25h":                  "hidden cursor",
		"Done (1.2s)! \x1b[K":                              "Done (1.2s)! ",
		"\x1bMreverse index":                               "reverse index",
	} {
		if got := StripANSI(in); got != want {
			t.Errorf("StripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

// chunks reads one string per Read.
type chunks []string

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	*c = (*c)[1:]
	return n, nil
}

// ReadLinesFlush calls flush after the lines of each read (issue 38: the
// lines read together are published together), and after a last line
// without a newline.
func TestReadLinesFlushPerRead(t *testing.T) {
	r := &chunks{"a\nb\nc", "d\n", "e\nf"}
	var got []string
	err := ReadLinesFlush(r, 100, func(l string) { got = append(got, l) }, func() { got = append(got, "|") })
	if err != nil {
		t.Fatal(err)
	}
	want := "a b | cd | e | | f |" // the read that ends (EOF) flushes nothing, then the last line
	if s := strings.Join(got, " "); s != want {
		t.Fatalf("got %q, want %q", s, want)
	}
}
