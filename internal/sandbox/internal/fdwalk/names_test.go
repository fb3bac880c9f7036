package fdwalk

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// direntRecord is a getdents64 record of name (padded to 8 bytes, as the
// kernel writes them).
func direntRecord(ino uint64, name string) []byte {
	n := (19 + len(name) + 1 + 7) &^ 7
	rec := make([]byte, n)
	binary.NativeEndian.PutUint64(rec, ino)
	binary.NativeEndian.PutUint16(rec[16:], uint16(n))
	rec[18] = unix.DT_REG
	copy(rec[19:], name)
	return rec
}

// TestAppendNamesIsParseDirent: the walk's parse of getdents64
// records gives unix.ParseDirent's names, for random records (deleted
// ones, ".", "..", names of every length) and for a real directory.
func TestAppendNamesIsParseDirent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var buf []byte
		for range r.IntN(40) {
			name := strings.Repeat(string(rune('a'+r.IntN(26))), 1+r.IntN(unix.NAME_MAX))
			switch r.IntN(10) {
			case 0:
				name = "."
			case 1:
				name = ".."
			}
			buf = append(buf, direntRecord(uint64(r.IntN(3)), name)...)
		}
		cut := buf[:r.IntN(len(buf)+1)] // a last record cut short is left out
		want := []string{"x"}
		_, _, want = unix.ParseDirent(cut, -1, want)
		if got := AppendNames([]string{"x"}, cut); !slices.Equal(got, want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	}
	dir := t.TempDir()
	for i := range 300 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%0*d", 1+i%200, i)), nil, 0o600)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, BufSize)
	var got, want []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		got = AppendNames(got, buf[:n])
		_, _, want = unix.ParseDirent(buf[:n], -1, want)
	}
	if len(got) != 300 || !slices.Equal(got, want) {
		t.Fatalf("%d names, ParseDirent's %d", len(got), len(want))
	}
}
