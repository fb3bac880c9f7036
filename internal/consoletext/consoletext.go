// Package consoletext handles the text of a game server's console and of the
// daemon's own messages: lines cut to a bound as they stream, and terminal
// escape sequences.
package consoletext

import (
	"bytes"
	"io"
	"regexp"
)

// ReadLines splits r into lines and calls emit for each, until r ends. A
// line longer than limit bytes is cut: its first limit bytes are emitted as soon
// as they are read and the rest, up to the next newline, is dropped, so that
// one endless line neither grows memory nor holds the lines after it back.
// Carriage returns at line ends are removed; a last line without a newline is
// emitted too. The error is r's (nil at io.EOF).
func ReadLines(r io.Reader, limit int, emit func(line string)) error {
	return ReadLinesFlush(r, limit, emit, nil)
}

// ReadLinesFlush is ReadLines that also calls flush, when not nil, after
// the lines of each read of r were emitted: lines that arrived together
// can be handed on together.
func ReadLinesFlush(r io.Reader, limit int, emit func(line string), flush func()) error {
	buf := make([]byte, 32<<10)
	var line []byte
	overflow := false
	flushLine := func() {
		emit(string(bytes.TrimRight(line, "\r")))
		line = line[:0]
	}
	for {
		n, err := r.Read(buf)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			part := chunk
			if i >= 0 {
				part = chunk[:i]
			}
			if !overflow {
				room := limit - len(line)
				if len(part) > room {
					line = append(line, part[:room]...)
					flushLine()
					overflow = true
				} else {
					line = append(line, part...)
				}
			}
			if i < 0 {
				break
			}
			if overflow {
				overflow = false
			} else {
				flushLine()
			}
			chunk = chunk[i+1:]
		}
		if flush != nil {
			flush()
		}
		if err != nil {
			if len(line) > 0 && !overflow {
				flushLine()
				if flush != nil {
					flush()
				}
			}
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// ansi matches terminal escape sequences: CSI sequences (colours, cursor
// movement, ESC [ ... final byte) and two-byte escapes.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]`)

// StripANSI removes terminal escape sequences from s.
func StripANSI(s string) string { return ansi.ReplaceAllString(s, "") }
