package eggconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// fuzzRewriter feeds random content and one random rule to a rewriter: it must never panic.
// check, when set, verifies an invariant of a successful rewrite.
func fuzzRewriter(f *testing.F, parser string, seeds []string, check func(t *testing.T, out []byte, r rule)) {
	matches, _ := filepath.Glob("testdata/golden/*/input/*")
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil && len(b) < 4096 {
			seeds = append(seeds, string(b))
		}
	}
	for _, s := range seeds {
		f.Add([]byte(s), "a.b", "", false, `"v"`)
	}
	f.Add([]byte("a=1\n"), "a", "regex:(\\d)", true, `"x$1"`)
	f.Add([]byte("[s]\nk=1\n"), "[s].k", "1", true, `5`)
	f.Add([]byte("<r><a x='1'/></r>"), "r.a[@x='1']", "", false, `"[y='2']"`)
	f.Add([]byte("a:\n- 1\n"), "a[1]", "", false, `true`)
	f.Fuzz(func(t *testing.T, data []byte, match, ifValue string, useIf bool, replaceWith string) {
		r := Replacement{Match: match, ReplaceWith: json.RawMessage(replaceWith)}
		if useIf {
			r.IfValue = &ifValue
		}
		p, err := prepareRule(r, Vars{DockerInterface: "172.18.0.1"})
		if err != nil {
			return
		}
		out, changed, _, fatal := rewriters[parser](data, []rule{p})
		if fatal != nil || !changed || check == nil {
			return
		}
		check(t, out, p)
	})
}

func FuzzProperties(f *testing.F) {
	fuzzRewriter(f, "properties", []string{"# c\na=1\nb : 2\\\n  3\n"}, func(t *testing.T, out []byte, r rule) {
		if r.cond {
			return
		}
		// The value written reads back exactly (escaping is correct).
		for _, e := range parseProperties(splitPropertyLines(out)) {
			if e.key == r.match && e.value != r.val.text {
				t.Fatalf("key %q reads back %q, want %q\n%s", r.match, e.value, r.val.text, out)
			}
		}
	})
}

func FuzzYAML(f *testing.F) {
	fuzzRewriter(f, "yaml", []string{"a:\n  b: 1 # c\n"}, func(t *testing.T, out []byte, _ rule) {
		var n yaml.Node
		if err := yaml.Unmarshal(out, &n); err != nil {
			t.Fatalf("output is not YAML: %v\n%s", err, out)
		}
	})
}

func FuzzJSON(f *testing.F) {
	fuzzRewriter(f, "json", []string{`{"a": {"b": [1, 2]}}`}, func(t *testing.T, out []byte, _ rule) {
		if !json.Valid(out) {
			t.Fatalf("output is not JSON:\n%s", out)
		}
	})
}

func FuzzINI(f *testing.F) {
	fuzzRewriter(f, "ini", []string{"; c\n[a]\nb = 1\n"}, nil)
}

func FuzzXML(f *testing.F) {
	fuzzRewriter(f, "xml", []string{`<?xml version="1.0"?><a><b>1</b></a>`}, nil)
}

func FuzzTOML(f *testing.F) {
	fuzzRewriter(f, "toml", []string{"# c\n[a]\nb = 1\n"}, func(t *testing.T, out []byte, _ rule) {
		if err := validateTOML(out); err != nil {
			t.Fatalf("output is not TOML: %v\n%s", err, out)
		}
	})
}

func FuzzFile(f *testing.F) {
	fuzzRewriter(f, "file", []string{"a b\nc d"}, nil)
}
