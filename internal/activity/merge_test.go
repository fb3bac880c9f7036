package activity

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/panel"
)

// SFTP records with the same user, server, ip, event and minute are sent
// as one, with every file in order and the earliest time; others are not
// merged.
func TestFlushMergesSFTPRecords(t *testing.T) {
	q, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	u1, u2 := "user-1", "user-2"
	base := time.Date(2026, 11, 23, 10, 15, 5, 0, time.UTC)
	sftp := func(user *string, event string, at time.Duration, files ...any) panel.Activity {
		return panel.Activity{User: user, Server: "srv", Event: "server:sftp." + event, IP: "192.0.2.7",
			Metadata: map[string]any{"files": files}, Timestamp: base.Add(at)}
	}
	q.Record(sftp(&u1, "write", 2*time.Second, "/b"))
	q.Record(sftp(&u1, "write", time.Second, "/a"))
	q.Record(record(1))
	q.Record(record(2))
	q.Record(sftp(&u1, "write", 3*time.Second, "/c"))
	q.Record(sftp(&u2, "write", 3*time.Second, "/other-user"))
	q.Record(sftp(&u1, "write", time.Minute, "/next-minute"))
	q.Record(sftp(&u1, "rename", 4*time.Second, map[string]string{"from": "/x", "to": "/y"}))
	q.Record(sftp(&u1, "rename", 5*time.Second, map[string]string{"from": "/y", "to": "/z"}))
	q.Record(sftp(nil, "delete", 5*time.Second, "/n1"))
	q.Record(sftp(nil, "delete", 6*time.Second, "/n2"))

	var got []panel.Activity
	n, err := q.Flush(context.Background(), func(_ context.Context, b []panel.Activity) error {
		got = append(got, b...)
		return nil
	}, 100)
	if err != nil || n != 7 {
		t.Fatalf("flush: %d records, %v", n, err)
	}
	files := func(a panel.Activity) string {
		b, _ := json.Marshal(a.Metadata["files"])
		return string(b)
	}
	want := []struct {
		event, files string
		at           time.Duration
	}{
		{"server:sftp.write", `["/b","/a","/c"]`, time.Second},
		{"server:console.command", `null`, -1},
		{"server:console.command", `null`, -1},
		{"server:sftp.write", `["/other-user"]`, 3 * time.Second},
		{"server:sftp.write", `["/next-minute"]`, time.Minute},
		{"server:sftp.rename", `[{"from":"/x","to":"/y"},{"from":"/y","to":"/z"}]`, 4 * time.Second},
		{"server:sftp.delete", `["/n1","/n2"]`, 5 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("%d records: %+v", len(got), got)
	}
	for i, w := range want {
		a := got[i]
		if a.Event != w.event || (w.files != "null" && files(a) != w.files) || (w.at >= 0 && !a.Timestamp.Equal(base.Add(w.at))) {
			t.Errorf("record %d: %s %s %v, want %s %s %v", i, a.Event, files(a), a.Timestamp, w.event, w.files, w.at)
		}
	}
}

// A wider merge window (the tests' knob) merges records of two minutes;
// the default keeps them apart.
func TestMergeWindowOption(t *testing.T) {
	u := "user-1"
	base := time.Date(2026, 11, 23, 10, 15, 59, 0, time.UTC)
	for _, tc := range []struct {
		opts []Option
		want int
	}{{nil, 2}, {[]Option{WithMergeWindow(time.Hour)}, 1}, {[]Option{WithMergeWindow(0)}, 2}} {
		q, err := Open(t.TempDir(), nil, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range []string{"/a", "/b"} {
			q.Record(panel.Activity{User: &u, Server: "srv", Event: "server:sftp.write", IP: "192.0.2.7",
				Metadata: map[string]any{"files": []any{f}}, Timestamp: base.Add(time.Duration(i) * time.Second)})
		}
		var got []panel.Activity
		if _, err := q.Flush(context.Background(), func(_ context.Context, b []panel.Activity) error {
			got = append(got, b...)
			return nil
		}, 100); err != nil {
			t.Fatal(err)
		}
		q.Close()
		if len(got) != tc.want {
			t.Errorf("options %d: %d records sent, want %d", len(tc.opts), len(got), tc.want)
		}
	}
}
