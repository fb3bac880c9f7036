package config

import (
	"bytes"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A configuration file written by another agent (Wings' own file, on a node
// switched to Wharf) holds keys Wharf does not know. They are never fatal:
// the daemon logs them once at boot, and Save keeps them in the file, so
// that the other agent finds its settings again after a switch back.

// UnknownKeys lists, as sorted dotted paths, the keys of the YAML document
// that the configuration does not have. Keys below a map-valued setting
// (docker.registries, docker.log_config.config, ...) are free-form.
func UnknownKeys(data []byte) []string {
	root := mappingOf(data)
	if root == nil {
		return nil
	}
	var out []string
	unknownIn(root, reflect.TypeFor[Config](), "", &out)
	sort.Strings(out)
	return out
}

// mappingOf parses a YAML document and returns its top mapping, or nil.
func mappingOf(data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	if m := doc.Content[0]; m.Kind == yaml.MappingNode {
		return m
	}
	return nil
}

// yamlFields maps the YAML names of struct type t to their field types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

func unknownIn(n *yaml.Node, t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			ft, ok := fields[key]
			if !ok {
				*out = append(*out, prefix+key)
				continue
			}
			unknownIn(n.Content[i+1], ft, prefix+key+".", out)
		}
	case reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			unknownIn(n.Content[i+1], t.Elem(), prefix+n.Content[i].Value+".", out)
		}
	}
}

// keepUnknown returns the YAML rendering next with the keys of the previous
// file old that the configuration does not know added back at the same
// places. When there are none, or either document cannot be read, next is
// returned as it is.
func keepUnknown(next, old []byte) []byte {
	src := mappingOf(old)
	if src == nil {
		return next
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(next, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return next
	}
	if !mergeUnknown(doc.Content[0], src, reflect.TypeFor[Config]()) {
		return next
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return next
	}
	if err := enc.Close(); err != nil {
		return next
	}
	return buf.Bytes()
}

// mergeUnknown copies the keys of src unknown to struct type t into dst
// (both mappings), recursing into known struct-valued keys. It reports
// whether anything was copied.
func mergeUnknown(dst, src *yaml.Node, t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || dst.Kind != yaml.MappingNode || src.Kind != yaml.MappingNode {
		return false
	}
	fields := yamlFields(t)
	changed := false
	for i := 0; i+1 < len(src.Content); i += 2 {
		key, val := src.Content[i], src.Content[i+1]
		ft, known := fields[key.Value]
		existing := lookup(dst, key.Value)
		switch {
		case !known && existing == nil:
			dst.Content = append(dst.Content, key, val)
			changed = true
		case known && existing != nil:
			if mergeUnknown(existing, val, ft) {
				changed = true
			}
		}
	}
	return changed
}

func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
