package main

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

func TestHandle(t *testing.T) {
	var buf bytes.Buffer
	out := bufio.NewWriter(&buf)
	say := func(s string) { out.WriteString(s + "\n"); out.Flush() }
	for _, cmd := range []string{"echo hello world", "flood 3", "longline 5", "bogus x", "", "sleep 0"} {
		handle(cmd, out, say)
	}
	want := "hello world\nflood line 1\nflood line 2\nflood line 3\nxxxxx\nUnknown command: bogus\nSlept\n"
	if buf.String() != want {
		t.Errorf("output %q, want %q", buf.String(), want)
	}

	buf.Reset()
	t.Setenv("WHARF_GS_TEST", "yes")
	handle("env", out, say)
	if !strings.Contains(buf.String(), "WHARF_GS_TEST=yes\n") {
		t.Errorf("env output lacks the variable: %q", buf.String())
	}
}
