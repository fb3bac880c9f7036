package httpapi

import (
	"net/http"
	"path"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/files"
	"github.com/wharf/wharf/internal/isolate"
	"github.com/wharf/wharf/internal/server"
)

// fileManager is the file manager of s with the node's settings.
func (a *API) fileManager(s *server.Server) *files.Manager {
	m := files.New(s.Files())
	cfg := a.Config.Get()
	m.Level = archive.ParseLevel(cfg.System.Backups.CompressionLevel)
	m.TempDir = cfg.System.TmpDirectory
	return m
}

// getFileContents answers the raw bytes of a regular file. Errors (missing,
// a directory, a pipe or device, denylisted) are answered before any header.
func (a *API) getFileContents(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	name := r.URL.Query().Get("file")
	c, err := a.fileManager(s).Open(name)
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

func (a *API) getListDirectory(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	out, err := a.fileManager(s).List(r.URL.Query().Get("directory"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// changeFiles is a writing route answered with 204: the JSON body into
// req, a refusal (409) when the server's files may not be changed now
// (suspended, or an exclusive job rewrites them), then change on them.
func (a *API) changeFiles(w http.ResponseWriter, r *http.Request, s *server.Server, req any, change func(*files.Manager) error) error {
	if err := readJSON(w, r, req); err != nil {
		return err
	}
	if err := s.CheckFileWrites(); err != nil {
		return err
	}
	if err := change(a.fileManager(s)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) putRename(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string         `json:"root"`
		Files []files.Rename `json:"files"`
	}
	return a.changeFiles(w, r, s, &req, func(fm *files.Manager) error {
		return fm.RenameAll(req.Root, req.Files)
	})
}

func (a *API) postCopy(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Location string `json:"location"`
	}
	return a.changeFiles(w, r, s, &req, func(fm *files.Manager) error {
		_, err := fm.Copy(req.Location)
		return err
	})
}

// postWrite stores the raw body as the file: Content-Length is required,
// and the file changes only once the whole body has arrived.
func (a *API) postWrite(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if r.Header.Get("Content-Length") == "" || r.ContentLength < 0 {
		return files.ErrMissingLength
	}
	if err := s.CheckFileWrites(); err != nil {
		return err
	}
	if err := a.fileManager(s).Write(r.URL.Query().Get("file"), r.Body, r.ContentLength); err != nil {
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
	return a.changeFiles(w, r, s, &req, func(fm *files.Manager) error {
		return fm.Mkdir(req.Path, req.Name)
	})
}

func (a *API) postDelete(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string   `json:"root"`
		Files []string `json:"files"`
	}
	return a.changeFiles(w, r, s, &req, func(fm *files.Manager) error {
		return fm.Delete(r.Context(), req.Root, req.Files)
	})
}

func (a *API) postChmod(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string        `json:"root"`
		Files []files.Chmod `json:"files"`
	}
	return a.changeFiles(w, r, s, &req, func(fm *files.Manager) error {
		return fm.ChmodAll(req.Root, req.Files)
	})
}

// fileJob reads a file job's (compress, decompress, pull) JSON body into
// req and takes the server's job slot for it: refused while an exclusive
// job runs, and while the server's files may not be changed.
func fileJob(w http.ResponseWriter, r *http.Request, s *server.Server, req any) (end func(), err error) {
	if err := readJSON(w, r, req); err != nil {
		return nil, err
	}
	if err := s.CheckFileWrites(); err != nil {
		return nil, err
	}
	return s.BeginJob(server.JobFiles)
}

func (a *API) postCompress(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req files.CompressRequest
	end, err := fileJob(w, r, s, &req)
	if err != nil {
		return err
	}
	defer end()
	st, err := a.fileManager(s).Compress(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (a *API) postDecompress(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root string `json:"root"`
		File string `json:"file"`
	}
	end, err := fileJob(w, r, s, &req)
	if err != nil {
		return err
	}
	defer end()
	fm := a.fileManager(s)
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
	res, err := fm.Decompress(r.Context(), req.Root, req.File)
	if err != nil {
		return err
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
	out, err := a.fileManager(s).Search(r.Context(), q.Get("directory"), q.Get("pattern"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
