package eggconfig

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The TOML rewriter edits the text itself: the document is parsed with go-toml's unstable AST,
// which gives the byte range of every scalar value, and only those bytes are replaced, so
// comments, layout and untouched values stay exactly as written. A missing key is inserted as
// "key = value" after the last key of the deepest existing table that contains it (or a dotted
// key there). Every result is checked by decoding it again; an edit that would make the
// document invalid is refused.

type tomlElem struct {
	key   string
	idx   int
	isIdx bool
}

type tomlLeaf struct {
	path       []tomlElem
	start, end int
	cur        string
}

type tomlTable struct {
	path     []tomlElem
	insertAt int
}

type tomlDoc struct {
	leaves     []tomlLeaf
	containers [][]tomlElem
	tables     []tomlTable // tables[0] is the root table
}

func validateTOML(data []byte) error {
	var m map[string]any
	return toml.Unmarshal(data, &m)
}

func rewriteTOML(data []byte, rules []rule) ([]byte, bool, []error, error) {
	if err := validateTOML(data); err != nil {
		return nil, false, nil, err
	}
	cur := data
	changed := false
	var ruleErrs []error
	for i := range rules {
		out, c, err := tomlApply(cur, &rules[i])
		if err == nil && c {
			if verr := validateTOML(out); verr != nil {
				err = fmt.Errorf("the edit would make the document invalid: %w", verr)
			} else {
				cur, changed = out, true
			}
		}
		if err != nil {
			ruleErrs = append(ruleErrs, &RuleError{Match: rules[i].match, Err: err})
		}
	}
	if !changed {
		return data, false, ruleErrs, nil
	}
	return cur, true, ruleErrs, nil
}

func tomlKeyParts(it unstable.Iterator) []string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

func tomlPathString(p []tomlElem) string {
	var b strings.Builder
	for _, e := range p {
		if e.isIdx {
			b.WriteString("\x00#" + strconv.Itoa(e.idx))
		} else {
			b.WriteString("\x00." + e.key)
		}
	}
	return b.String()
}

func lineEnd(data []byte, off int) int {
	if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
		return off + i + 1
	}
	return len(data)
}

func parseTOMLDoc(data []byte) (*tomlDoc, error) {
	var p unstable.Parser
	p.Reset(data)
	d := &tomlDoc{tables: []tomlTable{{}}}
	arrays := map[string]int{} // array-of-tables path -> number of elements so far
	resolve := func(parts []string) []tomlElem {
		var out []tomlElem
		for _, k := range parts {
			out = append(out, tomlElem{key: k})
			if n, ok := arrays[tomlPathString(out)]; ok {
				out = append(out, tomlElem{idx: n - 1, isIdx: true})
			}
		}
		return out
	}
	var prefix []tomlElem
	cur := 0 // index in d.tables of the current table
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			full := append(slices.Clone(prefix), keysToElems(tomlKeyParts(e.Key()))...)
			d.collect(full, e.Value())
			d.tables[cur].insertAt = lineEnd(data, int(e.Raw.Offset+e.Raw.Length))
		case unstable.Table, unstable.ArrayTable:
			parts := tomlKeyParts(e.Key())
			var path []tomlElem
			if e.Kind == unstable.Table {
				path = resolve(parts)
			} else {
				path = append(resolve(parts[:len(parts)-1]), tomlElem{key: parts[len(parts)-1]})
				name := tomlPathString(path)
				arrays[name]++
				path = append(path, tomlElem{idx: arrays[name] - 1, isIdx: true})
			}
			prefix = path
			first := e.Key()
			first.Next()
			d.tables = append(d.tables, tomlTable{path: slices.Clone(path), insertAt: lineEnd(data, int(first.Node().Raw.Offset))})
			cur = len(d.tables) - 1
			for i := 1; i <= len(path); i++ {
				d.containers = append(d.containers, path[:i])
			}
		}
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	return d, nil
}

func keysToElems(parts []string) []tomlElem {
	out := make([]tomlElem, len(parts))
	for i, k := range parts {
		out[i] = tomlElem{key: k}
	}
	return out
}

func (d *tomlDoc) collect(path []tomlElem, n *unstable.Node) {
	switch n.Kind {
	case unstable.Array:
		d.containers = append(d.containers, path)
		i := 0
		for it := n.Children(); it.Next(); i++ {
			d.collect(append(slices.Clone(path), tomlElem{idx: i, isIdx: true}), it.Node())
		}
	case unstable.InlineTable:
		d.containers = append(d.containers, path)
		for it := n.Children(); it.Next(); {
			kv := it.Node()
			if kv.Kind != unstable.KeyValue {
				continue
			}
			d.collect(append(slices.Clone(path), keysToElems(tomlKeyParts(kv.Key()))...), kv.Value())
		}
	default:
		for i := 1; i < len(path); i++ {
			d.containers = append(d.containers, path[:i])
		}
		d.leaves = append(d.leaves, tomlLeaf{path: path, start: int(n.Raw.Offset),
			end: int(n.Raw.Offset + n.Raw.Length), cur: string(n.Data)})
	}
}

// tomlPattern turns a parsed path into elements; a wildcard is an element with key "*" and
// idx -1.
func tomlPattern(segs []segment) ([]tomlElem, bool, error) {
	var pat []tomlElem
	wild := false
	for _, s := range segs {
		if s.hasAttr {
			return nil, false, errAttrPath
		}
		if s.wildcard {
			pat = append(pat, tomlElem{idx: -1})
			wild = true
			continue
		}
		if s.key != "" {
			pat = append(pat, tomlElem{key: s.key})
		}
		for _, i := range s.index {
			pat = append(pat, tomlElem{idx: i, isIdx: true})
		}
	}
	return pat, wild, nil
}

func tomlMatch(path, pat []tomlElem) bool {
	if len(path) != len(pat) {
		return false
	}
	for i, p := range pat {
		if p.idx == -1 && !p.isIdx {
			continue
		}
		if p != path[i] {
			return false
		}
	}
	return true
}

func tomlApply(data []byte, r *rule) ([]byte, bool, error) {
	segs, err := parsePath(r.match)
	if err != nil {
		return nil, false, err
	}
	pat, wild, err := tomlPattern(segs)
	if err != nil {
		return nil, false, err
	}
	d, err := parseTOMLDoc(data)
	if err != nil {
		return nil, false, err
	}
	var hits []tomlLeaf
	for _, l := range d.leaves {
		if tomlMatch(l.path, pat) {
			hits = append(hits, l)
		}
	}
	if len(hits) > 0 {
		out := data
		changed := false
		// Splice from the end so earlier offsets stay valid.
		slices.SortFunc(hits, func(a, b tomlLeaf) int { return b.start - a.start })
		for _, h := range hits {
			v, ok := r.apply(h.cur, true)
			if !ok {
				continue
			}
			text := tomlValue(v)
			if string(out[h.start:h.end]) == text {
				continue
			}
			out = slices.Concat(out[:h.start], []byte(text), out[h.end:])
			changed = true
		}
		return out, changed, nil
	}
	if wild || r.cond {
		return data, false, nil
	}
	for _, c := range d.containers {
		if tomlMatch(c, pat) {
			return nil, false, errors.New("the path names a table or an array, not a value")
		}
	}
	// Create the key in the deepest table containing it.
	best := 0
	for i, t := range d.tables {
		if len(t.path) < len(pat) && len(t.path) >= len(d.tables[best].path) && tomlMatch(t.path, pat[:len(t.path)]) {
			best = i
		}
	}
	t := d.tables[best]
	var key []string
	for _, e := range pat[len(t.path):] {
		if e.isIdx {
			return nil, false, errors.New("cannot create a list element")
		}
		key = append(key, tomlKey(e.key))
	}
	v, _ := r.apply("", false)
	eol := "\n"
	if i := bytes.IndexByte(data, '\n'); i > 0 && data[i-1] == '\r' {
		eol = "\r\n"
	}
	line := strings.Join(key, ".") + " = " + tomlValue(v) + eol
	at := t.insertAt
	if at > 0 && data[at-1] != '\n' {
		line = eol + line
	}
	return slices.Concat(data[:at], []byte(line), data[at:]), true, nil
}

func tomlKey(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return tomlString(k)
		}
	}
	return k
}

func tomlValue(v value) string {
	switch v.kind {
	case vInt, vFloat, vBool:
		return v.text
	}
	return tomlString(v.text)
}

// tomlString writes s as a TOML basic string.
func tomlString(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
