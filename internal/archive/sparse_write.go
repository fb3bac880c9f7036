package archive

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"syscall"

	"github.com/wharf/wharf/internal/sandbox"
)

// sparseFrags returns the data fragments of the open file f when it has
// holes worth keeping: fewer blocks allocated than its size, and the
// kernel able to tell where its data is. Otherwise ok is false and f is
// read whole from its start.
func sparseFrags(f *sandbox.File, fi fs.FileInfo) (frags []frag, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat || fi.Size() == 0 || st.Blocks*512 >= fi.Size() {
		return nil, false
	}
	osf := f.OSFile()
	if osf == nil {
		return nil, false
	}
	rc, err := osf.SyscallConn()
	if err != nil {
		return nil, false
	}
	if cerr := rc.Control(func(fd uintptr) { frags, ok = dataFrags(int(fd), fi.Size()) }); cerr != nil {
		ok = false
	}
	if ok && dataBytes(frags) >= fi.Size() {
		ok = false // no hole after all
	}
	if !ok {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, false
		}
	}
	return frags, ok
}

// writeSparse stores the open file f as a GNU sparse 1.0 entry (sparse.go)
// with the fragments frags, written straight to the archive's stream after
// the tar writer's pending padding. A fragment that shrank while it was
// read is padded with zeros to its listed length; data written into a hole
// after the listing is not stored (as any change made during the read, it
// is the next backup's). The integrity entry's hash of a sparse file is
// that of its map's text followed by its data.
func (wr *writer) writeSparse(ctx context.Context, f *sandbox.File, hdr *tar.Header, frags []frag, fi fs.FileInfo) error {
	if err := wr.tw.Flush(); err != nil {
		return err
	}
	data, err := wr.sparseEntry(ctx, f, hdr, frags)
	if err != nil {
		return err
	}
	return wr.fileDone(hdr.Name, fi, data)
}

// sparseEntry writes the whole sparse entry of f (headers, map, data,
// padding) to the archive's stream, hashing the map's text and the data
// into wr.fileHash with an integrity entry; it returns the data's bytes.
func (wr *writer) sparseEntry(ctx context.Context, f *sandbox.File, hdr *tar.Header, frags []frag) (int64, error) {
	frags = withEnd(frags, hdr.Size)
	mapText := formatMap(frags)
	mapLen := int64(len(mapText)+511) &^ 511
	data := dataBytes(frags)
	physical := mapLen + data
	head := sparseHeader(hdr.Name, hdr.Mode, hdr.ModTime.Unix(), hdr.Size, physical)
	if _, err := wr.sink.Write(head); err != nil {
		return 0, err
	}
	var dst io.Writer = wr.sink
	if wr.man != nil {
		wr.fileHash.Reset()
		dst = io.MultiWriter(wr.sink, wr.fileHash)
	}
	if _, err := dst.Write(mapText); err != nil {
		return 0, err
	}
	if _, err := wr.sink.Write(make([]byte, mapLen-int64(len(mapText)))); err != nil {
		return 0, err
	}
	for _, fr := range frags {
		if err := wr.copyFrag(ctx, dst, f, fr); err != nil {
			return 0, err
		}
	}
	if pad := -physical & 511; pad > 0 {
		if _, err := wr.sink.Write(make([]byte, pad)); err != nil {
			return 0, err
		}
	}
	return data, nil
}

// copyFrag copies one fragment of f to dst, padded with zeros when the
// file no longer holds all of it.
func (wr *writer) copyFrag(ctx context.Context, dst io.Writer, f *sandbox.File, fr frag) error {
	if fr.n == 0 {
		return nil
	}
	src := sandbox.ContextReader(ctx, onlyReader{io.NewSectionReader(f, fr.off, fr.n)})
	n, err := io.CopyBuffer(dst, src, wr.buf)
	var rerr readErr
	if errors.As(err, &rerr) {
		return rerr.error
	}
	if err != nil {
		return err
	}
	if n < fr.n {
		_, err = io.CopyBuffer(dst, io.LimitReader(sandbox.ContextReader(ctx, zeros{}), fr.n-n), wr.buf)
	}
	return err
}
