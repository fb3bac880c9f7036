package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestLogFormats(t *testing.T) {
	var buf bytes.Buffer
	slog.New(newLogHandler(&buf, "json", slog.LevelInfo)).Info("hello", "server", "s1")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["msg"] != "hello" || m["server"] != "s1" {
		t.Fatalf("json log line %q: %v", buf.String(), err)
	}
	buf.Reset()
	slog.New(newLogHandler(&buf, "text", slog.LevelInfo)).Info("hello", "server", "s1")
	if !strings.Contains(buf.String(), "msg=hello server=s1") {
		t.Fatalf("text log line %q", buf.String())
	}
}
