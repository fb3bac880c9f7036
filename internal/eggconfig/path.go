package eggconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// segment is one dot-separated part of a match path: a key, the wildcard "*", or a key
// followed by list indexes ("name[2]", "name[0][1]", or "[3]" alone), or, for xml only, an
// attribute predicate ("property[@name='port']").
type segment struct {
	key      string
	wildcard bool
	index    []int
	hasAttr  bool
	attr     string
	attrVal  string
}

const maxIndex = 1 << 20

var errBadPath = errors.New("invalid path")

// parsePath splits match at the dots that are outside square brackets and quotes.
func parsePath(match string) ([]segment, error) {
	var parts []string
	depth, quote, start := 0, byte(0), 0
	for i := 0; i < len(match); i++ {
		c := match[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			if depth > 0 {
				quote = c
			}
		case c == '[':
			depth++
		case c == ']':
			if depth > 0 {
				depth--
			}
		case c == '.' && depth == 0:
			parts = append(parts, match[start:i])
			start = i + 1
		}
	}
	parts = append(parts, match[start:])
	segs := make([]segment, 0, len(parts))
	for _, p := range parts {
		s, err := parseSegment(p)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", errBadPath, match, err)
		}
		segs = append(segs, s)
	}
	return segs, nil
}

func parseSegment(p string) (segment, error) {
	if p == "" {
		return segment{}, errors.New("empty segment")
	}
	if p == "*" {
		return segment{wildcard: true}, nil
	}
	i := strings.IndexByte(p, '[')
	if i < 0 {
		return segment{key: p}, nil
	}
	s := segment{key: p[:i]}
	rest := p[i:]
	for rest != "" {
		if rest[0] != '[' {
			return segment{}, fmt.Errorf("unexpected %q after ']'", rest)
		}
		if strings.HasPrefix(rest, "[@") {
			name, val, tail, err := parseAttrPredicate(rest)
			if err != nil {
				return segment{}, err
			}
			if s.hasAttr || len(s.index) > 0 || s.key == "" {
				return segment{}, errors.New("an attribute predicate must follow a name, once")
			}
			s.hasAttr, s.attr, s.attrVal = true, name, val
			rest = tail
			continue
		}
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return segment{}, errors.New("missing ']'")
		}
		n, err := strconv.Atoi(rest[1:end])
		if err != nil || n < 0 || n > maxIndex || rest[1] == '+' {
			return segment{}, fmt.Errorf("bad index %q", rest[1:end])
		}
		if s.hasAttr {
			return segment{}, errors.New("index after an attribute predicate")
		}
		s.index = append(s.index, n)
		rest = rest[end+1:]
	}
	return s, nil
}

// parseAttrPredicate parses [@name='value'] (or double quotes) at the start of p.
func parseAttrPredicate(p string) (name, val, rest string, err error) {
	eq := strings.IndexByte(p, '=')
	if eq < 3 || eq+1 >= len(p) {
		return "", "", "", errors.New("bad attribute predicate")
	}
	name = p[2:eq]
	q := p[eq+1]
	if q != '\'' && q != '"' {
		return "", "", "", errors.New("attribute predicate value must be quoted")
	}
	end := strings.IndexByte(p[eq+2:], q)
	if end < 0 {
		return "", "", "", errors.New("unterminated attribute predicate value")
	}
	val = p[eq+2 : eq+2+end]
	rest = p[eq+2+end+1:]
	if !strings.HasPrefix(rest, "]") {
		return "", "", "", errors.New("missing ']' after attribute predicate")
	}
	if !isXMLName(name) {
		return "", "", "", fmt.Errorf("bad attribute name %q", name)
	}
	return name, val, rest[1:], nil
}

func isXMLName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r == ':' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r > 0x7f && r != utf8.RuneError:
		case i > 0 && (r == '-' || r == '.' || r >= '0' && r <= '9'):
		default:
			return false
		}
	}
	return true
}
