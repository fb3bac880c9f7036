package transfer

import (
	"errors"
	"testing"
)

func TestParseSnapshotRef(t *testing.T) {
	good := `{"repository":"0123456789abcdef0123456789abcdef","snapshot":"transfer-7a000036-0000-4000-8000-000000000036"}`
	if ref, err := parseSnapshotRef([]byte(good)); err != nil || ref.Snapshot != "transfer-7a000036-0000-4000-8000-000000000036" {
		t.Fatalf("parseSnapshotRef(good) = %+v, %v", ref, err)
	}
	for _, bad := range []string{
		``, `{}`, `null`, `[]`,
		`{"repository":"0123456789abcdef0123456789abcdef","snapshot":"../../etc/passwd"}`,
		`{"repository":"0123456789abcdef0123456789abcdef","snapshot":"transfer-../x"}`,
		`{"repository":"0123456789abcdef0123456789abcdef","snapshot":"b1"}`,
		`{"repository":"../x","snapshot":"transfer-7a000036-0000-4000-8000-000000000036"}`,
		`{"repository":"0123456789ABCDEF0123456789ABCDEF","snapshot":"transfer-7a000036-0000-4000-8000-000000000036"}`,
		`{"repository":"0123456789abcdef0123456789abcdef","snapshot":"transfer-7a000036-0000-4000-8000-000000000036","server":"x"}`,
		good + good,
	} {
		if _, err := parseSnapshotRef([]byte(bad)); !errors.Is(err, ErrBadForm) {
			t.Errorf("parseSnapshotRef(%q) = %v, want ErrBadForm", bad, err)
		}
	}
}

// FuzzParseSnapshotRef: another node's part never panics the target, and
// what it accepts names a snapshot "transfer-<uuid>" of a repository id.
func FuzzParseSnapshotRef(f *testing.F) {
	f.Add([]byte(`{"repository":"0123456789abcdef0123456789abcdef","snapshot":"transfer-7a000036-0000-4000-8000-000000000036"}`))
	f.Add([]byte(`{"repository":"x","snapshot":"transfer-/../"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ref, err := parseSnapshotRef(b)
		if err != nil {
			return
		}
		if !validRepositoryID(ref.Repository) || !validSnapshotName(ref.Snapshot) || len(ref.Snapshot) != len("transfer-")+36 {
			t.Fatalf("accepted %+v", ref)
		}
	})
}
