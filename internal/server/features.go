package server

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/wharf/wharf/internal/consoletext"
)

// FeatureMatcher recognises the console lines that tell the panel an egg
// feature needs the user (Pelican's EULA and Java-version prompts): as
// Pelican Wings does it (server/listeners.go there), a line matches a
// feature when it contains one of the feature's strings, ignoring case, and
// a line raises at most one match. Features are tried in name order (Pelican
// Wings' order is a Go map's, random) and a feature's strings in the order
// the panel sent them.
//
// It is built once per configuration: a server without features has a nil
// matcher and its console lines cost nothing; with features, a line costs
// a substring search per string, without allocating. With ASCII strings (all of Pelican's), only
// the line's ASCII letters are folded: the one difference from Pelican
// Wings' strings.ToLower is the Kelvin sign, which it folds to "k".
type FeatureMatcher struct {
	entries   []featureEntry
	stripANSI bool
	// unicode is set when a string has non-ASCII letters: lines are then
	// lower-cased with strings.ToLower, as Pelican Wings does, which
	// allocates.
	unicode bool
}

type featureEntry struct {
	key     string
	pattern string // as the panel sent it
	lower   []byte // pattern lower-cased
}

// FeatureMatch is the argument of the "feature match" event: the JSON
// object Pelican Wings sends (key, line, pattern; its panel reads key).
type FeatureMatch struct {
	Key     string `json:"key"`
	Line    string `json:"line"`
	Pattern string `json:"pattern"`
}

// NewFeatureMatcher compiles features; it returns nil when there is nothing
// to match. stripANSI follows the process configuration's
// startup.strip_ansi, as Pelican Wings does.
func NewFeatureMatcher(features Features, stripANSI bool) *FeatureMatcher {
	keys := make([]string, 0, len(features))
	for k := range features {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	m := &FeatureMatcher{stripANSI: stripANSI}
	for _, k := range keys {
		for _, p := range features[k] {
			if p == "" {
				continue // Pelican Wings would match every line: a panel mistake
			}
			lower := strings.ToLower(p)
			m.entries = append(m.entries, featureEntry{key: k, pattern: p, lower: []byte(lower)})
			if !isASCII(lower) {
				m.unicode = true
			}
		}
	}
	if len(m.entries) == 0 {
		return nil
	}
	return m
}

// Match returns the first feature whose string the line contains.
func (m *FeatureMatcher) Match(line string) (FeatureMatch, bool) {
	if m == nil {
		return FeatureMatch{}, false
	}
	if m.stripANSI && strings.IndexByte(line, 0x1b) >= 0 {
		line = consoletext.StripANSI(line)
	}
	if m.unicode {
		return m.matchLower([]byte(strings.ToLower(line)), line)
	}
	if len(line) <= shortLine {
		// Lower-case into a small stack buffer and let bytes.Contains
		// search (most console lines are short).
		var buf [shortLine]byte
		lower := buf[:len(line)]
		for i := 0; i < len(line); i++ {
			lower[i] = lowerASCII(line[i])
		}
		return m.matchLower(lower, line)
	}
	for _, e := range m.entries {
		if containsFoldASCII(line, e.lower) {
			return FeatureMatch{Key: e.key, Line: line, Pattern: e.pattern}, true
		}
	}
	return FeatureMatch{}, false
}

// shortLine is the longest line lower-cased into a stack buffer (zeroing a
// bigger one would cost more than the search).
const shortLine = 512

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// containsFoldASCII reports whether s contains lower (already lower-case
// ASCII), folding only s's ASCII letters. The patterns are the panel's
// sentences, without the self-overlap that makes this naive search slow.
func containsFoldASCII(s string, lower []byte) bool {
	n := len(lower)
	if n == 0 {
		return true
	}
	first := lower[0]
	for i := 0; i+n <= len(s); i++ {
		if lowerASCII(s[i]) != first {
			continue
		}
		j := 1
		for j < n && lowerASCII(s[i+j]) == lower[j] {
			j++
		}
		if j == n {
			return true
		}
	}
	return false
}

func (m *FeatureMatcher) matchLower(lower []byte, line string) (FeatureMatch, bool) {
	for _, e := range m.entries {
		if bytes.Contains(lower, e.lower) {
			return FeatureMatch{Key: e.key, Line: line, Pattern: e.pattern}, true
		}
	}
	return FeatureMatch{}, false
}

// JSON is the event's argument.
func (f FeatureMatch) JSON() string {
	b, err := json.Marshal(f)
	if err != nil {
		return "{}" // three strings always marshal
	}
	return string(b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
