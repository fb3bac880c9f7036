package sftpd

import (
	"context"
	"errors"
	"io"
	"os"
	"path"

	"github.com/pkg/sftp"

	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/usererr"
)

// The backups folder (issue 35, internal/backupview) over SFTP: ls, stat
// and get read the backups; a rename out of the folder restores a copy;
// every other change inside it is refused with permission denied.

// inView places name against the session's server's backups folder.
func (h *handlers) inView(name string) (backupview.Path, bool, error) {
	if h.browse == nil {
		return backupview.Path{}, false, nil
	}
	p, err := h.browse.Split(h.files(), name)
	if err != nil {
		return p, false, toStatus(err)
	}
	return p, p.In, nil
}

// viewStatus is toStatus for the folder's own errors.
func viewStatus(err error) error {
	switch {
	case errors.Is(err, backupview.ErrReadOnly), errors.Is(err, backupview.ErrIntoView):
		ue, _ := usererr.From(err)
		return &statusError{sftp.ErrSSHFxPermissionDenied, ue.Message}
	case errors.Is(err, backupview.ErrLink):
		ue, _ := usererr.From(err)
		return &statusError{sftp.ErrSSHFxFailure, ue.Message}
	}
	return toStatus(err)
}

var errViewReadOnly = viewStatus(backupview.ErrReadOnly)

// viewChange refuses a change naming the folder (and answers true), except
// a rename out of it (viewRename).
func (h *handlers) viewChange(r *sftp.Request) (bool, error) {
	for _, n := range []string{r.Filepath, r.Target} {
		if n == "" {
			continue
		}
		if _, in, err := h.inView(n); err != nil || in {
			if err != nil {
				return true, err
			}
			if r.Method == "Rename" || r.Method == "PosixRename" {
				return true, h.viewRename(r)
			}
			return true, errViewReadOnly
		}
	}
	return false, nil
}

// viewRename restores r.Filepath (in the folder) to r.Target (outside):
// a copy, as a job on the server's slot.
func (h *handlers) viewRename(r *sftp.Request) error {
	from, _, err := h.inView(r.Filepath)
	if err != nil {
		return err
	}
	if _, in, err := h.inView(r.Target); err != nil || in {
		if err != nil {
			return err
		}
		return viewStatus(backupview.ErrIntoView)
	}
	if !from.In {
		return errViewReadOnly
	}
	if !h.sess.can(permCreate) {
		return errDenied
	}
	job, err := h.sess.allowWrite(r.Context(), permUpdate)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	if err := h.browse.CopyOut(ctx, job.FS(), h.sess.srv.UUID(), from, r.Target); err != nil {
		return viewStatus(err)
	}
	h.sess.record("rename", map[string]string{"from": r.Filepath, "to": r.Target})
	return nil
}

// viewRead opens a file of the folder for download.
func (h *handlers) viewRead(r *sftp.Request, p backupview.Path) (io.ReaderAt, error) {
	release, err := h.sess.takeHandle()
	if err != nil {
		return nil, err
	}
	f, err := h.browse.Open(r.Context(), h.files(), h.sess.srv.UUID(), p)
	if err != nil {
		release()
		return nil, viewStatus(err)
	}
	return &viewReader{f: f, release: release}, nil
}

type viewReader struct {
	f       *backupview.File
	release func()
}

func (r *viewReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.f.ReadAt(p, off)
	if err == io.EOF {
		return n, err
	}
	return n, toStatus(err)
}

func (r *viewReader) Close() error {
	defer r.release()
	return r.f.Close()
}

// viewList answers List, Stat, Lstat and Readlink inside the folder.
func (h *handlers) viewList(r *sftp.Request, p backupview.Path) (sftp.ListerAt, error) {
	srv := h.sess.srv.UUID()
	if r.Method == "List" {
		infos, err := h.browse.List(r.Context(), h.files(), srv, p)
		if err != nil {
			return nil, viewStatus(err)
		}
		out := make(listOf, len(infos))
		for i := range infos {
			out[i] = infos[i]
		}
		return out, nil
	}
	fi, err := h.browse.Stat(r.Context(), h.files(), srv, p)
	if err != nil {
		return nil, viewStatus(err)
	}
	return listOf{fi}, nil
}

// viewRootEntry is the folder's entry in the listing of dir (the root).
func (h *handlers) viewRootEntry(dir string) []os.FileInfo {
	if h.browse == nil || path.Clean("/"+dir) != "/" || h.browse.Active(h.files()) == "" {
		return nil
	}
	fi, err := h.browse.Stat(context.Background(), h.files(), h.sess.srv.UUID(), backupview.Path{In: true})
	if err != nil {
		return nil
	}
	return []os.FileInfo{fi}
}

// viewReadlink is a link's stored target inside the folder.
func (h *handlers) viewReadlink(p backupview.Path) (string, error) {
	fi, err := h.browse.Stat(context.Background(), h.files(), h.sess.srv.UUID(), p)
	if err != nil {
		return "", viewStatus(err)
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		return "", errFailure
	}
	return fi.Target, nil
}
