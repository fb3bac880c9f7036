package eggconfig

import (
	"bytes"
	"errors"
	"strings"
)

type iniLine struct {
	section   string // section the line belongs to ("" = root)
	isHeader  bool
	isKey     bool
	key       string
	value     string // trimmed, surrounding double quotes removed
	quoted    bool
	valueFrom int // offset in the line body where the value text starts
}

// rewriteINI edits an INI file line by line: a key's value is replaced in place (the text before
// it is kept, and a value that was double-quoted stays quoted), missing keys are added at the end
// of their section, missing sections at the end of the file. Comments (; and #), blank lines and
// untouched lines are kept byte for byte. Keys and section names are case-sensitive; values are
// written as text. Everything after the separator is the value (no inline comments).
func rewriteINI(data []byte, rules []rule) ([]byte, bool, []error, error) {
	body, bom := bytes.CutPrefix(data, utf8BOM)
	lines := splitLines(body)
	eol := fileEOL(lines)
	sep := iniSeparator(lines)
	changed := false
	var ruleErrs []error
	for ri := range rules {
		r := &rules[ri]
		c, err := iniApply(&lines, r, eol, sep)
		changed = changed || c
		if err != nil {
			ruleErrs = append(ruleErrs, &RuleError{Match: r.match, Err: err})
		}
	}
	if !changed {
		return data, false, ruleErrs, nil
	}
	out := joinLines(lines, nil, eol)
	if bom {
		out = append(append([]byte{}, utf8BOM...), out...)
	}
	return out, true, ruleErrs, nil
}

// splitINIPath splits match into section and key: "[a.b].key" names a section whose name has
// dots, "section.key" splits at the first dot, a bare "key" is in the root section.
func splitINIPath(match string) (section, key string, err error) {
	if strings.ContainsAny(match, "\r\n") {
		return "", "", errors.New("line break in the path")
	}
	if strings.HasPrefix(match, "[") {
		end := strings.IndexByte(match, ']')
		if end < 0 || !strings.HasPrefix(match[end+1:], ".") || len(match) <= end+2 {
			return "", "", errors.New(`expected "[section].key"`)
		}
		return match[1:end], match[end+2:], nil
	}
	if i := strings.IndexByte(match, '.'); i >= 0 {
		if i == 0 || i == len(match)-1 {
			return "", "", errors.New(`expected "section.key"`)
		}
		return match[:i], match[i+1:], nil
	}
	return "", match, nil
}

// checkININame refuses a section or key that could not be written back as one.
func checkININame(section, key string) error {
	if strings.ContainsAny(section, "]") || strings.ContainsAny(key, "=:[") || strings.HasPrefix(key, ";") || strings.HasPrefix(key, "#") ||
		strings.TrimSpace(key) != key || strings.TrimSpace(section) != section {
		return errors.New("section or key cannot be written in an INI file")
	}
	return nil
}

func parseINI(lines [][]byte) []iniLine {
	out := make([]iniLine, len(lines))
	section := ""
	for i, l := range lines {
		b, _ := lineBody(l)
		s := string(b)
		t := strings.TrimSpace(s)
		switch {
		case t == "" || t[0] == ';' || t[0] == '#':
			out[i] = iniLine{section: section}
		case t[0] == '[' && strings.Contains(t, "]"):
			section = strings.TrimSpace(t[1:strings.LastIndexByte(t, ']')])
			out[i] = iniLine{section: section, isHeader: true}
		default:
			sep := strings.IndexByte(s, '=')
			if sep < 0 {
				sep = strings.IndexByte(s, ':')
			}
			if sep < 0 {
				out[i] = iniLine{section: section}
				continue
			}
			from := sep + 1
			for from < len(s) && (s[from] == ' ' || s[from] == '\t') {
				from++
			}
			v := strings.TrimSpace(s[from:])
			quoted := len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"'
			if quoted {
				v = v[1 : len(v)-1]
			}
			out[i] = iniLine{section: section, isKey: true, key: strings.TrimSpace(s[:sep]),
				value: v, quoted: quoted, valueFrom: from}
		}
	}
	return out
}

// iniSeparator is the separator used for added keys: " = " when the file's first key has spaces
// around its "=", else "=".
func iniSeparator(lines [][]byte) string {
	for i, p := range parseINI(lines) {
		if p.isKey {
			b, _ := lineBody(lines[i])
			if k := bytes.IndexByte(b, '='); k > 0 && b[k-1] == ' ' {
				return " = "
			}
			return "="
		}
	}
	return "="
}

func iniApply(lines *[][]byte, r *rule, eol, sep string) (bool, error) {
	section, key, err := splitINIPath(r.match)
	if err != nil {
		return false, err
	}
	parsed := parseINI(*lines)
	changed, found := false, false
	sectionSeen := section == ""
	insertAt := -1 // after the last key (or header) of the last occurrence of the section
	if section == "" {
		insertAt = 0
	}
	for i, p := range parsed {
		if p.section != section {
			continue
		}
		if p.isHeader {
			sectionSeen, insertAt = true, i+1
			continue
		}
		if !p.isKey {
			continue
		}
		insertAt = i + 1
		if p.key != key {
			continue
		}
		found = true
		v, ok := r.apply(p.value, true)
		if !ok || v.text == p.value {
			continue
		}
		if strings.ContainsAny(v.text, "\r\n") {
			return changed, errors.New("value contains a line break")
		}
		b, le := lineBody((*lines)[i])
		text := v.text
		if p.quoted && !strings.Contains(text, `"`) {
			text = `"` + text + `"`
		}
		(*lines)[i] = []byte(string(b[:p.valueFrom]) + text + string(le))
		changed = true
	}
	if found || r.cond {
		return changed, nil
	}
	if err := checkININame(section, key); err != nil {
		return changed, err
	}
	v, _ := r.apply("", false)
	if strings.ContainsAny(v.text, "\r\n") {
		return changed, errors.New("value contains a line break")
	}
	kv := []byte(key + sep + v.text + eol)
	if sectionSeen {
		// Make sure the line before the insertion point is terminated.
		if insertAt > 0 {
			if _, le := lineBody((*lines)[insertAt-1]); len(le) == 0 {
				(*lines)[insertAt-1] = append((*lines)[insertAt-1][:len((*lines)[insertAt-1]):len((*lines)[insertAt-1])], eol...)
			}
		}
		*lines = append((*lines)[:insertAt], append([][]byte{kv}, (*lines)[insertAt:]...)...)
		return true, nil
	}
	var add [][]byte
	if n := len(*lines); n > 0 {
		last := (*lines)[n-1]
		if _, le := lineBody(last); len(le) == 0 {
			(*lines)[n-1] = append(last[:len(last):len(last)], eol...)
			last = (*lines)[n-1]
		}
		if b, _ := lineBody(last); len(bytes.TrimSpace(b)) > 0 {
			add = append(add, []byte(eol))
		}
	}
	add = append(add, []byte("["+section+"]"+eol), kv)
	*lines = append(*lines, add...)
	return true, nil
}
