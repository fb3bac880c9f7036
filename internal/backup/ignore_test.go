package backup

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// matches reports whether the compiled patterns leave name out.
func matches(patterns, name string) bool {
	m := archive.NewIgnore(patterns)
	return m != nil && m.Match(strings.Split(name, "/"), false)
}

func TestIgnorePatternsUnionOfEveryIgnoreFile(t *testing.T) {
	svc := &Service{log: slog.New(slog.DiscardHandler)}
	root := t.TempDir()
	srv := benchServer{tree.Open(t, root)}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if got := svc.ignorePatterns(srv, ""); got != "" {
		t.Fatalf("no ignore file: %q", got)
	}
	// Each file alone, without a final newline.
	for name, pattern := range map[string]string{PteroIgnoreFile: "ptero.log", PelicanIgnoreFile: "pelican.log", IgnoreFile: "service.log"} {
		write(name, pattern)
		if got := svc.ignorePatterns(srv, ""); !matches(got, pattern) {
			t.Fatalf("%s alone: %q does not leave %s out", name, got, pattern)
		}
		os.Remove(filepath.Join(root, name))
	}

	// All three: the union, in the documented order.
	write(PteroIgnoreFile, "ptero.log")
	write(PelicanIgnoreFile, "pelican.log\r\n")
	write(IgnoreFile, "service.log")
	got := svc.ignorePatterns(srv, "")
	for _, name := range []string{"ptero.log", "pelican.log", "service.log"} {
		if !matches(got, name) {
			t.Fatalf("union %q does not leave %s out", got, name)
		}
	}
	if matches(got, "world/level.dat") {
		t.Fatalf("union %q leaves out a file no pattern names", got)
	}
	if strings.Index(got, "ptero.log") > strings.Index(got, "pelican.log") || strings.Index(got, "pelican.log") > strings.Index(got, "service.log") {
		t.Fatalf("order: %q", got)
	}
	// The request's patterns replace the files'.
	if got := svc.ignorePatterns(srv, "from-request"); got != "from-request" {
		t.Fatalf("request patterns: %q", got)
	}

	// A FIFO, a link and an oversized file are skipped; the others count.
	os.Remove(filepath.Join(root, PteroIgnoreFile))
	if err := syscall.Mkfifo(filepath.Join(root, PteroIgnoreFile), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(root, PelicanIgnoreFile))
	write("elsewhere", "pelican.log")
	if err := os.Symlink("elsewhere", filepath.Join(root, PelicanIgnoreFile)); err != nil {
		t.Fatal(err)
	}
	got = svc.ignorePatterns(srv, "")
	if matches(got, "pelican.log") || !matches(got, "service.log") {
		t.Fatalf("with a FIFO and a link: %q", got)
	}
	write(IgnoreFile, "service.log\n"+strings.Repeat("#", IgnoreFileMax))
	if got := svc.ignorePatterns(srv, ""); got != "" {
		t.Fatalf("an oversized file was read: %d bytes", len(got))
	}
}

// FuzzIgnoreFiles: whatever bytes a user puts in the three ignore files,
// reading and compiling them never panics, a pattern of one file alone
// still counts in the union, and a name no line mentions is kept.
func FuzzIgnoreFiles(f *testing.F) {
	f.Add("logs/\n*.jar", "!keep.jar\r\n", "cache/")
	f.Add("", "\x00\xff[", "**/\n\\!x")
	f.Add("[", "]", "!*")
	f.Fuzz(func(t *testing.T, ptero, pelican, service string) {
		svc := &Service{log: slog.New(slog.DiscardHandler)}
		root := t.TempDir()
		for name, data := range map[string]string{PteroIgnoreFile: ptero, PelicanIgnoreFile: pelican, IgnoreFile: service} {
			if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		srv := benchServer{tree.Open(t, root)}
		got := svc.ignorePatterns(srv, "")
		for _, part := range []string{ptero, pelican, service} {
			if len(part) <= IgnoreFileMax && !strings.Contains(got, part) {
				t.Fatalf("the patterns %q lost a file's content %q", got, part)
			}
		}
		if !strings.Contains(got, "zz") && matches(got, "zz-unmentioned.dat") && !strings.ContainsAny(got, "*?[") {
			t.Fatalf("patterns %q leave out a name none mentions", got)
		}
	})
}
