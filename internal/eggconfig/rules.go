package eggconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// File is one entry of process_configuration.configs as the panel sends it.
//
// Decoding is lenient, as the existing agents are: a replace list that cannot be decoded becomes
// empty (Apply logs a warning for it) and no error escapes, so one bad entry never makes the
// whole server configuration unreadable. An unknown parser is reported by Apply for that file.
type File struct {
	File    string        `json:"file"`
	Parser  string        `json:"parser"`
	Replace []Replacement `json:"replace"`

	decodeErr error // why Replace (or another field) was dropped while decoding
}

// Replacement is one rule of a File.
type Replacement struct {
	Match   string  `json:"match"`
	IfValue *string `json:"if_value,omitempty"`
	// ReplaceWith is any JSON scalar. The legacy key "value" is accepted instead.
	ReplaceWith json.RawMessage `json:"replace_with"`
}

// UnmarshalJSON decodes a File leniently: it never returns an error.
func (f *File) UnmarshalJSON(b []byte) error {
	*f = File{}
	var raw struct {
		File    json.RawMessage `json:"file"`
		Parser  json.RawMessage `json:"parser"`
		Replace json.RawMessage `json:"replace"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		f.decodeErr = fmt.Errorf("configuration entry: %w", err)
		return nil
	}
	var errs []error
	if len(raw.File) > 0 {
		if err := json.Unmarshal(raw.File, &f.File); err != nil {
			errs = append(errs, fmt.Errorf("file: %w", err))
		}
	}
	if len(raw.Parser) > 0 {
		if err := json.Unmarshal(raw.Parser, &f.Parser); err != nil {
			errs = append(errs, fmt.Errorf("parser: %w", err))
		}
	}
	if len(raw.Replace) > 0 {
		var rs []Replacement
		if err := json.Unmarshal(raw.Replace, &rs); err != nil {
			errs = append(errs, fmt.Errorf("replace: %w", err))
		} else {
			f.Replace = rs
		}
	}
	f.decodeErr = errors.Join(errs...)
	return nil
}

// UnmarshalJSON decodes a Replacement, accepting the legacy key "value" for "replace_with" and a
// non-string scalar if_value (used as its JSON text).
func (r *Replacement) UnmarshalJSON(b []byte) error {
	var raw struct {
		Match       *string         `json:"match"`
		IfValue     json.RawMessage `json:"if_value"`
		ReplaceWith json.RawMessage `json:"replace_with"`
		Value       json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*r = Replacement{}
	if raw.Match != nil {
		r.Match = *raw.Match
	}
	if iv := bytes.TrimSpace(raw.IfValue); len(iv) > 0 && !bytes.Equal(iv, []byte("null")) {
		var s string
		if err := json.Unmarshal(iv, &s); err != nil {
			if iv[0] == '{' || iv[0] == '[' {
				return fmt.Errorf("if_value must be a scalar")
			}
			s = string(iv)
		}
		r.IfValue = &s
	}
	r.ReplaceWith = raw.ReplaceWith
	if len(r.ReplaceWith) == 0 {
		r.ReplaceWith = raw.Value
	}
	return nil
}

type valueKind int

const (
	vString valueKind = iota
	vInt
	vFloat
	vBool
	vNull
)

// value is a typed replacement value; text is its textual form (empty for null).
type value struct {
	kind valueKind
	text string
}

// rule is a Replacement prepared for the rewriters.
type rule struct {
	match   string
	cond    bool           // has an if_value: replace only an existing value that passes
	ifValue string         // plain if_value
	re      *regexp.Regexp // regex: if_value
	val     value          // replacement value (placeholders substituted, typed)
}

// apply returns the value to write in place of the current one, and whether to write it.
// exists tells whether there is a current value.
func (r *rule) apply(current string, exists bool) (value, bool) {
	switch {
	case !r.cond:
		return r.val, true
	case !exists:
		return value{}, false
	case r.re != nil:
		if !r.re.MatchString(current) {
			return value{}, false
		}
		return typeString(r.re.ReplaceAllString(current, r.val.text)), true
	case current == r.ifValue:
		return r.val, true
	}
	return value{}, false
}

func prepareRules(rs []Replacement, vars Vars) ([]rule, []error) {
	out := make([]rule, 0, len(rs))
	var errs []error
	for _, r := range rs {
		p, err := prepareRule(r, vars)
		if err != nil {
			errs = append(errs, &RuleError{Match: r.Match, Err: err})
			continue
		}
		out = append(out, p)
	}
	return out, errs
}

func prepareRule(r Replacement, vars Vars) (rule, error) {
	if r.Match == "" {
		return rule{}, errors.New("empty match")
	}
	p := rule{match: r.Match}
	v, err := parseValue(r.ReplaceWith, vars)
	if err != nil {
		return rule{}, err
	}
	p.val = v
	if r.IfValue != nil {
		p.cond = true
		if pat, ok := strings.CutPrefix(*r.IfValue, "regex:"); ok {
			if pat == "" {
				return rule{}, errors.New("empty regex: if_value")
			}
			re, err := regexp.Compile(pat)
			if err != nil {
				return rule{}, fmt.Errorf("if_value: %w", err)
			}
			p.re = re
		} else {
			p.ifValue = *r.IfValue
		}
	}
	return p, nil
}

// parseValue types a replace_with JSON scalar: a boolean or number stays one, a string that is a
// canonical decimal integer becomes an integer (as the existing agents do, but "007" or "+5"
// stay strings so that passwords and codes are not mangled), any other string stays a string.
// Placeholders are substituted in strings before typing.
func parseValue(raw json.RawMessage, vars Vars) (value, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return value{}, errors.New("no replace_with")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return value{}, fmt.Errorf("replace_with: %w", err)
		}
		return typeString(substitute(s, vars)), nil
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return value{}, fmt.Errorf("replace_with: %w", err)
		}
		return value{kind: vBool, text: strconv.FormatBool(b)}, nil
	case 'n':
		if string(raw) != "null" {
			return value{}, errors.New("replace_with: invalid JSON")
		}
		return value{kind: vNull}, nil
	case '{', '[':
		return value{}, errors.New("replace_with must be a scalar, not an object or array")
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return value{}, fmt.Errorf("replace_with: %w", err)
	}
	s := n.String()
	if isCanonicalInt(s) {
		return value{kind: vInt, text: s}, nil
	}
	return value{kind: vFloat, text: s}, nil
}

func typeString(s string) value {
	if isCanonicalInt(s) {
		return value{kind: vInt, text: s}
	}
	return value{kind: vString, text: s}
}

// isCanonicalInt reports whether s is a decimal integer without sign "+" or leading zeros that
// fits in 64 bits.
func isCanonicalInt(s string) bool {
	d := strings.TrimPrefix(s, "-")
	if d == "" || (len(d) > 1 && d[0] == '0') || s == "-0" {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// placeholderRE finds {{config.x.y}} placeholders, with one optional space inside each brace.
var placeholderRE = regexp.MustCompile(`\{\{ ?config\.([A-Za-z0-9_.\-]+) ?\}\}`)

// substitute replaces each allowlisted placeholder with its value. Every other placeholder is
// left exactly as written (attacks A7: the node token or any other setting must never be copied
// into a file the server owner can read).
func substitute(s string, vars Vars) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		name := placeholderRE.FindStringSubmatch(m)[1]
		switch name {
		case "docker.network.interface", "docker.interface":
			return vars.DockerInterface
		}
		return m
	})
}
