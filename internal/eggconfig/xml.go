package eggconfig

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/beevik/etree"
)

// attrValueRE recognises a replace_with of the form [attr='value'] (or "value"), which sets an
// attribute of the element instead of its text.
var attrValueRE = regexp.MustCompile(`^\[\s*([A-Za-z_:][-A-Za-z0-9_.:]*)\s*=\s*(?:'([^']*)'|"([^"]*)")\s*\]$`)

// rewriteXML edits an XML file with etree. The path's first segment names the root element;
// segments may be "*", "name[N]" (0-based, among the children named name) or
// "name[@attr='v']". Missing elements are created (never through "*"). Comments, the
// declaration and the formatting of the file are kept, except that a file where elements were
// created is re-indented with 2 spaces.
func rewriteXML(data []byte, rules []rule) ([]byte, bool, []error, error) {
	doc := etree.NewDocument()
	if len(bytes.TrimSpace(data)) > 0 {
		if err := doc.ReadFromBytes(data); err != nil {
			return nil, false, nil, err
		}
	}
	changed, created := false, false
	var ruleErrs []error
	for i := range rules {
		e := &xmlEdit{r: &rules[i]}
		if err := e.run(doc); err != nil {
			ruleErrs = append(ruleErrs, &RuleError{Match: rules[i].match, Err: err})
		}
		changed = changed || e.changed
		created = created || e.created
	}
	if !changed {
		return data, false, ruleErrs, nil
	}
	if doc.Root() != nil && len(bytes.TrimSpace(data)) == 0 {
		doc.InsertChildAt(0, etree.NewProcInst("xml", `version="1.0" encoding="UTF-8"`))
	}
	if created {
		doc.Indent(2)
	}
	var buf bytes.Buffer
	if _, err := doc.WriteTo(&buf); err != nil {
		return nil, false, ruleErrs, err
	}
	return buf.Bytes(), true, ruleErrs, nil
}

type xmlEdit struct {
	r                *rule
	create           bool
	changed, created bool
	attr             string // non-empty: the rule sets this attribute
	attrVal          string
}

func (e *xmlEdit) run(doc *etree.Document) error {
	segs, err := parsePath(e.r.match)
	if err != nil {
		return err
	}
	e.create = !e.r.cond
	for _, s := range segs {
		if s.wildcard {
			e.create = false
		}
		if !s.wildcard && s.key == "" {
			return fmt.Errorf("%w: an index needs an element name", errBadPath)
		}
		if !s.wildcard && !isXMLName(s.key) {
			return fmt.Errorf("%w: %q is not an XML name", errBadPath, s.key)
		}
		if len(s.index) > 1 {
			return fmt.Errorf("%w: one index per element", errBadPath)
		}
	}
	if m := attrValueRE.FindStringSubmatch(e.r.val.text); m != nil && e.r.val.kind == vString {
		e.attr, e.attrVal = m[1], m[2]+m[3]
	}
	root := doc.Root()
	if root == nil {
		if !e.create {
			return nil
		}
		root = e.newElement(&doc.Element, segs[0])
	}
	if !xmlMatches(root, segs[0]) {
		if segs[0].wildcard || len(segs[0].index) > 0 && segs[0].index[0] > 0 {
			return nil
		}
		return fmt.Errorf("root element is <%s>, not <%s>", root.FullTag(), segs[0].key)
	}
	return e.walk(root, segs[1:])
}

func xmlMatches(el *etree.Element, s segment) bool {
	if s.wildcard {
		return true
	}
	if el.FullTag() != s.key {
		return false
	}
	if s.hasAttr {
		a := el.SelectAttr(s.attr)
		return a != nil && a.Value == s.attrVal
	}
	return true
}

func (e *xmlEdit) newElement(parent *etree.Element, s segment) *etree.Element {
	el := parent.CreateElement(s.key)
	if s.hasAttr {
		el.CreateAttr(s.attr, s.attrVal)
	}
	e.changed, e.created = true, true
	return el
}

func (e *xmlEdit) walk(el *etree.Element, segs []segment) error {
	if len(segs) == 0 {
		e.setLeaf(el)
		return nil
	}
	s := segs[0]
	var matches []*etree.Element
	for _, c := range el.ChildElements() {
		if xmlMatches(c, s) {
			matches = append(matches, c)
		}
	}
	if len(s.index) > 0 {
		n := s.index[0]
		switch {
		case n < len(matches):
			matches = matches[n : n+1]
		case e.create && n == len(matches):
			matches = nil
		case e.create:
			return fmt.Errorf("%w: %s[%d]", errRange, s.key, n)
		default:
			return nil
		}
	}
	if len(matches) == 0 {
		if !e.create {
			return nil
		}
		matches = append(matches, e.newElement(el, s))
	}
	var errs []error
	for _, c := range matches {
		errs = append(errs, e.walk(c, segs[1:]))
	}
	return errors.Join(errs...)
}

func (e *xmlEdit) setLeaf(el *etree.Element) {
	if e.attr != "" {
		cur := el.SelectAttr(e.attr)
		exists := cur != nil
		curVal := ""
		if exists {
			curVal = cur.Value
		}
		// The rule's value is the attribute value; a regex: if_value rewrites it.
		r := *e.r
		r.val = value{kind: vString, text: e.attrVal}
		v, ok := r.apply(curVal, exists)
		if !ok || exists && v.text == curVal {
			return
		}
		el.CreateAttr(e.attr, v.text)
		e.changed = true
		return
	}
	cur := strings.TrimSpace(el.Text())
	v, ok := e.r.apply(cur, true)
	if !ok || v.text == el.Text() {
		return
	}
	el.SetText(v.text)
	e.changed = true
}
