package files

import (
	"testing"
	"time"
)

func TestCopyName(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		file string
		i    int
		want string
	}{
		{"a.txt", 0, "a copy.txt"},
		{"a.txt", 1, "a copy 1.txt"},
		{"a.txt", 50, "a copy 50.txt"},
		{"a.txt", 51, "a copy.2026-01-02T030405-1.txt"},
		{"world.tar.gz", 0, "world copy.tar.gz"},
		{"world.tar.zst", 2, "world copy 2.tar.zst"},
		{"Makefile", 0, "Makefile copy"},
		{".env", 0, ".env copy"},
		{"a.b.c", 0, "a.b copy.c"},
		{"a.txt", 61, ""},
	}
	for _, tt := range tests {
		if got := copyName(tt.file, tt.i, now); got != tt.want {
			t.Errorf("copyName(%q, %d) = %q, want %q", tt.file, tt.i, got, tt.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, ok := range []string{"644", "0755", "777", "0", " 600 "} {
		if _, err := ParseMode(ok); err != nil {
			t.Errorf("ParseMode(%q) = %v", ok, err)
		}
	}
	for give, want := range map[string]error{"": ErrBadMode, "9": ErrBadMode, "rwx": ErrBadMode, "-1": ErrBadMode,
		"4755": ErrSpecialBits, "2755": ErrSpecialBits, "1777": ErrSpecialBits, "17777777777": ErrSpecialBits} {
		if _, err := ParseMode(give); err != want {
			t.Errorf("ParseMode(%q) = %v, want %v", give, err, want)
		}
	}
}

func TestDetectMime(t *testing.T) {
	tar := make([]byte, 512)
	copy(tar[257:], "ustar")
	tests := []struct {
		name string
		head []byte
		want string
	}{
		{"empty", nil, MimeText},
		{"a.gz", []byte{0x1f, 0x8b, 8, 0}, "application/gzip"},
		{"a.jar", []byte("PK\x03\x04rest"), "application/zip"},
		{"a.7z", []byte("7z\xbc\xaf\x27\x1c"), "application/x-7z-compressed"},
		{"a.tar", tar, "application/x-tar"},
		{"a.json", []byte(`{"a":1}`), "application/json"},
		{"readme", []byte("hello world\n"), MimeText},
		{"bin", []byte{0, 1, 2, 3, 0xff}, MimeBinary},
	}
	for _, tt := range tests {
		if got := DetectMime(tt.name, tt.head); got != tt.want {
			t.Errorf("DetectMime(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSelectionIncludes(t *testing.T) {
	s := selection([]string{"a.txt", "/d/sub", "../x"})
	tests := []struct {
		rel  string
		dir  bool
		want bool
	}{
		{"a.txt", false, true}, {"b.txt", false, false}, {"d", true, true}, {"d/other", false, false},
		{"d/sub", true, true}, {"d/sub/deep/f", false, true}, {"x", false, true}, {"dd", true, false},
	}
	for _, tt := range tests {
		if got := s.includes(tt.rel, tt.dir); got != tt.want {
			t.Errorf("includes(%q) = %v, want %v", tt.rel, got, tt.want)
		}
	}
}
