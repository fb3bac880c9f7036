package eggconfig

import (
	"bytes"
	"strings"
)

// rewriteFile is the "file" parser: every line that starts with match is replaced by the text of
// replace_with (which may span several lines). Lines have no length limit, their terminators
// ("\n" or "\r\n") are kept, and nothing is added when no line matches. With an if_value, the
// whole line (without terminator) is the current value: a plain if_value must equal it, a
// regex: if_value rewrites it.
func rewriteFile(data []byte, rules []rule) ([]byte, bool, []error, error) {
	lines := splitLines(data)
	changed := false
	for ri := range rules {
		r := &rules[ri]
		m := []byte(r.match)
		for i, l := range lines {
			if !bytes.HasPrefix(l, m) {
				continue
			}
			body, eol := lineBody(l)
			v, ok := r.apply(string(body), true)
			if !ok || v.text == string(body) {
				continue
			}
			text := v.text
			if strings.HasSuffix(text, "\n") && len(eol) > 0 {
				text = strings.TrimSuffix(text, "\n")
			}
			lines[i] = append([]byte(text), eol...)
			changed = true
		}
	}
	if !changed {
		return data, false, nil, nil
	}
	return joinLines(lines, nil, "\n"), true, nil, nil
}
