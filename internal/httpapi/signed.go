package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
)

// errUploadTooLarge is returned while streaming a file over api.upload_limit.
var errUploadTooLarge = errors.New("upload too large")

// queryToken returns the token of a signed URL, answering 401 when absent.
func queryToken(w http.ResponseWriter, r *http.Request) (string, bool) {
	t := r.URL.Query().Get("token")
	if t == "" {
		writeError(w, r, http.StatusUnauthorized, "A valid signed token is required.")
		return "", false
	}
	return t, true
}

// oneTimeClaims are the claims of a signed URL usable once.
type oneTimeClaims interface {
	OneTimeUse() (server, uniqueID string, exp time.Time)
}

// redeem verifies the signed URL's token with verify, resolves its server
// and consumes its one-time id; it answers the request itself on failure.
func redeem[C oneTimeClaims](a *API, w http.ResponseWriter, r *http.Request, verify func(raw string) (C, error)) (C, *server.Server, bool) {
	var none C
	raw, ok := queryToken(w, r)
	if !ok {
		return none, nil, false
	}
	claims, err := verify(raw)
	if err != nil {
		a.fail(w, r, err)
		return none, nil, false
	}
	uuid, id, exp := claims.OneTimeUse()
	s, ok := a.Servers.Get(uuid)
	if !ok {
		writeError(w, r, http.StatusNotFound, "The requested resource does not exist on this instance.")
		return none, nil, false
	}
	if err := a.OneTime.Use(id, exp); err != nil {
		a.fail(w, r, err)
		return none, nil, false
	}
	return claims, s, true
}

// getDownloadFile streams a server file named in a one-time file-download token.
func (a *API) getDownloadFile(w http.ResponseWriter, r *http.Request) {
	claims, s, ok := redeem(a, w, r, a.Tokens.FileDownload)
	if !ok {
		return
	}
	f, err := s.Files().Open(claims.FilePath)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !st.Mode().IsRegular() {
		writeError(w, r, http.StatusBadRequest, "Cannot download this type of file: only regular files can be downloaded.")
		return
	}
	w.Header().Set("Content-Disposition", attachment(path.Base("/"+claims.FilePath)))
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// getDownloadBackup streams a local backup named in a one-time
// backup-download token. Only backups of the server named in the token.
func (a *API) getDownloadBackup(w http.ResponseWriter, r *http.Request) {
	claims, s, ok := redeem(a, w, r, a.Tokens.BackupDownload)
	if !ok {
		return
	}
	p, err := a.Backups.Locate(s, claims.BackupUUID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Disposition", attachment("backup-"+claims.BackupUUID+".tar.gz"))
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", st.ModTime(), f)
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
// `directory`, each streamed to disk through the sandbox and limited to
// api.upload_limit MB; a file over the limit is refused as soon as the limit is
// crossed, and nothing of it is left behind.
func (a *API) postUploadFile(w http.ResponseWriter, r *http.Request) {
	claims, s, ok := redeem(a, w, r, a.Tokens.Upload)
	if !ok {
		return
	}
	liftBodyDeadline(w)
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "Failed to get multipart form data from request.")
		return
	}
	limit := a.Config.Get().API.UploadLimit * 1024 * 1024
	dir := r.URL.Query().Get("directory")
	files := s.Files()
	if r.ContentLength > 0 {
		if err := files.HasSpaceFor(r.ContentLength); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	var stored []string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "The multipart form could not be read.")
			return
		}
		if part.FormName() != "files" {
			_ = part.Close()
			continue
		}
		name := uploadName(part)
		if name == "" {
			_ = part.Close()
			writeError(w, r, http.StatusBadRequest, "An uploaded file has no valid name.")
			return
		}
		if len(stored) == 0 {
			if err := files.MkdirAll(dir, 0o755); err != nil {
				_ = part.Close()
				a.fail(w, r, err)
				return
			}
		}
		target := path.Join("/", dir, name)
		body := &limitedReader{r: part, left: limit}
		err = files.WriteFileAtomic(target, body, 0o644)
		_ = part.Close()
		if body.exceeded {
			w.Header().Set("Connection", "close")
			writeError(w, r, http.StatusBadRequest, fmt.Sprintf("File %s is larger than the maximum file upload size of %d MB.", name, limit/1024/1024))
			return
		}
		if err != nil {
			a.fail(w, r, err)
			return
		}
		stored = append(stored, target)
		if a.Activity != nil {
			user := claims.UserUUID
			a.Activity.Record(panel.Activity{
				User: &user, Server: s.UUID(), Event: "server:file.uploaded", IP: a.clientIP(r), Timestamp: time.Now().UTC(),
				Metadata: map[string]any{"file": name, "directory": path.Join("/", dir)},
			})
		}
	}
	if len(stored) == 0 {
		writeError(w, r, http.StatusBadRequest, "No files were found on the request body.")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// uploadName is the base name of an uploaded part, or "" when unusable.
func uploadName(p *multipart.Part) string {
	name := p.FileName()
	name = path.Base(strings.ReplaceAll(name, `\`, "/"))
	if name == "." || name == "/" || name == ".." || strings.ContainsRune(name, 0) {
		return ""
	}
	return name
}

// limitedReader fails with errUploadTooLarge once more than left bytes are read.
// (The sandbox rewrites errors, so the caller checks exceeded.)
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
		return n, errUploadTooLarge
	}
	return n, err
}
