package archive

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strings"
)

// spoolMemory is how much of a spool is kept in memory before it moves to a
// temporary file, so that the per-file lists of huge trees stay bounded.
const spoolMemory = 4 << 20

// spool is an append-only byte store read back once from the start: in
// memory up to spoolMemory, then in an unlinked temporary file.
type spool struct {
	dir  string
	mem  bytes.Buffer
	file *os.File
	bw   *bufio.Writer
	n    int64
}

func (s *spool) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	if s.file == nil && s.mem.Len()+len(p) <= spoolMemory {
		return s.mem.Write(p)
	}
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, ".wharf-spool-")
		if err != nil {
			return 0, err
		}
		_ = os.Remove(f.Name()) // unlinked: gone whatever happens to us
		s.file = f
		s.bw = bufio.NewWriterSize(f, 256<<10)
		if _, err := s.bw.Write(s.mem.Bytes()); err != nil {
			return 0, err
		}
		s.mem = bytes.Buffer{}
	}
	return s.bw.Write(p)
}

// Len is the number of bytes written.
func (s *spool) Len() int64 { return s.n }

// Reader returns the content from the start.
func (s *spool) Reader() (io.Reader, error) {
	if s.file == nil {
		return bytes.NewReader(s.mem.Bytes()), nil
	}
	if err := s.bw.Flush(); err != nil {
		return nil, err
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return bufio.NewReaderSize(s.file, 256<<10), nil
}

// Close releases the temporary file.
func (s *spool) Close() {
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
}

// manifestLine formats one line of the integrity entry, escaping names the
// way sha1sum does.
func manifestLine(sum []byte, name string) string {
	const hexd = "0123456789abcdef"
	var b strings.Builder
	esc := strings.ContainsAny(name, "\\\n\r")
	if esc {
		b.WriteByte('\\')
	}
	for _, c := range sum {
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	b.WriteString("  ")
	if esc {
		name = strings.NewReplacer("\\", "\\\\", "\n", "\\n", "\r", "\\r").Replace(name)
	}
	b.WriteString(name)
	b.WriteByte('\n')
	return b.String()
}
