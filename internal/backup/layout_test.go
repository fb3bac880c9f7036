package backup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/wharf/wharf/internal/config"
)

const (
	serverA = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	serverB = "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"
	backupX = "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f"
)

func layoutConfig(t *testing.T, layout string) *config.Config {
	t.Helper()
	cfg := config.Defaults()
	cfg.System.BackupDirectory = t.TempDir()
	cfg.System.Backups.Layout = layout
	return cfg
}

func place(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("archive"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLocalPathFindsEitherLayoutOfItsServerOnly(t *testing.T) {
	cfg := layoutConfig(t, LayoutAuto)
	dir := cfg.System.BackupDirectory

	// Pelican Wings' layout: only server A's directory holds it.
	place(t, filepath.Join(dir, serverA, backupX+".tar.gz"))
	if p, err := LocalPath(cfg, serverA, backupX); err != nil || p != filepath.Join(dir, serverA, backupX+".tar.gz") {
		t.Fatalf("per-server archive of A: %q %v", p, err)
	}
	if _, err := LocalPath(cfg, serverB, backupX); !errors.Is(err, ErrNotFound) {
		t.Fatalf("B reached A's per-server archive: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, serverA)); err != nil {
		t.Fatal(err)
	}

	// The flat layout without an owner record (Pterodactyl Wings'): any server.
	place(t, filepath.Join(dir, backupX+".tar.gz"))
	for _, s := range []string{serverA, serverB} {
		if p, err := LocalPath(cfg, s, backupX); err != nil || p != filepath.Join(dir, backupX+".tar.gz") {
			t.Fatalf("flat archive for %s: %q %v", s, p, err)
		}
	}
	// With Wharf's owner record: its server only.
	if err := os.WriteFile(ownerPath(dir, backupX), []byte(serverA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalPath(cfg, serverA, backupX); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalPath(cfg, serverB, backupX); !errors.Is(err, ErrNotFound) {
		t.Fatalf("B reached A's flat archive: %v", err)
	}

	for _, bad := range []string{"../" + backupX, "", "x"} {
		if _, err := LocalPath(cfg, serverA, bad); !errors.Is(err, ErrBadUUID) {
			t.Fatalf("backup %q: %v", bad, err)
		}
	}
	// A directory in the archive's place is not an archive.
	if err := os.MkdirAll(filepath.Join(dir, serverB, backupX+".tar.gz"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalPath(cfg, serverB, backupX); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a directory was taken for an archive: %v", err)
	}
}

func TestWriteLayout(t *testing.T) {
	for _, tc := range []struct {
		name, layout string
		setup        func(dir string)
		want         string
	}{
		{"auto, empty directory", LayoutAuto, func(string) {}, LayoutFlat},
		{"unset, empty directory", "", func(string) {}, LayoutFlat},
		{"auto, missing directory", LayoutAuto, func(dir string) { os.Remove(dir) }, LayoutFlat},
		{"auto, flat archives", LayoutAuto, func(dir string) { place(t, filepath.Join(dir, backupX+".tar.gz")) }, LayoutFlat},
		{"auto, a directory not named by a UUID", LayoutAuto, func(dir string) { place(t, filepath.Join(dir, "old", backupX+".tar.gz")) }, LayoutFlat},
		{"auto, a file named by a UUID", LayoutAuto, func(dir string) { place(t, filepath.Join(dir, serverA)) }, LayoutFlat},
		{"auto, a server directory", LayoutAuto, func(dir string) { place(t, filepath.Join(dir, serverA, backupX+".tar.gz")) }, LayoutPerServer},
		{"auto, an emptied server directory", LayoutAuto, func(dir string) { os.Mkdir(filepath.Join(dir, serverA), 0o700) }, LayoutPerServer},
		{"flat despite a server directory", LayoutFlat, func(dir string) { os.Mkdir(filepath.Join(dir, serverA), 0o700) }, LayoutFlat},
		{"per_server on an empty directory", LayoutPerServer, func(string) {}, LayoutPerServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := layoutConfig(t, tc.layout)
			tc.setup(cfg.System.BackupDirectory)
			if got := WriteLayout(cfg); got != tc.want {
				t.Fatalf("WriteLayout = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestCommitLocalAndRemove(t *testing.T) {
	for _, tc := range []struct {
		layout string
		want   func(dir string) string
	}{
		{LayoutFlat, func(dir string) string { return filepath.Join(dir, backupX+".tar.gz") }},
		{LayoutPerServer, func(dir string) string { return filepath.Join(dir, serverA, backupX+".tar.gz") }},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			cfg := layoutConfig(t, tc.layout)
			dir := cfg.System.BackupDirectory
			f, err := CreateTemp(cfg)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			p, err := CommitLocal(cfg, serverA, backupX, f.Name())
			if err != nil || p != tc.want(dir) || !isRegular(p) {
				t.Fatalf("CommitLocal = %q %v", p, err)
			}
			if _, err := os.Stat(f.Name()); !os.IsNotExist(err) {
				t.Fatal("the temporary file is still there")
			}
			if got, err := LocalPath(cfg, serverA, backupX); err != nil || got != p {
				t.Fatalf("LocalPath = %q %v", got, err)
			}
			if _, err := LocalPath(cfg, serverB, backupX); !errors.Is(err, ErrNotFound) {
				t.Fatalf("another server found the new archive: %v", err)
			}
			if err := removeLocal(cfg, p, backupX); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if !(e.IsDir() && e.Name() == serverA) {
					t.Fatalf("left behind after removal: %s", e.Name())
				}
			}
		})
	}
}
