// Package upload stores the files of a signed upload, a multipart form, in a
// server's sandbox: each `files` part streamed to disk through the sandbox,
// each limited in size, each recorded as activity.
package upload

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"path"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/activity"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// Errors of an upload a user may see (400).
var (
	ErrNotMultipart = usererr.New(usererr.Invalid, "Failed to get multipart form data from request.")
	ErrBadForm      = usererr.New(usererr.Invalid, "The multipart form could not be read.")
	ErrNoName       = usererr.New(usererr.Invalid, "An uploaded file has no valid name.")
	ErrNoFiles      = usererr.New(usererr.Invalid, "No files were found on the request body.")
	// ErrTooLarge is in the chain of every *TooLargeError.
	ErrTooLarge = errors.New("upload too large")
)

// TooLargeError is a file over the limit. The rest of the body is not read:
// the caller should close the connection.
type TooLargeError struct {
	Name    string
	LimitMB int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("File %s is larger than the maximum file upload size of %d MB.", e.Name, e.LimitMB)
}

// Unwrap gives ErrTooLarge and the user-visible error (400) naming the file.
func (e *TooLargeError) Unwrap() []error {
	return []error{ErrTooLarge, usererr.New(usererr.Invalid, e.Error())}
}

// Request is one upload.
type Request struct {
	// Form is the request's body.
	Form *multipart.Reader
	// Files is the server's sandbox; Server its UUID (for the activity).
	Files  *sandbox.FS
	Server string
	// Dir is the directory the files go to, created when missing.
	Dir string
	// LimitMB bounds each file, in MiB.
	LimitMB int64
	// Size is the body's declared length, checked against the disk limit
	// before anything is written; 0 when unknown.
	Size int64
	// Activity, when not nil, records server:file.uploaded for each file,
	// for User from IP.
	Activity *activity.Queue
	User, IP string
	// Now is the clock of the activity records (time.Now when nil).
	Now func() time.Time
}

// Store writes every `files` part of the form into Dir. A file over the
// limit is refused (*TooLargeError) as soon as the limit is crossed, and
// nothing of it is left behind; files stored before it stay. A form without
// any file is ErrNoFiles.
func Store(req Request) error {
	now := req.Now
	if now == nil {
		now = time.Now
	}
	limit := req.LimitMB * 1024 * 1024
	if req.Size > 0 {
		if err := req.Files.HasSpaceFor(req.Size); err != nil {
			return err
		}
	}
	stored := 0
	for {
		part, err := req.Form.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadForm, err)
		}
		if part.FormName() != "files" {
			_ = part.Close()
			continue
		}
		name := partName(part)
		if name == "" {
			_ = part.Close()
			return ErrNoName
		}
		if stored == 0 {
			if err := req.Files.MkdirAll(req.Dir, 0o755); err != nil {
				_ = part.Close()
				return err
			}
		}
		body := &limitedReader{r: part, left: limit}
		err = req.Files.WriteFileAtomic(path.Join("/", req.Dir, name), body, 0o644)
		_ = part.Close()
		if body.exceeded {
			// The sandbox rewrites the reader's error, so the flag decides.
			return &TooLargeError{Name: name, LimitMB: req.LimitMB}
		}
		if err != nil {
			return err
		}
		stored++
		if req.Activity != nil {
			user := req.User
			req.Activity.Record(panel.Activity{
				User: &user, Server: req.Server, Event: "server:file.uploaded", IP: req.IP, Timestamp: now().UTC(),
				Metadata: map[string]any{"file": name, "directory": path.Join("/", req.Dir)},
			})
		}
	}
	if stored == 0 {
		return ErrNoFiles
	}
	return nil
}

// partName is the base name of an uploaded part, or "" when unusable.
func partName(p *multipart.Part) string {
	name := p.FileName()
	name = path.Base(strings.ReplaceAll(name, `\`, "/"))
	if name == "." || name == "/" || name == ".." || strings.ContainsRune(name, 0) {
		return ""
	}
	return name
}

// limitedReader fails with ErrTooLarge once more than left bytes are read.
type limitedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		l.exceeded = true
		return n, ErrTooLarge
	}
	return n, err
}
