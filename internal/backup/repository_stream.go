package backup

import (
	"context"
	"io"
	"sync"

	"github.com/klauspost/pgzip"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/sandbox"
)

// What a generated tar.gz holds in its compressor, whatever the number of
// cores (pgzip's default is GOMAXPROCS blocks of 1 MiB): blocks of 256
// KiB, four compressed at once (docs/security.md, "Repository backup
// downloads").
const (
	streamGzipBlock  = 256 << 10
	streamGzipBlocks = 4
)

// gzipStream returns the tar.gz of backup m at level, generated as it is
// read (WriteRepositoryArchive). A damaged chunk ends it with a
// *chunkstore.ChunkError. The generation ends when the stream does, when
// ctx ends, or when the caller closes the reader; Close waits for it, so
// that nothing of a download outlives it: the caller must close it.
func gzipStream(ctx context.Context, st *chunkstore.Store, m chunkstore.Manifest, level int, tempDir string) io.ReadCloser {
	pr, pw := io.Pipe()
	g := &generated{PipeReader: pr}
	g.wg.Go(func() {
		pw.CloseWithError(WriteRepositoryArchive(ctx, pw, st, m, level, tempDir))
	})
	return g
}

// generated is the reading end of a generated stream.
type generated struct {
	*io.PipeReader
	wg sync.WaitGroup
}

// Close stops the generation (its next write fails) and waits for it.
func (g *generated) Close() error {
	g.PipeReader.Close()
	g.wg.Wait()
	return nil
}

// WriteRepositoryArchive writes backup m of st to w as the tar.gz an
// archive backup of the same tree is: a bare stream gets its integrity
// entry (archive.Seal), dated when the backup was made. tempDir holds the
// entry's spool when it outgrows memory. It ends when ctx does.
//
// A failed write to w (a download whose client went away) is kept, never
// returned to pgzip: a pgzip.Writer that saw a write error refuses to
// Close and leaves its output goroutine and buffers behind for ever
// (archive.Write's hashCounter does the same).
func WriteRepositoryArchive(ctx context.Context, w io.Writer, st *chunkstore.Store, m chunkstore.Manifest, level int, tempDir string) error {
	out := &keepError{w: w}
	gw, err := pgzip.NewWriterLevel(out, level)
	if err != nil {
		return err
	}
	if err := gw.SetConcurrency(streamGzipBlock, streamGzipBlocks); err != nil {
		return err
	}
	rd := st.Reader(m)
	defer rd.Close()
	in := untilFailed{w: gw, out: out}
	src := sandbox.ContextReader(ctx, rd)
	if m.Bare {
		err = archive.Seal(ctx, in, src, archive.SealOptions{TempDir: tempDir, ModTime: m.Created})
	} else {
		_, err = io.Copy(in, src)
	}
	// It always ends pgzip's goroutines: pgzip never saw a write error.
	cerr := gw.Close()
	if werr := out.failed(); werr != nil {
		return werr // the cause of whatever the tar side reported
	}
	if err == nil {
		err = cerr
	}
	return err
}

// keepError passes writes to w until one fails; it keeps that error and
// swallows everything after it, never failing a write itself.
type keepError struct {
	w   io.Writer  // written by pgzip's one output goroutine
	mu  sync.Mutex // err: set there, read by the tar side
	err error
}

func (k *keepError) Write(p []byte) (int, error) {
	if k.failed() != nil {
		return len(p), nil
	}
	n, err := k.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		k.mu.Lock()
		k.err = err
		k.mu.Unlock()
	}
	return len(p), nil
}

func (k *keepError) failed() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// untilFailed passes writes to the compressor until the output failed,
// so that the tar side stops at its next write.
type untilFailed struct {
	w   io.Writer
	out *keepError
}

func (u untilFailed) Write(p []byte) (int, error) {
	if err := u.out.failed(); err != nil {
		return 0, err
	}
	return u.w.Write(p)
}
