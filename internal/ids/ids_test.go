package ids

import (
	"testing"

	"github.com/google/uuid"
)

func TestIsUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f7":          true,
		"6F1A2B3C-4D5E-4F60-8A71-92B3C4D5E6F7":          true,
		"00000000-0000-0000-0000-000000000000":          true,
		"":                                              false,
		"6f1a2b3c4d5e4f608a7192b3c4d5e6f7":              false, // no dashes
		"{6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f7}":        false,
		"urn:uuid:6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f7": false,
		"6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6fg":          false,
		"6f1a2b3c-4d5e-4f60-8a71_92b3c4d5e6f7":          false,
		"../../../../../../../../../../etc/x":           false,
		"6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f7\n":        false,
	} {
		if got := IsUUID(s); got != want {
			t.Errorf("IsUUID(%q) = %v, want %v", s, got, want)
		}
	}
}

// IsUUID accepts exactly the 36-character strings that uuid.Parse accepts.
func FuzzIsUUID(f *testing.F) {
	f.Add("6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f7")
	f.Add("6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := uuid.Parse(s)
		if want := err == nil && len(s) == 36; IsUUID(s) != want {
			t.Fatalf("IsUUID(%q) = %v, uuid.Parse agrees: %v", s, IsUUID(s), want)
		}
	})
}
