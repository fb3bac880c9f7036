package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/upload"
)

// oneTimeClaims are the claims of a signed URL usable once.
type oneTimeClaims interface {
	OneTimeUse() (server, uniqueID string, exp time.Time)
}

// redeem verifies the signed URL's token (the query's token) with verify,
// resolves its server and consumes its one-time id.
func redeem[C oneTimeClaims](a *API, r *http.Request, verify func(raw string) (C, error)) (C, *server.Server, error) {
	var none C
	raw := r.URL.Query().Get("token")
	if raw == "" {
		return none, nil, errNoToken
	}
	claims, err := verify(raw)
	if err != nil {
		return none, nil, err
	}
	uuid, id, exp := claims.OneTimeUse()
	s, ok := a.Servers.Get(uuid)
	if !ok {
		return none, nil, errNoResource
	}
	if err := a.OneTime.Use(id, exp); err != nil {
		return none, nil, err
	}
	return claims, s, nil
}

// getDownloadFile streams a server file named in a one-time file-download token.
func (a *API) getDownloadFile(w http.ResponseWriter, r *http.Request) error {
	claims, s, err := redeem(a, r, a.Tokens.FileDownload)
	if err != nil {
		return err
	}
	if p, err := a.viewPath(s, claims.FilePath); err != nil || p.In {
		if err != nil {
			return err
		}
		return a.serveViewFile(w, r, s, p, claims.FilePath, true, true)
	}
	f, err := s.Files().Open(claims.FilePath)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return errNotRegular
	}
	w.Header().Set("Content-Disposition", attachment(path.Base("/"+claims.FilePath)))
	w.Header().Set("Content-Type", "application/octet-stream")
	// The *os.File itself, so that net/http sends it with sendfile; its
	// errors (which name the host path) never reach the client from here.
	var content io.ReadSeeker = f
	if osf := f.OSFile(); osf != nil {
		content = osf
	}
	http.ServeContent(w, r, "", st.ModTime(), content)
	return nil
}

// getDownloadBackup streams a local backup named in a one-time
// backup-download token. Only backups of the server named in the token.
func (a *API) getDownloadBackup(w http.ResponseWriter, r *http.Request) error {
	claims, s, err := redeem(a, r, a.Tokens.BackupDownload)
	if err != nil {
		return err
	}
	p, err := a.Backups.Locate(s, claims.BackupUUID)
	if errors.Is(err, backup.ErrNotFound) {
		return a.sendRepositoryBackup(w, r, s.UUID(), claims.BackupUUID)
	}
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Disposition", attachment("backup-"+claims.BackupUUID+".tar.gz"))
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", st.ModTime(), f)
	return nil
}

// attachment builds a Content-Disposition header that no file name can break:
// control characters are replaced, quotes and backslashes escaped, and
// non-ASCII names also sent in RFC 5987 form.
func attachment(name string) string {
	clean := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '_'
		}
		return r
	}, name)
	if clean == "" || clean == "/" || clean == "." {
		clean = "download"
	}
	ascii := strings.Map(func(r rune) rune {
		if r > unicode.MaxASCII {
			return '_'
		}
		return r
	}, clean)
	quoted := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(ascii)
	h := fmt.Sprintf(`attachment; filename="%s"`, quoted)
	if ascii != clean {
		if enc := mime.FormatMediaType("attachment", map[string]string{"filename": clean}); enc != "" {
			h += "; " + strings.TrimPrefix(enc, "attachment; ")
		}
	}
	return h
}

// postUploadFile stores the `files` parts of a multipart form into
// `directory` (upload.Store): each streamed to disk through the sandbox and
// limited to api.upload_limit MB; a file over the limit is refused as soon as
// the limit is crossed, nothing of it is left behind, and the connection is
// closed rather than the rest of the body read.
func (a *API) postUploadFile(w http.ResponseWriter, r *http.Request) error {
	claims, s, err := redeem(a, r, a.Tokens.Upload)
	if err != nil {
		return err
	}
	if err := a.refuseInView(s, r.URL.Query().Get("directory")); err != nil {
		return err
	}
	// The same rule as the file manager: the upload holds the server's job
	// slot until it has answered (no install, restore or transfer rewrites
	// the tree under it), and is refused while the server is suspended. The
	// body stops being stored when the server is deleted mid-upload.
	job, err := s.BeginJob(r.Context(), server.JobUpload)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	liftBodyDeadline(w)
	r.Body = struct {
		io.Reader
		io.Closer
	}{sandbox.ContextReader(ctx, r.Body), r.Body}
	mr, err := r.MultipartReader()
	if err != nil {
		return fmt.Errorf("%w: %w", upload.ErrNotMultipart, err)
	}
	err = upload.Store(upload.Request{
		Form:     mr,
		Files:    job.FS(),
		Server:   s.UUID(),
		Dir:      r.URL.Query().Get("directory"),
		LimitMB:  a.Config.Get().API.UploadLimit,
		Size:     r.ContentLength,
		Activity: a.Activity,
		User:     claims.UserUUID,
		IP:       a.clientIP(r),
	})
	if errors.Is(err, upload.ErrTooLarge) {
		w.Header().Set("Connection", "close")
	}
	if err != nil {
		return workErr(ctx, err)
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
