package eggconfig

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
)

// propEntry is one logical key line of a .properties file: natural lines first..last.
type propEntry struct {
	first, last int
	key, value  string
}

// rewriteProperties edits a Java .properties file (Minecraft's server.properties): a key's
// logical line is replaced in place by key=value, missing keys are appended; comments, blank
// lines and every untouched line are kept byte for byte. Keys and values are escaped as
// java.util.Properties.store escapes them (non-ASCII as \uXXXX), so any Java reader gets them
// back exactly.
func rewriteProperties(data []byte, rules []rule) ([]byte, bool, []error, error) {
	lines := splitPropertyLines(data)
	entries := parseProperties(lines)
	eol := fileEOL(lines)
	var extra []string
	added := map[string]int{}
	changed := false
	for ri := range rules {
		r := &rules[ri]
		found := false
		for _, e := range entries {
			if e.key != r.match {
				continue
			}
			found = true
			v, ok := r.apply(e.value, true)
			if !ok || v.text == e.value {
				continue
			}
			_, lastEOL := lineBody(lines[e.last])
			lines[e.first] = []byte(escapeProperty(r.match, true) + "=" + escapeProperty(v.text, false) + string(lastEOL))
			for i := e.first + 1; i <= e.last; i++ {
				lines[i] = nil
			}
			// Keep the entry's value current for later rules on the same key.
			for i := range entries {
				if entries[i].first == e.first {
					entries[i].value, entries[i].last = v.text, e.first
				}
			}
			changed = true
		}
		if found || r.cond {
			continue
		}
		v, _ := r.apply("", false)
		line := escapeProperty(r.match, true) + "=" + escapeProperty(v.text, false)
		if i, ok := added[r.match]; ok { // added by an earlier rule
			extra[i] = line
		} else {
			added[r.match] = len(extra)
			extra = append(extra, line)
		}
		changed = true
	}
	if !changed {
		return data, false, nil, nil
	}
	return joinLines(lines, extra, eol), true, nil, nil
}

// splitPropertyLines splits data as java.util.Properties.load does: after "\n", "\r\n" or a
// lone "\r". Every element keeps its terminator.
func splitPropertyLines(data []byte) [][]byte {
	var lines [][]byte
	for len(data) > 0 {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			lines = append(lines, data)
			break
		}
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		lines = append(lines, data[:i+1])
		data = data[i+1:]
	}
	return lines
}

func isPropWS(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

func parseProperties(lines [][]byte) []propEntry {
	var entries []propEntry
	for i := 0; i < len(lines); i++ {
		body, _ := lineBody(lines[i])
		s := strings.TrimLeft(string(body), " \t\f")
		if s == "" || s[0] == '#' || s[0] == '!' {
			continue
		}
		e := propEntry{first: i, last: i}
		var logical strings.Builder
		for {
			if !endsWithOddBackslashes(s) || e.last+1 >= len(lines) {
				if endsWithOddBackslashes(s) {
					s = s[:len(s)-1]
				}
				logical.WriteString(s)
				break
			}
			logical.WriteString(s[:len(s)-1])
			e.last++
			next, _ := lineBody(lines[e.last])
			s = strings.TrimLeft(string(next), " \t\f")
		}
		e.key, e.value = splitProperty(logical.String())
		entries = append(entries, e)
		i = e.last
	}
	return entries
}

func endsWithOddBackslashes(s string) bool {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitProperty splits a logical line (leading whitespace removed) into its unescaped key and
// value, as java.util.Properties.load does.
func splitProperty(s string) (key, value string) {
	i := 0
	for i < len(s) {
		c := s[i]
		if c == '\\' {
			i += 2
			continue
		}
		if c == '=' || c == ':' || isPropWS(c) {
			break
		}
		i++
	}
	if i > len(s) {
		i = len(s)
	}
	key = s[:i]
	j := i
	for j < len(s) && isPropWS(s[j]) {
		j++
	}
	if j < len(s) && (s[j] == '=' || s[j] == ':') {
		j++
		for j < len(s) && isPropWS(s[j]) {
			j++
		}
	}
	return unescapeProperty(key), unescapeProperty(s[j:])
}

func unescapeProperty(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch c = s[i]; c {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 <= len(s) {
				if n, err := strconv.ParseUint(s[i+1:i+5], 16, 16); err == nil {
					u := []uint16{uint16(n)}
					// Join a surrogate pair written as two escapes.
					if utf16.IsSurrogate(rune(n)) && i+11 <= len(s) && s[i+5] == '\\' && s[i+6] == 'u' {
						if m, err := strconv.ParseUint(s[i+7:i+11], 16, 16); err == nil {
							u = append(u, uint16(m))
							i += 6
						}
					}
					b.WriteString(string(utf16.Decode(u)))
					i += 4
					continue
				}
			}
			b.WriteByte('u')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// escapeProperty escapes s as java.util.Properties.store does (with \uXXXX for characters
// outside printable ASCII); spaces are escaped everywhere in keys, only in front in values.
func escapeProperty(s string, isKey bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == ' ':
			if i == 0 || isKey {
				b.WriteString(`\ `)
			} else {
				b.WriteByte(' ')
			}
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '=' || r == ':' || r == '#' || r == '!' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, `\u%04X`, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
