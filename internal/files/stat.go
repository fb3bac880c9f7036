package files

import (
	"bytes"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stat is the panels' description of one file (list-directory, compress,
// a foreground pull).
type Stat struct {
	Name      string `json:"name"`
	Created   string `json:"created"`
	Modified  string `json:"modified"`
	Mode      string `json:"mode"`
	ModeBits  string `json:"mode_bits"`
	Size      int64  `json:"size"`
	Directory bool   `json:"directory"`
	File      bool   `json:"file"`
	Symlink   bool   `json:"symlink"`
	Mime      string `json:"mime"`
}

// Mime types the listing gives without reading.
const (
	MimeDirectory = "inode/directory"
	MimeText      = "text/plain; charset=utf-8"
	MimeBinary    = "application/octet-stream"
	MimeTarGzip   = "application/tar+gzip"
)

// NewStat describes fi (lstat data) with the given mime type. created is
// the inode change time, as Wings reports it.
func NewStat(fi fs.FileInfo, mime string) Stat {
	mod := fi.ModTime()
	created := mod
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		created = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	mode := fi.Mode()
	bits := mode.Perm()
	if mode&fs.ModeSymlink != 0 {
		bits = 0o777
	}
	return Stat{
		Name:      fi.Name(),
		Created:   created.Format(time.RFC3339),
		Modified:  mod.Format(time.RFC3339),
		Mode:      mode.String(),
		ModeBits:  strconv.FormatUint(uint64(bits), 8),
		Size:      fi.Size(),
		Directory: fi.IsDir(),
		File:      !fi.IsDir(),
		Symlink:   mode&fs.ModeSymlink != 0,
		Mime:      mime,
	}
}

// textExt are extensions whose files are text for the editor; they are not
// read to be typed (most files of a game server are configs and logs).
var textExt = map[string]string{
	".txt": MimeText, ".log": MimeText, ".cfg": MimeText, ".conf": MimeText, ".ini": MimeText,
	".properties": MimeText, ".yml": MimeText, ".yaml": MimeText, ".toml": MimeText, ".md": MimeText,
	".sh": MimeText, ".lua": MimeText, ".js": MimeText, ".py": MimeText, ".csv": MimeText,
	".xml": "text/xml; charset=utf-8", ".json": "application/json",
}

// sniffLen is how much of a file's head mime detection reads: enough for
// every signature below (tar's is at 257).
const sniffLen = 512

// mimeByName returns the type of a regular file known by its extension,
// or "" when its head must be read.
func mimeByName(name string) string {
	return textExt[strings.ToLower(path.Ext(name))]
}

// magic are the signatures of the types the panels treat specially
// (archives they offer to unpack), checked before http.DetectContentType.
var magic = []struct {
	off  int
	sig  []byte
	mime string
}{
	{0, []byte{0x1f, 0x8b}, "application/gzip"},
	{0, []byte("PK\x03\x04"), "application/zip"},
	{0, []byte("PK\x05\x06"), "application/zip"},
	{0, []byte("7z\xbc\xaf\x27\x1c"), "application/x-7z-compressed"},
	{0, []byte("Rar!\x1a\x07"), "application/x-rar-compressed"},
	{0, []byte("\xfd7zXZ\x00"), "application/x-xz"},
	{0, []byte("BZh"), "application/x-bzip2"},
	{0, []byte{0x28, 0xb5, 0x2f, 0xfd}, "application/zstd"},
	{0, []byte("LZIP"), "application/x-lzip"},
	{257, []byte("ustar"), "application/x-tar"},
}

// DetectMime types a file from its head (at most sniffLen bytes; an empty
// head is an empty file, which the editor may open).
func DetectMime(name string, head []byte) string {
	if len(head) == 0 {
		return MimeText
	}
	for _, m := range magic {
		if len(head) >= m.off+len(m.sig) && bytes.Equal(head[m.off:m.off+len(m.sig)], m.sig) {
			return m.mime
		}
	}
	t := http.DetectContentType(head)
	if strings.HasPrefix(t, "text/plain") {
		if byName := mimeByName(name); byName != "" {
			return byName
		}
	}
	return t
}

// MimeByName is the type of a regular file known by its extension, or ""
// (the backups folder types its files without reading them).
func MimeByName(name string) string { return mimeByName(name) }
