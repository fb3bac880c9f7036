// Package tree builds server file trees for tests and benchmarks, and
// describes trees so that two can be compared (contents, modes, mtimes,
// symbolic links, empty directories).
package tree

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// Mtime is the modification time given to every entry Build makes.
var Mtime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// Build writes a tree of about size bytes under root: nested directories
// with modes 0750/0755, files of mixed sizes (half compressible text, half
// random bytes) with modes 0644/0600/0755, an empty directory, symbolic
// links inside and outside the root. Every mtime is Mtime.
func Build(root string, size int64) error {
	rng := rand.New(rand.NewPCG(1, uint64(size)))
	dirs := []string{"world/region", "world/data", "plugins/conf", "logs", "empty/deeper"}
	for i, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), []fs.FileMode{0o750, 0o755}[i%2]); err != nil {
			return err
		}
	}
	files := []string{"server.properties", "run.sh", "world/level.dat", "world/region/r.0.mca", "world/data/raids.dat", "plugins/a.jar", "plugins/conf/a.yml", "logs/latest.log"}
	modes := []fs.FileMode{0o644, 0o755, 0o600, 0o644}
	var written int64
	for i := 0; written < size || i < len(files); i++ {
		name := files[i%len(files)]
		if i >= len(files) {
			name = fmt.Sprintf("%s.%d", name, i)
		}
		n := min(max(size-written, 0), int64(1<<(10+rng.IntN(13)))) // 1 KiB .. 4 MiB
		if err := writeFile(filepath.Join(root, name), n, i%2 == 0, rng, modes[i%len(modes)]); err != nil {
			return err
		}
		written += n
	}
	for link, target := range map[string]string{"etc-link": "/etc", "level-link": "world/level.dat", "world/out-link": "../../outside"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			return err
		}
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, Mtime, Mtime)
	})
}

func writeFile(path string, n int64, text bool, rng *rand.Rand, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for i := range buf {
		if text {
			buf[i] = "abcdefgh ijklmnop\n"[rng.IntN(18)]
		} else {
			buf[i] = byte(rng.Uint32())
		}
	}
	for left := n; left > 0; {
		if !text {
			for i := 0; i < len(buf); i += 8 {
				v := rng.Uint64()
				for j := 0; j < 8 && i+j < len(buf); j++ {
					buf[i+j] = byte(v >> (8 * j))
				}
			}
		}
		k := min(left, int64(len(buf)))
		if _, err := f.Write(buf[:k]); err != nil {
			f.Close()
			return err
		}
		left -= k
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// Snapshot describes every entry under root (root itself excluded): type
// and mode, mtime (not for links), SHA-256 of the contents or the link target.
func Snapshot(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + tgt
		case fi.IsDir():
			desc += " " + fi.ModTime().UTC().Format(time.RFC3339)
		default:
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %s %d %s", fi.ModTime().UTC().Format(time.RFC3339), fi.Size(), hex.EncodeToString(h.Sum(nil)))
		}
		out[rel] = desc
		return nil
	})
	return out, err
}
