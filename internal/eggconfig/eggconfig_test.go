package eggconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustRules(t testing.TB, rs ...Replacement) []rule {
	t.Helper()
	out, errs := prepareRules(rs, Vars{DockerInterface: "172.18.0.1"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return out
}

func rw(match string, with any) Replacement {
	b, _ := json.Marshal(with)
	return Replacement{Match: match, ReplaceWith: b}
}

func rwIf(match, ifValue string, with any) Replacement {
	r := rw(match, with)
	r.IfValue = &ifValue
	return r
}

func TestSubstitutePlaceholders(t *testing.T) {
	vars := Vars{DockerInterface: "172.18.0.1"}
	for in, want := range map[string]string{
		"{{config.docker.network.interface}}":                             "172.18.0.1",
		"{{ config.docker.network.interface }}":                           "172.18.0.1",
		"{{config.docker.interface }}":                                    "172.18.0.1",
		"{{config.docker.interface}}:{{config.docker.network.interface}}": "172.18.0.1:172.18.0.1",
		"{{config.token}}":                                                "{{config.token}}",
		"{{ config.token_id }}":                                           "{{ config.token_id }}",
		"{{config.api}}":                                                  "{{config.api}}",
		"{{config.system}}":                                               "{{config.system}}",
		"{{config.remote}}{{config.docker.interface}}":                    "{{config.remote}}172.18.0.1",
		"{{  config.docker.interface  }}":                                 "{{  config.docker.interface  }}",
		"{{config.docker}}":                                               "{{config.docker}}",
		"{{config.docker.network}}":                                       "{{config.docker.network}}",
		"{{server.build.default.port}}":                                   "{{server.build.default.port}}",
		"plain":                                                           "plain",
	} {
		if got := substitute(in, vars); got != want {
			t.Errorf("substitute(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValueTyping(t *testing.T) {
	for raw, want := range map[string]value{
		`"25565"`:                {vInt, "25565"},
		`"-5"`:                   {vInt, "-5"},
		`"007"`:                  {vString, "007"},
		`"+5"`:                   {vString, "+5"},
		`"-0"`:                   {vString, "-0"},
		`"1.5"`:                  {vString, "1.5"},
		`"true"`:                 {vString, "true"},
		`"99999999999999999999"`: {vString, "99999999999999999999"},
		`25565`:                  {vInt, "25565"},
		`2.5`:                    {vFloat, "2.5"},
		`1e3`:                    {vFloat, "1e3"},
		`true`:                   {vBool, "true"},
		`false`:                  {vBool, "false"},
		`null`:                   {vNull, ""},
	} {
		got, err := parseValue(json.RawMessage(raw), Vars{})
		if err != nil || got != want {
			t.Errorf("parseValue(%s) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{``, `{}`, `[1]`, `nul`} {
		if _, err := parseValue(json.RawMessage(raw), Vars{}); err == nil {
			t.Errorf("parseValue(%q) accepted", raw)
		}
	}
}

func TestDecodeFilesLenient(t *testing.T) {
	in := `[
		{"file": "a.yml", "parser": "yaml", "replace": [{"match": "x", "value": 1}, {"match": "y", "if_value": 3, "replace_with": "z"}]},
		{"file": "b.yml", "parser": "yaml", "replace": {"match": "not a list"}},
		{"file": "c.yml", "parser": "yaml", "replace": [{"match": ["bad"]}]},
		{"file": 5, "parser": "yaml"},
		"not an object",
		{"file": "d.cfg", "parser": "nope", "replace": []}
	]`
	var files []File
	if err := json.Unmarshal([]byte(in), &files); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(files) != 6 {
		t.Fatalf("got %d files", len(files))
	}
	if got := files[0].Replace; len(got) != 2 || string(got[0].ReplaceWith) != "1" || got[1].IfValue == nil || *got[1].IfValue != "3" {
		t.Errorf("legacy value / numeric if_value not decoded: %+v", got)
	}
	for i := 1; i <= 4; i++ {
		if files[i].Replace != nil || files[i].decodeErr == nil {
			t.Errorf("file %d: replace %v, decodeErr %v", i, files[i].Replace, files[i].decodeErr)
		}
	}
	errs := Apply(context.Background(), newRootFS(t, t.TempDir()), files[5:], Vars{}, nil)
	if len(errs) != 1 || !errors.Is(errs[0], ErrUnknownParser) {
		t.Errorf("unknown parser: %v", errs)
	}
}

// TestFileParserLongLine: a 10 MB single-line file is rewritten whole (the existing agents
// truncated everything after a 64 KiB line).
func TestFileParserLongLine(t *testing.T) {
	dir := t.TempDir()
	long := "data=" + strings.Repeat("x", 10<<20)
	content := "first line\n" + long + "\nkey=old\n" + long
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	files := []File{{File: "big.txt", Parser: "file", Replace: []Replacement{rw("key=", "key=new")}}}
	if errs := Apply(context.Background(), newRootFS(t, dir), files, Vars{}, nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "big.txt"))
	want := "first line\n" + long + "\nkey=new\n" + long
	if string(got) != want {
		t.Fatalf("content differs: got %d bytes, want %d", len(got), len(want))
	}

	// The long line itself can be matched and replaced.
	files = []File{{File: "big.txt", Parser: "file", Replace: []Replacement{rw("data=", "data=short")}}}
	if errs := Apply(context.Background(), newRootFS(t, dir), files, Vars{}, nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	got, _ = os.ReadFile(filepath.Join(dir, "big.txt"))
	if want := "first line\ndata=short\nkey=new\ndata=short"; string(got) != want {
		t.Fatalf("got %q", got)
	}
}

// TestSymlinkOutsideRootNotWritten: a config file that is a symlink to a file outside the
// server directory is neither read nor written through.
func TestSymlinkOutsideRootNotWritten(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "server")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(outside, "victim.properties")
	const orig = "secret=keep\n"
	if err := os.WriteFile(target, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(root, "server.properties")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside/victim.properties", filepath.Join(root, "relative.properties")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(root, "plugins")); err != nil {
		t.Fatal(err)
	}
	files := []File{
		{File: "server.properties", Parser: "properties", Replace: []Replacement{rw("secret", "overwritten")}},
		{File: "relative.properties", Parser: "properties", Replace: []Replacement{rw("secret", "overwritten")}},
		{File: "plugins/victim.properties", Parser: "properties", Replace: []Replacement{rw("secret", "overwritten")}},
		{File: "plugins/new.yml", Parser: "yaml", Replace: []Replacement{rw("a", "b")}},
		{File: "../outside/victim.properties", Parser: "properties", Replace: []Replacement{rw("secret", "overwritten")}},
	}
	errs := Apply(context.Background(), newRootFS(t, root), files, Vars{}, nil)
	if len(errs) != len(files) {
		t.Errorf("got %d errors, want %d: %v", len(errs), len(files), errs)
	}
	if got, _ := os.ReadFile(target); string(got) != orig {
		t.Errorf("outside file changed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.yml")); !os.IsNotExist(err) {
		t.Errorf("file created outside the root: %v", err)
	}
}

func TestCreatesMissingFileWithParents(t *testing.T) {
	dir := t.TempDir()
	files := []File{{File: "config/paper/paper-global.yml", Parser: "yaml",
		Replace: []Replacement{rw("proxies.velocity.enabled", true), rw("proxies.velocity.secret", "s"),
			rwIf("proxies.velocity.online-mode", "true", false)}}}
	if errs := Apply(context.Background(), newRootFS(t, dir), files, Vars{}, nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	p := filepath.Join(dir, "config/paper/paper-global.yml")
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := "proxies:\n  velocity:\n    enabled: true\n    secret: s\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	di, _ := os.Stat(filepath.Dir(p))
	if !di.IsDir() {
		t.Error("parent not created")
	}
}

func TestUnchangedFileNotRewritten(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.json")
	const orig = `{"a":   1, "b": [1,2]}`
	if err := os.WriteFile(p, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	files := []File{{File: "c.json", Parser: "json", Replace: []Replacement{rw("a", 1), rwIf("b[0]", "5", 9)}}}
	if errs := Apply(context.Background(), newRootFS(t, dir), files, Vars{}, nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	got, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(got) != orig || fi.Mode().Perm() != 0o600 {
		t.Errorf("file rewritten: %q %v", got, fi.Mode())
	}
}

func TestTooLargeFileRefused(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "huge.properties")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 1); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "ok.properties"), []byte("a=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	files := []File{
		{File: "huge.properties", Parser: "properties", Replace: []Replacement{rw("a", "2")}},
		{File: "ok.properties", Parser: "properties", Replace: []Replacement{rw("a", "2")}},
	}
	errs := Apply(context.Background(), newRootFS(t, dir), files, Vars{}, newTestLogger(&logs))
	if len(errs) != 1 || !errors.Is(errs[0], ErrFileTooLarge) {
		t.Fatalf("errors: %v", errs)
	}
	var fe *FileError
	if !errors.As(errs[0], &fe) || fe.File != "huge.properties" {
		t.Errorf("not a FileError for huge.properties: %v", errs[0])
	}
	if !strings.Contains(logs.String(), "huge.properties") {
		t.Errorf("not logged: %s", logs.String())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "ok.properties")); string(got) != "a=2\n" {
		t.Errorf("next file not rewritten: %q", got)
	}
	if fi, _ := os.Stat(big); fi.Size() != MaxFileSize+1 {
		t.Error("huge file changed")
	}
}

func TestCancelledContextStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	errs := Apply(ctx, newRootFS(t, dir), []File{{File: "a.properties", Parser: "properties"}}, Vars{}, nil)
	if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("errors: %v", errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.properties")); !os.IsNotExist(err) {
		t.Error("file written after cancel")
	}
}

// TestRewriters covers small cases per parser that the golden files do not.
func TestRewriters(t *testing.T) {
	tests := []struct {
		name, parser, in string
		rules            []Replacement
		want             string
		ruleErrs         int
	}{
		{"properties continuation replaced", "properties", "a=1,\\\n  2\nb=3\n", []Replacement{rw("a", "x")}, "a=x\nb=3\n", 0},
		{"properties separators and escaped key", "properties", "my\\ key : v\n! bang comment\nk v\n", []Replacement{rw("my key", "w"), rw("k", "z")}, "my\\ key=w\n! bang comment\nk=z\n", 0},
		{"properties if_value on unescaped value", "properties", "url=http\\://x\n", []Replacement{rwIf("url", "http://x", "y")}, "url=y\n", 0},
		{"properties append without trailing newline", "properties", "a=1", []Replacement{rw("b", 2)}, "a=1\nb=2\n", 0},
		{"properties crlf kept", "properties", "a=1\r\nb=2\r\n", []Replacement{rw("a", 5), rw("c", 3)}, "a=5\r\nb=2\r\nc=3\r\n", 0},
		{"properties lone cr is a line end", "properties", "a=1\rb=2\r", []Replacement{rw("b", 5), rw("c", 3)}, "a=1\rb=5\rc=3\r", 0},
		{"properties non-BMP", "properties", "", []Replacement{rw("e", "😀")}, "e=\\uD83D\\uDE00\n", 0},
		{"properties surrogate read back", "properties", "e=\\uD83D\\uDE00\n", []Replacement{rwIf("e", "😀", "ok")}, "e=ok\n", 0},
		{"yaml sequence of maps wildcard", "yaml", "a:\n- p: 1\n- p: 2\n", []Replacement{rw("a.*.p", 9)}, "a:\n- p: 9\n- p: 9\n", 0},
		{"yaml null becomes mapping", "yaml", "a:\n", []Replacement{rw("a.b", "c")}, "a:\n  b: c\n", 0},
		{"yaml scalar conflict", "yaml", "a: 1\n", []Replacement{rw("a.b", "c")}, "a: 1\n", 1},
		{"yaml quoted style kept", "yaml", "a: 'x'\n", []Replacement{rw("a", "y")}, "a: 'y'\n", 0},
		{"yaml alias not followed", "yaml", "x: &x {p: 1}\ny: *x\n", []Replacement{rw("y.p", 2)}, "x: &x {p: 1}\ny: *x\n", 1},
		{"yaml nested index", "yaml", "m: [[1, 2], [3]]\n", []Replacement{rw("m[0][1]", 5)}, "m: [[1, 5], [3]]\n", 0},
		{"yaml if_value never creates", "yml", "a: 1\n", []Replacement{rwIf("b", "1", 2)}, "a: 1\n", 0},
		{"json root array index", "json", "[1, 2]", []Replacement{rw("[1]", "x")}, "[\n    1,\n    \"x\"\n]\n", 0},
		{"json regex", "json", `{"motd": "Hello World"}`, []Replacement{rwIf("motd", "regex:World", "Wharf")}, "{\n    \"motd\": \"Hello Wharf\"\n}\n", 0},
		{"json regex typed result", "json", `{"port": "x25565"}`, []Replacement{rwIf("port", "regex:^x", "")}, "{\n    \"port\": 25565\n}\n", 0},
		{"json html not escaped", "json", `{}`, []Replacement{rw("a", "<&>")}, "{\n    \"a\": \"<&>\"\n}\n", 0},
		{"ini root key and section", "ini", "x=1\n[s]\ny=2\n", []Replacement{rw("x", 3), rw("z", 4), rw("s.y", 5)}, "x=3\nz=4\n[s]\ny=5\n", 0},
		{"ini spaced separator kept", "ini", "[s]\na = 1\n", []Replacement{rw("s.a", 2), rw("s.b", 3)}, "[s]\na = 2\nb = 3\n", 0},
		{"ini dotted key", "ini", "[s]\na.b=1\n", []Replacement{rw("s.a.b", 2)}, "[s]\na.b=2\n", 0},
		{"ini line break refused", "ini", "[s]\na=1\n", []Replacement{rw("s.a", "x\n[evil]")}, "[s]\na=1\n", 1},
		{"xml wildcard", "xml", "<r><a><p>1</p></a><b><p>2</p></b></r>", []Replacement{rw("r.*.p", 7)}, "<r><a><p>7</p></a><b><p>7</p></b></r>", 0},
		{"xml wrong root", "xml", "<r/>", []Replacement{rw("x.a", 1)}, "<r/>", 1},
		{"xml attribute if_value", "xml", `<r><a v="1"/></r>`, []Replacement{rwIf("r.a", "1", "[v='2']")}, `<r><a v="2"/></r>`, 0},
		{"toml array of tables index", "toml", "[[s]]\nn = 1\n[[s]]\nn = 2\n", []Replacement{rw("s[1].n", 5), rw("s[0].m", "x")}, "[[s]]\nn = 1\nm = \"x\"\n[[s]]\nn = 5\n", 0},
		{"toml create in empty file", "toml", "", []Replacement{rw("a.b", 1), rw("c", "d")}, "a.b = 1\nc = \"d\"\n", 0},
		{"toml inline table", "toml", "a = {b = 1, c = [1, 2]}\n", []Replacement{rw("a.b", 2), rw("a.c[1]", 3)}, "a = {b = 2, c = [1, 3]}\n", 0},
		{"toml conflicting create refused", "toml", "a = 1\n", []Replacement{rw("a.b", 2)}, "a = 1\n", 1},
		{"toml literal string if_value", "toml", "p = 'C:\\x'\n", []Replacement{rwIf("p", `C:\x`, "y")}, "p = \"y\"\n", 0},
		{"file crlf kept", "file", "a=1\r\nb=2\r\n", []Replacement{rw("a=", "a=9")}, "a=9\r\nb=2\r\n", 0},
		{"file number", "file", "port 1\n", []Replacement{rw("port", 25565)}, "25565\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, errs, fatal := rewriters[tc.parser]([]byte(tc.in), mustRules(t, tc.rules...))
			if fatal != nil {
				t.Fatal(fatal)
			}
			if len(errs) != tc.ruleErrs {
				t.Errorf("rule errors: %v, want %d", errs, tc.ruleErrs)
			}
			if diff := cmp.Diff(tc.want, string(out)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDeepNesting: deeply nested input is refused or handled, never a crash.
func TestDeepNesting(t *testing.T) {
	const n = 200000
	inputs := map[string]string{
		"json": strings.Repeat("[", n) + strings.Repeat("]", n),
		"yaml": strings.Repeat("[", n) + strings.Repeat("]", n),
		"toml": "a = " + strings.Repeat("[", n) + strings.Repeat("]", n),
		"xml":  strings.Repeat("<a>", n) + strings.Repeat("</a>", n),
	}
	for parser, in := range inputs {
		_, _, _, fatal := rewriters[parser]([]byte(in), mustRules(t, rw("a", 1)))
		if fatal == nil {
			t.Errorf("%s: %d levels accepted", parser, n)
		}
	}
}

func TestYAMLCommentOnlyFileKeepsComments(t *testing.T) {
	out, _, _, fatal := rewriteYAML([]byte("# managed by the egg\n"), mustRules(t, rw("a.b", 1)))
	if fatal != nil || string(out) != "# managed by the egg\na:\n  b: 1\n" {
		t.Errorf("got %q, %v", out, fatal)
	}
}
