package sandbox

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFileSetTimes: SetTimes on an open file sets both times to the
// nanosecond, on the file itself.
func TestFileSetTimes(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	d := mustOpenDir(t, fx.fs, "/")
	w, err := d.Create("f", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	mt := time.Date(2011, 12, 13, 14, 15, 16, 987654321, time.UTC)
	if err := w.SetTimes(at, mt); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(fx.root, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(st.Mtim.Unix()); !got.Equal(mt) {
		t.Errorf("mtime %v, want %v", got, mt)
	}
	if got := time.Unix(st.Atim.Unix()); !got.Equal(at) {
		t.Errorf("atime %v, want %v", got, at)
	}
	if err := w.SetTimes(at, mt); err == nil {
		t.Error("SetTimes on a closed file did not fail")
	}
}
