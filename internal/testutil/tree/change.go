package tree

import (
	"crypto/rand"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// RegularFiles lists the regular files under root, sorted.
func RegularFiles(tb testing.TB, root string) []string {
	tb.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// ChangeTwoPercent rewrites the first 4 KiB of every 50th file (a
// different set each round) with random bytes: the "2 % of the files
// changed" between the backups of the backup benchmarks.
func ChangeTwoPercent(tb testing.TB, files []string, round int) {
	tb.Helper()
	buf := make([]byte, 4096)
	for i := round % 50; i < len(files); i += 50 {
		f, err := os.OpenFile(files[i], os.O_WRONLY, 0)
		if err != nil {
			tb.Fatal(err)
		}
		rand.Read(buf)
		fi, err := f.Stat()
		if err == nil {
			_, err = f.WriteAt(buf[:min(int64(len(buf)), fi.Size())], 0)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}
