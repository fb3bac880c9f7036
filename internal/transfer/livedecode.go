package transfer

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// recDecoder reads a record's fields and keeps the first error, as
// bufio.Scanner does: once a read failed, the later ones read nothing and
// return zero values, and err reports the failure. A record is read field
// by field and checked once.
type recDecoder struct {
	r   recReader
	err error
}

// keep records err when it is the first one.
func (d *recDecoder) keep(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *recDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	b, err := d.r.byte()
	d.keep(err)
	return b
}

func (d *recDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := d.r.uvarint()
	d.keep(err)
	return v
}

func (d *recDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, err := d.r.varint()
	d.keep(err)
	return v
}

func (d *recDecoder) str() string {
	if d.err != nil {
		return ""
	}
	s, err := d.r.str()
	d.keep(err)
	return s
}

func (d *recDecoder) sum() contentHash {
	if d.err != nil {
		return contentHash{}
	}
	s, err := d.r.sum()
	d.keep(err)
	return s
}

// name reads a path and refuses one leading out of the root.
func (d *recDecoder) name() string {
	rel := d.str()
	if d.err != nil {
		return ""
	}
	if strings.HasPrefix(rel, "/") || strings.IndexByte(rel, 0) >= 0 || path.Clean(rel) != rel || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		d.keep(fmt.Errorf("%w: %q", errBadStream, rel))
		return ""
	}
	return rel
}

// head reads what starts a directory or file record: name, mode, time.
func (d *recDecoder) head() (rel string, mode fs.FileMode, mtime int64) {
	rel = d.name()
	mode = fs.FileMode(d.uvarint()) & fs.ModePerm
	mtime = d.varint()
	return rel, mode, mtime
}
