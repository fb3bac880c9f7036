package eggconfig

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// The yaml and json rewriters share one path engine working on yaml.Node trees (JSON documents
// are converted to the same node kinds), so both keep key order, and YAML keeps its comments.

var (
	errConflict = errors.New("path runs into a value of another kind")
	errAlias    = errors.New("path goes through a YAML alias")
	errAttrPath = errors.New("attribute predicates are only supported by the xml parser")
	errRange    = errors.New("list index past the end (only the next index can be created)")
)

type treeEdit struct {
	r       *rule
	create  bool
	changed bool
}

// applyTreeRules applies every rule to the tree (JSON and YAML share it);
// a rule that fails is reported and the others still apply.
func applyTreeRules(root *yaml.Node, rules []rule) (changed bool, ruleErrs []error) {
	for i := range rules {
		c, err := applyTree(root, &rules[i])
		changed = changed || c
		if err != nil {
			ruleErrs = append(ruleErrs, &RuleError{Match: rules[i].match, Err: err})
		}
	}
	return changed, ruleErrs
}

// applyTree applies one rule to the document root node (not the DocumentNode).
func applyTree(root *yaml.Node, r *rule) (changed bool, err error) {
	segs, err := parsePath(r.match)
	if err != nil {
		return false, err
	}
	e := &treeEdit{r: r, create: !r.cond}
	for _, s := range segs {
		if s.wildcard {
			e.create = false // a wildcard only visits what exists
		}
		if s.hasAttr {
			return false, errAttrPath
		}
	}
	err = e.walk(root, segs)
	return e.changed, err
}

func isNullNode(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func newNull() *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"} }

func (e *treeEdit) walk(n *yaml.Node, segs []segment) error {
	if len(segs) == 0 {
		e.setLeaf(n)
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return errAlias
	}
	s := segs[0]
	if s.wildcard {
		var errs []error
		switch n.Kind {
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				errs = append(errs, e.walk(n.Content[i], segs[1:]))
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				errs = append(errs, e.walk(c, segs[1:]))
			}
		}
		return errors.Join(errs...)
	}
	cur := n
	if s.key != "" {
		var child *yaml.Node
		if cur.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(cur.Content); i += 2 {
				if k := cur.Content[i]; k.Kind == yaml.ScalarNode && k.Value == s.key {
					child = cur.Content[i+1]
					break
				}
			}
		}
		if child == nil {
			if !e.create {
				return nil
			}
			if isNullNode(cur) {
				e.makeContainer(cur, yaml.MappingNode)
			}
			if cur.Kind != yaml.MappingNode {
				return fmt.Errorf("%w: %q is not a mapping", errConflict, s.key)
			}
			child = newNull()
			cur.Content = append(cur.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.key}, child)
			e.changed = true
		}
		cur = child
	}
	for _, idx := range s.index {
		if cur.Kind == yaml.AliasNode {
			return errAlias
		}
		if cur.Kind != yaml.SequenceNode {
			if !e.create {
				return nil
			}
			if !isNullNode(cur) {
				return fmt.Errorf("%w: %q is not a list", errConflict, s.key)
			}
			e.makeContainer(cur, yaml.SequenceNode)
		}
		switch {
		case idx < len(cur.Content):
			cur = cur.Content[idx]
		case !e.create:
			return nil
		case idx == len(cur.Content):
			c := newNull()
			cur.Content = append(cur.Content, c)
			e.changed = true
			cur = c
		default:
			return fmt.Errorf("%w: %q[%d]", errRange, s.key, idx)
		}
	}
	return e.walk(cur, segs[1:])
}

func (e *treeEdit) makeContainer(n *yaml.Node, kind yaml.Kind) {
	n.Kind, n.Value, n.Style = kind, "", 0
	if kind == yaml.MappingNode {
		n.Tag = "!!map"
	} else {
		n.Tag = "!!seq"
	}
	e.changed = true
}

func (e *treeEdit) setLeaf(n *yaml.Node) {
	v, ok := e.r.apply(n.Value, n.Kind == yaml.ScalarNode)
	if !ok {
		return
	}
	var tag, text string
	var style yaml.Style
	switch v.kind {
	case vString:
		tag, text = "!!str", v.text
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			style = n.Style & (yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle)
		}
	case vInt:
		tag, text = "!!int", v.text
	case vFloat:
		tag, text = "!!float", v.text
	case vBool:
		tag, text = "!!bool", v.text
	case vNull:
		tag, text = "!!null", "null"
	}
	if n.Kind == yaml.ScalarNode && n.Tag == tag && n.Value == text && n.Style == style {
		return
	}
	n.Kind, n.Tag, n.Value, n.Style = yaml.ScalarNode, tag, text, style
	n.Content, n.Alias = nil, nil
	e.changed = true
}
