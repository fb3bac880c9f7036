package archive

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// cancelAfter is an archive sink that cancels the write's context once n
// bytes reached it.
type cancelAfter struct {
	n      int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.n -= int64(len(p))
	if c.n <= 0 {
		c.cancel()
	}
	return len(p), nil
}

// TestWriteStopsInsideAFileWhenCancelled: a 1 TiB sparse file (nothing on
// disk, hours to read) stops being archived between two chunks once the
// context ends, for the tar writers of every compressor the file manager
// uses; without the per-chunk check this test would not end.
func TestWriteStopsInsideAFileWhenCancelled(t *testing.T) {
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "huge.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(filepath.Join(src, "huge.bin"), 1<<40); err != nil {
		t.Fatal(err)
	}
	fsys := newFS(t, src)
	for name, c := range map[string]func(io.Writer) (io.WriteCloser, error){
		"gzip": nil,
		"tar":  func(w io.Writer) (io.WriteCloser, error) { return nopWriteCloser{w}, nil },
	} {
		ctx, cancel := context.WithCancel(context.Background())
		sink := &cancelAfter{n: 64 << 10, cancel: cancel}
		_, err := Write(ctx, sink, fsys, WriteOptions{Level: LevelBestSpeed, Compress: c})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Write after the context ended = %v, want context.Canceled", name, err)
		}
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
