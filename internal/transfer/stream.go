package transfer

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// Errors of an incoming transfer's data, answered with 400.
var (
	// ErrChecksumMismatch: the archive's SHA-256 is not the one the source sent.
	ErrChecksumMismatch = errors.New("checksums don't match")
	// ErrBadForm: the multipart form is not what a source sends.
	ErrBadForm = errors.New("invalid transfer form")
	// ErrBadArchive: the archive is corrupt, truncated or unsafe.
	ErrBadArchive = errors.New("invalid transfer archive")
)

// refused gives a refused incoming transfer its answer to the source (400).
// The reason is worded by this package from the source's own form and
// archive, so it is shown as it is.
func refused(err error) error {
	if errors.Is(err, ErrChecksumMismatch) || errors.Is(err, ErrBadForm) || errors.Is(err, ErrBadArchive) ||
		errors.Is(err, ErrSourceGone) {
		return usererr.Wrap(err, usererr.Invalid, "The transfer was refused: "+err.Error()+".")
	}
	return err
}

// StatusError is a target's answer other than 200.
type StatusError struct{ Code int }

func (e *StatusError) Error() string {
	return fmt.Sprintf("unexpected status code from destination: %d", e.Code)
}

// errAnswered stops the form writer once the target has answered.
var errAnswered = errors.New("the destination answered before the end of the archive")

// push streams the server files to the target as a multipart form, through
// a pipe (no temporary file): the part `archive` (archive.tar.gz), then the
// fields `checksum` and `checksum_archive`, the hex SHA-256 of the archive
// bytes, then what extra carries (backups, install log). Authorization
// carries token exactly as given. Any answer but 200 is a *StatusError.
func push(ctx context.Context, client *http.Client, url, token string, src archive.Source, level int, progress func(archive.Progress), extra outgoing) error {
	return pushForm(ctx, client, url, token, func(mw *multipart.Writer) error {
		return writeForm(ctx, mw, src, level, progress, extra)
	})
}

// pushForm posts the multipart form write makes, through a pipe (no
// temporary file); the writer's goroutine is joined on every path. Any
// answer but 200 is a *StatusError.
func pushForm(ctx context.Context, client *http.Client, url, token string, write func(*multipart.Writer) error) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	done := make(chan error, 1)
	go func() {
		err := write(mw)
		pw.CloseWithError(err)
		done <- err
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pipeBody{pr})
	if err != nil {
		pr.CloseWithError(err)
		<-done
		return err
	}
	req.Header.Set("Authorization", token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := client.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		if werr := <-done; werr != nil && !errors.Is(werr, io.ErrClosedPipe) && ctx.Err() == nil && !errors.Is(werr, err) {
			return fmt.Errorf("%w (while writing the form: %v)", err, werr)
		}
		return err
	}
	defer res.Body.Close()
	pr.CloseWithError(errAnswered)
	werr := <-done
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		return &StatusError{Code: res.StatusCode}
	}
	return werr
}

// pipeBody hands the HTTP client the form in the writer's own pieces
// (whole compressed blocks) instead of io.Copy's 32 KiB: fewer, larger
// chunks, and fewer system calls at both ends.
type pipeBody struct{ *io.PipeReader }

func (b pipeBody) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, b.PipeReader, make([]byte, 1<<20))
}

func writeForm(ctx context.Context, mw *multipart.Writer, src archive.Source, level int, progress func(archive.Progress), extra outgoing) error {
	part, err := mw.CreateFormFile(partArchive, "archive.tar.gz")
	if err != nil {
		return err
	}
	res, err := archive.Write(ctx, part, src, archive.WriteOptions{Level: level, Progress: progress, Hash: sha256.New})
	if err != nil {
		return err
	}
	// Pterodactyl Wings' target requires the first, Pelican Wings' the
	// second; each skips the other.
	for _, name := range []string{partChecksum, partChecksumArchive} {
		if err := mw.WriteField(name, res.Sum); err != nil {
			return err
		}
	}
	if err := extra.write(ctx, mw); err != nil {
		return err
	}
	return mw.Close()
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// receive reads a source's form: the `archive` part is extracted into dst
// while it is hashed, then `checksum` (or `checksum_archive`) must match
// the hash. Backups and the install log are staged in x (verified here,
// put in place by its commit); other parts are read and ignored. A part's
// name is never used as a path.
func receive(ctx context.Context, mr *multipart.Reader, dst *sandbox.FS, opts archive.ExtractOptions, x *extras) error {
	var sum []byte
	verified := false
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("%w: %v", ErrBadForm, err)
		}
		switch p.FormName() {
		case partArchive:
			if sum != nil {
				return fmt.Errorf("%w: more than one archive", ErrBadForm)
			}
			h := sha256.New()
			body := ctxReader{ctx, p}
			// The SHA-256 checks the whole stream: no per-file manifest.
			opts.NoManifest = true
			if _, err := archive.Extract(ctx, io.TeeReader(body, h), dst, opts); err != nil {
				return extractErr(ctx, err)
			}
			// The gzip trailer (and any padding) follows the end of the tar.
			if _, err := io.Copy(h, body); err != nil {
				return extractErr(ctx, fmt.Errorf("%w: %v", archive.ErrCorrupt, err))
			}
			sum = h.Sum(nil)
		case partRepository:
			// A transfer by manifest (bymanifest.go): the files come from
			// the shared repository.
			if sum != nil || x.snapshot == nil {
				return fmt.Errorf("%w: unexpected part %s", ErrBadForm, partRepository)
			}
			hexSum, err := x.snapshot(ctx, ctxReader{ctx, p}, dst, opts)
			if err != nil {
				return err
			}
			if sum, err = hex.DecodeString(hexSum); err != nil || len(sum) == 0 {
				return fmt.Errorf("%w: the snapshot's checksum", ErrBadArchive)
			}
		case partChecksum, partChecksumArchive:
			if sum == nil {
				return fmt.Errorf("%w: the archive must be sent before the checksum", ErrBadForm)
			}
			v, err := io.ReadAll(io.LimitReader(ctxReader{ctx, p}, 256))
			if err != nil {
				return extractErr(ctx, fmt.Errorf("%w: %v", ErrBadForm, err))
			}
			want, err := hex.DecodeString(strings.TrimSpace(string(v)))
			if err != nil || !hmac.Equal(want, sum) {
				return ErrChecksumMismatch
			}
			verified = true
		default:
			if err := x.part(ctx, p); err != nil {
				return err
			}
		}
		_ = p.Close()
	}
	if !verified {
		return fmt.Errorf("%w: missing archive or checksum", ErrBadForm)
	}
	return x.verify()
}

// extractErr prefers the cancellation cause, and marks archive errors.
func extractErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if errors.Is(err, archive.ErrCorrupt) || errors.Is(err, archive.ErrUnsafeEntry) || errors.Is(err, archive.ErrChecksumMismatch) {
		return fmt.Errorf("%w: %w", ErrBadArchive, err)
	}
	return err
}
