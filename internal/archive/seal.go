package archive

import (
	"archive/tar"
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"time"

	"github.com/wharf/wharf/internal/sandbox"
)

// SealOptions configure Seal.
type SealOptions struct {
	// TempDir holds the spool of the integrity entry when it outgrows
	// memory; os.TempDir() when empty.
	TempDir string
	// ModTime is the integrity entry's modification time.
	ModTime time.Time
}

// Seal copies src, an uncompressed tar stream in the backup layout
// written without the integrity entry (WriteOptions.TreeTrailer without
// Manifest), to dst with it: each regular file of the files stream is
// hashed, and the entry ends the trailer, as Write would have made it. A
// regular file named ManifestName at the root is left out, as Write
// leaves it out. The backup repository stores its streams bare (hashing
// every file at every backup cost as much as compressing a third of it;
// its chunks carry their own SHA-256) and seals them for a download.
func Seal(ctx context.Context, dst io.Writer, src io.Reader, opts SealOptions) error {
	t := &tap{r: src}
	s := &sealer{
		ctx: ctx, rd: newStreamReader(t), tw: tar.NewWriter(dst), dst: dst,
		man: &spool{dir: opts.TempDir}, buf: make([]byte, 256<<10), tap: t,
	}
	defer s.man.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.tap.start()
		hdr, err := s.rd.next()
		s.tap.stop()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if err := s.entry(hdr); err != nil {
			return err
		}
	}
	if err := s.startTrailer(); err != nil {
		return err
	}
	mt := opts.ModTime
	if mt.IsZero() {
		mt = time.Now()
	}
	if err := writeManifestAt(s.tw, s.man, mt); err != nil {
		return err
	}
	return s.tw.Close()
}

type sealer struct {
	ctx     context.Context
	rd      *streamReader
	tw      *tar.Writer
	dst     io.Writer
	man     *spool
	buf     []byte
	trailer bool // tw writes the trailer
	tap     *tap // between src and the tar reader (sparse entries)
}

// startTrailer ends the files stream and starts the trailer's.
func (s *sealer) startTrailer() error {
	if s.trailer {
		return nil
	}
	if err := s.tw.Close(); err != nil {
		return err
	}
	s.tw, s.trailer = tar.NewWriter(s.dst), true
	return nil
}

func (s *sealer) entry(hdr *tar.Header) error {
	if s.rd.trailer {
		if err := s.startTrailer(); err != nil {
			return err
		}
		if hdr.Name == ManifestName {
			return fmt.Errorf("%w: the stream has an integrity entry already", ErrCorrupt)
		}
	}
	rel, ok := safeName(hdr.Name)
	file := !s.rd.trailer && hdr.Typeflag == tar.TypeReg && ok
	if file && rel == ManifestName {
		return nil // its content is skipped by the next read
	}
	if file && isSparse10(hdr) {
		return s.sparse(rel, hdr)
	}
	hdr.Format = tar.FormatUnknown // the writer picks, as Write's does
	if err := s.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, hdr.Name, err)
	}
	var dst io.Writer = s.tw
	h := sha1.New()
	if file {
		dst = io.MultiWriter(s.tw, h)
	}
	n, err := io.CopyBuffer(dst, sandbox.ContextReader(s.ctx, s.rd.tr), s.buf)
	if err != nil {
		// A damaged chunk of the repository stays an error of its own type.
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, hdr.Name, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("%w: %s: short entry", ErrCorrupt, hdr.Name)
	}
	if file {
		_, err = io.WriteString(s.man, manifestLine(h.Sum(nil), rel))
	}
	return err
}

// sparse copies a sparse 1.0 entry of the files stream as a sparse entry
// (its map written again as Write writes it, its data copied straight
// from the stream: the holes are never expanded) and hashes it as Write
// does for the integrity entry: the map's text, then the data.
func (s *sealer) sparse(rel string, hdr *tar.Header) error {
	frags, data, err := sparseLayout(s.tap, hdr)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, hdr.Name, err)
	}
	if err := s.tw.Flush(); err != nil {
		return err
	}
	text := formatMap(frags)
	mapLen := int64(len(text)+511) &^ 511
	physical := mapLen + data
	if _, err := s.dst.Write(sparseHeader(hdr.Name, hdr.Mode, hdr.ModTime.Unix(), hdr.Size, physical)); err != nil {
		return err
	}
	h := sha1.New()
	h.Write(text)
	if _, err := s.dst.Write(append(text, make([]byte, mapLen-int64(len(text)))...)); err != nil {
		return err
	}
	n, err := io.CopyBuffer(io.MultiWriter(s.dst, h), io.LimitReader(sandbox.ContextReader(s.ctx, direct{s.tap}), data), s.buf)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, hdr.Name, err)
	}
	if n != data {
		return fmt.Errorf("%w: %s: short entry", ErrCorrupt, hdr.Name)
	}
	s.tap.credit += data
	if _, err := s.dst.Write(make([]byte, -physical&511)); err != nil {
		return err
	}
	_, err = io.WriteString(s.man, manifestLine(h.Sum(nil), rel))
	return err
}
