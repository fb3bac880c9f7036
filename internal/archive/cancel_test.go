package archive

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
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

// TestWriteStopsInsideAFileWhenCancelled: a file stops being archived
// between two chunks once the context ends, for the tar writers of every
// compressor the file manager uses; without the per-chunk check the only
// file would be archived whole and Write would succeed. (A sparse file is
// no longer the example: its holes are not read, issue 33 item 5.)
func TestWriteStopsInsideAFileWhenCancelled(t *testing.T) {
	src := t.TempDir()
	data := make([]byte, 16<<20)
	rand.NewChaCha8([32]byte{1}).Read(data) // incompressible: the output grows with the input
	if err := os.WriteFile(filepath.Join(src, "big.bin"), data, 0o644); err != nil {
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
