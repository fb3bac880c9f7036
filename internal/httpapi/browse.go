package httpapi

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"

	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/files"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
)

// The backups folder (issue 35, internal/backupview): a branch taken early
// by the file routes for the names under it. Reads are served from the
// backup repository; every change is refused (403), except a rename out
// of it, which restores (copies) the file or directory.

// viewPath places name against s's backups folder.
func (a *API) viewPath(s *server.Server, name string) (backupview.Path, error) {
	return a.Browse.Split(s.Files(), name)
}

// refuseInView refuses a change that names the backups folder or a path
// inside it: nothing is changed.
func (a *API) refuseInView(s *server.Server, names ...string) error {
	for _, n := range names {
		p, err := a.viewPath(s, n)
		if err != nil {
			return err
		}
		if p.In {
			return backupview.ErrReadOnly
		}
	}
	return nil
}

// refuseInViewUnder is refuseInView for names relative to root.
func (a *API) refuseInViewUnder(s *server.Server, root string, names []string) error {
	if err := a.refuseInView(s, root); err != nil {
		return err
	}
	for _, n := range names {
		if err := a.refuseInView(s, joinRoot(root, n)); err != nil {
			return err
		}
	}
	return nil
}

// viewStat is the panels' description of an entry of the folder.
func viewStat(i backupview.Info) files.Stat {
	mime := files.MimeBinary
	switch {
	case i.IsDir():
		mime = files.MimeDirectory
	case i.Mode()&fs.ModeSymlink != 0:
		mime = "inode/symlink"
	default:
		if m := files.MimeByName(i.Name()); m != "" {
			mime = m
		}
	}
	return files.NewStat(i, mime)
}

// viewRootEntry is the folder's own entry in the listing of dir: one at
// the root when the folder shows for s.
func (a *API) viewRootEntry(s *server.Server, dir string) []files.Stat {
	if path.Clean("/"+dir) != "/" || a.Browse.Active(s.Files()) == "" {
		return nil
	}
	i, err := a.Browse.Stat(context.Background(), s.Files(), s.UUID(), backupview.Path{In: true})
	if err != nil {
		return nil
	}
	return []files.Stat{viewStat(i)}
}

// viewListing answers list-directory inside the folder.
func (a *API) viewListing(w http.ResponseWriter, r *http.Request, s *server.Server, p backupview.Path) error {
	infos, err := a.Browse.List(r.Context(), s.Files(), s.UUID(), p)
	if err != nil {
		return err
	}
	out := make([]files.Stat, 0, len(infos))
	for _, i := range infos {
		out = append(out, viewStat(i))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// serveViewFile answers the contents of a file of the folder (contents,
// the signed download: signed), with Content-Length and ranges.
func (a *API) serveViewFile(w http.ResponseWriter, r *http.Request, s *server.Server, p backupview.Path, name string, download, signed bool) error {
	f, err := a.Browse.Open(r.Context(), s.Files(), s.UUID(), p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := w.Header()
	if !signed {
		head := make([]byte, 512)
		n, err := f.ReadAt(head, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		mime := files.DetectMime(name, head[:n])
		h.Set("X-Mime-Type", mime)
		h.Set("Content-Type", mime)
	}
	if download {
		h.Set("Content-Disposition", attachment(path.Base("/"+name)))
		h.Set("Content-Type", "application/octet-stream")
	}
	http.ServeContent(w, r, "", f.Stat().ModTime(), io.NewSectionReader(f, 0, f.Size()))
	return nil
}

// renameAll is the rename route with the folder: a pair from inside it to
// a name outside restores a copy (CopyOut); a pair onto a name inside it
// is refused; the others are moves as before. Pairs run in order.
func (a *API) renameAll(ctx context.Context, s *server.Server, fm *files.Manager, root string, pairs []files.Rename) error {
	viewed := false
	for _, pr := range pairs {
		for _, n := range []string{pr.From, pr.To} {
			p, err := a.viewPath(s, joinRoot(root, n))
			if err != nil {
				return err
			}
			viewed = viewed || p.In
		}
	}
	if !viewed {
		return fm.RenameAll(ctx, root, pairs)
	}
	for _, pr := range pairs {
		from, to := joinRoot(root, pr.From), joinRoot(root, pr.To)
		pf, err := a.viewPath(s, from)
		if err != nil {
			return err
		}
		pt, err := a.viewPath(s, to)
		if err != nil {
			return err
		}
		switch {
		case pt.In:
			return backupview.ErrIntoView
		case pf.In:
			err = a.Browse.CopyOut(ctx, fm.FS, s.UUID(), pf, to) // the job's filesystem
			if errors.Is(err, sandbox.ErrExist) {
				return files.ErrDestExists
			}
		default:
			err = fm.RenameAll(ctx, "/", []files.Rename{{From: from, To: to}})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// compressNames is the names a compress archives: the backups folder is
// not part of the server, so naming it among the root's names (the Files
// tab's "select all") leaves it out; a compress inside it is refused.
func (a *API) compressNames(s *server.Server, root string, names []string) ([]string, error) {
	if err := a.refuseInView(s, root); err != nil {
		return nil, err
	}
	dir := a.Browse.Active(s.Files())
	out := names[:0:0]
	for _, n := range names {
		full := joinRoot(root, n)
		if dir != "" && path.Clean("/"+full) == "/"+dir {
			continue
		}
		if err := a.refuseInView(s, full); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// joinRoot names name inside the directory root as the file manager does
// (files.join): cleaning it, and refusing a climb out, is left to the
// sandbox and to the view's Split.
func joinRoot(root, name string) string {
	if root == "" {
		return name
	}
	return root + "/" + name
}
