package httpapi

import (
	"net/http"
	"path"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/files"
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

// readWrite reads a writing route's JSON body into v, then refuses with
// 409 when the server's files may not be changed now (suspended, or an
// exclusive job rewrites them).
func readWrite(w http.ResponseWriter, r *http.Request, s *server.Server, v any) error {
	if err := readJSON(w, r, v); err != nil {
		return err
	}
	return s.CheckFileWrites()
}

func (a *API) putRename(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string         `json:"root"`
		Files []files.Rename `json:"files"`
	}
	if err := readWrite(w, r, s, &req); err != nil {
		return err
	}
	if err := a.fileManager(s).RenameAll(req.Root, req.Files); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) postCopy(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Location string `json:"location"`
	}
	if err := readWrite(w, r, s, &req); err != nil {
		return err
	}
	if _, err := a.fileManager(s).Copy(req.Location); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
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
	if err := readWrite(w, r, s, &req); err != nil {
		return err
	}
	if err := a.fileManager(s).Mkdir(req.Path, req.Name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) postDelete(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string   `json:"root"`
		Files []string `json:"files"`
	}
	if err := readWrite(w, r, s, &req); err != nil {
		return err
	}
	if err := a.fileManager(s).Delete(r.Context(), req.Root, req.Files); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) postChmod(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req struct {
		Root  string        `json:"root"`
		Files []files.Chmod `json:"files"`
	}
	if err := readWrite(w, r, s, &req); err != nil {
		return err
	}
	if err := a.fileManager(s).ChmodAll(req.Root, req.Files); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fileJob takes the server's job slot for a file job (compress,
// decompress, pull): refused while an exclusive job runs, and while the
// server's files may not be changed.
func fileJob(s *server.Server) (end func(), err error) {
	if err := s.CheckFileWrites(); err != nil {
		return nil, err
	}
	return s.BeginJob(server.JobFiles)
}

func (a *API) postCompress(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req files.CompressRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	end, err := fileJob(s)
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
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	end, err := fileJob(s)
	if err != nil {
		return err
	}
	defer end()
	res, err := a.fileManager(s).Decompress(r.Context(), req.Root, req.File)
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
