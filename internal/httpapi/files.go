package httpapi

import (
	"context"
	"net/http"
	"path"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/files"
	"github.com/wharf/wharf/internal/isolate"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/usererr"
)

// fileReader is the file manager's reader of s's files (read-only: a
// change takes a job, fileManager).
func (a *API) fileReader(s *server.Server) *files.Reader { return files.NewReader(s.Files()) }

// fileManager is the file manager over the files of job's server, with the
// node's settings: its changes go through the job's filesystem.
func (a *API) fileManager(job *server.Job) *files.Manager {
	m := files.New(job.FS())
	cfg := a.Config.Get()
	m.Level = archive.ParseLevel(cfg.System.Backups.CompressionLevel)
	m.TempDir = cfg.System.TmpDirectory
	return m
}

// getFileContents answers the raw bytes of a regular file. Errors (missing,
// a directory, a pipe or device, denylisted) are answered before any header.
func (a *API) getFileContents(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	name := r.URL.Query().Get("file")
	if p, err := a.viewPath(s, name); err != nil || p.In {
		if err != nil {
			return err
		}
		return a.serveViewFile(w, r, s, p, name, r.URL.Query().Get("download") != "", false)
	}
	c, err := a.fileReader(s).Open(name)
	if err != nil {
		return err
	}
	defer c.File.Close()
	h := w.Header()
	h.Set("X-Mime-Type", c.Mime)
	if r.URL.Query().Get("download") != "" {
		h.Set("Content-Disposition", attachment(path.Base("/"+name)))
		h.Set("Content-Type", "application/octet-stream")
	} else {
		h.Set("Content-Type", c.Mime)
	}
	// The *os.File itself: ServeContent's copy then uses sendfile.
	http.ServeContent(w, r, "", c.Info.ModTime(), c.File.OSFile())
	return nil
}

// getListDirectory streams the listing (files.Listing.WriteJSON): memory
// stays bounded whatever the directory holds. An error before anything is
// sent is the usual JSON error; after, the 200 and part of the array are
// gone, so the connection is aborted and the client sees a broken document,
// never a truncated array that looks whole. The listing ends with the
// request's context (the client gone); then nobody waits for an answer
// and the connection is cut too.
func (a *API) getListDirectory(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	dir := r.URL.Query().Get("directory")
	if p, err := a.viewPath(s, dir); err != nil || p.In {
		if err != nil {
			return err
		}
		return a.viewListing(w, r, s, p)
	}
	l, err := a.fileReader(s).OpenListing(dir)
	if err != nil {
		return err
	}
	defer l.Close()
	l.Extra = a.viewRootEntry(s, dir)
	w.Header().Set("Content-Type", "application/json")
	out := &sentWriter{w: w}
	if err := l.WriteJSON(r.Context(), out); err != nil {
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // nobody is waiting for an answer
		}
		if !out.sent {
			return err
		}
		a.Log.Warn("list-directory aborted mid-answer", "request_id", requestIDFrom(r), "server", s.UUID(), "error", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// sentWriter records whether anything was written to the response, and
// flushes it on demand.
type sentWriter struct {
	w    http.ResponseWriter
	sent bool
}

func (s *sentWriter) Write(p []byte) (int, error) {
	s.sent = true
	return s.w.Write(p)
}

func (s *sentWriter) Flush() error { return http.NewResponseController(s.w).Flush() }

// changeFiles is a writing route answered with 204: the JSON body into
// req, then change on the files holding the server's job slot (a user's
// file change: refused with 409 while suspended or while an exclusive job
// rewrites the tree, and an exclusive job waits for it or is refused).
// ctx is the job's context (userJob).
func (a *API) changeFiles(w http.ResponseWriter, r *http.Request, s *server.Server, req any, change func(ctx context.Context, fm *files.Manager) error) error {
	if err := readJSON(w, r, req); err != nil {
		return err
	}
	job, err := a.userJob(r.Context(), s, server.JobFileChange)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	if err := change(ctx, a.fileManager(job)); err != nil {
		return workErr(ctx, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) putRename(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string         `json:"root"`
		Files []files.Rename `json:"files"`
	}
	return a.changeFiles(w, r, s, &req, func(ctx context.Context, fm *files.Manager) error {
		return a.renameAll(ctx, s, fm, req.Root, req.Files)
	})
}

func (a *API) postCopy(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Location string `json:"location"`
	}
	return a.changeFiles(w, r, s, &req, func(ctx context.Context, fm *files.Manager) error {
		if err := a.refuseInView(s, req.Location); err != nil {
			return err
		}
		_, err := fm.Copy(ctx, req.Location)
		return err
	})
}

// postWrite stores the raw body as the file: Content-Length is required,
// and the file changes only once the whole body has arrived.
func (a *API) postWrite(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if r.Header.Get("Content-Length") == "" || r.ContentLength < 0 {
		return files.ErrMissingLength
	}
	if err := a.refuseInView(s, r.URL.Query().Get("file")); err != nil {
		return err
	}
	// The write holds the job slot until it has answered: a restore or a
	// transfer never runs under it. The body stops being stored when the
	// server is deleted mid-upload; an upload still gets the shutdown grace
	// period to finish (s.BeginJob, not userJob).
	job, err := s.BeginJob(r.Context(), server.JobFileWrite)
	if err != nil {
		return err
	}
	defer job.End()
	body := sandbox.ContextReader(job.Context(), r.Body)
	if err := a.fileManager(job).Write(r.URL.Query().Get("file"), body, r.ContentLength); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) postCreateDirectory(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Name string `json:"name"`
		Path string `json:"path"`
	}
	return a.changeFiles(w, r, s, &req, func(_ context.Context, fm *files.Manager) error {
		if err := a.refuseInViewUnder(s, req.Path, []string{req.Name}); err != nil {
			return err
		}
		return fm.Mkdir(req.Path, req.Name)
	})
}

func (a *API) postDelete(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string   `json:"root"`
		Files []string `json:"files"`
	}
	return a.changeFiles(w, r, s, &req, func(ctx context.Context, fm *files.Manager) error {
		if err := a.refuseInViewUnder(s, req.Root, req.Files); err != nil {
			return err
		}
		return fm.Delete(ctx, req.Root, req.Files)
	})
}

func (a *API) postChmod(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string        `json:"root"`
		Files []files.Chmod `json:"files"`
	}
	return a.changeFiles(w, r, s, &req, func(ctx context.Context, fm *files.Manager) error {
		names := make([]string, len(req.Files))
		for i, c := range req.Files {
			names[i] = c.File
		}
		if err := a.refuseInViewUnder(s, req.Root, names); err != nil {
			return err
		}
		return fm.ChmodAll(ctx, req.Root, req.Files)
	})
}

// fileJob reads a file job's (compress, decompress) JSON body into req
// and takes the server's job slot for it (userJob).
func (a *API) fileJob(w http.ResponseWriter, r *http.Request, s *server.Server, req any, kind server.JobKind) (*server.Job, error) {
	if err := readJSON(w, r, req); err != nil {
		return nil, err
	}
	return a.userJob(r.Context(), s, kind)
}

// userJob takes the server's job slot for a user's job of kind on s's
// files: refused (409) while the server is suspended or an exclusive job
// runs. The job's context ends with parent, when the server is deleted,
// and as soon as the daemon begins to stop (a.Stopping: not after the
// shutdown grace period).
func (a *API) userJob(parent context.Context, s *server.Server, kind server.JobKind) (*server.Job, error) {
	return s.BeginJob(parent, kind, a.Stopping)
}

// workErr is the error of work whose context ended: the reason it ended
// when the user may know it (the server was deleted: a 409 that says so)
// rather than a bare "context canceled" answered as a 500.
func workErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil {
		if _, ok := usererr.From(cause); ok {
			return cause
		}
	}
	return err
}

func (a *API) postCompress(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req files.CompressRequest
	job, err := a.fileJob(w, r, s, &req, server.JobCompress)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	if req.Files, err = a.compressNames(s, req.Root, req.Files); err != nil {
		return err
	}
	st, err := a.fileManager(job).Compress(ctx, req)
	if err != nil {
		return workErr(ctx, err)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (a *API) postDecompress(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root string `json:"root"`
		File string `json:"file"`
	}
	job, err := a.fileJob(w, r, s, &req, server.JobDecompress)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	if err := a.refuseInViewUnder(s, req.Root, []string{req.File}); err != nil {
		return err
	}
	fm := a.fileManager(job)
	cfg := a.Config.Get().System
	d := cfg.Decompress
	fm.Isolation = &files.Isolation{
		Limits: isolate.Limits{
			Memory: int64(d.MemoryLimit) << 20,
			CPU:    time.Duration(d.CPULimit) * time.Second,
			Wall:   time.Duration(d.Timeout) * time.Second,
		},
		UID: cfg.User.UID, GID: cfg.User.GID,
		Denylist: s.Definition().Config.Egg.FileDenylist,
	}
	res, err := fm.Decompress(ctx, req.Root, req.File)
	if err != nil {
		return workErr(ctx, err)
	}
	if res.Skipped > 0 {
		a.Log.Info("decompress skipped entries", "server", s.UUID(), "file", req.File, "skipped", res.Skipped)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// getSearch is Pelican's recursive name search.
func (a *API) getSearch(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	q := r.URL.Query()
	// A read: no job, but the work ends with the client, the server and
	// the node beginning to stop.
	ctx, cancel := s.WorkContext(r.Context(), a.Stopping)
	defer cancel()
	out, err := a.fileReader(s).Search(ctx, q.Get("directory"), q.Get("pattern"))
	if err != nil {
		return workErr(ctx, err)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
