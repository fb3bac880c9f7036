package backup

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/errgroup"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/panel"
)

// Upload tuning.
const (
	partTimeout   = 2 * time.Hour // per attempt, as the spec says
	partRetryTime = 5 * time.Minute
)

// createRemote streams the archive to the object store while it is being
// made: the backend presigns parts for an upper bound of the archive's size
// (archive.SizeBound plus room for a tree that grows a little meanwhile),
// the compressed stream is cut into parts of the backend's part size, and
// each full part is uploaded while the next one is being compressed. Only
// the parts actually used are reported; the backend completes the upload
// with them (or aborts it on a failure report). See streamParts for the
// disk and memory used.
func (s *Service) createRemote(ctx context.Context, srv Server, backup, ignore string) (Details, error) {
	cfg := s.cfg.Get()
	opts := archive.WriteOptions{
		Ignore:      s.ignorePatterns(srv, ignore),
		Level:       archive.ParseLevel(cfg.System.Backups.CompressionLevel),
		Manifest:    true,
		TreeTrailer: true,
		TempDir:     cfg.System.TmpDirectory,
		Hash:        sha1.New, // the backend's checksum_type
	}
	files := srv.Files().Trusted()
	bound, err := archive.SizeBound(ctx, files, opts)
	if err != nil {
		return Details{}, fmt.Errorf("measuring the server's files: %w", err)
	}
	bound += growthRoom(bound)
	urls, err := s.panel.BackupUploadURLs(ctx, backup, bound)
	if err != nil {
		return Details{}, fmt.Errorf("asking the backend for upload URLs: %w", err)
	}
	var res archive.Result
	parts, err := streamParts(ctx, urls, cfg.System.Backups.ObjectStorePartsOnDisk, func() (*os.File, error) { return CreateTemp(cfg) }, nil, func(w io.Writer) error {
		var err error
		res, err = archive.Write(ctx, w, files, opts)
		return err
	})
	if err != nil {
		return Details{}, err
	}
	return Details{Checksum: res.Sum, Size: res.Size, Parts: parts}, nil
}

// uploadsAtOnce is how many parts are uploaded at once: the panel's
// max_concurrent_uploads when it names one, never more than the parts on
// disk.
func uploadsAtOnce(panelMax, partsOnDisk int) int {
	if panelMax > 0 {
		return min(panelMax, partsOnDisk)
	}
	return partsOnDisk
}

// growthRoom is what a remote backup's announced size adds to the bound of
// the tree as it was measured: a running game server keeps writing while
// its files are read (a file is stored with the size it had when opened,
// but new files appear). 1/64 of the bound plus 32 MiB; past that the
// backup fails with ErrArchiveOutgrewBound rather than upload a truncated
// archive.
func growthRoom(bound int64) int64 { return bound/64 + 32<<20 }

// ErrArchiveOutgrewBound fails a remote backup whose archive came out
// larger than the size announced to the backend (the parts it presigned).
var ErrArchiveOutgrewBound = errors.New("the archive outgrew the size announced to the backend (files were added during the backup)")

// defaultPartsOnDisk is how many parts of a remote backup exist at once
// unless configured (system.backups.object_store_parts_on_disk): the bound
// on local disk, and so also the number of parts in flight.
const defaultPartsOnDisk = 2

// streamParts runs produce with a writer that cuts its output into parts of
// urls.PartSize bytes and uploads each as soon as it is full, while produce
// goes on. At most partsOnDisk parts (defaultPartsOnDisk when < 1) exist at once, each being filled or
// uploaded: when both are uploading, produce waits for one to finish (the
// compressor is many times faster than one connection to a remote store, so
// both connections stay busy). Each part is a temporary file made by
// newPart (the backup directory): parts are commonly tens or hundreds of
// MiB (the panels' default part size is 5 GiB), too much to hold in
// memory, while on disk they mostly stay in the page cache and the
// process' own memory stays that of the compressor. A part file is removed
// as soon as it is uploaded, and every one is gone when streamParts
// returns. The first error (produce's, an upload's, the context's, or
// ErrArchiveOutgrewBound when the output needs more parts than urls has)
// stops both sides. The parts used are returned in order. client may be
// nil.
func streamParts(ctx context.Context, urls panel.BackupUploadURLs, partsOnDisk int, newPart func() (*os.File, error), client *http.Client, produce func(io.Writer) error) ([]panel.BackupPart, error) {
	if urls.PartSize <= 0 {
		return nil, fmt.Errorf("the backend gave a part size of %d", urls.PartSize)
	}
	if partsOnDisk < 1 {
		partsOnDisk = defaultPartsOnDisk
	}
	if len(urls.Parts) == 0 {
		return nil, errors.New("the backend gave no part URLs")
	}
	if client == nil {
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: partsOnDisk, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(ctx)
	parts := make([]panel.BackupPart, len(urls.Parts))
	w := &partWriter{ctx: gctx, urls: urls, newPart: newPart, slots: make(chan struct{}, partsOnDisk)}
	// The panel's max_concurrent_uploads (Pelican) bounds the uploads in
	// flight; the parts on disk bound them already.
	uploads := make(chan struct{}, uploadsAtOnce(urls.MaxConcurrentUploads, partsOnDisk))
	w.upload = func(p filledPart) {
		g.Go(func() error {
			defer func() {
				p.remove()
				<-w.slots
			}()
			select {
			case uploads <- struct{}{}:
			case <-gctx.Done():
				return context.Cause(gctx)
			}
			defer func() { <-uploads }()
			etag, err := uploadPart(gctx, client, urls.Parts[p.index], p.f, 0, p.size)
			if err != nil {
				err = fmt.Errorf("part %d: %w", p.index+1, err)
				cancel(err) // before the slot is freed: no new part starts
				return err
			}
			parts[p.index] = panel.BackupPart{PartNumber: p.index + 1, ETag: etag}
			return nil
		})
	}
	err := produce(w)
	if err == nil {
		w.flush() // the last part, shorter
	}
	if err != nil {
		cancel(err) // stop the uploads in flight too
	}
	w.discard()
	gerr := g.Wait()
	switch {
	case err != nil:
		// An upload's failure reaches produce as its writer's error.
		return nil, err
	case gerr != nil:
		return nil, gerr
	}
	return parts[:w.next], nil
}

// filledPart is a part file ready for upload.
type filledPart struct {
	index int
	f     *os.File
	size  int64
}

func (p filledPart) remove() {
	_ = p.f.Close()
	_ = os.Remove(p.f.Name())
}

// partWriter fills part files and hands each full one to upload. Write is
// called by one goroutine at a time (the compressor's output).
type partWriter struct {
	ctx     context.Context // cancelled with the first upload error as cause
	urls    panel.BackupUploadURLs
	newPart func() (*os.File, error)
	upload  func(filledPart)
	slots   chan struct{} // one token per part on disk

	cur  *os.File
	n    int64 // bytes in cur
	next int   // index of cur
}

func (w *partWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if err := context.Cause(w.ctx); err != nil {
			return written, err
		}
		if w.cur == nil {
			if w.next >= len(w.urls.Parts) {
				return written, ErrArchiveOutgrewBound
			}
			select { // wait for room on disk
			case w.slots <- struct{}{}:
			case <-w.ctx.Done():
				return written, context.Cause(w.ctx)
			}
			f, err := w.newPart()
			if err != nil {
				<-w.slots
				return written, err
			}
			w.cur, w.n = f, 0
		}
		chunk := p[:min(int64(len(p)), w.urls.PartSize-w.n)]
		n, err := w.cur.Write(chunk)
		written += n
		w.n += int64(n)
		p = p[n:]
		if err != nil {
			return written, err
		}
		if w.n == w.urls.PartSize {
			w.flush()
		}
	}
	return written, nil
}

// flush starts the upload of the current part, if any.
func (w *partWriter) flush() {
	if w.cur == nil {
		return
	}
	w.upload(filledPart{index: w.next, f: w.cur, size: w.n})
	w.cur = nil
	w.next++
}

// discard removes the part being filled, if any (after an error).
func (w *partWriter) discard() {
	if w.cur != nil {
		filledPart{f: w.cur}.remove()
		w.cur = nil
		<-w.slots
	}
}

// UploadParts PUTs the size bytes of src to the presigned part URLs, several
// parts at a time: part i holds part_size bytes from offset i*part_size, the
// last one the remainder. Each part is retried with exponential backoff
// from its own offset (transport errors and 5xx; 4xx is final). The ETags
// are returned in part order. client may be nil. At most parallel parts are
// in flight.
func UploadParts(ctx context.Context, src io.ReaderAt, size int64, urls panel.BackupUploadURLs, client *http.Client, parallel int) ([]panel.BackupPart, error) {
	parallel = max(parallel, 1)
	if client == nil {
		// Our own transport: its keep-alive connections (and their
		// goroutines) would otherwise outlive the backup.
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: parallel, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	ps := urls.PartSize
	if ps <= 0 {
		return nil, fmt.Errorf("the backend gave a part size of %d", ps)
	}
	n := max(1, (size+ps-1)/ps) // parts needed; extra URLs stay unused
	if n > int64(len(urls.Parts)) {
		return nil, fmt.Errorf("the backend gave %d parts of %d bytes for %d bytes", len(urls.Parts), ps, size)
	}
	parts := make([]panel.BackupPart, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i := range n {
		off := i * ps
		length := min(ps, size-off)
		g.Go(func() error {
			etag, err := uploadPart(gctx, client, urls.Parts[i], src, off, length)
			if err != nil {
				return fmt.Errorf("part %d: %w", i+1, err)
			}
			parts[i] = panel.BackupPart{PartNumber: int(i + 1), ETag: etag}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}

// safeURL is a URL for logs and errors: without its query (the signature).
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

func uploadPart(ctx context.Context, client *http.Client, target string, src io.ReaderAt, off, length int64) (string, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.Multiplier = 2
	return backoff.Retry(ctx, func() (string, error) {
		actx, cancel := context.WithTimeout(ctx, partTimeout)
		defer cancel()
		// A fresh reader at the part's own offset on every attempt.
		body := io.NewSectionReader(src, off, length)
		req, err := http.NewRequestWithContext(actx, http.MethodPut, target, body)
		if err != nil {
			return "", backoff.Permanent(fmt.Errorf("bad part URL %s", safeURL(target)))
		}
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/x-gzip")
		res, err := client.Do(req)
		if err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // the URL, with its signature, stays out of the message
			}
			return "", fmt.Errorf("PUT %s: %w", safeURL(target), err)
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		if res.StatusCode != http.StatusOK {
			err := fmt.Errorf("PUT %s: status %d", safeURL(target), res.StatusCode)
			if res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != http.StatusRequestTimeout && res.StatusCode != http.StatusTooManyRequests {
				return "", backoff.Permanent(err)
			}
			return "", err
		}
		etag := res.Header.Get("ETag")
		if etag == "" {
			return "", backoff.Permanent(fmt.Errorf("PUT %s: no ETag in the answer", safeURL(target)))
		}
		return etag, nil
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(partRetryTime))
}
