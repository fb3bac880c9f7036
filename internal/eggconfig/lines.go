package eggconfig

import "bytes"

// splitLines splits data after each '\n'; every element keeps its terminator (the last one may
// have none). The line-based rewriters put the lines they do not touch back byte for byte.
func splitLines(data []byte) [][]byte {
	var lines [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, data)
			break
		}
		lines = append(lines, data[:i+1])
		data = data[i+1:]
	}
	return lines
}

// lineBody returns the line without its "\n", "\r\n" or lone "\r" terminator, and the
// terminator.
func lineBody(line []byte) (body, eol []byte) {
	if bytes.HasSuffix(line, []byte("\r\n")) {
		return line[:len(line)-2], line[len(line)-2:]
	}
	if bytes.HasSuffix(line, []byte("\n")) || bytes.HasSuffix(line, []byte("\r")) {
		return line[:len(line)-1], line[len(line)-1:]
	}
	return line, nil
}

// fileEOL is the line terminator to use for added lines: that of the first line, else "\n".
func fileEOL(lines [][]byte) string {
	if len(lines) > 0 {
		if _, eol := lineBody(lines[0]); len(eol) > 0 {
			return string(eol)
		}
	}
	return "\n"
}

// joinLines concatenates lines, and appends extra lines (without terminators) after making sure
// the last existing line is terminated.
func joinLines(lines [][]byte, extra []string, eol string) []byte {
	var buf bytes.Buffer
	for _, l := range lines {
		buf.Write(l)
	}
	if len(extra) > 0 && buf.Len() > 0 {
		if _, last := lineBody(buf.Bytes()); len(last) == 0 {
			buf.WriteString(eol)
		}
	}
	for _, e := range extra {
		buf.WriteString(e)
		buf.WriteString(eol)
	}
	return buf.Bytes()
}
