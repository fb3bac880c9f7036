package eggconfig

import (
	"bytes"
	"errors"
	"io"

	"go.yaml.in/yaml/v3"
)

// rewriteYAML edits the first document of a YAML file through its node tree: comments, key
// order and the quoting style of untouched scalars are kept (blank lines are not: the YAML
// library does not keep them). A file no rule changes is left byte for byte.
func rewriteYAML(data []byte, rules []rule) ([]byte, bool, []error, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		d := new(yaml.Node)
		err := dec.Decode(d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false, nil, err
		}
		docs = append(docs, d)
	}
	var keep []byte // a file with no document holds only comments: keep them in front
	if len(docs) == 0 {
		docs = append(docs, &yaml.Node{Kind: yaml.DocumentNode})
		if len(bytes.TrimSpace(data)) > 0 {
			keep = data
			if !bytes.HasSuffix(keep, []byte("\n")) {
				keep = append(keep[:len(keep):len(keep)], '\n')
			}
		}
	}
	doc := docs[0]
	if len(doc.Content) == 0 {
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"})
	}
	root := doc.Content[0]

	changed, ruleErrs := applyTreeRules(root, rules)
	if !changed {
		return data, false, ruleErrs, nil
	}
	var buf bytes.Buffer
	buf.Write(keep)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(yamlIndent(data))
	if yamlCompactSeq(data) {
		enc.CompactSeqIndent()
	}
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, false, ruleErrs, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, false, ruleErrs, err
	}
	return buf.Bytes(), true, ruleErrs, nil
}

// yamlIndent guesses the indentation of a YAML file: that of its first indented line that is
// not a comment, between 2 and 8, else 2 (the Bukkit/Spigot/Paper style).
func yamlIndent(data []byte) int {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		n := 0
		for n < len(line) && line[n] == ' ' {
			n++
		}
		if n == 0 || n == len(line) || line[n] == '#' || line[n] == '\r' {
			continue
		}
		if n >= 2 && n <= 8 {
			return n
		}
		return 2
	}
	return 2
}

// yamlCompactSeq reports whether the file writes block sequences at the indentation of their
// key ("key:\n- item", the Bukkit style) rather than indented under it.
func yamlCompactSeq(data []byte) bool {
	prevIndent, prevKey := -1, false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		t := bytes.TrimRight(line, " \t\r")
		n := 0
		for n < len(t) && t[n] == ' ' {
			n++
		}
		if n == len(t) || t[n] == '#' {
			continue
		}
		if (bytes.HasPrefix(t[n:], []byte("- ")) || len(t) == n+1 && t[n] == '-') && prevKey {
			return n == prevIndent
		}
		prevIndent, prevKey = n, bytes.HasSuffix(t, []byte(":"))
	}
	return false
}
