package eggconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

const maxDepth = 10000

var utf8BOM = []byte("\xef\xbb\xbf")

// rewriteJSON edits a JSON file with the shared path engine. Key order is kept; a changed file
// is written indented with 4 spaces (as the existing agents do). A file no rule changes is left
// byte for byte.
func rewriteJSON(data []byte, rules []rule) ([]byte, bool, []error, error) {
	body, bom := bytes.CutPrefix(data, utf8BOM)
	root, err := parseJSON(body)
	if err != nil {
		return nil, false, nil, err
	}
	changed, ruleErrs := applyTreeRules(root, rules)
	if !changed {
		return data, false, ruleErrs, nil
	}
	var buf bytes.Buffer
	if bom {
		buf.Write(utf8BOM)
	}
	writeJSON(&buf, root, 0)
	buf.WriteByte('\n')
	return buf.Bytes(), true, ruleErrs, nil
}

// parseJSON reads one JSON value into a yaml.Node tree; an empty input is an empty object.
func parseJSON(data []byte) (*yaml.Node, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := readJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	return n, nil
}

func readJSON(dec *json.Decoder, depth int) (*yaml.Node, error) {
	if depth > maxDepth {
		return nil, errors.New("JSON nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		var n *yaml.Node
		switch t {
		case '{':
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				v, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
			}
		case '[':
			n = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for dec.More() {
				v, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
		default:
			return nil, fmt.Errorf("unexpected %q", t)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t, Style: yaml.DoubleQuotedStyle}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t)}, nil
	case bool:
		v := "false"
		if t {
			v = "true"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: v}, nil
	case nil:
		return newNull(), nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

func writeIndent(buf *bytes.Buffer, level int) {
	for range level {
		buf.WriteString("    ")
	}
}

func writeJSON(buf *bytes.Buffer, n *yaml.Node, level int) {
	switch n.Kind {
	case yaml.MappingNode:
		if len(n.Content) < 2 {
			buf.WriteString("{}")
			return
		}
		buf.WriteString("{\n")
		for i := 0; i+1 < len(n.Content); i += 2 {
			writeIndent(buf, level+1)
			quoteJSON(buf, n.Content[i].Value)
			buf.WriteString(": ")
			writeJSON(buf, n.Content[i+1], level+1)
			if i+2 < len(n.Content)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		writeIndent(buf, level)
		buf.WriteByte('}')
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			buf.WriteString("[]")
			return
		}
		buf.WriteString("[\n")
		for i, c := range n.Content {
			writeIndent(buf, level+1)
			writeJSON(buf, c, level+1)
			if i < len(n.Content)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		writeIndent(buf, level)
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float", "!!bool":
			buf.WriteString(n.Value)
		case "!!null":
			buf.WriteString("null")
		default:
			quoteJSON(buf, n.Value)
		}
	default:
		buf.WriteString("null")
	}
}

const hexDigits = "0123456789abcdef"

// quoteJSON writes s as a JSON string (HTML characters are not escaped; invalid UTF-8 becomes
// U+FFFD).
func quoteJSON(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf.WriteByte('\\')
				buf.WriteByte(c)
			case c == '\n':
				buf.WriteString(`\n`)
			case c == '\r':
				buf.WriteString(`\r`)
			case c == '\t':
				buf.WriteString(`\t`)
			case c < 0x20 || c == 0x7f:
				buf.WriteString(`\u00`)
				buf.WriteByte(hexDigits[c>>4])
				buf.WriteByte(hexDigits[c&0xf])
			default:
				buf.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf.WriteString(`\ufffd`)
		case r == '\u2028':
			buf.WriteString(`\u2028`)
		case r == '\u2029':
			buf.WriteString(`\u2029`)
		default:
			buf.WriteString(s[i : i+size])
		}
		i += size
	}
	buf.WriteByte('"')
}
