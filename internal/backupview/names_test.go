package backupview

import (
	"strings"
	"testing"
)

// FuzzNames: a user's name and a name stored in a backup are cleaned to a
// relative name that never climbs out, or refused.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"", "/", ".backups/x/../../..", "a/../../b", "a\x00b", "../x", "./a//b/", "..\\..\\x", "a/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		check := func(what, c string) {
			if strings.HasPrefix(c, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.Contains(c, "/../") ||
				strings.HasSuffix(c, "/..") || strings.IndexByte(c, 0) >= 0 {
				t.Fatalf("%s(%q) = %q", what, name, c)
			}
		}
		if c, ok := cleanUser(name); ok {
			check("cleanUser", c)
		}
		if c, ok := cleanStored(name); ok {
			check("cleanStored", c)
		}
	})
}

func TestCleanUser(t *testing.T) {
	for in, want := range map[string]string{"/.backups/b/x": ".backups/b/x", "a/../.backups": ".backups", "": "", "//a//./b/": "a/b"} {
		if got, ok := cleanUser(in); !ok || got != want {
			t.Errorf("cleanUser(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"../.backups", "/a/../../b", "a\x00"} {
		if _, ok := cleanUser(in); ok {
			t.Errorf("cleanUser(%q) accepted", in)
		}
	}
}
