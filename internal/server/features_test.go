package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/consoletext"
)

// The matching rule of Pelican Wings' server/listeners.go: contains, ignoring
// case; one match per line; strip_ansi honoured.
func TestFeatureMatcher(t *testing.T) {
	m := NewFeatureMatcher(Features{
		"java_version": {"unsupported class file major version", "requires running the server with Java"},
		"eula":         {"You need to agree to the EULA in order to run the server"},
	}, true)
	for _, tc := range []struct {
		line, key, pattern string
	}{
		{"[12:00:01] [Server thread/WARN]: YOU NEED TO AGREE TO THE EULA IN ORDER TO RUN THE SERVER. Go to eula.txt", "eula", "You need to agree to the EULA in order to run the server"},
		{"\x1b[31mYou need to agree\x1b[0m to the EULA in order to run the server", "eula", "You need to agree to the EULA in order to run the server"},
		{"§cUnsupported class file major version 65", "java_version", "unsupported class file major version"},
		// Both features match: the first by name wins, one event per line.
		{"requires running the server with Java 21; you need to agree to the eula in order to run the server", "eula", "You need to agree to the EULA in order to run the server"},
		{"Done (1.0s)! For help, type \"help\"", "", ""},
		// Longer than the stack buffer: the folding search.
		{strings.Repeat("you need to agree ", 100) + "YOU NEED to agree to the EULA in order to run the server", "eula", "You need to agree to the EULA in order to run the server"},
		{strings.Repeat("you need to agree ", 100), "", ""},
		{"", "", ""},
	} {
		got, ok := m.Match(tc.line)
		if ok != (tc.key != "") || got.Key != tc.key || got.Pattern != tc.pattern {
			t.Errorf("Match(%q) = %+v, %v; want key %q pattern %q", tc.line, got, ok, tc.key, tc.pattern)
		}
		if ok && got.Line == "" {
			t.Errorf("Match(%q): no line in %+v", tc.line, got)
		}
	}
	var arg map[string]string
	got, _ := m.Match("you need to agree to the EULA in order to run the server")
	if err := json.Unmarshal([]byte(got.JSON()), &arg); err != nil || arg["key"] != "eula" || arg["line"] == "" || arg["pattern"] == "" {
		t.Errorf("event argument %s (%v)", got.JSON(), err)
	}
	if NewFeatureMatcher(nil, false) != nil || NewFeatureMatcher(Features{"eula": {""}}, false) != nil {
		t.Error("a matcher without strings must be nil (no cost per line)")
	}
	if _, ok := (*FeatureMatcher)(nil).Match("anything"); ok {
		t.Error("the nil matcher matched")
	}
	u := NewFeatureMatcher(Features{"x": {"ÉCHEC"}}, false)
	if got, ok := u.Match("la tentative a échoué: échec"); !ok || got.Key != "x" {
		t.Errorf("non-ASCII string: %+v %v", got, ok)
	}
}

// Pelican's panel encodes an egg without features as [] and Pelican Wings
// (server/configuration.go) drops features it cannot read: the rest of the
// configuration stays.
func TestEggFeaturesParsing(t *testing.T) {
	for _, raw := range []string{`[]`, `null`, `"junk"`, `{"eula": "not a list"}`} {
		def, err := ParseDefinition(json.RawMessage(`{"uuid":"0a0a0a0a-0000-4000-8000-00000000000a","egg":{"id":"e1","features":`+raw+`,"file_denylist":["a"]}}`), nil, false)
		if err != nil || def.Config.Egg.Features != nil || def.Config.Egg.ID != "e1" || len(def.Config.Egg.FileDenylist) != 1 {
			t.Errorf("features %s: %+v, %v", raw, def.Config.Egg, err)
		}
	}
	def, err := ParseDefinition(json.RawMessage(`{"uuid":"0a0a0a0a-0000-4000-8000-00000000000a","egg":{"features":{"eula":["a","b"]}}}`), nil, false)
	if err != nil || len(def.Config.Egg.Features["eula"]) != 2 {
		t.Errorf("features object: %+v, %v", def.Config.Egg, err)
	}
}

// Pelican's oom_killer wins over Pterodactyl's oom_disabled (Pelican Wings
// environment/settings.go: OomKillDisable = !OOMKiller).
func TestOOMKillDisabled(t *testing.T) {
	for raw, want := range map[string]bool{
		`{}`:                    false,
		`{"oom_disabled":true}`: true,
		`{"oom_killer":false}`:  true,
		`{"oom_killer":true}`:   false,
		`{"oom_killer":true,"oom_disabled":true}`:   false,
		`{"oom_disabled":false,"oom_killer":false}`: true,
	} {
		var b Build
		if err := json.Unmarshal([]byte(raw), &b); err != nil {
			t.Fatal(err)
		}
		if got := b.OOMKillDisabled(); got != want {
			t.Errorf("%s: OOMKillDisabled = %v, want %v", raw, got, want)
		}
	}
}

// Pelican Wings server/server.go DetermineServerTimezone: a valid
// SERVER_TIMEZONE, else the node's zone.
func TestServerTimezone(t *testing.T) {
	for tz, want := range map[any]string{
		"Asia/Tokyo": "Asia/Tokyo", "": "Europe/Paris", "Not/AZone": "Europe/Paris", "../../etc/passwd": "Europe/Paris",
		"/etc/localtime": "Europe/Paris", "Local": "Europe/Paris", 42: "Europe/Paris",
	} {
		if got := ServerTimezone(map[string]any{"SERVER_TIMEZONE": tz}, "Europe/Paris"); got != want {
			t.Errorf("SERVER_TIMEZONE=%v: TZ %q, want %q", tz, got, want)
		}
	}
	env := EnvironmentVariables(Configuration{Environment: map[string]any{"SERVER_TIMEZONE": "Asia/Tokyo"}}, "UTC")
	if env[0] != "TZ=Asia/Tokyo" || !strings.Contains(strings.Join(env, "\n"), "SERVER_TIMEZONE=Asia/Tokyo") {
		t.Errorf("env %v", env)
	}
}

// FuzzFeatureMatcher checks the matcher against Pelican Wings' rule written
// plainly (lower-case both, contains) on game output, which is anything.
func FuzzFeatureMatcher(f *testing.F) {
	f.Add("You need to agree to the EULA", "eula", true)
	f.Add("\x1b[1mUnsupported\x1b[0m class", "unsupported class", true)
	f.Add("§aÉCHEC\xff", "échec", false)
	f.Add(strings.Repeat("ab", 400)+"aBc", "abc", false)
	f.Fuzz(func(t *testing.T, line, pattern string, strip bool) {
		if strings.ContainsRune(line, '\u212a') || len(line) > MaxLineBytes {
			return // the Kelvin sign: the one documented difference
		}
		m := NewFeatureMatcher(Features{"k": {pattern}}, strip)
		_, got := m.Match(line)
		l := line
		if strip {
			l = stripForTest(l)
		}
		want := pattern != "" && strings.Contains(strings.ToLower(l), strings.ToLower(pattern))
		if got != want {
			t.Fatalf("Match(%q) with %q = %v, want %v", line, pattern, got, want)
		}
	})
}

func stripForTest(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return consoletext.StripANSI(s)
}

func BenchmarkFeatureMatcherLine(b *testing.B) {
	line := "[12:00:01] [Server thread/INFO]: Preparing spawn area: 83% of the world is ready, §aplayers online: 12"
	for _, bc := range []struct {
		name string
		m    *FeatureMatcher
	}{
		{"none", NewFeatureMatcher(nil, false)},
		{"pelican", NewFeatureMatcher(Features{
			"eula":         {"you need to agree to the eula in order to run the server"},
			"java_version": {"minecraft 1.17 requires running the server with java 16 or above", "unsupported class file major version"},
			"pid_limit":    {"pthread_create failed", "failed to create thread", "unable to create native thread"},
		}, true)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := bc.m.Match(line); ok {
					b.Fatal("matched")
				}
			}
		})
	}
}
