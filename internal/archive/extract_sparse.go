package archive

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
)

// tap sits between the decompressed stream and the tar reader. It keeps
// the bytes the reader consumes while it reads an entry's headers (at most
// tapKeep of them), so that the sparse map of a GNU sparse 1.0 entry, which
// the reader reads and does not expose, can be parsed again (sparseTail).
// The extractor then copies the entry's data fragments straight from the
// stream to their offsets (direct), leaving the holes holes, and owes the
// tar reader those bytes: it skips them as zeros it reads from the tap
// (credit) without their ever being expanded.
type tap struct {
	r         io.Reader
	rec       []byte
	recording bool
	credit    int64
}

// tapKeep bounds what a tap keeps of one entry's headers: the map (Go's
// reader accepts 1 MiB of it) and the header before it.
const tapKeep = maxMapBytes + 4096

func (t *tap) Read(p []byte) (int, error) {
	if t.credit > 0 {
		n := int(min(int64(len(p)), t.credit))
		clear(p[:n])
		t.credit -= int64(n)
		return n, nil
	}
	n, err := t.r.Read(p)
	if t.recording && n > 0 {
		t.rec = append(t.rec, p[:n]...)
		if len(t.rec) > 2*tapKeep {
			t.rec = append(t.rec[:0], t.rec[len(t.rec)-tapKeep:]...)
		}
	}
	return n, err
}

// start begins recording a header read; stop ends it.
func (t *tap) start() { t.rec, t.recording = t.rec[:0], true }
func (t *tap) stop()  { t.recording = false }

// direct reads the stream itself, past the tar reader.
type direct struct{ t *tap }

// Tap is the tap for a reader of tar entries outside this package (the
// file manager's decompress, which reads tar through another library):
// NewTap starts recording; Start and Stop bracket an entry's headers;
// Recorded is what was recorded (for SparseMap); Direct reads the stream
// past the tar reader; Owe records n bytes read through Direct that the tar
// reader will skip as zeros.
type Tap struct{ t tap }

// NewTap returns a tap over r, recording.
func NewTap(r io.Reader) *Tap { return &Tap{tap{r: r, recording: true}} }

func (t *Tap) Read(p []byte) (int, error) { return t.t.Read(p) }
func (t *Tap) Start()                     { t.t.start() }
func (t *Tap) Stop()                      { t.t.stop() }
func (t *Tap) Recorded() []byte           { return t.t.rec }
func (t *Tap) Direct() io.Reader          { return direct{&t.t} }
func (t *Tap) Owe(n int64)                { t.t.credit += n }

func (d direct) Read(p []byte) (int, error) { return d.t.r.Read(p) }

// isSparse10 reports whether hdr is a GNU sparse entry of format 1.0.
func isSparse10(hdr *tar.Header) bool {
	return hdr.PAXRecords["GNU.sparse.major"] == "1" && hdr.PAXRecords["GNU.sparse.minor"] == "0"
}

// otherSparse reports whether hdr is a sparse entry of the GNU PAX formats
// 0.0 or 0.1 (whose holes Go's reader expands as zeros): Extract refuses
// them. The old GNU format (type 'S') is skipped as an unknown type, its
// data passed over unexpanded.
func otherSparse(hdr *tar.Header) bool {
	if isSparse10(hdr) {
		return false
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// sparseLayout returns the fragments of the sparse 1.0 entry hdr that the
// tar reader just read from t and the bytes of data that follow its map.
func sparseLayout(t *tap, hdr *tar.Header) ([]frag, int64, error) {
	frags, mapBlocks, sizeField, err := sparseTail(t.rec, hdr.Size)
	if err != nil {
		return nil, 0, err
	}
	physical := sizeField
	if s, ok := hdr.PAXRecords["size"]; ok {
		if physical, err = strconv.ParseInt(s, 10, 64); err != nil || physical < 0 {
			return nil, 0, errSparse
		}
	}
	data := dataBytes(frags)
	if physical-int64(mapBlocks)*512 != data {
		return nil, 0, errSparse
	}
	return frags, data, nil
}

// skipSparse passes over a sparse 1.0 entry that is not extracted (an
// unknown type) without expanding its holes.
func (x *extractor) skipSparse(hdr *tar.Header) error {
	_, data, err := sparseLayout(x.tap, hdr)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, hdr.Name, err)
	}
	if _, err := io.CopyN(io.Discard, direct{x.tap}, data); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	x.tap.credit += data
	return nil
}

// sparseFile extracts a sparse 1.0 entry: its fragments are written at
// their offsets, the rest of the file stays holes (an existing file written
// over is emptied first), so the disk limit is charged what the fragments
// allocate. The integrity entry's hash is that of the map's text followed
// by the data (as Write computes it).
func (x *extractor) sparseFile(rel string, hdr *tar.Header) error {
	frags, _, err := sparseLayout(x.tap, hdr)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, rel, err)
	}
	d, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	delete(x.links, rel)
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	f, old, err := x.create(d, rel, base, mode)
	if err != nil {
		return err
	}
	if old > 0 {
		err = x.wrap(rel, f.Truncate(0))
	}
	if !x.opts.NoManifest {
		x.h.Reset()
		x.h.Write(formatMap(frags))
	}
	var written int64
	for _, fr := range frags {
		if err != nil || fr.n == 0 {
			continue
		}
		var r io.Reader = io.LimitReader(direct{x.tap}, fr.n)
		if !x.opts.NoManifest {
			r = io.TeeReader(r, x.h)
		}
		var n int64
		n, err = x.copy(io.NewOffsetWriter(f, fr.off), r)
		written += n
		if err == nil && n != fr.n {
			err = fmt.Errorf("%w: %s: short file", ErrCorrupt, rel)
		}
	}
	x.tap.credit += written // every fragment was read whole unless err
	if err == nil {
		err = x.wrap(rel, f.Truncate(hdr.Size))
	}
	return x.closeFile(f, d, rel, base, hdr, mode, old >= 0, written, err)
}
